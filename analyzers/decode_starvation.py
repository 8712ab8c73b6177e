"""Decode starvation: running streams froze beyond the ITL SLO because steps computed long prompts.

Method (the episode and its cause come from stallscope.analyzers.episodes; this module writes the finding):

1. A `prefill` episode is decode starvation: every decode in a step waits for the whole step, so a step that
   computes a long prompt (whole, with chunked prefill off; up to the budget, with a budget of 512 tokens or
   more) holds every running stream for its prefill time. An episode still open at the end of the data is a
   stall in progress, seen from the live counters (generation flat with requests RUNNING).
2. The explanation states the chunked-prefill configuration it assumes and where it came from
   (stallscope.analyzers.chunking); prefix-cache hits cost no compute, so prompt tokens are
   `source="local_compute"` where vLLM exports them, and a finding made from `prompt_tokens_total` (before
   0.16) says it could not separate them. With a step trace, the exact offending steps are attached.
3. The recommendation sizes `--max-num-batched-tokens` so one step (decode + chunk) fits the SLO, from the
   what-if simulation of the traced workload, else the step trace's fitted cost, else the metrics (the cost
   per computed prompt token fitted over scrape increments, stallscope.analyzers.prefill_cost, less the
   decode share of a chunked prompt's steps; else prefill time per computed token; ITL P50), else a
   roofline cost passed in by the caller; never the budget already in use (advice.slo_levers otherwise).
   Each target's cost comes from that target alone, so a run gets the same advice analyzed alone or with
   its siblings.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers import prefill_cost
from stallscope.analyzers.advice import chunked_prefill_recommendation
from stallscope.analyzers.chunking import LONG_PREFILL_TOKENS, SETTLE_IT, Chunking
from stallscope.analyzers.quantiles import format_quantile

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


def estimate_cost(signals: pd.DataFrame, steps: pd.DataFrame | None = None, roofline_cost: dict | None = None,
                  chunking: Chunking | None = None, samples: pd.DataFrame | None = None, model=None) -> dict:
    """{decode_step_s, prefill_s_per_token, source[, chunk_cost]}: from steps (least squares), metrics, or the
    roofline.

    From the metrics: a request's prefill time (first scheduled to first token) holds its steps' fixed and
    decode work too, so one decode step (ITL P50) per prefilled request is taken out, and with a known chunk
    budget B one more per B computed tokens (a chunked prompt spans all its chunk steps). With the model's
    shapes (`model`, a ModelConfig), `chunk_cost` splits that average by the attention share
    (stallscope.analyzers.chunk_cost), so a budget is priced by its slowest chunk; so it splits a fit of steps that
    do not name each request's tokens (a vLLM iteration-details log, nsys), whose cost per token is flat too."""
    cost = _estimate_cost(signals, steps, roofline_cost, chunking, samples)
    flat = cost.get("decode_step_from") == "itl_p50" or (   # steps without each request's tokens (a vLLM log,
        cost.get("decode_step_from") == "trace" and "num_scheduled_tokens" not in steps)   # nsys) fit a flat cost too
    if flat and model is not None and samples is not None:
        split = _chunk_cost(cost["prefill_s_per_token"], samples, model)
        if split is not None:
            cost["chunk_cost"] = split
        if split is not None and cost["decode_step_from"] == "trace" and chunking is not None and chunking.enabled \
                and chunking.budget:
            _calibrate(cost, steps, chunking.budget)
    return cost


def _calibrate(cost: dict, steps, budget: int) -> None:
    """Steps of a chunked server show its chunks at the budget in use: the split is scaled to them
    (chunk_cost.calibrated), so a budget the server already ran is priced as it ran."""
    from stallscope.analyzers.chunk_cost import calibrated

    got = calibrated(cost["chunk_cost"], steps, budget, cost["decode_step_s"])
    if got is not None:
        cost["chunk_cost"], cost["chunk_cost_calibration"] = got
        cost["source"] += (f"; the split scaled by {got[1]['scale']:.2f} to the deepest full chunks the steps show at "
                           f"the budget in use, {budget}")


def _chunk_cost(per_token: float, samples, model):
    """The metrics' average cost per token split by the model's attention share; None when no finished long
    prompt's length can be read."""
    from stallscope.analyzers.chunk_cost import from_average, long_prompt_tokens

    length = long_prompt_tokens(samples)
    return from_average(per_token, model, length) if length is not None and per_token > 0 else None


