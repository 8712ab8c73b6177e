"""PromQL semantics over a samples frame: rate(), instant gauges and histogram_quantile over sliding windows.

The idea: evaluate exactly what Prometheus 2.x evaluates for a range query, but vectorised with numpy.

1. A series is one (target, labels, le) combination of the `samples` frame, sorted by `ts` (ns).
2. For each evaluation time t on the grid, the window is [t - w, t], closed at both ends (Prometheus 2.x;
   3.x made it left-open - `left_open=True` selects that).
3. `rate` = (last - first + the value lost at each counter reset) extrapolated like Prometheus's
   `extrapolatedRate`: towards the window edges by the gap to the edge when that gap is < 1.1 x the mean
   sample spacing, else by half a spacing; never below the counter's zero point; divided by w.
   Fewer than 2 samples in the window -> no value (NaN), as Prometheus drops the element.
4. `sum by (...)` adds the per-series rates that exist; `histogram_quantile(q, ...)` then follows
   `bucketQuantile`: sort by `le`, require a +Inf bucket, force monotonic counts, find the first bucket
   whose count >= q x total and interpolate linearly inside it (lower edge 0 for the first bucket; the
   +Inf bucket returns the highest finite bound).
5. Every quantile carries the bucket it fell in (`bucket_lo`, `bucket_hi`], so callers can print
   "<= 0.3 s" instead of a false 0.297 (`format_quantile`).
"""

from __future__ import annotations

import ctypes
import math
import re
import warnings

import numpy as np
import pandas as pd

from stallscope.core.config import parse_duration  # noqa: F401  (re-exported for callers)
from stallscope.core.errors import InputError

NS = 1_000_000_000
LOOKBACK_NS = 300 * NS  # Prometheus's default lookback delta for instant gauges

_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_selector(text: str | None) -> list[tuple[str, str, str]]:
    """Label matchers from a PromQL-style selector body: `model_name="m",engine=~"0|1"`.

    >>> parse_selector('{model_name="m", engine!="1"}')
    [('model_name', '=', 'm'), ('engine', '!=', '1')]
    """
    if not text:
        return []
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    out, pos = [], 0
    while pos < len(body.rstrip()):
        m = _MATCHER.match(body, pos)
        if not m:
            raise InputError(f"bad selector {text!r}: expected label=\"value\" matchers near {body[pos:]!r}")
        value = m.group(3).encode().decode("unicode_escape")
        if m.group(2) in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise InputError(f"bad regex {value!r} in selector {text!r}: {exc}") from None
        out.append((m.group(1), m.group(2), value))
        pos = m.end()
    return out


def _matches(labels: dict, matchers) -> bool:
    for name, op, value in matchers:
        got = labels.get(name, "")
        if op == "=" and got != value or op == "!=" and got == value:
            return False
        if op == "=~" and not re.fullmatch(value, got) or op == "!~" and re.fullmatch(value, got):
            return False
    return True


def select(samples: pd.DataFrame, metric: str, selector=None) -> pd.DataFrame:
    """Rows of one metric, filtered by label matchers (a `target` matcher also reads the target column)."""
    df = samples[samples["metric"] == metric]
    matchers = parse_selector(selector) if isinstance(selector, str) else list(selector or [])
    if matchers and len(df):
        has_target = "target" in df.columns
        targets = df["target"] if has_target else pd.Series("", index=df.index)
        keep = [_matches({**lab, **({"target": t} if has_target and "target" not in lab else {})}, matchers)
                for lab, t in zip(df["labels"], targets)]
        df = df[np.asarray(keep, dtype=bool)]
    return df


def grid(start_ns: int, end_ns: int, step_ns: int) -> np.ndarray:
    """Evaluation times start, start+step, ... <= end (ns), like a Prometheus range query."""
    if step_ns <= 0:
        raise InputError(f"step must be positive, got {step_ns} ns")
    if end_ns < start_ns:
        raise InputError(f"end {end_ns} is before start {start_ns}")
    return np.arange(start_ns, end_ns + 1, step_ns, dtype=np.int64)


def _window_bounds(ts: np.ndarray, eval_ts: np.ndarray, window_ns: int, left_open: bool):
    lo = np.searchsorted(ts, eval_ts - window_ns, side="right" if left_open else "left")
    hi = np.searchsorted(ts, eval_ts, side="right") - 1  # index of the last sample <= t
    return lo, hi


