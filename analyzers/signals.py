"""Signals: the per-target series every detector reads, evaluated once on one sliding-window grid.

The idea: turn the raw `samples` frame into one tidy frame (one row per target and evaluation time)
with PromQL-equivalent values, so each detector is a few vectorised comparisons.

1. The grid runs from the first scrape + one window to the last scrape, one point per `step` (default:
   the scrape interval, at most `max_points` points): at the scrape times themselves when the step is the
   interval and one target's scrapes set it, else anchored at the last scrape, so the newest point always
   sees it; the window defaults to `windows.short` of the
   thresholds, shrunk to a tenth of the run (never under 4 scrape intervals) for short runs.
2. Histograms (`sum by (target, le) (rate(..._bucket[w]))`): ITL P99/P50 and TTFT P99/P50 with their
   buckets; the ITL observation rate; `itl_stall_share`, a lower bound of the stream time spent in
   gaps above the SLO (sum over buckets above the SLO of count x lower edge, over `rate(_sum)`), which
   does not under-weight a long stall the way a per-observation quantile does (one sample per output
   event); `itl_ref_count` / `_above` / `_above2`, ITL observations over the SLO's reference window
   (`windows.short`, the alert rules' window, even where a short run shrank the grid's window; for a point
   in a run's first such window, the first full one, the whole run when shorter), all of them and those in
   buckets wholly at or above the SLO and twice it, and `itl_ref_share`, the stream-time share over it; a
   freeze still open where that window ends (no ITL observation since: a whole prompt's step puts out only its
   first token, and the next step may be another) counts one observation per running request;
   `long_prefill_rate`, engine outputs of `iteration_tokens_total` above a cut that decode steps cannot reach:
   it observes the *computed* prompt tokens (cached ones excluded) plus the generated tokens of one engine
   output, so a prefill counts where it completes; the cut is 2 x peak running x
   tokens per output (1 + accepted / drafts under speculative decoding, else 1), at least 512.
3. Counters as `rate`: prompt, generation tokens, preemptions, the prefill-time sum (finish-time, lags).
   `prompt_rate` is the computed work, `prompt_tokens_by_source_total{source="local_compute"}` (vLLM
   0.16+); older versions fall back to `prompt_tokens_total`, which counts prefix-cache hits too
   (`prompt_computed` says which: 1 or 0).
4. Live (issue 16): the same generation and computed-prompt rates over the *live* window (half the window,
   at least 2 scrape intervals; `windows.live` in production, where the window is `windows.short`), and
   `live_mean_itl` = running / live generation rate, the mean gap per running stream right now (inf when
   nothing was generated). Unlike ITL, which is observed only when a stalled stream gets its next token,
   these counters show a stall while it lasts. `nothing_for_s`: seconds since the last scrape at which
   the generation counter rose by at least half the running requests, the computed prompt tokens rose at
   all, or a scheduler gauge (running, waiting, KV usage) changed, to the latest scrape (0 when nothing runs):
   a lower bound of how long one engine step has been holding everything, at scrape resolution. vLLM sends
   the scheduler's stats after every step, outputs or none (`v1/core/sched/scheduler.py`, "We must return
   the stats even if there are no request outputs this step"), so a gauge that moved proves a step ended: a
   lone prompt prefilled in chunks moves the KV usage every step and no counter until its last.
   `unserved_for_s`: the streams' own clock, seconds since the ITL count (tokens after a request's first) rose by
   at least half the running requests; a whole prompt's step ends, and moves the counters, without serving them.
5. Gauges as instant values (5 min lookback): running and waiting summed over engines, KV usage max.
   `waiting` is `num_requests_waiting_by_reason{reason="capacity"}` where scraped (0.20+), else
   `num_requests_waiting`, which also counts deferred requests (`waiting_total`); `asleep` is 1 while an
   engine's `engine_sleep_state` sits on a state other than "awake". `kv_usage_peak` is
   `max(max_over_time(kv_cache_usage_perc[window]))`: every scrape in the window, not only the latest, so a
   pool scraped full between two grid points (or in the first window, before the grid starts) is seen.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers import quantiles as Q
from stallscope.analyzers.workload import PREFILL_TIME
from stallscope.core.config import load_thresholds, parse_duration

NS = Q.NS
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
TTFT = "vllm:time_to_first_token_seconds"
ITERATION = "vllm:iteration_tokens_total"
BY_SOURCE = "vllm:prompt_tokens_by_source_total"
BY_REASON = "vllm:num_requests_waiting_by_reason"
SLEEP = "vllm:engine_sleep_state"
# the scheduler's gauges, sent after every engine step (outputs or none): one that changed means a step ended
# (rules/render.py's STEP_GAUGES: the same, with the pre-0.12 KV name the rules must also match)
STEP_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
DRAFTS, ACCEPTED = "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_total"
COLUMNS = ["ts", "target", "itl_p99", "itl_p99_lo", "itl_p99_hi", "itl_p50", "itl_p50_lo", "itl_p50_hi",
           "ttft_p99", "ttft_p99_lo", "ttft_p99_hi", "ttft_p50", "itl_rate", "itl_stall_share", "itl_above_slo_rate",
           "prompt_rate", "gen_rate", "preempt_rate", "prefill_time_rate", "long_prefill_rate", "running",
           "waiting", "kv_usage", "prompt_computed", "waiting_total", "asleep", "tokens_per_output", "live_gen_rate",
           "live_prompt_rate", "live_mean_itl", "prefill_count_rate", "nothing_for_s", "itl_ref_count",
           "itl_ref_above", "itl_ref_above2", "itl_ref_share", "kv_usage_peak", "unserved_for_s"]


def scrape_interval_ns(samples: pd.DataFrame) -> int:
    """Median gap between distinct scrape times (ns); 15 s when there are fewer than two."""
    ts = np.unique(samples["ts"].to_numpy(dtype=np.int64)) if len(samples) else np.array([], dtype=np.int64)
    return int(np.median(np.diff(ts))) if len(ts) > 1 else 15 * NS


def choose_grid(samples: pd.DataFrame, thresholds: dict, *, window_s: float | None = None,
                step_s: float | None = None, max_points: int = 4000) -> tuple[np.ndarray, int]:
    """(eval times, window ns) for a samples frame; see the module docstring for the rule."""
    ts = samples["ts"].to_numpy(dtype=np.int64)
    interval = scrape_interval_ns(samples)
    t0, t1 = int(ts.min()), int(ts.max())
    if window_s is not None:
        window = int(window_s * NS)
    else:
        window = int(parse_duration(thresholds["windows"]["short"]) * NS)
        window = max(min(window, (t1 - t0) // 10), 4 * interval)
    step = int(step_s * NS) if step_s else interval
    step = max(step, -(-(t1 - t0) // max_points))
    start = min(t0 + window, t1)
    scrapes = np.unique(ts)
    if step == interval and len(scrapes) <= 1.1 * (t1 - t0) / max(interval, 1) + 1:
        # one point per scrape, at the scrape: a fixed step drifts against jittered scrapes, seeing one twice
        # and the next never (a KV-usage peak, a freeze's first silent scrape)
        return scrapes[scrapes >= start], window
    # anchored at the newest scrape, so the last evaluation sees it (a stall in progress shows only there)
    return Q.grid(t1 - (t1 - start) // step * step, t1, step), window


def split_metrics(samples: pd.DataFrame, names) -> dict[str, pd.DataFrame]:
    """{metric: its rows} for the metrics in `names` that occur (one factorize, one take per metric)."""
    codes, uniq = pd.factorize(samples["metric"].to_numpy())
    pos = {m: k for k, m in enumerate(uniq)}
    return {m: samples.iloc[np.flatnonzero(codes == pos[m])] for m in names if m in pos}


def _by_group(frame: pd.DataFrame, name: str) -> dict:
    return {g: part[name if name in part else "value"].to_numpy(dtype=float) for g, part in frame.groupby("group")}


def compute(samples: pd.DataFrame, *, thresholds: dict | None = None, eval_ts: np.ndarray | None = None,
            window_ns: int | None = None, q: float = 0.99) -> pd.DataFrame:
    """The signals frame (columns `COLUMNS`, `target` = group name) of a samples frame.

    >>> # compute(samples)[["ts", "target", "itl_p99", "prompt_rate", "kv_usage"]]
    """
    th = thresholds or load_thresholds()
    if not len(samples):
        return _empty()
    if eval_ts is None or window_ns is None:
        eval_ts, window_ns = choose_grid(samples, th)
    slo = float(th["itl_slo_s"])
    cols: dict[str, dict[str, np.ndarray]] = {}
    parts = split_metrics(samples, [f + "_bucket" for f in (*ITL, TTFT, ITERATION)] + [f + end for f in ITL for end in
                                                                                       ("_sum", "_count")] + [
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
        f"{PREFILL_TIME}_sum", f"{PREFILL_TIME}_count",
        "vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc", BY_SOURCE, BY_REASON, SLEEP, DRAFTS, ACCEPTED])
    none = samples.iloc[:0]

    def rows(*metrics):  # the rows of these metrics only: every query below scans a small frame
        found = [parts[m] for m in metrics if m in parts]
        return pd.concat(found) if len(found) > 1 else (found[0] if found else none)

    def put(name, group, values):
        cols.setdefault(name, {})[group] = values

    itl_family = next((f for f in ITL if f + "_bucket" in parts), ITL[0])
    itl = Q.bucket_rates(rows(itl_family + "_bucket"), itl_family, eval_ts, window_ns)
    itl_sum = _by_group(Q.rate_range(rows(itl_family + "_sum"), itl_family + "_sum", eval_ts, window_ns), "value")
    _put_itl(put, itl, itl_sum, eval_ts, q, slo)
    ref_ns = int(parse_duration(th.get("windows", {}).get("short", "1m")) * NS)
    # the SLO's P99 over its reference window (episodes' severity): the full one each point lies in, so a point
    # in the first minute of a run reads the run's first minute, not the few seconds before it
    ref_ts = np.clip(eval_ts, int(samples["ts"].min()) + ref_ns, int(samples["ts"].max()))
    ref = itl if ref_ns <= window_ns else Q.bucket_rates(rows(itl_family + "_bucket"), itl_family, ref_ts, ref_ns)
    ref_sum = itl_sum if ref_ns <= window_ns else _by_group(
        Q.rate_range(rows(itl_family + "_sum"), itl_family + "_sum", ref_ts, ref_ns), "value")
    moved = _last_moved(rows, itl_family)
    _put_itl_ref(put, ref, ref_sum, ref_ns, slo, _nothing_for(moved, ref_ts, streams=True))
    for family, tag in ((TTFT, "ttft"),):
        for g, (labels, les, counts) in Q.bucket_rates(rows(family + "_bucket"), family, eval_ts, window_ns).items():
            r99 = Q.quantile_rows(q, labels, les, counts, eval_ts)
            put(tag + "_p99", g, r99["value"])
            put(tag + "_p99_lo", g, r99["bucket_lo"])
            put(tag + "_p99_hi", g, r99["bucket_hi"])
            put(tag + "_p50", g, Q.quantile_rows(0.5, labels, les, counts, eval_ts)["value"])
    def rate(metric, selector=None):
        return _by_group(Q.rate_range(rows(metric), metric, eval_ts, window_ns, selector=selector), "value")

    def gauge(metric, agg="sum", selector=None):
        return _by_group(Q.instant_range(rows(metric), metric, eval_ts, agg=agg, selector=selector), "value")

    for metric, tag in (("vllm:prompt_tokens_total", "prompt_rate"), ("vllm:generation_tokens_total", "gen_rate"),
                        ("vllm:num_preemptions_total", "preempt_rate"),
                        (f"{PREFILL_TIME}_sum", "prefill_time_rate"),
                        (f"{PREFILL_TIME}_count", "prefill_count_rate")):
        for g, v in rate(metric).items():
            put(tag, g, v)
    for metric, tag, agg in (("vllm:num_requests_running", "running", "sum"),
                             ("vllm:num_requests_waiting", "waiting_total", "sum"),
                             ("vllm:kv_cache_usage_perc", "kv_usage", "max")):
        for g, v in gauge(metric, agg).items():
            put(tag, g, v)
    peak = Q.max_over_time_range(rows("vllm:kv_cache_usage_perc"), "vllm:kv_cache_usage_perc", eval_ts, window_ns)
    for g, v in _by_group(peak, "value").items():
        put("kv_usage_peak", g, v)
    _put_computed_work(cols, put, rate, gauge, len(eval_ts))
    _put_live(cols, put, rows, eval_ts, live_window(window_ns, scrape_interval_ns(samples)))
    _put_nothing_for(put, moved, eval_ts)
    _put_long_prefill(cols, put, Q.bucket_rates(rows(ITERATION + "_bucket"), ITERATION, eval_ts, window_ns))
    return _frame(cols, eval_ts, window_ns)


def _peak(values, default: float) -> float:
    values = np.asarray(values, dtype=float)
    return float(np.nanmax(values)) if np.isfinite(values).any() else default


def _put_computed_work(cols: dict, put, rate, gauge, n: int) -> None:
    """The vLLM 0.16+ splits where scraped: computed prompt tokens, waiting for capacity; the sleep state
    and the spec-decode tokens per output (see the module docstring)."""
    computed = rate(BY_SOURCE, [("source", "=", "local_compute")])
    for g in set(cols.get("prompt_rate", {})) | set(computed):
        put("prompt_computed", g, np.full(n, float(g in computed)))
    cols.setdefault("prompt_rate", {}).update(computed)
    cols["waiting"] = {**cols.get("waiting_total", {}), **gauge(BY_REASON, selector=[("reason", "=", "capacity")])}
    for g, v in gauge(SLEEP, "max", [("sleep_state", "!=", "awake")]).items():
        put("asleep", g, (v >= 1).astype(float))
    accepted = rate(ACCEPTED)
    for g, drafts in rate(DRAFTS).items():
        with np.errstate(divide="ignore", invalid="ignore"):
            put("tokens_per_output", g, np.where(drafts > 0, 1.0 + accepted.get(g, 0.0) / drafts, np.nan))


def live_window(window_ns: int, interval_ns: int) -> int:
    """The live window: half the signal window, at least 2 scrape intervals, at most the window."""
    return int(min(window_ns, max(window_ns // 2, 2 * interval_ns)))


def _put_live(cols: dict, put, rows, eval_ts: np.ndarray, live_ns: int) -> None:
    """`live_gen_rate`, `live_prompt_rate` (computed where scraped) and `live_mean_itl` (module docstring, 4)."""
    def rate(metric, selector=None):
        return _by_group(Q.rate_range(rows(metric), metric, eval_ts, live_ns, selector=selector), "value")

    prompt = {**rate("vllm:prompt_tokens_total"), **rate(BY_SOURCE, [("source", "=", "local_compute")])}
    for g, v in prompt.items():
        put("live_prompt_rate", g, v)
    for g, gen in rate("vllm:generation_tokens_total").items():
        put("live_gen_rate", g, gen)
        running = cols.get("running", {}).get(g, np.full(len(eval_ts), np.nan))
        with np.errstate(divide="ignore", invalid="ignore"):
            put("live_mean_itl", g, np.where(running > 0, running / gen, np.nan))


def _totals(frame: pd.DataFrame) -> dict[str, pd.Series]:
    """{group: value summed per ts} of one metric's rows."""
    if not len(frame):
        return {}
    target = frame["target"].fillna("").astype(str) if "target" in frame else pd.Series("", index=frame.index)
    return {Q.group_name({"target": t} if t else {}): part.groupby("ts")["value"].sum()
            for t, part in frame.groupby(target.to_numpy())}


