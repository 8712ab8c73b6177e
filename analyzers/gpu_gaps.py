"""GPU idle gaps per (process, device), with the definition of `nsys analyze --rule gpu_gaps`.

Method:
1. Operations = kernels + memcpy + memset with start > 0, keyed by (pid, device_id).
2. Profiler overhead that stalls CUDA ("CUDA profiling data flush overhead", "... stop overhead",
   "CUDA profiling overhead") is added as busy time on every device of its process, but only where it
   lies strictly inside that device's [first op start, last op end] window, so gaps the user cannot
   fix are not reported.
3. Sort the starts and, independently, the ends of each group. Gap i runs from end[i] to start[i+1]
   and is kept when end[i] < start[i+1]; with sorted starts and ends this is exactly an idle stretch of
   the union of the intervals, so overlapping streams never produce false gaps.
4. Keep gaps with duration > threshold (nsys default 500 ms); the context id is that of the op whose
   end opens the gap. Rows sorted by duration desc, then start.

`GapScanner` does this on operations that arrive in start order, batch by batch, in memory that does
not grow with the trace: with sorted starts, end[i] < start[i+1] holds exactly when every op before
start[i+1] has ended, so the gap opens at the running maximum of the ends (ties: the op latest in the
frame order kernels, graph launches, memcpy/memset, overhead). Only gaps longer than the threshold are
kept, and profiler overhead, which can only shorten a gap, is subtracted from them at the end.

    >>> find_gaps(ops_frame(trace.kernels, trace.memops), threshold_ns=1_000_000)   # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DEFAULT_THRESHOLD_NS = 500_000_000  # nsys gpu_gaps default, 500 ms
COLUMNS = ["pid", "device_id", "context_id", "start_ns", "end_ns", "duration_ns"]
_OPS = ["start_ns", "end_ns", "pid", "device_id", "context_id"]
SOURCES = 4  # frame order of the sources: 0 kernels, 1 graph launches, 2 memcpy/memset, 3 overhead


def ops_frame(kernels: pd.DataFrame, memops: pd.DataFrame | None = None) -> pd.DataFrame:
    """GPU operations (kernels, memcpy, memset) as one frame of _OPS columns, start > 0 only."""
    parts = [f[_OPS] for f in (kernels, memops) if f is not None and len(f)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in _OPS})
    ops = pd.concat(parts, ignore_index=True)
    return ops[ops["start_ns"] > 0].astype("int64")


def _constant(a: np.ndarray) -> bool:
    return bool(np.all(a == a[0]))


def _in_frame_order(source: np.ndarray, index: np.ndarray) -> bool:
    """Rows sorted by (source, index), strictly."""
    return bool(np.all((source[1:] > source[:-1]) | ((source[1:] == source[:-1]) & (index[1:] > index[:-1]))))


class GapScanner:
    """Gaps longer than `threshold_ns` per (pid, device_id) over ops added in start order."""

    def __init__(self, threshold_ns: int = DEFAULT_THRESHOLD_NS):
        self.threshold = int(threshold_ns)
        self.state: dict = {}  # (pid, dev) -> [end, source, index, context] of the op that ends last so far
        self.first_ctx: dict = {}  # (pid, dev) -> {source: context of its first op}
        self.lo: dict = {}  # (pid, dev) -> first start
        self.found: list = []

    def add(self, ops: pd.DataFrame, source: np.ndarray, index: np.ndarray) -> None:
        """Ops (columns _OPS, start > 0) that start no earlier than any op added before; `source` and
        `index` give each op's place in the frame order, for ties between equal ends."""
        if not len(ops):
            return
        start, end = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
        pid, dev, ctx = (ops[c].to_numpy(np.int64) for c in ("pid", "device_id", "context_id"))
        source, index = np.asarray(source, np.int64), np.asarray(index, np.int64)
        cols = [start, end, pid, dev, ctx, source, index]
        if not (_constant(pid) and _constant(dev) and _in_frame_order(source, index)):
            order = np.lexsort((index, source, start, dev, pid))
        elif np.all(start[1:] >= start[:-1]):
            order = None  # one device, already in (start, source, index) order
        else:  # one device, rows in (source, index) order: a stable sort by start breaks ties the same way
            order = np.argsort(start, kind="stable")
        if order is not None:
            cols = [a[order] for a in cols]
        bounds = np.nonzero(np.r_[True, (cols[2][1:] != cols[2][:-1]) | (cols[3][1:] != cols[3][:-1]), True])[0]
        for a, b in zip(bounds[:-1], bounds[1:]):
            self._group((int(cols[2][a]), int(cols[3][a])), *(c[a:b] for c in cols[:2] + cols[4:]))

    def _group(self, key, start, end, ctx, src, idx) -> None:
        firsts = self.first_ctx.setdefault(key, {})
        for s in np.unique(src):
            mine = np.nonzero(src == s)[0]
            firsts.setdefault(int(s), int(ctx[mine[np.argmin(idx[mine])]]))
        self.lo.setdefault(key, int(start[0]))
        prev = self.state.get(key)
        if prev is not None:  # the op that ended last before this batch, as a row in front
            start, end, ctx, src, idx = (np.r_[start[0], start], np.r_[prev[0], end], np.r_[prev[3], ctx],
                                         np.r_[prev[1], src], np.r_[prev[2], idx])
        rank = np.empty(len(end), np.int64)
        rank[np.lexsort((idx, src, end))] = np.arange(len(end))
        holder = np.argsort(rank)[np.maximum.accumulate(rank)]  # per prefix: the op that ends last
        gap = start[1:] - end[holder[:-1]]
        for i in np.nonzero((gap > 0) & (gap > self.threshold))[0]:
            h = holder[i]
            self.found.append((key[0], key[1], int(ctx[h]), int(end[h]), int(start[i + 1]), int(gap[i])))
        h = holder[-1]
        self.state[key] = [int(end[h]), int(src[h]), int(idx[h]), int(ctx[h])]

    def result(self, overhead: pd.DataFrame | None = None) -> pd.DataFrame:
        """The gaps (COLUMNS), longest first; `overhead` (start_ns, end_ns, pid) is busy time where it lies
        strictly inside a device's [first op start, last op end]."""
        rows = self.found
        if overhead is not None and len(overhead) and rows:
            rows = [piece for gap in rows for piece in self._minus_overhead(gap, overhead.astype("int64"))]
        out = pd.DataFrame(rows, columns=COLUMNS).astype("int64")
        return out.sort_values(["duration_ns", "start_ns"], ascending=[False, True], kind="stable").reset_index(drop=True)

    def _minus_overhead(self, gap: tuple, overhead: pd.DataFrame) -> list:
        pid, dev, ctx, a, b, _ = gap
        lo, hi = self.lo[(pid, dev)], self.state[(pid, dev)][0]
        o = overhead[(overhead["pid"] == pid) & (overhead["start_ns"] > lo) & (overhead["end_ns"] < hi)
                     & (overhead["start_ns"] < b) & (overhead["end_ns"] >= a)].sort_values("start_ns")
        first = next(iter(sorted(self.first_ctx[(pid, dev)].items())))[1]  # `first` context of the device
        pieces, at, at_ctx = [], a, (first if (o["end_ns"] == a).any() else ctx)
        for s, e in zip(o["start_ns"], o["end_ns"]):
            if s > at:
                pieces.append((pid, dev, at_ctx, at, s, s - at))
            if e >= at:
                at, at_ctx = e, first
        if b > at:
            pieces.append((pid, dev, at_ctx, at, b, b - at))
        return [p for p in pieces if p[5] > self.threshold]


def find_gaps(ops: pd.DataFrame, *, threshold_ns: int = DEFAULT_THRESHOLD_NS,
              overhead: pd.DataFrame | None = None) -> pd.DataFrame:
    """Idle gaps longer than `threshold_ns` per (pid, device_id): COLUMNS, longest first."""
    scanner = GapScanner(threshold_ns)
    if len(ops):
        scanner.add(ops, np.zeros(len(ops), np.int64), np.arange(len(ops)))
    return scanner.result(overhead)
