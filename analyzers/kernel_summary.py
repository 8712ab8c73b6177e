"""Per-kernel time summary with the definitions of `nsys stats --report cuda_gpu_kern_sum`.

Method:
1. Group kernels by demangled name (`name`); duration = end - start in ns.
2. Total, Instances, Min, Max per group; Avg = mean; Med = median (mean of the two middle values
   for an even count); StdDev = *sample* standard deviation (n - 1 denominator; 0 for one instance),
   as nsys's `stdev` SQL aggregate computes it.
3. Time % = 100 * group total / sum of all group totals (share of kernel time, not of wall time).
4. Time %, Avg, Med and StdDev are rounded to 0.1 half away from zero (SQLite `round(x, 1)`).
5. Rows are sorted by Total desc, then Instances asc, then Name, as nsys orders them.

    >>> summarize(trace.kernels).head(3)          # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = ["name", "time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"]


def round1(x):
    """SQLite's round(x, 1): half away from zero (numpy's round is half-to-even)."""
    x = np.asarray(x, dtype="float64")
    return np.sign(x) * np.floor(np.abs(x) * 10.0 + 0.5) / 10.0


def summarize(kernels: pd.DataFrame, *, by: str = "name") -> pd.DataFrame:
    """One row per kernel name: COLUMNS, sorted as nsys sorts cuda_gpu_kern_sum."""
    if kernels.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else "float64") for c in COLUMNS})
    dur = (kernels["end_ns"] - kernels["start_ns"]).astype("int64")
    key = kernels[by]
    key = key if isinstance(key.dtype, pd.CategoricalDtype) else key.astype(object)
    groups = dur.groupby(key.to_numpy() if not isinstance(key.dtype, pd.CategoricalDtype) else key, sort=False,
                         observed=True)
    out = pd.DataFrame({
        "total_ns": groups.sum(),
        "instances": groups.size(),
        "avg_ns": groups.mean(),
        "med_ns": groups.median(),
        "min_ns": groups.min(),
        "max_ns": groups.max(),
        "stddev_ns": groups.std(ddof=1).fillna(0.0),
    })
    out.index = out.index.astype(object)
    out.index.name = "name"
    out = out.reset_index()
    out["time_pct"] = round1(out["total_ns"] * 100.0 / out["total_ns"].sum())
    for col in ("avg_ns", "med_ns", "stddev_ns"):
        out[col] = round1(out[col])
    out = out.sort_values(["total_ns", "instances", "name"], ascending=[False, True, True], kind="stable")
    return out[COLUMNS].reset_index(drop=True).astype({"total_ns": "int64", "instances": "int64",
                                                       "min_ns": "int64", "max_ns": "int64"})