def _put_nothing_for(put, moved: dict, eval_ts: np.ndarray) -> None:
    """`nothing_for_s` and `unserved_for_s` (module docstring, 4)."""
    for name, streams in (("nothing_for_s", False), ("unserved_for_s", True)):
        for g, (out, _) in _nothing_for(moved, eval_ts, streams=streams).items():
            put(name, g, out)


def _nothing_for(moved: dict, eval_ts: np.ndarray, *, streams: bool = False) -> dict:
    """{group: (seconds without progress, running requests)} at each eval time, from `_last_moved` (module
    docstring, 4); with `streams`, seconds since the running streams last got a token after their first."""
    return {g: _nothing_at(ts, served if streams else last, run, eval_ts)
            for g, (ts, last, run, served) in moved.items()}


def _rose(series: pd.Series, ts: np.ndarray, run: np.ndarray) -> np.ndarray:
    """At each scrape, whether the counter rose by at least half the running requests of the scrape before (at
    least 1), or reset."""
    inc = np.diff(series.reindex(ts).ffill().to_numpy(dtype=float), prepend=np.nan)
    return ~(inc >= 0) | (inc >= np.maximum(1.0, 0.5 * np.concatenate([[0.0], run[:-1]])))


def _last_moved(rows, itl_family: str = ITL[0]) -> dict:
    """{group: (scrape times, when progress was last seen at each, running requests, when the streams were last
    served at each)}: a counter moved or a step ended (module docstring, 4); served: the ITL count rose by half
    the running requests, tokens after a stream's first (a whole prompt's step puts out its first token and ends,
    and the next may be another: the streams' gap stays open through both)."""
    gen, gauges = _totals(rows("vllm:generation_tokens_total")), [_totals(rows(name)) for name in STEP_GAUGES]
    running = gauges[STEP_GAUGES.index("vllm:num_requests_running")]
    prompt = _totals(rows(BY_SOURCE)) or _totals(rows("vllm:prompt_tokens_total"))
    itl_count = _totals(rows(itl_family + "_count"))
    found = {}
    for g, series in gen.items():
        ts = series.index.to_numpy(dtype=np.int64)
        run = running.get(g, pd.Series(dtype=float)).reindex(ts).ffill().fillna(0.0).to_numpy()
        moved = _rose(series, ts, run)
        served = _rose(itl_count[g], ts, run) if g in itl_count else None
        if g in prompt:
            p = prompt[g].reindex(ts).ffill().to_numpy(dtype=float)
            moved |= np.diff(p, prepend=np.nan) > 0
        for gauge in (gg[g] for gg in gauges if g in gg):   # a step ended: the scheduler's stats came
            step = np.diff(gauge.reindex(ts).to_numpy(dtype=float), prepend=np.nan)
            moved |= np.isfinite(step) & (step != 0)
        served = moved if served is None else served   # no ITL count scraped: any progress
        last, streams = (np.maximum.accumulate(np.where(m, ts, ts[0])) for m in (moved, served))
        found[g] = (ts, last, run, streams)
    return found


