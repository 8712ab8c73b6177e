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

Every step figure is a sum, minimum, maximum or count over its kernels, so `StepAgg` (step_agg.py) builds
them from kernel batches in start order (busy time carries each step's open run of overlapping kernels across
batches); `StepBuilder` feeds it from NVTX ranges or, without them, from per-(process, device) segments
that are cut at every idle gap over 200 us and merged at the end once the median gap is known.

    >>> steps, info = reconstruct_steps(classify(trace.kernels), trace.nvtx, trace.graph_launches)  # doctest: +SKIP
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from stallscope.analyzers.kernel_summary import DurationCounts, _medians
from stallscope.analyzers.step_agg import TOKEN_COLS, StepAgg

VLLM_STEP = re.compile(r"execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)")
VLLM_FORWARD = re.compile(r"gpu_model_runner: forward$")
MIN_SPLIT_GAP_NS = 200_000
GAP_FACTOR = 20.0
RANGE_COLS = ["start_ns", "end_ns", "pid", *TOKEN_COLS]


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


class RangeIndex:
    """Step ranges per process, for `assign`: which range a time (a launch call, a kernel start) is in."""

    def __init__(self, ranges: pd.DataFrame):
        self.by_pid = {}
        for pid, r in ranges.groupby("pid"):
            r = r.sort_values("start_ns")
            starts, ends, idx = r["start_ns"].to_numpy(), r["end_ns"].to_numpy(), r.index.to_numpy()
            # without launch calls a kernel may run until the next range starts; after the last range, for
            # at most that range's own length (trailing kernels outside profiling must not join it)
            nxt = np.r_[starts[1:], ends[-1] + (ends[-1] - starts[-1]) + 1]
            self.by_pid[int(pid)] = (starts, ends, idx, nxt)

    def assign(self, pid: np.ndarray, t: np.ndarray, use_launch: np.ndarray) -> np.ndarray:
        """Index of the range holding each time, -1 for none: a launch call inside [start, end], a
        kernel start (no launch call) from the range's start up to the next range's."""
        step = np.full(len(t), -1, dtype=np.int64)
        for p, (starts, ends, idx, nxt) in self.by_pid.items():
            sel = np.nonzero(pid == p)[0]
            pos = np.searchsorted(starts, t[sel], side="right") - 1
            pos_ok = np.clip(pos, 0, None)
            ok = (pos >= 0) & (t[sel] <= np.where(use_launch[sel], ends[pos_ok], nxt[pos_ok] - 1))
            step[sel[ok]] = idx[pos_ok[ok]]
        return step

    def launch_value(self, gpid: np.ndarray, start: np.ndarray) -> np.ndarray:
        """For LaunchIndex: the range holding each launch call (masked globalPid, call start)."""
        return self.assign((gpid >> 24) & 0xFFFFFF, start, np.ones(len(start), bool))

    def of_kernels(self, kernels: pd.DataFrame) -> np.ndarray:
        pid = kernels["pid"].to_numpy()
        if "launch_value" in kernels:  # the range of the launch call, looked up while reading
            value = kernels["launch_value"].to_numpy()
            step = np.where(np.isnan(value), -1, value).astype(np.int64)
            lost = np.nonzero(np.isnan(value))[0]  # no launch call traced: by the kernel's start
            if len(lost):
                step[lost] = self.assign(pid[lost], kernels["start_ns"].to_numpy()[lost], np.zeros(len(lost), bool))
            return step
        use_launch = kernels["launch_ns"].notna().to_numpy()
        t = np.where(use_launch, kernels["launch_ns"].fillna(0).to_numpy(), kernels["start_ns"].to_numpy())
        return self.assign(pid, t.astype(np.int64), use_launch)


