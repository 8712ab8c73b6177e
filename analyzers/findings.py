"""Findings: one typed record per diagnosed problem, the findings frame, and concrete recommendations.

The idea: a detector says *what* (kind, severity, window, target), *why* (evidence figures in base
units and a one-paragraph explanation) and *what to change* (vLLM flags with their expected effect).
Recommendation numbers come from measurements, in this order of preference: the step trace (a fitted
step time per prefill token), the metrics (prefill time per prompt token, ITL P50), the roofline.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from stallscope.core.errors import InputError
from stallscope.core.schema import columns, validate

SEVERITIES = ("info", "warning", "critical")


def severity_rank(severity: str) -> int:
    """0 for info, 1 warning, 2 critical; an unknown name is an InputError that names it."""
    try:
        return SEVERITIES.index(severity)
    except ValueError:
        raise InputError(f"unknown severity {severity!r}; choose one of {', '.join(SEVERITIES)}") from None


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem over one time window (ns).

    >>> f = Finding("kv_pressure", "warning", 0, 10, "a", {"kv_usage": 0.93}, "...", "--kv-cache-dtype fp8")
    >>> to_frame([f])["severity"].tolist()
    ['warning']
    """

    kind: str
    severity: str
    start_ns: int
    end_ns: int
    target: str = ""
    evidence: dict = field(default_factory=dict)
    explanation: str = ""
    recommendation: str = ""

    def __post_init__(self):
        severity_rank(self.severity)

    def to_json(self) -> dict:
        out = asdict(self)
        out["evidence"] = _jsonable(self.evidence)
        return out


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    return value


def to_frame(findings) -> pd.DataFrame:
    """The `findings` frame (schema.FRAMES["findings"]) of a list of Finding, sorted by start."""
    cols = columns("findings")
    if not findings:
        from stallscope.core.schema import empty
        return empty("findings")
    df = pd.DataFrame([asdict(f) for f in findings], columns=cols)
    df["start_ns"] = df["start_ns"].astype("int64")
    df["end_ns"] = df["end_ns"].astype("int64")
    df = df.sort_values(["start_ns", "kind"], kind="stable").reset_index(drop=True)
    return validate(df, "findings")


def from_frame(frame: pd.DataFrame) -> list[Finding]:
    return [Finding(**{c: row[c] for c in columns("findings")}) for _, row in frame.iterrows()]


def at_or_above(frame: pd.DataFrame, severity: str) -> pd.DataFrame:
    """Rows whose severity is at or above `severity`."""
    floor = severity_rank(severity)
    return frame[[severity_rank(s) >= floor for s in frame["severity"]]]