def _estimate_cost(signals, steps, roofline_cost, chunking, samples) -> dict:
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
                        "source": f"a least-squares fit of {len(st)} traced steps", "decode_step_from": "trace"}
    prompt = np.nansum(signals["prompt_rate"].to_numpy(dtype=float))
    prefill_time = np.nansum(signals["prefill_time_rate"].to_numpy(dtype=float))
    decode = _nanmedian(signals["itl_p50"])
    fitted = prefill_cost.fit(samples) if np.isfinite(decode) else None
    if fitted is not None:
        per_token, what = fitted["per_token_s"], ""
        if chunking is not None and chunking.enabled and chunking.budget:
            per_token = max(per_token - decode / chunking.budget, 0.25 * per_token)
            what = f", less one decode step per {chunking.budget}-token chunk"
        return {"decode_step_s": decode, "prefill_s_per_token": per_token, "decode_step_from": "itl_p50",
                "source": f"the metrics (a least-squares fit of request_prefill_time_seconds on requests and computed "
                          f"prompt tokens over {fitted['intervals']} scrape intervals{what}; ITL P50 as the decode step)"}
    if prompt > 0 and prefill_time > 0 and np.isfinite(decode):
        tokens = ("computed prompt token" if _computed(signals) else
                  "prompt token; " + NOT_SEPARATED + ": with prefix caching the cost per token reads low")
        raw = float(prefill_time / prompt)
        # a request's prefill time also holds each of its steps' fixed and decode work: one decode step per
        # request, and with a known chunk budget B one more per B computed tokens
        steps = np.nansum(signals["prefill_count_rate"].to_numpy(dtype=float)) if "prefill_count_rate" in signals else 0.0
        if chunking is not None and chunking.enabled and chunking.budget:
            steps += prompt / chunking.budget
            tokens += f", less one decode step per {chunking.budget}-token chunk"
        per_token = max((prefill_time - decode * steps) / prompt, 0.25 * raw)
        return {"decode_step_s": decode, "prefill_s_per_token": per_token, "decode_step_from": "itl_p50",
                "source": f"the metrics (request_prefill_time_seconds per {tokens}, less one ITL P50 decode step "
                          "per prefilled request; ITL P50 as the decode step)"}
    if roofline_cost:
        return dict(roofline_cost)
    return {"decode_step_s": decode if np.isfinite(decode) else 0.0, "prefill_s_per_token": float("nan"),
            "source": "none", "decode_step_from": "itl_p50" if np.isfinite(decode) else None}


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


def evidence(part: dict, slo: float, stalls, start: int, end: int) -> dict:
    """The figures of one episode's windows (`part`: column -> values), with the trace's offending steps."""
    p99s = np.asarray(part["itl_p99"], dtype=float)
    k = int(np.nanargmax(p99s)) if np.isfinite(p99s).any() else 0
    worst = {c: a[k] for c, a in part.items()}
    ev = {
        "itl_p99_s": float(worst["itl_p99"]), "itl_p99_bucket_s": [float(worst["itl_p99_lo"]), float(worst["itl_p99_hi"])],
        "itl_p99": format_quantile(worst["itl_p99"], worst["itl_p99_lo"], worst["itl_p99_hi"]), "itl_slo_s": slo,
        "itl_stall_share_max": _nanmax(part["itl_stall_share"]),
        "itl_above_slo_per_s_max": _nanmax(part["itl_above_slo_rate"]),
        "live_mean_itl_s_max": _nanmax(np.where(np.isinf(part["live_mean_itl"]), np.nan, part["live_mean_itl"])),
        "prompt_tokens_per_s_max": _nanmax(part["prompt_rate"]),
        "prompt_tokens_source": "local_compute" if _computed(part) else "prompt_tokens_total",
        "ttft_p99_s_max": _nanmax(part["ttft_p99"]), "running_median": _nanmedian(part["running"]),
        # recorded when requests finish, so it lags the stall: evidence, never the trigger
        "request_prefill_time_s_per_s_max": _nanmax(part["prefill_time_rate"]),
        "waiting_max": _nanmax(part["waiting"]), "preemptions_per_s_max": _nanmax(part["preempt_rate"]),
    }
    steps_ev = _offending_steps(stalls, start, end)
    if steps_ev:
        ev["offending_steps"] = steps_ev
        ev["offending_steps_total"] = int(((stalls["end_ns"] > start) & (stalls["end_ns"] <= end)).sum())
    return ev


def recommend(slo: float, cost: dict, chunking: Chunking, running: float, budget_advice=None,
              budget_in_use: int | None = None, in_use_floor: int | None = None) -> tuple[str, dict]:
    """The budget text and evidence: the what-if simulation when available, else the fitted cost.
    `in_use_floor`: an estimated `budget_in_use` may be as low as this (advice.chunked_prefill_recommendation)."""
    in_use = budget_in_use if budget_in_use is not None else (chunking.budget if chunking.enabled else None)
    text, extra = chunked_prefill_recommendation(slo_s=slo, decode_step_s=cost["decode_step_s"],
                                                 prefill_s_per_token=cost["prefill_s_per_token"], source=cost["source"],
                                                 budget_in_use=in_use, running=running,
                                                 budget_estimated=in_use is not None and not chunking.budget,
                                                 decode_from=cost.get("decode_step_from"),
                                                 chunk_cost=cost.get("chunk_cost"),
                                                 measured_in_use="chunk_cost_calibration" in cost,
                                                 in_use_floor=in_use_floor)
    if "chunk_cost_calibration" in cost:
        extra = {**extra, "chunk_cost_calibration": cost["chunk_cost_calibration"]}
    simulated = budget_advice() if budget_advice is not None else None
    if simulated is not None and simulated[1].get("max_num_batched_tokens") != in_use:
        text = simulated[0]
        extra = {**extra, **simulated[1]}
    return text, extra