def series_rate(ts: np.ndarray, values: np.ndarray, eval_ts: np.ndarray, window_ns: int, *,
                is_rate: bool = True, left_open: bool = False) -> np.ndarray:
    """Prometheus `rate(x[w])` (or `increase` with is_rate=False) of one counter series at each eval time.

    >>> ts = np.array([0, 15, 30, 45, 60]) * NS
    >>> float(series_rate(ts, np.array([0., 15, 30, 45, 60]), np.array([60 * NS]), 60 * NS)[0])
    1.0
    """
    ts = np.asarray(ts, dtype=np.int64)
    v = np.asarray(values, dtype=float)
    eval_ts = np.asarray(eval_ts, dtype=np.int64)
    out = np.full(len(eval_ts), np.nan)
    if len(ts) < 2:
        return out
    # value lost at each reset, accumulated: the counter's "true" running total is v + lost
    drop = np.zeros(len(v))
    drop[1:] = np.where(v[1:] < v[:-1], v[:-1], 0.0)
    lost = np.cumsum(drop)
    lo, hi = _window_bounds(ts, eval_ts, window_ns, left_open)
    ok = hi - lo >= 1
    if not ok.any():
        return out
    lo, hi, t = lo[ok], hi[ok], eval_ts[ok]
    first, last = v[lo], v[hi]
    result = last - first + (lost[hi] - lost[lo])
    t_first, t_last = ts[lo] / NS, ts[hi] / NS
    to_start, to_end = t_first - (t - window_ns) / NS, t / NS - t_last  # seconds to the window's edges
    sampled = t_last - t_first
    avg = sampled / (hi - lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        to_zero = np.where((result > 0) & (first >= 0), sampled * (first / result), np.inf)
    to_start = np.minimum(to_start, to_zero)
    thr = avg * 1.1
    interval = sampled + np.where(to_start < thr, to_start, avg / 2) + np.where(to_end < thr, to_end, avg / 2)
    factor = interval / sampled
    if is_rate:
        factor = factor / (window_ns / NS)
    out[ok] = result * factor
    return out


def series_instant(ts: np.ndarray, values: np.ndarray, eval_ts: np.ndarray,
                   lookback_ns: int = LOOKBACK_NS) -> np.ndarray:
    """Instant-vector value of a gauge at each eval time: the latest sample in (t - lookback, t]."""
    ts = np.asarray(ts, dtype=np.int64)
    v = np.asarray(values, dtype=float)
    idx = np.searchsorted(ts, np.asarray(eval_ts, dtype=np.int64), side="right") - 1
    out = np.full(len(eval_ts), np.nan)
    ok = idx >= 0
    ok[ok] = ts[idx[ok]] > np.asarray(eval_ts)[ok] - lookback_ns
    out[ok] = v[idx[ok]]
    return out


def series_max_over_time(ts: np.ndarray, values: np.ndarray, eval_ts: np.ndarray, window_ns: int) -> np.ndarray:
    """`max_over_time(x[w])` of one gauge series at each eval time: the largest sample in [t - w, t], NaN where
    the window holds none. Every scrape counts, not only the latest at each eval time.

    >>> ts = np.array([0, 1, 2, 3]) * NS
    >>> series_max_over_time(ts, np.array([0.5, 0.97, 0.6, 0.7]), np.array([2, 3]) * NS, 1 * NS).tolist()
    [0.97, 0.7]
    """
    ts = np.asarray(ts, dtype=np.int64)
    v = np.append(np.asarray(values, dtype=float), np.nan)   # a NaN past the end: hi + 1 is always an index
    lo, hi = _window_bounds(ts, np.asarray(eval_ts, dtype=np.int64), window_ns, left_open=False)
    out = np.full(len(lo), np.nan)
    ok = hi >= lo
    if ok.any():   # fmax.reduceat over [lo, hi + 1) pairs; fmax skips NaN samples
        bounds = np.column_stack([lo[ok], hi[ok] + 1]).ravel()
        out[ok] = np.fmax.reduceat(v, bounds)[::2]
    return out


def _keys(target, labels: dict, by):
    """(series key, group key) of one label set: the target plus all labels / the `by` labels."""
    skey = (target, tuple(sorted(labels.items())))
    if by is None:
        return skey, skey
    names = [b for b in by if b != "target"]
    return skey, ((target if "target" in by else ""), tuple((n, labels.get(n, "")) for n in names))


def _object_ids(arr: np.ndarray) -> np.ndarray:
    """id() of every element of an object array, read from the array's pointer buffer (no Python loop)."""
    buf = np.ascontiguousarray(arr, dtype=object)  # keeps the objects alive while we read the pointers
    if not len(buf):
        return np.zeros(0, dtype=np.intp)
    ptrs = (ctypes.c_ssize_t * len(buf)).from_address(buf.ctypes.data)
    return np.ctypeslib.as_array(ptrs).copy()


def iter_series(df: pd.DataFrame, by, *, split_le: bool = False):
    """(group key, le, ts, values) per series of `df`, each sorted by ts; vectorised over rows.

    Label dicts are keyed once per distinct dict object (the collectors share one dict per series),
    then by content, so rows are never visited one by one in Python.
    """
    n = len(df)
    if n == 0:
        return
    labels = df["labels"].to_numpy()
    targets = df["target"].to_numpy() if "target" in df.columns else np.full(n, "", dtype=object)
    obj_codes, _ = pd.factorize(_object_ids(labels))
    t_codes, _ = pd.factorize(targets, use_na_sentinel=False)
    combo, uniq = pd.factorize(t_codes.astype(np.int64) * (int(obj_codes.max()) + 1) + obj_codes)
    rep = np.empty(len(uniq), dtype=np.int64)
    rep[combo] = np.arange(n)
    series_of: dict = {}
    series_code = np.empty(len(uniq), dtype=np.int64)
    group_of: list = []
    for c, r in enumerate(rep):
        t = targets[r]
        skey, gkey = _keys("" if t is None or (isinstance(t, float) and np.isnan(t)) else str(t), labels[r], by)
        if skey not in series_of:
            series_of[skey] = len(series_of)
            group_of.append(gkey)
        series_code[c] = series_of[skey]
    codes = series_code[combo]
    if split_le:
        le_codes, le_uniq = pd.factorize(df["le"].to_numpy(dtype=float), use_na_sentinel=False)
        codes = codes * (len(le_uniq) + 1) + le_codes
    ts = df["ts"].to_numpy(dtype=np.int64)
    values = df["value"].to_numpy(dtype=float)
    order = np.lexsort((ts, codes))
    codes_sorted = codes[order]
    bounds = np.flatnonzero(np.diff(codes_sorted)) + 1
    for chunk in np.split(order, bounds):
        code = int(codes[chunk[0]])
        if split_le:
            scode, lcode = divmod(code, len(le_uniq) + 1)
            yield group_of[scode], float(le_uniq[lcode]), ts[chunk], values[chunk]
        else:
            yield group_of[code], float("nan"), ts[chunk], values[chunk]


def _label_dict(key) -> dict:
    target, items = key
    out = dict(items)
    if target:
        out.setdefault("target", target)
    return out


def _rows(labels: dict, eval_ts: np.ndarray, **values) -> dict:
    """One group's output rows: `ts, group, labels` and the given value columns."""
    return {"ts": eval_ts, "group": group_name(labels), "labels": [labels] * len(eval_ts), **values}


def _frame_for(out_rows: list[dict], extra_cols: list[str]) -> pd.DataFrame:
    cols = ["ts", "group", "labels", *extra_cols]
    if not out_rows:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c == "ts" else "object") for c in cols})
    return pd.concat([pd.DataFrame(r) for r in out_rows], ignore_index=True)[cols]


