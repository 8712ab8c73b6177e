"""Decode-stall detection on steps rebuilt from an Nsight Systems trace, and the CUDA-graph notice.

Method (find_decode_starvation):
1. Decode-only steps (decode work, no prefill) set the pace: the median duration of the decode-only
   steps among the previous `window` steps (before any, the median of the first `window` of them).
   With fewer than `min_decode_steps` decode-only steps the trace has no decode cadence (training,
   vision, a lone forward pass) and nothing is reported: no LLM-serving structure, no finding.
2. A stall is either a step that carries prefill and lasts longer than k x that median, or a
   decode-free interval (end of one decode step to the start of the next) longer than k x the median
   that holds prefill work. Overlapping stalls merge.
3. Each stall becomes a `decode_starvation` finding: start/end, duration, prefill tokens (from NVTX,
   or an estimate gridX x kBlockM from the attention grid), the top kernels inside by time, how many
   decode steps were delayed (duration // median) and by how much (duration - median: the extra wait
   of every running stream's next token). Severity means what it means on the metrics path: the stall is
   the gap every running stream saw, so under the ITL SLO it is `info` (prefill interference that stays
   within the SLO, with its numbers), above it `warning`, at twice the SLO or more `critical`.

    >>> find_decode_starvation(steps, kernels)        # doctest: +SKIP
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import pandas as pd

from stallscope.analyzers.finding import Finding

K_BLOCK_M = 128  # FlashAttention-2/3 query tile rows for head_dim 128
TOP_KERNELS = 5


def rolling_decode_median(steps: pd.DataFrame, *, window: int = 64) -> np.ndarray:
    """Per step: median duration (ns) of the decode-only steps among the previous `window` steps."""
    dur = (steps["end_ns"] - steps["start_ns"]).to_numpy(dtype="float64")
    decode_only = (steps["is_decode"] & ~steps["has_prefill"]).to_numpy()
    series = pd.Series(np.where(decode_only, dur, np.nan))
    prior = series.shift(1).rolling(window, min_periods=1).median()
    first = float(np.nanmedian(series.to_numpy()[decode_only][:window])) if decode_only.any() else np.nan
    return prior.fillna(first).to_numpy()


def _stall_intervals(steps: pd.DataFrame, med: np.ndarray, k: float) -> list[tuple[int, int]]:
    start, end = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    dur = end - start
    pre = steps["has_prefill"].to_numpy(dtype=bool)
    dec = steps["is_decode"].to_numpy(dtype=bool)
    found = [(int(start[i]), int(end[i])) for i in np.nonzero(pre & (dur > k * med))[0]]
    dec_idx = np.nonzero(dec)[0]
    for a, b in zip(dec_idx[:-1], dec_idx[1:]):
        if b - a > 1 and pre[a + 1:b].any() and start[b] - end[a] > k * med[b]:
            found.append((int(end[a]), int(start[b])))
    found.sort()
    merged: list[list[int]] = []
    for s, e in found:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def top_kernels(frames: Iterable[pd.DataFrame], intervals: list[tuple[int, int]]) -> list[list[dict]]:
    """Per interval [s, e) (sorted, disjoint): the kernels overlapping it, ranked by time inside it
    (clipped), from `frames` (batches holding at least every kernel that overlaps an interval; start_ns,
    end_ns, short_name, role), taken one at a time."""
    sums: list[dict] = [{} for _ in intervals]
    iv_s, iv_e = np.array([iv[0] for iv in intervals]), np.array([iv[1] for iv in intervals])
    for f in frames:
        if not len(f):
            continue
        f = f.sort_values("start_ns", kind="stable")
        start, end = f["start_ns"].to_numpy(), f["end_ns"].to_numpy()
        name = f["short_name"].astype(object).to_numpy()
        role = f["role"].astype(object).to_numpy() if "role" in f else np.full(len(f), "other", dtype=object)
        longest = int((end - start).max())
        first, last = np.searchsorted(iv_e, start[0], side="right"), np.searchsorted(iv_s, end.max(), side="left")
        for i in range(first, last):  # the intervals this frame reaches
            s, e = iv_s[i], iv_e[i]
            lo, hi = np.searchsorted(start, [s - longest, e])
            inside = lo + np.nonzero(end[lo:hi] > s)[0]
            clipped = (np.minimum(end[inside], e) - np.maximum(start[inside], s)).tolist()
            for key, ns in zip(zip(name[inside], role[inside]), clipped):
                t = sums[i].setdefault(key, [0, 0])
                t[0] += ns
                t[1] += 1
    return [_ranked(acc) for acc in sums]


def _ranked(acc: dict) -> list[dict]:
    """Top TOP_KERNELS by time; ties keep (name, role) order, as pandas' descending sort of a groupby does."""
    ranked = sorted(sorted(acc.items()), key=lambda kv: -kv[1][0])[:TOP_KERNELS]
    return [{"name": n, "role": r, "total_ns": int(t), "instances": int(c)} for (n, r), (t, c) in ranked]


def _fmt_ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"