def _nothing_at(ts: np.ndarray, last: np.ndarray, run: np.ndarray, eval_ts: np.ndarray):
    """(seconds without progress, running requests) at each eval time, from `_last_moved`'s arrays."""
    idx = np.searchsorted(ts, eval_ts, side="right") - 1
    ok = idx >= 0
    out, now = np.full(len(eval_ts), np.nan), np.zeros(len(eval_ts))
    out[ok] = np.where(run[idx[ok]] > 0, (ts[idx[ok]] - last[idx[ok]]) / NS, 0.0)   # a lower bound
    now[ok] = run[idx[ok]]
    return out, now


def _put_long_prefill(cols: dict, put, iteration: dict) -> None:
    """`long_prefill_rate`: outputs of `iteration_tokens_total` above max(512, 2 x peak running x tokens per
    output), the cut rounded up to a bucket bound."""
    for g, (labels, les, counts) in iteration.items():
        per_output = _peak(cols.get("tokens_per_output", {}).get(g, np.nan), 1.0)
        running = float(_peak(cols.get("running", {}).get(g, np.nan), 0.0))   # a Python float: 1e308 overflows to inf quietly
        cut = max(512.0, 2.0 * running * float(per_output))
        at = les[les >= cut]
        idx = int(np.searchsorted(les, at[0])) if len(at) else len(les) - 1
        mono = np.maximum.accumulate(np.nan_to_num(counts), axis=1)
        put("long_prefill_rate", g, np.clip(mono[:, -1] - mono[:, idx], 0.0, None))


