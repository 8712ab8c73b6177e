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

Every step figure is a sum, minimum, maximum or count over its kernels, so `StepAgg` builds them from
kernel batches in start order (busy time carries each step's open run of overlapping kernels across
batches); `StepBuilder` feeds it from NVTX ranges or, without them, from per-(process, device) segments
that are cut at every idle gap over 200 us and merged at the end once the median gap is known.

    >>> steps, info = reconstruct_steps(classify(trace.kernels), trace.nvtx, trace.graph_launches)  # doctest: +SKIP
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from stallscope.analyzers.kernel_summary import DurationCounts, _medians
from stallscope.core.schema import validate

VLLM_STEP = re.compile(r"execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)")
VLLM_FORWARD = re.compile(r"gpu_model_runner: forward$")
MIN_SPLIT_GAP_NS = 200_000
GAP_FACTOR = 20.0
TOKEN_COLS = ["num_prefill_reqs", "num_prefill_tokens", "num_decode_reqs", "num_decode_tokens"]  # NaN: unknown
RANGE_COLS = ["start_ns", "end_ns", "pid", *TOKEN_COLS]
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


def _group_reduce(ufunc, sid: np.ndarray, values: np.ndarray, n: int, fill) -> np.ndarray:
    """ufunc.reduce of `values` per group id 0..n-1 (`sid` sorted ascending); `fill` for empty groups."""
    out = np.full(n, fill, dtype=values.dtype if len(values) else np.int64)
    if len(sid):
        first = np.r_[0, np.nonzero(sid[1:] != sid[:-1])[0] + 1]
        out[sid[first]] = ufunc.reduceat(values, first)
    return out