def explain(ep, ev: dict, where: str, slo: float, chunking: Chunking) -> str:
    """The explanation of a decode_starvation episode, true to the configuration it assumes."""
    share = ev["itl_stall_share_max"]
    if ep.ongoing and ep.evidence["windows_frozen"]:
        last = ep.timeline[-1] if ep.timeline else {}
        still = float(last.get("nothing_for_s", float("nan")))
        waited = float(last.get("unserved_for_s", float("nan")))
        now = (f"no stream has had a token after its first for {waited:.1f} s" if waited > max(still, slo) else
               f"no token has come out for {still:.1f} s" if still > slo else
               f"the live mean gap per stream is {_fmt_gap(last.get('live_mean_itl', ev['live_mean_itl_s_max']))}")
        lead = (f"Running streams{where} are frozen now, at the end of the data: {ep.evidence['running_median']:.0f} "
                f"requests are RUNNING and {now}, against a {slo * 1e3:.0f} ms SLO (ITL is recorded only when a "
                "frozen stream gets its next token, so the generation counter shows the stall first).")
    elif ev["itl_p99_bucket_s"][0] >= slo:
        lead = (f"Running streams{where} froze while long prompts were prefilled: ITL P99 reached {ev['itl_p99']} "
                f"against a {slo * 1e3:.0f} ms SLO (up to {share:.1%} of stream time in gaps above it).")
    else:
        lead = (f"Running streams{where} froze while long prompts were prefilled: up to {share:.1%} of stream time "
                f"sat in gaps above the {slo * 1e3:.0f} ms SLO, though ITL P99 stayed at {ev['itl_p99']} (a freeze "
                "is one ITL sample per stream, however long it lasts).")
    if chunking.enabled is False:
        how = (f" With {chunking.describe()}, one step computes a whole prompt, and every decode in a step waits for "
               "the whole step, so the step holds every running stream for the prompt's prefill time.")
    elif chunking.enabled:
        size = (f"up to {chunking.budget}" if chunking.budget else
                f"about {chunking.chunk_estimate():.0f}" if chunking.chunk_estimate() else "a long prompt's worth of")
        how = (f" With {chunking.describe()}, a step still computes {size} prompt tokens, and every "
               "decode in it waits for the whole step.")
    else:
        how = (f" {chunking.sentence()}. Every decode in a step waits for the whole step, so a step "
               "that computes a long prompt holds every running stream.")
    text = f"{lead}{how} Decided by: {ep.decided_by}."
    if chunking.undecided():
        text += (f" The metrics cannot rule out chunked prefill at a budget of about {chunking.budget_floor:.0f} "
                 f"tokens or more (the slowest ITL gaps fell in a bucket that wide); under {LONG_PREFILL_TOKENS} the "
                 f"same stalls are chunk steps slower than the SLO, not long prefills. {SETTLE_IT}")
    if ev["prompt_tokens_source"] != "local_compute":
        text += (f" Note: {NOT_SEPARATED}; with prefix caching on (vLLM's default) part of this load may "
                 "be cache hits that cost no compute.")
    if ev.get("offending_steps"):
        s0 = ev["offending_steps"][0]
        text += (f" The step trace confirms it: step {s0['step']} left a {s0['gap_s'] * 1e3:.0f} ms gap "
                 f"while computing {s0['num_prefill_tokens']:.0f} prompt tokens.")
    return text


def _fmt_gap(s: float) -> str:
    return "more than the live window (no token at all)" if not np.isfinite(s) else f"{s * 1e3:.0f} ms"


def detect(signals: pd.DataFrame, *, thresholds: dict | None = None, steps: pd.DataFrame | None = None,
           roofline_cost: dict | None = None, budget_advice=None, chunking: Chunking | None = None) -> list:
    """The decode_starvation and itl_high findings of stream_stalls.detect (one per episode).

    >>> # detect(signals.compute(samples), steps=steps)
    """
    from stallscope.analyzers import stream_stalls

    found = stream_stalls.detect(signals, thresholds=thresholds, steps=steps, roofline_cost=roofline_cost,
                                 budget_advice=budget_advice, chunking=chunking)
    return [f for f in found if f.kind != "scheduler_stall"]
