"""Rebuild engine steps (the `steps` frame of docs/step-trace.md) from an Nsight Systems trace.

Method:
1. vLLM NVTX step ranges, when present: one `execute_context_{n}({tokens})_generation_{m}({tokens})`
   range per `execute_model` call (vLLM's profiler annotation; the detailed `execute_{total}_context_...`
   form too) gives the step and its prefill/decode token counts. Else one `gpu_model_runner: forward`
   range per step (VLLM_NVTX_SCOPES_FOR_PROFILING=1), token counts unknown.
2. A kernel belongs to the range whose [start, end] holds its launching API call (same process), as
   nsys's nvtx_gpu_proj_trace projects ranges; without launch calls, the range its start falls in.
   The step spans the CPU range and its kernels: [min(range start, first kernel start),
   max(range end, last kernel end)].
3. Without step ranges, steps come from the kernel stream of the busiest (process, device): a step
   ends after each cluster of sampling kernels (argmax/top-k) when those exist, otherwise at every
   GPU idle gap longer than max(200 us, 20 x the median gap between operations). Whole CUDA-graph
   launches count as operations. The repeating per-layer pattern gives the layer count (the modal
   number of attention kernels per step).
4. Every step gets gpu_busy_ns (union of its kernel intervals), num_kernels, and from the attention
   grids `has_prefill` (an attention kernel with gridX > 1 or a prefill-only name) and `is_decode`
   (decode tokens by NVTX, or decode-phase attention, or a whole-graph launch).

    >>> steps, info = reconstruct_steps(classify(trace.kernels), trace.nvtx, trace.graph_launches)  # doctest: +SKIP
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from stallscope.core.schema import validate

VLLM_STEP = re.compile(r"execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)")
VLLM_FORWARD = re.compile(r"gpu_model_runner: forward$")
MIN_SPLIT_GAP_NS = 200_000
GAP_FACTOR = 20.0
TOKEN_COLS = ["num_prefill_reqs", "num_prefill_tokens", "num_decode_reqs", "num_decode_tokens"]  # NaN: unknown
EXTRA = ["pid", "has_prefill", "is_decode", "num_prefill_reqs", "num_decode_reqs", "num_attention_kernels",
         "max_attention_grid_x", "source"]


def _step_ranges(nvtx: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    if nvtx.empty:
        return nvtx, ""
    names = nvtx["name"].astype(str)
    maybe = names.str.contains("execute_", regex=False)  # cheap filter before the regex (aten ranges: millions)
    parsed = names[maybe].str.extract(VLLM_STEP)
    hit = parsed[0].notna()
    if hit.any():
        r = nvtx[maybe][hit.to_numpy()].copy()
        p = parsed[hit].astype("float64")
        r["num_prefill_reqs"], r["num_prefill_tokens"] = p[0].to_numpy(), p[1].to_numpy()
        r["num_decode_reqs"], r["num_decode_tokens"] = p[2].to_numpy(), p[3].to_numpy()
        return r, "nvtx:vllm-execute"
    fwd = names.str.contains(VLLM_FORWARD)
    if fwd.any():
        return nvtx[fwd].assign(**dict.fromkeys(TOKEN_COLS, np.nan)), "nvtx:vllm-scopes"
    return nvtx.iloc[:0], ""


def _assign_to_ranges(kernels: pd.DataFrame, ranges: pd.DataFrame) -> np.ndarray:
    """Index (into `ranges`) of the step range each kernel belongs to, -1 for none."""
    step = np.full(len(kernels), -1, dtype=np.int64)
    use_launch = kernels["launch_ns"].notna().to_numpy()
    t = np.where(use_launch, kernels["launch_ns"].fillna(0).to_numpy(), kernels["start_ns"].to_numpy()).astype(np.int64)
    kpid = kernels["pid"].to_numpy()
    for pid, r in ranges.groupby("pid"):
        r = r.sort_values("start_ns")
        starts, ends, idx = r["start_ns"].to_numpy(), r["end_ns"].to_numpy(), r.index.to_numpy()
        # without launch calls a kernel may run until the next range starts; after the last range, for
        # at most that range's own length (trailing kernels outside profiling must not join it)
        nxt = np.r_[starts[1:], ends[-1] + (ends[-1] - starts[-1]) + 1]
        sel = np.nonzero(kpid == pid)[0]
        pos = np.searchsorted(starts, t[sel], side="right") - 1
        ok = pos >= 0
        pos_ok = np.clip(pos, 0, None)
        limit = np.where(use_launch[sel], ends[pos_ok], nxt[pos_ok] - 1)
        ok &= t[sel] <= limit
        step[sel[ok]] = idx[pos_ok[ok]]
    return step


def _group_reduce(ufunc, sid: np.ndarray, values: np.ndarray, n: int, fill) -> np.ndarray:
    """ufunc.reduce of `values` per group id 0..n-1 (`sid` sorted ascending); `fill` for empty groups."""
    out = np.full(n, fill, dtype=values.dtype if len(values) else np.int64)
    if len(sid):
        first = np.r_[0, np.nonzero(sid[1:] != sid[:-1])[0] + 1]
        out[sid[first]] = ufunc.reduceat(values, first)
    return out


def _group_busy(sid: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int) -> np.ndarray:
    """Union length (ns) of [start, end) intervals per group id; rows sorted by (sid, start)."""
    if len(sid) == 0:
        return np.zeros(n, dtype=np.int64)
    new_group = np.r_[True, sid[1:] != sid[:-1]]
    # running max of ends that restarts at each group: add a per-group offset larger than any span
    base, span = starts.min(), int(ends.max() - starts.min()) + 1
    if sid.max() > 0 and span * (int(sid.max()) + 2) >= 2**62:  # absurd clock spans: one group at a time
        return np.array([_group_busy(np.zeros(int(m.sum()), np.int64), starts[m], ends[m], 1)[0]
                         for m in (sid == g for g in range(n))], dtype=np.int64)
    off = sid.astype(np.int64) * span
    s2, e2 = starts - base + off, ends - base + off
    run_max = np.maximum.accumulate(e2)
    new_run = new_group | np.r_[True, s2[1:] > run_max[:-1]]
    first = np.nonzero(new_run)[0]
    run_len = np.maximum.reduceat(e2, first) - s2[first]
    return np.bincount(sid[first], weights=run_len, minlength=n).astype(np.int64)


def _finish(steps: pd.DataFrame, kernels: pd.DataFrame, step_of: np.ndarray, source: str) -> pd.DataFrame:
    n = len(steps)
    inside = np.nonzero(step_of >= 0)[0]
    order = inside[np.argsort(step_of[inside], kind="stable")]  # by step, then start (kernels come sorted)
    if not kernels["start_ns"].is_monotonic_increasing:
        order = order[np.lexsort((kernels["start_ns"].to_numpy()[order], step_of[order]))]
    sid = step_of[order]
    k = kernels.iloc[order]
    kstart, kend = k["start_ns"].to_numpy(), k["end_ns"].to_numpy()
    big = np.iinfo(np.int64)
    steps["start_ns"] = np.minimum(steps["start_ns"].to_numpy(), _group_reduce(np.minimum, sid, kstart, n, big.max))
    steps["end_ns"] = np.maximum(steps["end_ns"].to_numpy(), _group_reduce(np.maximum, sid, kend, n, big.min))
    steps["num_kernels"] = np.bincount(sid, minlength=n).astype("float64")
    steps["gpu_busy_ns"] = _group_busy(sid, kstart, kend, n).astype("float64")
    attn = k["attention_core"].to_numpy(dtype=bool) if "attention_core" in k else np.zeros(len(k), bool)
    phase = np.asarray(k["attention_phase"]) if "attention_phase" in k else np.full(len(k), "")
    graph = (k["role"] == "cuda_graph").to_numpy() if "role" in k else np.zeros(len(k), bool)
    steps["num_attention_kernels"] = np.bincount(sid[attn], minlength=n)
    steps["max_attention_grid_x"] = _group_reduce(np.maximum, sid[attn], k["grid_x"].to_numpy()[attn], n, 0)
    pre = np.bincount(sid[phase == "prefill"], minlength=n) > 0
    dec = (np.bincount(sid[phase == "decode"], minlength=n) > 0) | (np.bincount(sid[graph], minlength=n) > 0)
    known_p = steps["num_prefill_tokens"].notna().to_numpy()
    steps["has_prefill"] = np.where(known_p, steps["num_prefill_tokens"].fillna(0).to_numpy() > 0, pre)
    known_d = steps["num_decode_tokens"].notna().to_numpy()
    steps["is_decode"] = np.where(known_d, steps["num_decode_tokens"].fillna(0).to_numpy() > 0, dec)
    steps["source"] = source
    steps = steps.sort_values("start_ns", kind="stable").reset_index(drop=True)
    steps["step"] = np.arange(len(steps), dtype=np.int64)
    cols = ["step", "start_ns", "end_ns", "num_prefill_tokens", "num_decode_tokens", "gpu_busy_ns", "num_kernels"]
    return validate(steps[cols + EXTRA].astype({"start_ns": "int64", "end_ns": "int64"}), "steps")


def steps_from_nvtx(kernels: pd.DataFrame, nvtx: pd.DataFrame) -> pd.DataFrame | None:
    """Steps from vLLM NVTX step ranges, or None when the trace has none."""
    ranges, source = _step_ranges(nvtx)
    if ranges.empty:
        return None
    ranges = ranges.reset_index(drop=True)
    step_of = _assign_to_ranges(kernels, ranges)
    return _finish(ranges[["start_ns", "end_ns", "pid", *TOKEN_COLS]].copy(), kernels, step_of, source)


def graph_ops(graphs: pd.DataFrame) -> pd.DataFrame:
    g = graphs.copy()
    g["dur_ns"] = g["end_ns"] - g["start_ns"]
    g["name"] = g["short_name"] = "<CUDA graph " + g["graph_id"].astype(str) + ">"
    g["role"], g["attention_phase"], g["attention_core"], g["grid_x"] = "cuda_graph", "", False, 0
    return g


def steps_from_kernels(kernels: pd.DataFrame, graphs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Steps from the kernel stream alone (no step ranges): sampling kernels or idle gaps delimit steps."""
    ops = kernels
    if graphs is not None and len(graphs):
        ops = pd.concat([kernels, graph_ops(graphs)], ignore_index=True)
    if ops.empty:
        empty = pd.DataFrame({c: pd.Series(dtype="float64") for c in ["start_ns", "end_ns", "pid", *TOKEN_COLS]})
        return _finish(empty.astype({"start_ns": "int64", "end_ns": "int64", "pid": "int64"}),
                       ops, np.zeros(0, np.int64), "kernels")
    busiest = ops.groupby(["pid", "device_id"])["dur_ns"].sum().idxmax()
    on = ((ops["pid"] == busiest[0]) & (ops["device_id"] == busiest[1])).to_numpy()
    ops = ops.reset_index(drop=True)
    sub = ops[on].sort_values("start_ns", kind="stable")
    starts, ends = sub["start_ns"].to_numpy(), sub["end_ns"].to_numpy()
    run_end = np.maximum.accumulate(ends)
    gaps = starts[1:] - run_end[:-1]  # ns, negative when overlapping
    sampling = (sub["role"] == "sampling").to_numpy() if "role" in sub else np.zeros(len(sub), bool)
    if sampling.sum() >= 3:
        cut = sampling[:-1] & ~sampling[1:]  # a step ends after a cluster of sampling kernels
    else:
        positive = gaps[gaps > 0]
        thr = max(MIN_SPLIT_GAP_NS, GAP_FACTOR * float(np.median(positive))) if len(positive) else np.inf
        cut = gaps > thr
    local = np.r_[0, np.cumsum(cut)]  # step number of each op of `sub`
    step_of = np.full(len(ops), -1, dtype=np.int64)
    step_of[np.nonzero(on)[0][np.argsort(ops.loc[on, "start_ns"].to_numpy(), kind="stable")]] = local
    n = int(local[-1]) + 1
    first = np.full(n, np.iinfo(np.int64).max)
    last = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(first, local, starts)
    np.maximum.at(last, local, ends)
    steps = pd.DataFrame({"start_ns": first, "end_ns": last, "pid": np.full(n, busiest[0], dtype=np.int64),
                          **dict.fromkeys(TOKEN_COLS, np.nan)})
    return _finish(steps, ops, step_of, "kernels")


def reconstruct_steps(kernels: pd.DataFrame, nvtx: pd.DataFrame, graphs: pd.DataFrame | None = None
                      ) -> tuple[pd.DataFrame, dict]:
    """Steps from NVTX when possible, else from kernels; `info` says how and the layer count guess."""
    steps = steps_from_nvtx(kernels, nvtx)
    if steps is None:
        steps = steps_from_kernels(kernels, graphs)
    per_step = steps.loc[steps["num_attention_kernels"] > 0, "num_attention_kernels"]
    layers = int(per_step.mode().iloc[0]) if len(per_step) else None
    return steps, {"source": steps["source"].iloc[0] if len(steps) else "none", "layers_guess": layers}