def _busy_runs(sid: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of overlapping [start, end) intervals per group; rows sorted by (sid, start). Returns the
    first row of each run, its end and its length (ns)."""
    new_group = np.r_[True, sid[1:] != sid[:-1]]
    local = np.cumsum(new_group) - 1  # 0.. per group, small offsets
    # running max of ends that restarts at each group: add a per-group offset larger than any span
    base, span = starts.min(), int(ends.max() - starts.min()) + 1
    if local[-1] > 0 and span * (int(local[-1]) + 2) >= 2**62:  # absurd clock spans: one group at a time
        parts = [_busy_runs(np.zeros(int(m.sum()), np.int64), starts[m], ends[m]) for m in
                 (local == g for g in range(int(local[-1]) + 1))]
        offsets = np.r_[0, np.cumsum([int(m.sum()) for m in (local == g for g in range(int(local[-1]) + 1))])][:-1]
        return (np.concatenate([p[0] + o for p, o in zip(parts, offsets)]),
                np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]))
    off = local.astype(np.int64) * span
    s2, e2 = starts - base + off, ends - base + off
    run_max = np.maximum.accumulate(e2)
    new_run = new_group | np.r_[True, s2[1:] > run_max[:-1]]
    first = np.nonzero(new_run)[0]
    run_end = np.maximum.reduceat(e2, first)
    return first, run_end - off[first] + base, run_end - s2[first]


def _group_busy(sid: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int) -> np.ndarray:
    """Union length (ns) of [start, end) intervals per group id; rows sorted by (sid, start)."""
    if len(sid) == 0:
        return np.zeros(n, dtype=np.int64)
    first, _, length = _busy_runs(sid, starts, ends)
    return np.bincount(sid[first], weights=length, minlength=n).astype(np.int64)


def _phase_codes(k: pd.DataFrame) -> np.ndarray:
    """attention_phase as 0 '', 1 decode, 2 prefill (kernel_roles.PHASE_LABELS)."""
    if "attention_phase" not in k:
        return np.zeros(len(k), np.int8)
    col = k["attention_phase"]
    if isinstance(col.dtype, pd.CategoricalDtype) and list(col.cat.categories) == ["", "decode", "prefill"]:
        return col.cat.codes.to_numpy()
    arr = col.astype(object).to_numpy()
    return np.where(arr == "prefill", 2, np.where(arr == "decode", 1, 0)).astype(np.int8)


class StepAgg:
    """Per-step kernel figures, added batch by batch with kernels in start order (ties: table order)."""

    FIELDS = {"kmin": np.iinfo(np.int64).max, "kmax": np.iinfo(np.int64).min, "count": 0, "busy": 0,
              "run_s": -1, "run_e": -1, "attn": 0, "grid": 0, "pre": 0, "dec": 0, "graph": 0}

    def __init__(self, n: int = 0):
        self.a = {k: np.full(n, v, dtype=np.int64) for k, v in self.FIELDS.items()}

    def grow(self, n: int) -> None:
        have = len(self.a["count"])
        if n > have:
            size = max(n, 2 * have)
            self.a = {k: np.r_[v, np.full(size - have, self.FIELDS[k], np.int64)] for k, v in self.a.items()}

    def add(self, sid: np.ndarray, k: pd.DataFrame) -> None:
        """Kernels `k` (start order) of steps `sid` (-1: none)."""
        inside = np.nonzero(sid >= 0)[0]
        if len(inside) == 0:
            return
        order = inside[np.argsort(sid[inside], kind="stable")]
        s = sid[order]
        ks, ke = k["start_ns"].to_numpy()[order], k["end_ns"].to_numpy()[order]
        self.grow(int(s[-1]) + 1)
        a, first = self.a, np.r_[0, np.nonzero(s[1:] != s[:-1])[0] + 1]
        u = s[first]
        a["kmin"][u] = np.minimum(a["kmin"][u], np.minimum.reduceat(ks, first))
        a["kmax"][u] = np.maximum(a["kmax"][u], np.maximum.reduceat(ke, first))
        a["count"][u] += np.diff(np.r_[first, len(s)])
        self._busy(u, s, ks, ke)
        attn = k["attention_core"].to_numpy(dtype=bool)[order] if "attention_core" in k else np.zeros(len(s), bool)
        phase = _phase_codes(k)[order]
        graph = (k["role"] == "cuda_graph").to_numpy()[order] if "role" in k else np.zeros(len(s), bool)
        size = len(a["count"])
        for name, mask in (("attn", attn), ("pre", phase == 2), ("dec", phase == 1), ("graph", graph)):
            a[name] += np.bincount(s[mask], minlength=size)  # PHASE_LABELS: '', decode, prefill
        np.maximum.at(a["grid"], s[attn], k["grid_x"].to_numpy()[order][attn])

    def _busy(self, u: np.ndarray, s: np.ndarray, ks: np.ndarray, ke: np.ndarray) -> None:
        """Union of kernel intervals per step, with each step's open run from earlier batches in front."""
        a = self.a
        open_ = u[a["run_e"][u] >= 0]
        sid, st, en = np.r_[open_, s], np.r_[a["run_s"][open_], ks], np.r_[a["run_e"][open_], ke]
        o = np.lexsort((st, sid))
        sid, st, en = sid[o], st[o], en[o]
        first, run_end, length = _busy_runs(sid, st, en)
        g = sid[first]
        last = np.r_[g[1:] != g[:-1], True]  # the last run of each step stays open
        a["busy"][open_] -= a["run_e"][open_] - a["run_s"][open_]
        np.add.at(a["busy"], g, length)
        a["run_s"][g[last]], a["run_e"][g[last]] = st[first][last], run_end[last]

    def flip_to_decode(self, sid: int, old_phase: int) -> None:
        """A kernel counted with `old_phase` turned out to be split-KV decode attention."""
        if sid >= 0 and old_phase != 1:
            self.a["pre"][sid] -= old_phase == 2
            self.a["dec"][sid] += 1

    def merged(self, new_index: np.ndarray, ids: np.ndarray) -> "StepAgg":
        """Steps `ids` merged into `new_index` groups (the runs between them never overlap)."""
        out = StepAgg(int(new_index.max()) + 1 if len(new_index) else 0)
        for k, op in (("kmin", np.minimum), ("kmax", np.maximum), ("grid", np.maximum), ("count", np.add),
                      ("busy", np.add), ("attn", np.add), ("pre", np.add), ("dec", np.add), ("graph", np.add)):
            op.at(out.a[k], new_index, self.a[k][ids])
        return out

    def finish(self, steps: pd.DataFrame, source: str) -> pd.DataFrame:
        """`steps` (start_ns, end_ns, pid and TOKEN_COLS per step) with the kernel figures: the steps frame."""
        n = len(steps)
        self.grow(n)
        a = {k: v[:n] for k, v in self.a.items()}
        steps["start_ns"] = np.minimum(steps["start_ns"].to_numpy(), a["kmin"])
        steps["end_ns"] = np.maximum(steps["end_ns"].to_numpy(), a["kmax"])
        steps["num_kernels"] = a["count"].astype("float64")
        steps["gpu_busy_ns"] = a["busy"].astype("float64")
        steps["num_attention_kernels"] = a["attn"]
        steps["max_attention_grid_x"] = a["grid"]
        known_p = steps["num_prefill_tokens"].notna().to_numpy()
        steps["has_prefill"] = np.where(known_p, steps["num_prefill_tokens"].fillna(0).to_numpy() > 0, a["pre"] > 0)
        known_d = steps["num_decode_tokens"].notna().to_numpy()
        steps["is_decode"] = np.where(known_d, steps["num_decode_tokens"].fillna(0).to_numpy() > 0,
                                      (a["dec"] > 0) | (a["graph"] > 0))
        steps["source"] = source
        steps = steps.sort_values("start_ns", kind="stable").reset_index(drop=True)
        steps["step"] = np.arange(len(steps), dtype=np.int64)
        cols = ["step", "start_ns", "end_ns", "num_prefill_tokens", "num_decode_tokens", "gpu_busy_ns", "num_kernels"]
        return validate(steps[cols + EXTRA].astype({"start_ns": "int64", "end_ns": "int64"}), "steps")


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
