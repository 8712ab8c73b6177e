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

    >>> find_gaps(ops_frame(trace.kernels, trace.memops), threshold_ns=1_000_000)   # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DEFAULT_THRESHOLD_NS = 500_000_000  # nsys gpu_gaps default, 500 ms
COLUMNS = ["pid", "device_id", "context_id", "start_ns", "end_ns", "duration_ns"]
_OPS = ["start_ns", "end_ns", "pid", "device_id", "context_id"]


def ops_frame(kernels: pd.DataFrame, memops: pd.DataFrame | None = None) -> pd.DataFrame:
    """GPU operations (kernels, memcpy, memset) as one frame of _OPS columns, start > 0 only."""
    parts = [f[_OPS] for f in (kernels, memops) if f is not None and len(f)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in _OPS})
    ops = pd.concat(parts, ignore_index=True)
    return ops[ops["start_ns"] > 0].astype("int64")


def _with_overhead(ops: pd.DataFrame, overhead: pd.DataFrame | None) -> pd.DataFrame:
    if overhead is None or overhead.empty or ops.empty:
        return ops
    span = ops.groupby(["pid", "device_id"]).agg(lo=("start_ns", "min"), hi=("end_ns", "max"),
                                                 context_id=("context_id", "first")).reset_index()
    rows = span.merge(overhead.astype("int64"), on="pid")
    rows = rows[(rows["start_ns"] > rows["lo"]) & (rows["end_ns"] < rows["hi"])]
    return pd.concat([ops, rows[_OPS]], ignore_index=True)


def find_gaps(ops: pd.DataFrame, *, threshold_ns: int = DEFAULT_THRESHOLD_NS,
              overhead: pd.DataFrame | None = None) -> pd.DataFrame:
    """Idle gaps longer than `threshold_ns` per (pid, device_id): COLUMNS, longest first."""
    ops = _with_overhead(ops, overhead)
    found = []
    for (pid, dev), g in ops.groupby(["pid", "device_id"], sort=True):
        starts = np.sort(g["start_ns"].to_numpy())
        order = np.argsort(g["end_ns"].to_numpy(), kind="stable")
        ends = g["end_ns"].to_numpy()[order]
        ctx = g["context_id"].to_numpy()[order]
        gap = starts[1:] - ends[:-1]  # ns
        keep = np.nonzero((gap > 0) & (gap > threshold_ns))[0]
        for i in keep:
            found.append((pid, dev, ctx[i], ends[i], starts[i + 1], gap[i]))
    out = pd.DataFrame(found, columns=COLUMNS).astype("int64")
    return out.sort_values(["duration_ns", "start_ns"], ascending=[False, True], kind="stable").reset_index(drop=True)