# --- recommendations -----------------------------------------------------------------------------
def chunk_budget(slo_s: float, decode_step_s: float, prefill_s_per_token: float, *, block: int = 64,
                 lo: int = 64, hi: int = 16384) -> int:
    """The largest `--max-num-batched-tokens` whose step (decode + one chunk) stays under the ITL SLO.

    step ≈ decode_step_s + N x prefill_s_per_token <= slo_s, N rounded down to a multiple of `block`.

    >>> chunk_budget(0.2, 0.03, 0.0005)
    320
    """
    if not (prefill_s_per_token > 0 and math.isfinite(prefill_s_per_token)):
        return 512
    n = (slo_s - max(decode_step_s, 0.0)) / prefill_s_per_token
    n = int(n // block * block)
    return int(min(max(n, lo), hi))


def chunked_prefill_recommendation(*, slo_s: float, decode_step_s: float, prefill_s_per_token: float,
                                   source: str, long_prompt_tokens: float | None = None) -> tuple[str, dict]:
    """`--enable-chunked-prefill --max-num-batched-tokens N` with the step time and ITL it should give."""
    if not (prefill_s_per_token > 0 and math.isfinite(prefill_s_per_token)):
        text = ("`--enable-chunked-prefill --max-num-batched-tokens 512` (no measured prefill cost, so 512 is a "
                "conservative default): long prompts are then split into chunks that share each step with the "
                "running decodes instead of holding the step for the whole prompt.")
        return text, {"max_num_batched_tokens": 512, "budget_source": "default"}
    n = chunk_budget(slo_s, decode_step_s, prefill_s_per_token)
    step_s = decode_step_s + n * prefill_s_per_token
    text = (f"`--enable-chunked-prefill --max-num-batched-tokens {n}`: a step then carries at most {n} tokens, "
            f"so it takes about {decode_step_s * 1e3:.0f} ms + {n} x {prefill_s_per_token * 1e3:.3f} ms "
            f"= {step_s * 1e3:.0f} ms and ITL P99 should fall to about {step_s * 1e3:.0f} ms "
            f"(SLO {slo_s * 1e3:.0f} ms)")
    if long_prompt_tokens and long_prompt_tokens > n:
        chunks = math.ceil(long_prompt_tokens / n)
        text += (f"; a {long_prompt_tokens:.0f}-token prompt then needs {chunks} steps, which adds roughly "
                 f"{(chunks - 1) * decode_step_s * 1e3:.0f} ms to its TTFT")
    text += f". Cost figures from {source}."
    return text, {"max_num_batched_tokens": n, "expected_step_s": step_s, "budget_source": source}


def kv_recommendation(*, capacity_tokens: float | None, peak_running: float, peak_usage: float,
                      kv_usage_high: float, cache_dtype: str | None = None) -> tuple[str, dict]:
    """`--kv-cache-dtype fp8` (capacity N -> 2N tokens) and a lower `--max-num-seqs`."""
    parts, extra = [], {}
    if cache_dtype not in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        if capacity_tokens and math.isfinite(capacity_tokens):
            n = int(capacity_tokens)
            parts.append(f"`--kv-cache-dtype fp8` halves the bytes per cached token, so the same memory holds "
                         f"{2 * n:,} tokens instead of {n:,} (check accuracy for your model)")
            extra["kv_capacity_tokens"] = n
            extra["kv_capacity_tokens_fp8"] = 2 * n
        else:
            parts.append("`--kv-cache-dtype fp8` halves the bytes per cached token, doubling the KV capacity "
                         "from N to 2N tokens (check accuracy for your model)")
    if peak_running and peak_running >= 2 and peak_usage > 0:
        seqs = max(1, int(math.floor(peak_running * kv_usage_high / peak_usage)))
        parts.append(f"lowering `--max-num-seqs` from the observed peak of {peak_running:.0f} running requests to "
                     f"{seqs} keeps peak KV usage near {kv_usage_high:.0%} (fewer preemptions, more queueing)")
        extra["max_num_seqs"] = seqs
    parts.append("or raise `--gpu-memory-utilization` / add GPUs (`--tensor-parallel-size`) for more KV blocks")
    return "; ".join(parts) + ".", extra


def diagnose(samples: pd.DataFrame | None = None, gpu: pd.DataFrame | None = None, steps: pd.DataFrame | None = None,
             *, thresholds: dict | None = None, roofline_cost: dict | None = None, window_s: float | None = None,
             step_s: float | None = None, whatif_inputs=None) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """(signals frame or None, findings frame) of one source's frames; every detector runs once.

    `whatif_inputs` (stallscope.analyzers.budget.WhatifInputs, e.g. a run directory's) sizes the
    decode_starvation budget; without it the budget is simulated from `steps` and `samples` alone.
    """
    from stallscope.analyzers import decode_starvation, kv_pressure, memory_bound, scheduler_stall, signals
    from stallscope.core.config import load_thresholds

    th = thresholds or load_thresholds()
    parts, sig = [], None
    if samples is not None and len(samples):
        eval_ts, window = signals.choose_grid(samples, th, window_s=window_s, step_s=step_s)
        sig = signals.compute(samples, thresholds=th, eval_ts=eval_ts, window_ns=window)
        parts += [decode_starvation.detect(sig, thresholds=th, steps=steps, roofline_cost=roofline_cost),
                  kv_pressure.detect(sig, thresholds=th, samples=samples),
                  scheduler_stall.detect(sig, thresholds=th)]
    if gpu is not None and len(gpu):
        parts.append(memory_bound.detect(gpu, signals=sig, thresholds=th))
    parts = [p for p in parts if len(p)]
    if not parts:
        return sig, to_frame([])
    out = pd.concat(parts, ignore_index=True).sort_values(["start_ns", "kind"], kind="stable")
    out = _whatif_budget(out.reset_index(drop=True), steps, float(th["itl_slo_s"]), samples=samples,
                         inputs=whatif_inputs)
    return sig, validate(out, "findings")


def _whatif_budget(out: pd.DataFrame, steps: pd.DataFrame | None, slo_s: float, *, samples=None,
                   inputs=None) -> pd.DataFrame:
    """With a step trace that names each request's tokens, the starvation finding's budget is
    `budget.recommend_budget`'s: the same call `stallscope whatif` and the dashboard make (docs/whatif.md)."""
    starving = out["kind"] == "decode_starvation"
    if steps is None or "num_scheduled_tokens" not in steps or not starving.any():
        return out
    from stallscope.analyzers.budget import inputs_from_frames, recommend_budget
    from stallscope.core.errors import ToolkitError

    try:
        inputs = inputs if inputs is not None else inputs_from_frames(steps, samples)
        res = recommend_budget(inputs, slo_s)
    except ToolkitError:
        return out
    rec, budgets, cost = res["recommendation"], res["budgets"], inputs.cost
    n = rec["max_num_batched_tokens"]
    verdict = "meets" if rec["meets_slo"] else "is the lowest simulated but misses"
    text = (f"`--enable-chunked-prefill --max-num-batched-tokens {n}`: simulating the workload of {inputs.source} "
            f"through the engine's scheduler at budgets {', '.join(map(str, budgets))} predicts ITL P99 "
            f"{rec['predicted_itl_p99_s'] * 1e3:.0f} ms at {n}, which {verdict} the {slo_s * 1e3:.0f} ms SLO"
            + (f", with long-prompt TTFT P99 {rec['predicted_ttft_long_p99_s']:.2f} s"
               if math.isfinite(rec["predicted_ttft_long_p99_s"]) else "")
            + f" (step-cost fit on {cost.n_steps} steps, MAPE {cost.mape:.0%}); "
            "`stallscope whatif` shows every budget.")
    evidence = {"max_num_batched_tokens": n, "budget_source": f"what-if simulation of {inputs.source}",
                "whatif_predicted_itl_p99_s": rec["predicted_itl_p99_s"], "whatif_meets_slo": rec["meets_slo"],
                "whatif_budgets": budgets}
    out = out.copy()
    out.loc[starving, "recommendation"] = text
    out.loc[starving, "evidence"] = pd.Series([{**e, **evidence} for e in out.loc[starving, "evidence"]],
                                              index=out.index[starving])
    return out


def find_all(frames: dict, *, thresholds: dict | None = None, roofline_cost: dict | None = None,
             window_s: float | None = None, step_s: float | None = None) -> pd.DataFrame:
    """Every detector over `{"samples", "gpu", "steps"}` frames (any may be absent): one findings frame.

    >>> # find_all({"samples": samples, "steps": steps})[["kind", "severity"]]
    """
    return diagnose(frames.get("samples"), frames.get("gpu"), frames.get("steps"), thresholds=thresholds,
                    roofline_cost=roofline_cost, window_s=window_s, step_s=step_s,
                    whatif_inputs=frames.get("whatif_inputs"))[1]