def find_decode_starvation(steps: pd.DataFrame, kernels: pd.DataFrame | Callable, *, k: float = 3.0,
                           window: int = 64, min_decode_steps: int = 5, itl_slo_ns: int = 200_000_000,
                           session_start_ns: int | None = None) -> list[Finding]:
    """`decode_starvation` findings for stalls longer than k x the decode pace. `kernels`: a frame, or
    `f(intervals) -> iterable of frames` holding every kernel that overlaps one (a second, partial read)."""
    if steps.empty or int((steps["is_decode"] & ~steps["has_prefill"]).sum()) < min_decode_steps:
        return []
    med = rolling_decode_median(steps, window=window)
    intervals = _stall_intervals(steps, med, k)
    if not intervals:
        return []
    tops = top_kernels(kernels(intervals) if callable(kernels) else [kernels], intervals)
    rows = []
    for (s, e), top in zip(intervals, tops):
        inside = steps[(steps["start_ns"] < e) & (steps["end_ns"] > s)]
        pace = float(np.median(med[inside.index])) if len(inside) else float(np.nanmedian(med))
        dur = e - s
        tokens = inside.loc[inside["has_prefill"], "num_prefill_tokens"]
        prefill_tokens = int(tokens.sum()) if len(tokens) and tokens.notna().all() else None
        grid = int(inside.loc[inside["has_prefill"], "max_attention_grid_x"].max()) if len(inside) else 0
        streams = inside["num_decode_tokens"].dropna()
        delayed, delay = int(dur // pace), int(dur - pace)
        evidence = {
            "start_ns": s, "end_ns": e, "duration_ns": dur, "median_decode_step_ns": int(pace),
            "stall_over_median": round(dur / pace, 2), "k": k,
            "prefill_tokens": prefill_tokens,
            "prefill_tokens_estimate": grid * K_BLOCK_M if prefill_tokens is None and grid > 1 else None,
            "steps_inside": int(len(inside)), "decode_streams": int(streams.max()) if len(streams) else None,
            "decode_steps_delayed": delayed, "decode_delay_ns": delay,
            "top_kernels": top,
        }
        if session_start_ns is not None:
            evidence["start_utc_ns"] = session_start_ns + s
        tok = (f"{prefill_tokens} prompt tokens" if prefill_tokens is not None else
               f"about {evidence['prefill_tokens_estimate']} prompt tokens (attention gridX {grid} x {K_BLOCK_M})"
               if evidence["prefill_tokens_estimate"] else "prefill work")
        who = f"the {evidence['decode_streams']} running decode streams" if evidence["decode_streams"] else "running decode streams"
        evidence["itl_slo_ns"] = int(itl_slo_ns)
        severity = "info" if dur <= itl_slo_ns else "critical" if dur >= 2 * itl_slo_ns else "warning"
        verdict = (f" That gap is within the {_fmt_ms(itl_slo_ns)} ITL SLO: prefill interference, not a missed SLO."
                   if severity == "info" else f" That gap is above the {_fmt_ms(itl_slo_ns)} ITL SLO.")
        rows.append(Finding(
            "decode_starvation", severity, s, e, "", evidence,
            explanation=(f"For {_fmt_ms(dur)} ({evidence['stall_over_median']}x the median decode step of "
                         f"{_fmt_ms(pace)}) the GPU computed {tok}; {who} got no token meanwhile, so "
                         f"{delayed} decode steps were delayed and each stream's next token came "
                         f"{_fmt_ms(delay)} late.{verdict}"),
            recommendation=("Bound the prefill work per step: keep chunked prefill on (vLLM V1 default) and "
                            "lower `--max-num-batched-tokens` (e.g. 512-2048) so a long prompt is split into "
                            "chunks that each add about one decode step; cap long prompts per step with "
                            "`--long-prefill-token-threshold` and `--max-num-partial-prefills 1`. Expected: "
                            "ITL P99 near k x the decode step instead of the full prefill time.")))
    return rows


def cuda_graph_findings(graph_launches: pd.DataFrame, kernel_ns: int, *, mode: str | None,
                        graph_launch_calls: int = 0) -> list[Finding]:
    """One `cuda_graphs_hidden` info finding when work ran as whole-graph launches (kernels invisible);
    `kernel_ns`: the kernels' summed duration."""
    n = len(graph_launches)
    if n == 0 and not (graph_launch_calls and mode == "Graph"):
        return []
    graph_ns = int((graph_launches["end_ns"] - graph_launches["start_ns"]).sum()) if n else 0
    share = graph_ns / (graph_ns + kernel_ns) if graph_ns + kernel_ns else 0.0
    s = int(graph_launches["start_ns"].min()) if n else 0
    e = int(graph_launches["end_ns"].max()) if n else 0
    return [Finding(
        "cuda_graphs_hidden", "info", s, e, "",
        {"graph_launches": n, "graph_launch_calls": graph_launch_calls, "graph_time_ns": graph_ns,
         "graph_time_share": round(share, 4), "cuda_graph_trace_mode": mode},
        explanation=(f"{n or graph_launch_calls} CUDA graph launches were traced as whole graphs "
                     f"({share:.0%} of GPU time): the kernels inside them (GEMMs, norms, attention of "
                     "decode-only steps under vLLM's FULL_AND_PIECEWISE cudagraph mode) are not in the "
                     "trace, so kernel summaries and roles cover only eager kernels."),
        recommendation=("Re-capture with `nsys profile --cuda-graph-trace=node --trace-fork-before-exec=true` "
                        "to record every kernel inside CUDA graphs (step detection already works on the "
                        "graph launches)."))]