class KernelSegments:
    """Step candidates from the kernel stream, for traces without step ranges, per (pid, device_id):
    segments cut after each sampling-kernel cluster (S) and at each idle gap over MIN_SPLIT_GAP_NS (G).
    `steps()` takes the busiest (pid, device): its S segments when it ran >= 3 sampling kernels, else
    its G segments merged across gaps up to max(200 us, 20 x the median positive gap)."""

    def __init__(self):
        self.groups: dict = {}
        self.s_agg, self.g_agg = StepAgg(), StepAgg()
        self.next_id = [0, 0]

    def add(self, ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Ops (kernels and graph launches, classified) in start order; returns their S and G segment ids."""
        s_sid, g_sid = np.full(len(ops), -1, np.int64), np.full(len(ops), -1, np.int64)
        keys = ops["pid"].to_numpy() * (1 << 32) + ops["device_id"].to_numpy()
        for key in np.unique(keys):
            rows = np.nonzero(keys == key)[0]
            s_sid[rows], g_sid[rows] = self._group(int(key), ops.iloc[rows])
        self.s_agg.add(s_sid, ops)
        self.g_agg.add(g_sid, ops)
        return s_sid, g_sid

    def _group(self, key: int, g: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        st = self.groups.setdefault(key, {"dur": 0, "sampling": 0, "last_sampling": None, "runmax": None,
                                          "s_ids": [], "g_ids": [], "g_gaps": [], "gaps": DurationCounts()})
        starts, ends = g["start_ns"].to_numpy(), g["end_ns"].to_numpy()
        st["dur"] += int(g["dur_ns"].sum())
        sampling = (g["role"] == "sampling").to_numpy() if "role" in g else np.zeros(len(g), bool)
        st["sampling"] += int(sampling.sum())
        prev = np.r_[st["last_sampling"] if st["last_sampling"] is not None else False, sampling[:-1]]
        s_new = np.r_[st["last_sampling"] is None, (prev & ~sampling)[1:]]
        s_new[0] |= bool(prev[0] and not sampling[0])
        run_end = np.maximum.accumulate(np.r_[st["runmax"] if st["runmax"] is not None else ends[0], ends])
        gaps = starts - run_end[:-1]  # ns; negative when overlapping; the first op ever has none
        has_gap = np.r_[st["runmax"] is not None, np.ones(len(g) - 1, bool)]
        positive = gaps[has_gap & (gaps > 0)]
        st["gaps"].add(np.zeros(len(positive), np.int64), positive)
        g_new = has_gap & (gaps > MIN_SPLIT_GAP_NS)
        g_new[0] |= st["runmax"] is None
        st["g_gaps"] += gaps[g_new & has_gap].tolist()
        st["last_sampling"], st["runmax"] = bool(sampling[-1]), int(run_end[-1])
        return self._ids(st["s_ids"], s_new, 0), self._ids(st["g_ids"], g_new, 1)

    def _ids(self, ids: list, new: np.ndarray, which: int) -> np.ndarray:
        """Global segment ids of rows, given where new segments begin; the group's list gets the new ones."""
        n_new = int(new.sum())
        fresh = list(range(self.next_id[which], self.next_id[which] + n_new))
        self.next_id[which] += n_new
        ids += fresh
        return np.asarray(ids, np.int64)[len(ids) - n_new - 1 + np.cumsum(new)]

    def steps(self) -> pd.DataFrame:
        if not self.groups:
            return StepAgg().finish(_no_steps(), "kernels")
        key = max(sorted(self.groups), key=lambda k: self.groups[k]["dur"])  # first of the largest, as idxmax
        st = self.groups[key]
        if st["sampling"] >= 3:
            ids = np.asarray(st["s_ids"], np.int64)
            agg = self.s_agg.merged(np.arange(len(ids)), ids)
        else:
            _, dur, cnt = st["gaps"].table()
            n = int(cnt.sum())
            median = float(_medians(dur, cnt, np.zeros(1, np.int64), np.array([n]))[0]) if n else np.inf
            thr = max(MIN_SPLIT_GAP_NS, GAP_FACTOR * median)
            cut = np.asarray(st["g_gaps"], dtype=np.int64) > thr
            ids = np.asarray(st["g_ids"], np.int64)
            agg = self.g_agg.merged(np.r_[0, np.cumsum(cut)], ids)
        n = len(agg.a["count"])
        steps = pd.DataFrame({"start_ns": agg.a["kmin"].copy(), "end_ns": agg.a["kmax"].copy(),
                              "pid": np.full(n, key >> 32, dtype=np.int64), **dict.fromkeys(TOKEN_COLS, np.nan)})
        return agg.finish(steps, "kernels")


def _no_steps() -> pd.DataFrame:
    empty = pd.DataFrame({c: pd.Series(dtype="float64") for c in ["start_ns", "end_ns", "pid", *TOKEN_COLS]})
    return empty.astype({"start_ns": "int64", "end_ns": "int64", "pid": "int64"})


def graph_ops(graphs: pd.DataFrame) -> pd.DataFrame:
    g = graphs.copy()
    g["dur_ns"] = g["end_ns"] - g["start_ns"]
    g["name"] = g["short_name"] = "<CUDA graph " + g["graph_id"].astype(str) + ">"
    g["role"], g["attention_phase"], g["attention_core"], g["grid_x"] = "cuda_graph", "", False, 0
    return g


class StepBuilder:
    """Steps of one trace from classified kernel batches in start order: from the NVTX step ranges when
    the trace has them, else from the kernel stream (KernelSegments, graph launches included)."""

    def __init__(self, nvtx: pd.DataFrame):
        ranges, self.source = _step_ranges(nvtx)
        self.ranges = ranges[RANGE_COLS].reset_index(drop=True) if len(ranges) else ranges  # one row per step
        self.index = RangeIndex(self.ranges) if len(self.ranges) else None
        self.agg = StepAgg(len(self.ranges))
        self.segments = KernelSegments() if self.index is None else None
        self.sids: tuple = ()

    def add(self, kernels: pd.DataFrame, ops: pd.DataFrame | None = None, kernel_pos: np.ndarray | None = None) -> None:
        """A batch: its kernels and, for the kernel-stream fallback, `ops` (kernels + graph launches in
        start order; `kernel_pos` = each kernel's row in `ops`)."""
        if self.index is not None:
            sid = self.index.of_kernels(kernels)
            self.agg.add(sid, kernels)
            self.sids = (sid,)
        else:
            ops = kernels if ops is None else ops
            s_sid, g_sid = self.segments.add(ops)
            pos = np.arange(len(kernels)) if kernel_pos is None else kernel_pos
            self.sids = (s_sid[pos], g_sid[pos])

    def handle(self, row: int, phase: int) -> tuple:
        """Where kernel `row` of the last batch was counted, for `flip_to_decode`."""
        return ("h", phase, *(int(s[row]) for s in self.sids))

    def flip_to_decode(self, handles: list) -> None:
        for h in handles:
            aggs = (self.agg,) if self.index is not None else (self.segments.s_agg, self.segments.g_agg)
            for agg, sid in zip(aggs, h[2:]):
                agg.flip_to_decode(sid, h[1])

    def steps(self) -> pd.DataFrame:
        if self.index is not None:
            steps = self.ranges.copy()
            return self.agg.finish(steps, self.source)
        return self.segments.steps()


def steps_from_nvtx(kernels: pd.DataFrame, nvtx: pd.DataFrame) -> pd.DataFrame | None:
    """Steps from vLLM NVTX step ranges, or None when the trace has none."""
    builder = StepBuilder(nvtx)
    if builder.index is None:
        return None
    builder.add(kernels)
    return builder.steps()


def _merged_ops(kernels: pd.DataFrame, graphs: pd.DataFrame | None) -> tuple[pd.DataFrame, np.ndarray]:
    """Kernels and graph launches in start order (kernels first on ties), and each kernel's row."""
    if graphs is None or not len(graphs):
        return kernels.reset_index(drop=True), np.arange(len(kernels))
    ops = pd.concat([kernels, graph_ops(graphs)], ignore_index=True)
    order = np.argsort(ops["start_ns"].to_numpy(), kind="stable")
    pos = np.empty(len(ops), np.int64)
    pos[order] = np.arange(len(ops))
    return ops.iloc[order].reset_index(drop=True), pos[:len(kernels)]


def steps_from_kernels(kernels: pd.DataFrame, graphs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Steps from the kernel stream alone (no step ranges): sampling kernels or idle gaps delimit steps."""
    segments = KernelSegments()
    ops, _ = _merged_ops(kernels, graphs)
    if len(ops):
        segments.add(ops)
    return segments.steps()


def reconstruct_steps(kernels: pd.DataFrame, nvtx: pd.DataFrame, graphs: pd.DataFrame | None = None
                      ) -> tuple[pd.DataFrame, dict]:
    """Steps from NVTX when possible, else from kernels; `info` says how and the layer count guess."""
    steps = steps_from_nvtx(kernels, nvtx)
    if steps is None:
        steps = steps_from_kernels(kernels, graphs)
    return steps, steps_info(steps)


def steps_info(steps: pd.DataFrame) -> dict:
    per_step = steps.loc[steps["num_attention_kernels"] > 0, "num_attention_kernels"]
    layers = int(per_step.mode().iloc[0]) if len(per_step) else None
    return {"source": steps["source"].iloc[0] if len(steps) else "none", "layers_guess": layers}
