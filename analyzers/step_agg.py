"""Per-step kernel figures built from kernel batches in start order: `StepAgg`.

Every figure of a step is a sum, minimum, maximum or count over its kernels (first start, last end,
kernels, attention kernels, their largest grid, prefill/decode attention, CUDA-graph launches), so
batches add into per-step arrays in any batch size; busy time (the union of the kernels' intervals)
carries each step's open run of overlapping kernels from one batch to the next. `finish` lays the
figures out as the `steps` frame of docs/step-trace.md.

    >>> agg = StepAgg(len(ranges)); agg.add(step_of_each_kernel, kernels); steps = agg.finish(ranges, "nvtx")  # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.core.schema import validate

TOKEN_COLS = ["num_prefill_reqs", "num_prefill_tokens", "num_decode_reqs", "num_decode_tokens"]  # NaN: unknown
EXTRA = ["pid", "has_prefill", "is_decode", "num_prefill_reqs", "num_decode_reqs", "num_attention_kernels",
         "max_attention_grid_x", "source"]


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
