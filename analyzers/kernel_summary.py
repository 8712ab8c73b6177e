"""Per-kernel time summary with the definitions of `nsys stats --report cuda_gpu_kern_sum`.

Method:
1. Group kernels by demangled name (`name`); duration = end - start in ns.
2. Total, Instances, Min, Max per group; Avg = mean; Med = median (mean of the two middle values
   for an even count); StdDev = *sample* standard deviation (n - 1 denominator; 0 for one instance),
   as nsys's `stdev` SQL aggregate computes it.
3. Time % = 100 * group total / sum of all group totals (share of kernel time, not of wall time).
4. Time %, Avg, Med and StdDev are rounded to 0.1 half away from zero (SQLite `round(x, 1)`).
5. Rows are sorted by Total desc, then Instances asc, then Name, as nsys orders them.

Exact in bounded memory: `DurationCounts` keeps, per name, how many kernels had each distinct duration
(ns), merged into one sorted table batch by batch. The median and the standard deviation are computed from those counts,
which are the same whatever the batch size, so every figure is identical to a one-pass computation.
The counts grow with the distinct (name, duration) pairs, not with the kernels: a kernel's durations
spread over a range of nanoseconds that a longer trace fills, not widens.

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


class DurationCounts:
    """Per name key: count of each distinct duration (ns), accumulated batch by batch in any order.

    Each batch is reduced to its distinct (key, duration) pairs and merged into one sorted table at once,
    so memory is the table (one row per distinct pair) plus one batch, however many batches come. While
    keys fit 22 bits and durations 40 bits (18 minutes), a pair is one int64 `(key << 40) | duration` and
    the merge is a binary search plus an insert of the new pairs; other values fall back to a sort."""

    def __init__(self):
        self.code = np.zeros(0, np.int64)  # packed pairs, sorted; None once a batch did not fit
        self.key = self.dur = np.zeros(0, np.int64)  # the unpacked table, when `code` is None
        self.count = np.zeros(0, np.int64)

    def add(self, key: np.ndarray, dur: np.ndarray, count: np.ndarray | None = None) -> None:
        """Kernels of names `key` with durations `dur` (`count` kernels each; 1 when None)."""
        key, dur = np.asarray(key, np.int64), np.asarray(dur, np.int64)
        if len(key) == 0:
            return
        if self.code is not None and _packs(key, dur):
            self._merge(*_distinct_codes((key << 40) | dur, count))
            return
        if self.code is not None:  # unpack once; from here on every merge sorts
            self.key, self.dur, self.code = self.code >> 40, self.code & (2**40 - 1), None
        self.key, self.dur, self.count = _distinct(np.r_[self.key, key], np.r_[self.dur, dur],
                                                   np.r_[self.count, np.ones(len(key), np.int64) if count is None
                                                         else np.asarray(count, np.int64)])

    def _merge(self, code: np.ndarray, count: np.ndarray) -> None:
        pos = np.searchsorted(self.code, code)
        hit = pos < len(self.code)
        hit[hit] = self.code[pos[hit]] == code[hit]
        self.count[pos[hit]] += count[hit]  # `code` is distinct, so each position once
        new = ~hit
        if new.any():  # inserted before the row at `pos`; several at one position keep their sorted order
            self.code = np.insert(self.code, pos[new], code[new])
            self.count = np.insert(self.count, pos[new], count[new])

    def table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(key, duration, count) sorted by key, then duration."""
        if self.code is not None:
            return self.code >> 40, self.code & (2**40 - 1), self.count
        return self.key, self.dur, self.count


def _packs(key: np.ndarray, dur: np.ndarray) -> bool:
    return bool(0 <= key.min() and key.max() < 2**22 and 0 <= dur.min() and dur.max() < 2**40)


def _distinct_codes(code: np.ndarray, count: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    if count is None:
        uniq, counts = np.unique(code, return_counts=True)
        return uniq, counts.astype(np.int64)
    order = np.argsort(code, kind="stable")
    code = code[order]
    first = np.nonzero(np.r_[True, code[1:] != code[:-1]])[0]
    return code[first], np.add.reduceat(np.asarray(count, np.int64)[order], first)


def _distinct(key: np.ndarray, dur: np.ndarray, count: np.ndarray) -> tuple:
    """(key, dur, summed count) per distinct pair, sorted by key, then duration."""
    order = np.lexsort((dur, key))
    key, dur = key[order], dur[order]
    first = np.nonzero(np.r_[True, (key[1:] != key[:-1]) | (dur[1:] != dur[:-1])])[0]
    return key[first], dur[first], np.add.reduceat(count[order], first)


def summary_frame(counts: DurationCounts, names: np.ndarray) -> pd.DataFrame:
    """COLUMNS from duration counts keyed by index into `names`, sorted as nsys sorts cuda_gpu_kern_sum."""
    key, dur, cnt = counts.table()
    if len(key) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else "float64") for c in COLUMNS})
    first = np.r_[0, np.nonzero(key[1:] != key[:-1])[0] + 1]
    n = np.add.reduceat(cnt, first)
    total = np.add.reduceat(dur * cnt, first)
    mean = total / n
    dev = dur - np.repeat(mean, np.diff(np.r_[first, len(key)]))
    var = np.add.reduceat(cnt * dev * dev, first) / np.maximum(n - 1, 1)
    out = pd.DataFrame({"name": names[key[first]], "total_ns": total, "instances": n, "avg_ns": mean,
                        "med_ns": _medians(dur, cnt, first, n), "min_ns": dur[first],
                        "max_ns": dur[np.r_[first[1:], len(key)] - 1], "stddev_ns": np.where(n > 1, np.sqrt(var), 0.0)})
    out["time_pct"] = round1(out["total_ns"] * 100.0 / out["total_ns"].sum())
    for col in ("avg_ns", "med_ns", "stddev_ns"):
        out[col] = round1(out[col])
    out = out.sort_values(["total_ns", "instances", "name"], ascending=[False, True, True], kind="stable")
    return out[COLUMNS].reset_index(drop=True).astype({"total_ns": "int64", "instances": "int64",
                                                       "min_ns": "int64", "max_ns": "int64", "name": object})


def _medians(dur: np.ndarray, cnt: np.ndarray, first: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Per key: the middle duration (mean of the two middle ones for an even count), from sorted counts."""
    cum = np.cumsum(cnt)
    before = np.r_[0, cum[:-1]][first]  # kernels of earlier keys
    lo = np.searchsorted(cum, before + (n - 1) // 2, side="right")  # index of the (n-1)//2-th kernel
    hi = np.searchsorted(cum, before + n // 2, side="right")
    return (dur[lo] + dur[hi]) / 2.0


def summarize(kernels: pd.DataFrame, *, by: str = "name") -> pd.DataFrame:
    """One row per kernel name: COLUMNS, sorted as nsys sorts cuda_gpu_kern_sum."""
    if kernels.empty:
        return summary_frame(DurationCounts(), np.zeros(0, dtype=object))
    key = kernels[by]
    names = key.array if isinstance(key.dtype, pd.CategoricalDtype) else pd.Categorical(key.astype(object))
    counts = DurationCounts()
    counts.add(names.codes, (kernels["end_ns"] - kernels["start_ns"]).to_numpy(dtype=np.int64))
    return summary_frame(counts, np.asarray(names.categories, dtype=object))