def _put_itl(put, itl: dict, itl_sum: dict, eval_ts: np.ndarray, q: float, slo: float) -> None:
    """The ITL columns per group: P99/P50 with their buckets, the rate, the rate above the SLO and the
    share of stream time in gaps above it (each gap counted at its bucket's lower edge)."""
    n = len(eval_ts)
    for g, (labels, les, counts) in itl.items():
        for qq, tag in ((q, "itl_p99"), (0.5, "itl_p50")):
            r = Q.quantile_rows(qq, labels, les, counts, eval_ts)
            put(tag, g, r["value"])
            put(tag + "_lo", g, r["bucket_lo"])
            put(tag + "_hi", g, r["bucket_hi"])
        put("itl_rate", g, counts[:, -1])
        lower, per_bucket = _per_bucket(les, counts)
        above = lower >= slo
        put("itl_above_slo_rate", g, per_bucket[:, above].sum(axis=1))
        with np.errstate(divide="ignore", invalid="ignore"):
            share = (per_bucket[:, above] * lower[above]).sum(axis=1) / itl_sum.get(g, np.full(n, np.nan))
        put("itl_stall_share", g, np.clip(share, 0.0, 1.0))


def _per_bucket(les: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each bucket's lower edge, the rate per bucket, not cumulative) of `bucket_rates` counts."""
    mono = np.maximum.accumulate(np.nan_to_num(counts), axis=1)
    return (np.concatenate([[0.0], les[:-1]]),
            np.diff(np.concatenate([np.zeros((len(mono), 1)), mono], axis=1), axis=1))


def _put_itl_ref(put, ref: dict, ref_sum: dict, ref_ns: int, slo: float, frozen: dict) -> None:
    """Over the reference window: `itl_ref_count`, `itl_ref_above`, `itl_ref_above2` (ITL observations, all of
    them and those in buckets wholly at or above the SLO and twice it) and `itl_ref_share` (stream time in
    gaps above the SLO, as `itl_stall_share`). A freeze still open where the window ends (`frozen`: the streams'
    clock of `_nothing_for` there, since the ITL count last rose) counts one observation of its length so far per
    running request, as a client's P99 and its stream time count the gap it is waiting in."""
    span = ref_ns / NS
    for g, (labels, les, counts) in ref.items():
        lower, per_bucket = _per_bucket(les, counts * span)   # observations, not per second
        n = len(per_bucket)
        held, running = frozen.get(g, (np.zeros(n), np.zeros(n)))
        held = np.nan_to_num(held)
        open_gaps = np.where(held >= slo, running, 0.0)
        put("itl_ref_count", g, per_bucket.sum(axis=1) + open_gaps)
        put("itl_ref_above", g, per_bucket[:, lower >= slo].sum(axis=1) + open_gaps)
        put("itl_ref_above2", g, per_bucket[:, lower >= 2 * slo].sum(axis=1) + np.where(held >= 2 * slo, open_gaps, 0))
        stalled = (per_bucket[:, lower >= slo] * lower[lower >= slo]).sum(axis=1) + open_gaps * held
        with np.errstate(divide="ignore", invalid="ignore"):
            share = stalled / (ref_sum.get(g, np.full(n, np.nan)) * span + open_gaps * held)
        put("itl_ref_share", g, np.clip(share, 0.0, 1.0))


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64" if c == "ts" else "float64") for c in COLUMNS})


def _frame(cols: dict, eval_ts: np.ndarray, window_ns: int) -> pd.DataFrame:
    """The signals frame of `{column: {group: values}}`, one block of rows per group."""
    n, frames = len(eval_ts), []
    for g in sorted({g for by in cols.values() for g in by}):
        data = {"ts": eval_ts, "target": g.split("=", 1)[1] if g.startswith("target=") else ""}
        for c in COLUMNS[2:]:
            data[c] = cols.get(c, {}).get(g, np.full(n, np.nan))
        frames.append(pd.DataFrame(data))
    out = (pd.concat(frames, ignore_index=True) if frames else _empty())[COLUMNS]
    out.attrs["window_ns"] = int(window_ns)
    out.attrs["step_ns"] = int(np.median(np.diff(eval_ts))) if n > 1 else int(window_ns)
    return out


def episodes(mask: np.ndarray, *, min_len: int = 1, merge_gap: int = 0,
             barrier: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Index ranges [i, j] of consecutive True values of `mask`, at least `min_len` long; runs separated
    by at most `merge_gap` False values are merged first, unless a `barrier` value is True in between.

    >>> episodes(np.array([0, 1, 1, 0, 1], dtype=bool)), episodes(np.array([0, 1, 1, 0, 1], dtype=bool), merge_gap=1)
    ([(1, 2), (4, 4)], [(1, 4)])
    """
    out, start = [], None
    for i, v in enumerate(np.asarray(mask, dtype=bool)):
        if v and start is None:
            start = i
        if not v and start is not None:
            out.append((start, i - 1))
            start = None
    if start is not None:
        out.append((start, len(mask) - 1))
    merged: list[tuple[int, int]] = []
    for a, b in out:
        blocked = barrier is not None and merged and np.asarray(barrier)[merged[-1][1] + 1:a].any()
        if merged and a - merged[-1][1] - 1 <= merge_gap and not blocked:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return [(a, b) for a, b in merged if b - a + 1 >= min_len]
