"""The signals frame of a fleet, evaluated by the server: `rules/fleet.py`'s expressions through bounded queries.

The idea: the same frame `analyzers/signals.compute` builds locally (columns `signals.COLUMNS`, one block of
rows per replica, `target` the replica's name), but every value comes from a `query_range`.

1. The ITL bucket bounds are read once (`group by (le)`), so the stall share and the SLO bound use the
   bounds the fleet really exports.
2. Every column of `fleet.signal_exprs` is one job per replica group; `running` and `tokens_per_output`
   then give each replica its long-prefill cut (`fleet.iteration_cut`, from the peaks over the whole range,
   as `signals._put_long_prefill` does), and `long_prefill_rate` is one more job per distinct cut.
3. A quantile's bucket (`*_lo`, `*_hi`) is the bucket its value falls in; `prompt_computed` is 1 where
   `prompt_tokens_by_source_total` answered.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers.signals import COLUMNS
from stallscope.collectors.prometheus_fleet import Job, Runner, time_chunks
from stallscope.rules import fleet as F

NS = 1_000_000_000


def replica_name(labels: dict, by) -> str:
    """`pod=p1,model_name=m`: the identity labels a replica has, in `by` order ("all" when none)."""
    return ",".join(f"{k}={labels[k]}" for k in by if labels.get(k)) or "all"


def bucket_bounds(runner: Runner, families, start_s: float, end_s: float, matchers=(),
                  default=F.ITL_LES) -> tuple[list[str], tuple[str, ...]]:
    """(the `le` strings, the families exporting them) of a histogram exported under one of `families`
    (vLLM's current and legacy names), read from the latest sample of each bucket series at the end, the
    middle or the start of the range (instant queries: one sample per series); `default` and every
    family when none answers."""
    for at in (end_s, (start_s + end_s) / 2, start_s):
        found: dict[str, list[str]] = {}
        for name in families:
            expr = F.with_matchers(f"group by (le) ({name}_bucket)", matchers)
            les = [lab["le"] for lab, _ in runner.instant(expr, at) if "le" in lab]
            if les:
                found[name] = les
        if found:
            les = sorted({le for v in found.values() for le in v}, key=float)
            return les, tuple(found)
    return list(default), tuple(families)


def grid_index(times_s: np.ndarray, start_s: float, step_s: float) -> np.ndarray:
    return np.rint((np.asarray(times_s) - start_s) / step_s).astype(np.int64)


def _collect(answer, key: str, by, n: int, start_s: float, step_s: float) -> dict[str, np.ndarray]:
    """{replica name: values on the grid (NaN where absent)} of one job key."""
    out: dict[str, np.ndarray] = {}
    for labels, t, v in answer.series.get(key, []):
        arr = out.setdefault(replica_name(labels, by), np.full(n, np.nan))
        idx = grid_index(t, start_s, step_s)
        ok = (idx >= 0) & (idx < n)
        arr[idx[ok]] = v[ok]
    return out


def bucket_of(values: np.ndarray, les) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) bound of the bucket each quantile value lies in (+Inf bucket: its value is the
    largest finite bound, as histogram_quantile returns)."""
    bounds = np.array([float(le) for le in les])
    finite = bounds[np.isfinite(bounds)]
    v = np.asarray(values, dtype=float)
    lo, hi = np.full(len(v), np.nan), np.full(len(v), np.nan)
    if not len(finite):
        return lo, hi
    ok = np.isfinite(v)
    k = np.searchsorted(finite, v[ok], side="left")  # first bound >= v
    top = (k >= len(finite) - 1) & (v[ok] >= finite[-1])
    hi_ok = np.where(top, np.inf, finite[np.minimum(k, len(finite) - 1)])
    lo_ok = np.where(top, finite[-1], np.where(k > 0, finite[np.maximum(k - 1, 0)], 0.0))
    lo[ok], hi[ok] = lo_ok, hi_ok
    return lo, hi


def scrape_interval(runner: Runner, by, start_s: float, end_s: float, matchers=()) -> float:
    """The scrape interval (s, rounded to whole seconds above 1 s): the span over the most scrapes of
    `num_requests_running` any replica has in it; 15 s when none answers."""
    span = F.R.fmt_duration(max(1.0, end_s - start_s))
    expr = F.with_matchers(f"max(count_over_time(vllm:num_requests_running[{span}]))", matchers)
    got = runner.instant(expr, end_s)
    count = got[0][1] if got else 0.0
    if count <= 1:
        return 15.0
    interval = (end_s - start_s) / (count - 1)
    return float(round(interval)) if interval > 1 else interval


def live_window(window: str, interval_s: float) -> str:
    """signals.live_window as a PromQL duration."""
    from stallscope.analyzers.signals import live_window as lw
    from stallscope.core.config import parse_duration

    return F.R.fmt_duration(lw(int(parse_duration(window) * NS), int(round(interval_s * NS))) / NS)


def compute(runner: Runner, th: dict, start_s: float, end_s: float, step_s: float, *, window: str,
            by=F.DEFAULT_IDENTITY, matchers=(), progress=None, scrape_s: float | None = None
            ) -> tuple[pd.DataFrame, dict]:
    """(signals frame, query stats) of every replica matching `matchers` on the grid start..end by step;
    `scrape_s` (for the live window) is read from the server when not given."""
    by = F.label_list(by)
    live = live_window(window, scrape_s or scrape_interval(runner, by, start_s, end_s, matchers))
    les, families = bucket_bounds(runner, (F.ITL, F.ITL_LEGACY), start_s, end_s, matchers)
    ttft_les, _ = bucket_bounds(runner, (F.TTFT,), start_s, end_s, matchers, default=("+Inf",))
    exprs = F.signal_exprs(th, by=by, window=window, matchers=matchers, itl_les=les, itl_families=families,
                           live_window=live)
    n = len(np.arange(start_s, end_s + step_s / 2, step_s))
    jobs = [Job("all", col, expr, a, b, step_s) for col, expr in exprs.items()
            for a, b in _chunks(start_s, end_s, step_s)]
    answer = runner.run(jobs, progress)
    cols = {col: _collect(answer, col, by, n, start_s, step_s) for col in exprs}
    cuts: dict[str, list[str]] = {}
    for name, running in cols["running"].items():
        tpo = cols["tokens_per_output"].get(name, np.array([np.nan]))
        peak_tpo = float(np.nanmax(tpo)) if np.isfinite(tpo).any() else 1.0
        peak_run = float(np.nanmax(running)) if np.isfinite(running).any() else 0.0
        cuts.setdefault(F.iteration_cut(peak_run, peak_tpo), []).append(name)
    cols["long_prefill_rate"] = {}
    for cut, names in cuts.items():
        expr = F.signal_exprs(th, by=by, window=window, matchers=matchers, itl_les=les,
                              iteration_cut=cut, itl_families=families)["long_prefill_rate"]
        extra = runner.run([Job("long_prefill", "lp", expr, a, b, step_s) for a, b in _chunks(start_s, end_s, step_s)])
        got = _collect(extra, "lp", by, n, start_s, step_s)
        cols["long_prefill_rate"].update({k: v for k, v in got.items() if k in names})
        answer.requests += extra.requests
        answer.server_s += extra.server_s
        answer.bytes += extra.bytes
        answer.samples += extra.samples
    stats = {"requests": answer.requests, "samples": answer.samples, "bytes": answer.bytes,
             "server_s": answer.server_s, "failures": answer.failures, "itl_les": les}
    return frame(cols, start_s, step_s, n, les, ttft_les, window), stats


def _chunks(start_s, end_s, step_s):
    return time_chunks(start_s, end_s, step_s)


def frame(cols: dict, start_s: float, step_s: float, n: int, les, ttft_les, window: str) -> pd.DataFrame:
    """The signals frame of `{column: {replica: values}}` (COLUMNS; *_lo/_hi from the ITL/TTFT buckets)."""
    from stallscope.core.config import parse_duration

    ts = (np.rint(start_s * 1000).astype(np.int64) * 1_000_000 + np.arange(n, dtype=np.int64)
          * int(round(step_s * NS)))
    names = sorted({r for by_replica in cols.values() for r in by_replica})
    frames = []
    for name in names:
        data = {"ts": ts, "target": name}
        for c in COLUMNS[2:]:
            data[c] = cols.get(c, {}).get(name, np.full(n, np.nan))
        for q, bounds in (("itl_p99", les), ("itl_p50", les), ("ttft_p99", ttft_les)):
            data[q + "_lo"], data[q + "_hi"] = bucket_of(data[q], bounds)
        frames.append(pd.DataFrame(data))
    out = pd.concat(frames, ignore_index=True)[COLUMNS] if frames else pd.DataFrame(columns=COLUMNS)
    out.attrs["window_ns"] = int(parse_duration(window) * NS)
    out.attrs["step_ns"] = int(round(step_s * NS))
    return out


