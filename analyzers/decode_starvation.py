"""Decode starvation: windows where running streams stall (ITL tail above the SLO) while prefill load spikes.

Method, per target, on the signals grid (stallscope.analyzers.signals):

1. A window *stalls* when ITL P99 is above `itl_slo_s` (its whole bucket: interpolation inside a bucket
   that straddles the SLO decides nothing), or when at least 1 % of stream time sat in gaps above the
   SLO (`itl_stall_share`): ITL is one sample per output event, so a 2 s freeze of 16 streams is 16 samples
   among thousands of fast ones and can hide below a per-observation P99.
2. A window has *prefill load* when the computed prompt-token rate is >= `prefill_tokens_rate_high`, or an
   engine output counted more tokens in `iteration_tokens_total` than decode steps can (`long_prefill_rate`
   > 0; a prompt's computed tokens are counted in the step where its prefill completes, so this is "a long
   prefill ended"). Prefix-cache hits cost no compute: the rate is `source="local_compute"` where vLLM
   exports it, and a finding made from `prompt_tokens_total` (before 0.16) says it could not separate them.
3. Stall + prefill load = `decode_starvation`. Stall without prefill load is *not* starvation: it is
   reported as `itl_high`, explained as preemption (recompute gaps, when preemptions rose) or memory-bound
   decode at a large batch (otherwise). When a long prefill is counted within the next window, the text
   adds that a chunked prefill's chunks may have run there (its prompt is counted only at completion);
   counting those windows as starvation was measured to cost precision (docs/accuracy.md).
4. Flagged windows merge into one finding spanning [first window start, last window end] while they
   overlap (recurring stalls less than a window apart are one episode).
   With a step trace, the exact offending steps (stallscope.analyzers.step_stalls) are attached.
5. The recommendation sizes `--max-num-batched-tokens` so one step (decode + chunk) fits the SLO, from the
   step trace's fitted cost, else the metrics (prefill time per computed prompt token, ITL P50), else a
   roofline cost passed in by the caller.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers.advice import chunked_prefill_recommendation
from stallscope.analyzers.finding import Finding
from stallscope.analyzers.quantiles import format_quantile
from stallscope.analyzers.signals import episodes
from stallscope.analyzers.step_stalls import find_stalls
from stallscope.core.config import load_thresholds

STALL_SHARE = 0.01  # 1 - q for q = 0.99: the time-weighted counterpart of a P99 breach
NOT_SEPARATED = ("this vLLM exports no prompt_tokens_by_source_total (before 0.16), so the prompt tokens are "
                 "prompt_tokens_total, which could not separate cached tokens")


def _nanmax(a) -> float:
    a = np.asarray(a, dtype=float)
    return float(np.nanmax(a)) if np.isfinite(a).any() else float("nan")


def _nanmedian(a) -> float:
    a = np.asarray(a, dtype=float)
    return float(np.nanmedian(a)) if np.isfinite(a).any() else float("nan")


def flags(signals: pd.DataFrame, thresholds: dict) -> tuple[np.ndarray, np.ndarray]:
    """(stalled, prefill_load) boolean arrays aligned with the rows of `signals`."""
    slo = float(thresholds["itl_slo_s"])
    # the P99 is known only to its bucket: a breach needs the whole bucket above the SLO (identical to
    # `histogram_quantile > slo` when the SLO is a bucket bound, as the default 0.2 s is)
    stalled = (signals["itl_p99_lo"].to_numpy(dtype=float) >= slo) | (
        signals["itl_stall_share"].to_numpy(dtype=float) >= STALL_SHARE)
    prefill = (signals["prompt_rate"].to_numpy(dtype=float) >= float(thresholds["prefill_tokens_rate_high"])) | (
        signals["long_prefill_rate"].to_numpy(dtype=float) > 0)
    return stalled, prefill


def prefill_ahead(prefill: np.ndarray, signals: pd.DataFrame) -> np.ndarray:
    """Whether prefill load shows up within the next window: prompt tokens are counted when a prefill
    completes, after all its chunks ran, so a chunked prefill's slow steps precede its evidence."""
    step = int(signals.attrs.get("step_ns", 0)) or 1
    ahead = max(1, int(signals.attrs.get("window_ns", 0)) // step)
    out = np.zeros(len(prefill), dtype=bool)
    for k in range(1, ahead + 1):
        out[:-k] |= prefill[k:]
    return out


def estimate_cost(signals: pd.DataFrame, steps: pd.DataFrame | None = None, roofline_cost: dict | None = None) -> dict:
    """{decode_step_s, prefill_s_per_token, source}: from steps (least squares), metrics, or the roofline."""
    if steps is not None and len(steps) >= 8:
        st = steps.dropna(subset=["num_prefill_tokens", "num_decode_tokens"])
        dur = (st["end_ns"] - st["start_ns"]).to_numpy(dtype=float) / 1e9
        x = np.column_stack([np.ones(len(st)), st["num_prefill_tokens"].to_numpy(dtype=float),
                             st["num_decode_tokens"].to_numpy(dtype=float)])
        if len(st) >= 8 and (x[:, 1] > 0).any():
            coef = np.linalg.lstsq(x, dur, rcond=None)[0]
            decode_only = dur[(x[:, 1] == 0) & (x[:, 2] > 0)]
            if coef[1] > 0 and len(decode_only):
                return {"decode_step_s": float(np.median(decode_only)), "prefill_s_per_token": float(coef[1]),
                        "source": f"a least-squares fit of {len(st)} traced steps"}
    prompt = np.nansum(signals["prompt_rate"].to_numpy(dtype=float))
    prefill_time = np.nansum(signals["prefill_time_rate"].to_numpy(dtype=float))
    decode = _nanmedian(signals["itl_p50"])
    if prompt > 0 and prefill_time > 0 and np.isfinite(decode):
        tokens = ("computed prompt token" if _computed(signals) else
                  "prompt token; " + NOT_SEPARATED + ": with prefix caching the cost per token reads low")
        return {"decode_step_s": decode, "prefill_s_per_token": float(prefill_time / prompt),
                "source": f"the metrics (request_prefill_time_seconds per {tokens}; ITL P50 as the decode step)"}
    if roofline_cost:
        return dict(roofline_cost)
    return {"decode_step_s": decode if np.isfinite(decode) else 0.0, "prefill_s_per_token": float("nan"),
            "source": "none"}


def _computed(signals) -> bool:
    """Whether the prompt rate is the computed work (local_compute) everywhere it was measured."""
    flag = np.asarray(signals.get("prompt_computed", [np.nan]), dtype=float)
    return bool(np.isfinite(flag).any() and np.nanmin(flag) == 1.0)


def _offending_steps(stalls: pd.DataFrame, start: int, end: int, limit: int = 5) -> list[dict]:
    if stalls is None or not len(stalls):
        return []
    inside = stalls[(stalls["end_ns"] > start) & (stalls["end_ns"] <= end)]
    top = inside.sort_values("gap_s", ascending=False).head(limit)
    return [{"step": int(r.step), "end_ns": int(r.end_ns), "gap_s": float(r.gap_s),
             "num_prefill_tokens": float(r.num_prefill_tokens), "cause": r.cause} for r in top.itertuples()]


def detect(signals: pd.DataFrame, *, thresholds: dict | None = None, steps: pd.DataFrame | None = None,
           roofline_cost: dict | None = None, budget_advice=None) -> list[Finding]:
    """Findings of kind `decode_starvation` (and `itl_high` for stalls without prefill load).

    `budget_advice` (advice.budget_advisor's callable) gives the what-if budget's text and evidence,
    or None; it is called only when a starvation finding is made.

    >>> # detect(signals.compute(samples), steps=steps)[["kind", "severity", "start_ns", "end_ns"]]
    """
    th = thresholds or load_thresholds()
    slo = float(th["itl_slo_s"])
    window = int(signals.attrs.get("window_ns", 60 * 10**9))
    cost = estimate_cost(signals, steps, roofline_cost)
    stalls = find_stalls(steps, min_gap_s=slo) if steps is not None and len(steps) else None
    out = []
    for target, sig in signals.groupby("target", sort=True):
        sig = sig.sort_values("ts").reset_index(drop=True)
        sig.attrs = dict(signals.attrs)
        stalled, prefill = flags(sig, th)
        ts = sig["ts"].to_numpy(dtype=np.int64)
        step = int(signals.attrs.get("step_ns", window)) or window
        cols = {c: sig[c].to_numpy() for c in sig.columns if c != "target"}
        soon = prefill_ahead(prefill, sig)
        cols["prefill_soon"] = soon
        starving, other = stalled & prefill, stalled & ~prefill
        for kind, mask, barrier in (("decode_starvation", starving, other), ("itl_high", other, starving)):
            # windows that overlap belong together, unless the other kind sits between them
            for i, j in episodes(mask, merge_gap=window // step, barrier=barrier):
                part = {c: a[i:j + 1] for c, a in cols.items()}
                start, end = int(ts[i] - window), int(ts[j])
                out.append(_finding(kind, target, part, start, end, slo, cost, stalls, window, budget_advice))
    return out


def _above_slo(extra: dict, slo: float) -> str:
    step = extra.get("expected_step_s")
    if step is None or step <= slo:
        return ""
    return (f" Even the smallest budget leaves steps of about {step * 1e3:.0f} ms, above the SLO: the decode step "
            "itself is too slow here, so also lower `--max-num-seqs` or add compute.")


def _evidence(part, slo, stalls, start, end, window) -> tuple[dict, dict]:
    """(evidence, the worst window's row) of one episode."""
    p99s = part["itl_p99"].astype(float)
    k = int(np.nanargmax(p99s)) if np.isfinite(p99s).any() else 0
    worst = {c: a[k] for c, a in part.items()}
    n = len(p99s)
    evidence = {
        "itl_p99_s": float(worst["itl_p99"]), "itl_p99_bucket_s": [float(worst["itl_p99_lo"]), float(worst["itl_p99_hi"])],
        "itl_p99": format_quantile(worst["itl_p99"], worst["itl_p99_lo"], worst["itl_p99_hi"]), "itl_slo_s": slo,
        "itl_stall_share_max": _nanmax(part["itl_stall_share"]),
        "itl_above_slo_per_s_max": _nanmax(part["itl_above_slo_rate"]),
        "prompt_tokens_per_s_max": _nanmax(part["prompt_rate"]),
        "prompt_tokens_source": "local_compute" if _computed(part) else "prompt_tokens_total",
        "long_prefills": float(np.nansum(part["long_prefill_rate"].astype(float)) * window / 1e9 / max(n, 1)),
        "ttft_p99_s_max": _nanmax(part["ttft_p99"]), "running_median": _nanmedian(part["running"]),
        # recorded when requests finish, so it lags the stall: evidence, never the trigger
        "request_prefill_time_s_per_s_max": _nanmax(part["prefill_time_rate"]),
        "waiting_max": _nanmax(part["waiting"]), "preemptions_per_s_max": _nanmax(part["preempt_rate"]),
        "windows": int(n),
    }
    steps_ev = _offending_steps(stalls, start, end)
    if steps_ev:
        evidence["offending_steps"] = steps_ev
        evidence["offending_steps_total"] = int(((stalls["end_ns"] > start) & (stalls["end_ns"] <= end)).sum())
    return evidence, worst


def _finding(kind, target, part, start, end, slo, cost, stalls, window, budget_advice) -> Finding:
    evidence, worst = _evidence(part, slo, stalls, start, end, window)
    share = evidence["itl_stall_share_max"]
    critical = (worst["itl_p99_lo"] >= 2 * slo) or share >= 5 * STALL_SHARE
    where = f" on {target}" if target else ""
    if kind == "decode_starvation":
        explanation, recommendation = _starvation(evidence, where, slo, cost, budget_advice)
        severity = "critical" if critical else "warning"
    else:
        explanation, recommendation = _itl_high(evidence, where, slo, cost, bool(np.asarray(part["prefill_soon"]).any()))
        severity = "warning"
    return Finding(kind, severity, start, end, target, evidence, explanation, recommendation)


def _chunking(slo, cost) -> tuple[str, dict]:
    text, extra = chunked_prefill_recommendation(slo_s=slo, decode_step_s=cost["decode_step_s"],
                                                 prefill_s_per_token=cost["prefill_s_per_token"], source=cost["source"])
    return text + _above_slo(extra, slo), extra


def _starvation(evidence: dict, where: str, slo: float, cost: dict, budget_advice) -> tuple[str, str]:
    """(explanation, recommendation) of a decode_starvation finding; updates `evidence` with the budget."""
    p99, share = evidence["itl_p99"], evidence["itl_stall_share_max"]
    explanation = (
        f"Running streams{where} froze while long prompts were being prefilled: ITL P99 was {p99} against a "
        f"{slo * 1e3:.0f} ms SLO (up to {share:.1%} of stream time in gaps above the SLO) while prompt tokens "
        f"arrived at up to {evidence['prompt_tokens_per_s_max']:.0f} tokens/s and about "
        f"{evidence['long_prefills']:.1f} long prefills completed per window. Every decode in a step waits "
        "for the whole step, so a step that computes a whole long prompt holds every running stream for "
        "the prompt's prefill time.")
    if evidence["prompt_tokens_source"] != "local_compute":
        explanation += (f" Note: {NOT_SEPARATED}; with prefix caching on (vLLM's default) part of this load may "
                        "be cache hits that cost no compute.")
    if evidence.get("offending_steps"):
        s0 = evidence["offending_steps"][0]
        explanation += (f" The step trace confirms it: step {s0['step']} left a {s0['gap_s'] * 1e3:.0f} ms gap "
                        f"while computing {s0['num_prefill_tokens']:.0f} prompt tokens.")
    recommendation, extra = _chunking(slo, cost)
    evidence.update(extra)
    simulated = budget_advice() if budget_advice is not None else None
    if simulated is not None:
        recommendation = simulated[0]
        evidence.update(simulated[1])
    return explanation, recommendation


def _itl_high(evidence: dict, where: str, slo: float, cost: dict, soon: bool) -> tuple[str, str]:
    """(explanation, recommendation) of an itl_high finding; adds its likely cause to `evidence`."""
    p99, share = evidence["itl_p99"], evidence["itl_stall_share_max"]
    tail = (f"ITL P99{where} was {p99} and {share:.1%} of stream time sat in gaps above the {slo * 1e3:.0f} ms SLO"
            if np.isfinite(share) else f"ITL P99{where} was {p99} (SLO {slo * 1e3:.0f} ms)")
    preempting = evidence["preemptions_per_s_max"] > 0
    evidence["likely_cause"] = "preemption" if preempting else "memory_bound_decode"
    evidence["prefill_counted_next_window"] = soon
    if preempting:
        explanation = (
            f"{tail}, with no prefill load, so this is not decode starvation. Preemptions rose (up to {evidence['preemptions_per_s_max']:.2f}/s): a preempted "
            "request loses its KV blocks and is recomputed, and the recompute gap lands in its next ITL sample.")
        recommendation = ("Relieve KV pressure: `--kv-cache-dtype fp8` (doubles KV capacity) or a lower "
                          "`--max-num-seqs`, so fewer running requests are preempted.")
    else:
        explanation = (
            f"{tail}, with no prefill load and no preemptions, so this is not decode starvation. More likely the decode step itself is slow: memory-bound decode at "
            f"a large batch (median {evidence['running_median']:.0f} running requests) reads every weight and "
            "each request's KV cache once per step, so the step time grows with the batch and its context.")
        recommendation = ("Lower `--max-num-seqs` to shorten each decode step (fewer KV bytes per step), or add "
                          "bandwidth: `--tensor-parallel-size` splits the weight and KV reads across GPUs; "
                          "`stallscope roofline` shows the weight-read floor per step.")
    if soon:
        explanation += (" A long prefill was counted within the next window: prompt tokens are counted only when "
                        "a prefill completes, so if chunked prefill is on, its chunks ran in these windows and "
                        "made each step slower.")
        recommendation += " If chunked prefill is on, a smaller chunk helps: " + _chunking(slo, cost)[0]
    return explanation, recommendation