def _add_present(acc: np.ndarray, r: np.ndarray) -> None:
    """`acc += r` where `r` has a value, a missing `acc` counting as 0 (PromQL `sum` over the series that exist)."""
    ok = ~np.isnan(r)
    acc[ok] = np.where(np.isnan(acc[ok]), 0.0, acc[ok]) + r[ok]


def group_name(labels: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "all"


def rate_range(samples: pd.DataFrame, metric: str, eval_ts: np.ndarray, window_ns: int, *, by=("target",),
               selector=None, is_rate: bool = True, left_open: bool = False) -> pd.DataFrame:
    """`sum by (by) (rate(metric{selector}[w]))` at each eval time; columns ts, group, labels, value."""
    sums: dict = {}
    for gkey, _, ts, values in iter_series(select(samples, metric, selector), by):
        r = series_rate(ts, values, eval_ts, window_ns, is_rate=is_rate, left_open=left_open)
        _add_present(sums.setdefault(gkey, np.full(len(eval_ts), np.nan)), r)
    return _frame_for([_rows(_label_dict(g), eval_ts, value=acc) for g, acc in sums.items()], ["value"])


def instant_range(samples: pd.DataFrame, metric: str, eval_ts: np.ndarray, *, by=("target",), selector=None,
                  agg: str = "sum", lookback_ns: int = LOOKBACK_NS) -> pd.DataFrame:
    """`<agg> by (by) (metric{selector})` of a gauge at each eval time (agg: sum, max, min)."""
    per_group: dict = {}
    for gkey, _, ts, values in iter_series(select(samples, metric, selector), by):
        per_group.setdefault(gkey, []).append(series_instant(ts, values, eval_ts, lookback_ns))
    rows = []
    for gkey, arrs in per_group.items():
        stack = np.vstack(arrs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            val = {"sum": np.nansum, "max": np.nanmax, "min": np.nanmin}[agg](stack, axis=0)
        val[np.isnan(stack).all(axis=0)] = np.nan
        rows.append(_rows(_label_dict(gkey), eval_ts, value=val))
    return _frame_for(rows, ["value"])


def max_over_time_range(samples: pd.DataFrame, metric: str, eval_ts: np.ndarray, window_ns: int, *,
                        by=("target",)) -> pd.DataFrame:
    """`max by (by) (max_over_time(metric[window]))` of a gauge at each eval time."""
    peaks: dict = {}
    for gkey, _, ts, values in iter_series(select(samples, metric), by):
        r = series_max_over_time(ts, values, eval_ts, window_ns)
        acc = peaks.setdefault(gkey, np.full(len(eval_ts), np.nan))
        peaks[gkey] = np.fmax(acc, r)
    return _frame_for([_rows(_label_dict(g), eval_ts, value=acc) for g, acc in peaks.items()], ["value"])


def bucket_quantile(q: float, les: np.ndarray, counts: np.ndarray):
    """Prometheus `bucketQuantile` for many rows at once, plus the bucket each result falls in.

    `les`: (B,) upper bounds sorted ascending, the last must be +Inf; `counts`: (T, B) cumulative counts,
    NaN where a bucket series is missing at that time. Returns (value, bucket_lo, bucket_hi), each (T,).

    >>> v, lo, hi = bucket_quantile(0.5, np.array([0.1, 0.2, np.inf]), np.array([[2., 6, 8]]))
    >>> round(float(v[0]), 6), float(lo[0]), float(hi[0])
    (0.15, 0.1, 0.2)
    """
    counts = np.atleast_2d(np.asarray(counts, dtype=float))
    les = np.asarray(les, dtype=float)
    n = counts.shape[0]
    value, blo, bhi = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    if math.isnan(q):
        return value, blo, bhi
    if q < 0 or q > 1:
        value[:] = -np.inf if q < 0 else np.inf
        return value, blo, bhi
    order = np.argsort(les, kind="stable")
    les, counts = les[order], counts[:, order]
    missing = np.isnan(counts).any(axis=1)
    if missing.any():  # rows where some bucket has no rate: evaluate with the buckets present
        for i in np.flatnonzero(missing):
            keep = ~np.isnan(counts[i])
            value[i], blo[i], bhi[i] = (x[0] for x in bucket_quantile(q, les[keep], counts[i, keep][None, :]))
        full = ~missing
        if full.any():
            value[full], blo[full], bhi[full] = bucket_quantile(q, les, counts[full])
        return value, blo, bhi
    if len(les) == 0 or not np.isposinf(les[-1]):
        return value, blo, bhi
    uniq, inv = np.unique(les, return_inverse=True)  # coalesce equal bounds
    if len(uniq) != len(les):
        summed = np.zeros((n, len(uniq)))
        np.add.at(summed.T, inv, counts.T)
        les, counts = uniq, summed
    counts = np.maximum.accumulate(counts, axis=1)  # ensureMonotonic
    if len(les) < 2:
        return value, blo, bhi
    obs = counts[:, -1]
    rank = q * obs
    hit = counts[:, :-1] >= rank[:, None]
    b = np.where(hit.any(axis=1), hit.argmax(axis=1), len(les) - 1)
    rows = np.arange(n)
    start = np.where(b > 0, les[np.maximum(b - 1, 0)], 0.0)
    below = np.where(b > 0, counts[rows, np.maximum(b - 1, 0)], 0.0)
    end = les[b]
    with np.errstate(divide="ignore", invalid="ignore"):
        interp = start + (end - start) * ((rank - below) / (counts[rows, b] - below))
    value = np.where(b == len(les) - 1, les[-2], interp)
    value = np.where((b == 0) & (les[0] <= 0), les[0], value)
    blo = np.where(b == len(les) - 1, les[-2], start)
    bhi = end
    dead = obs == 0
    value[dead], blo[dead], bhi[dead] = np.nan, np.nan, np.nan
    return value, blo, bhi


def bucket_rates(samples: pd.DataFrame, family: str, eval_ts: np.ndarray, window_ns: int, *, by=("target",),
                 selector=None, left_open: bool = False) -> dict:
    """`sum by (by, le) (rate(<family>_bucket[w]))`: {group name: (labels, les (B,), rates (T, B))}."""
    out: dict = {}
    per_group: dict = {}
    for gkey, le, ts, values in iter_series(select(samples, family + "_bucket", selector), by, split_le=True):
        r = series_rate(ts, values, eval_ts, window_ns, left_open=left_open)
        _add_present(per_group.setdefault(gkey, {}).setdefault(float(le), np.full(len(eval_ts), np.nan)), r)
    for gkey, buckets in per_group.items():
        les = np.array(sorted(buckets))
        labels = _label_dict(gkey)
        out[group_name(labels)] = (labels, les, np.column_stack([buckets[le] for le in les]))
    return out


def quantile_range(samples: pd.DataFrame, family: str, q: float, eval_ts: np.ndarray, window_ns: int, *,
                   by=("target",), selector=None, left_open: bool = False) -> pd.DataFrame:
    """`histogram_quantile(q, sum by (by, le) (rate(<family>_bucket{selector}[w])))` at each eval time.

    Returns columns ts, group, labels, value, bucket_lo, bucket_hi, count_rate (observations per second).

    >>> # quantile_range(samples, "vllm:inter_token_latency_seconds", 0.99, grid(t0, t1, 15 * NS), 60 * NS)
    """
    groups = bucket_rates(samples, family, eval_ts, window_ns, by=by, selector=selector, left_open=left_open)
    rows = [quantile_rows(q, labels, les, counts, eval_ts) for labels, les, counts in groups.values()]
    return _frame_for(rows, ["value", "bucket_lo", "bucket_hi", "count_rate"])


def quantile_rows(q: float, labels: dict, les: np.ndarray, counts: np.ndarray, eval_ts: np.ndarray) -> dict:
    present = ~np.isnan(counts).all(axis=1)
    value, blo, bhi = bucket_quantile(q, les, counts)
    value[~present] = np.nan
    total = counts[:, -1] if np.isposinf(les[-1]) else np.full(len(eval_ts), np.nan)
    return _rows(labels, eval_ts, value=value, bucket_lo=blo, bucket_hi=bhi, count_rate=total)


def format_seconds(x: float) -> str:
    if x is None or not math.isfinite(x):
        return "inf" if x == math.inf else "n/a"
    if x >= 1:
        return f"{x:g} s"
    if x >= 0.001:
        return f"{x * 1e3:g} ms"
    return f"{x * 1e6:g} us"


def format_quantile(value: float, bucket_lo: float, bucket_hi: float, les=None) -> str:
    """A quantile printed no finer than its bucket: "<= 300 ms" in the lowest bucket, "> 80 s" in +Inf,
    "200 ms-300 ms" otherwise.

    >>> format_quantile(0.297, 0.0, 0.3)
    '<= 300 ms'
    >>> format_quantile(80.0, 80.0, float('inf'))
    '> 80 s'
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(bucket_hi):
        return f"> {format_seconds(bucket_lo)}"
    if bucket_lo <= 0:
        return f"<= {format_seconds(bucket_hi)}"
    return f"{format_seconds(bucket_lo)}-{format_seconds(bucket_hi)}"
