"""Request-level views, defined once: each view is a (family, kind) whose PromQL the Grafana dashboard runs and
whose value this module computes from a samples frame with the same semantics, so every face shows one number.

The idea: vLLM's own dashboards (`examples/online_serving/prometheus_grafana/grafana.json`,
`dashboards/grafana/performance_statistics.json`, `query_statistics.json`) plot request latency, queue,
prefill and decode time, lengths, finish reasons, throughput and cache hit rate, pooled per `model_name`.
`VIEWS` lists those views; `promql(view)` writes each series of a view as PromQL and `evaluate()` computes
the same expression over a frame with `analyzers/quantiles.py` (Prometheus's `rate` and `histogram_quantile`):

    histogram  P50/P90/P95/P99  histogram_quantile(q, sum by (le, <by>) (rate(<family>_bucket{sel}[w])))
               mean             sum by (<by>) (rate(<family>_sum{sel}[w])) / sum by (<by>) (rate(<family>_count{sel}[w]))
    rate       per second       sum by (<by>) (rate(<counter>{sel}[w]))
    by_label   per window       sum by (<by>, <label>) (increase(<counter>{sel}[w]))
    ratio      0-1              sum by (<by>) (rate(<num>{sel}[w])) / sum by (<by>) (rate(<den>{sel}[w]))
    gauge      as scraped       <agg> by (<by>) (<gauge>{sel})

One grouping (`GROUPINGS`): per model (`model_name`) by default, per instance and engine on drill-down.
In a frame read from scrapes the scrape target is the instance (Prometheus's `instance` label).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stallscope.analyzers import quantiles as Q
from stallscope.analyzers.workload import PREFILL_TIME

QUANTILES = (0.5, 0.9, 0.95, 0.99)
GROUPINGS = {"model": ("model_name",), "instance": ("model_name", "instance"),
             "engine": ("model_name", "instance", "engine")}
SELECTOR = 'model_name=~"$model_name",instance=~"$instance",engine=~"$engine"'  # Grafana's variables
WINDOW = "$__rate_interval"


@dataclass(frozen=True)
class View:
    """One request-level view: `metric` is a histogram family, a counter or a gauge as `kind` says."""

    key: str
    title: str
    kind: str            # histogram | rate | by_label | ratio | gauge
    metric: str
    unit: str            # a Grafana unit id: s, short, reqps, percentunit
    vllm_panel: str      # the panel of vLLM's dashboards it matches ("" when only stallscope has it)
    what: str
    denominator: str = ""
    label: str = ""
    agg: str = "sum"
    heatmap: bool = False
    slo: str = ""        # the thresholds.yaml key drawn as the SLO line
    extra: tuple = ()    # more (legend, counter) rates on the same panel (kind rate)
    legend: str = ""     # the series name of a rate view's `metric`


VIEWS: tuple[View, ...] = (
    View("e2e", "E2E request latency", "histogram", "vllm:e2e_request_latency_seconds", "s",
         "E2E Request Latency", "arrival to last token, per finished request"),
    View("ttft", "Time to first token", "histogram", "vllm:time_to_first_token_seconds", "s",
         "Time To First Token Latency", "arrival to first token", slo="ttft_slo_s"),
    View("itl", "Inter-token latency", "histogram", "vllm:inter_token_latency_seconds", "s",
         "Time Per Output Token Latency", "gap between output tokens (one sample per output)", slo="itl_slo_s"),
    View("queue", "Queue time", "histogram", "vllm:request_queue_time_seconds", "s",
         "Queue Time", "time a request waited before its first schedule"),
    View("prefill", "Prefill time", "histogram", PREFILL_TIME, "s",
         "Requests Prefill and Decode Time", "first schedule to first token"),
    View("decode", "Decode time", "histogram", "vllm:request_decode_time_seconds", "s",
         "Requests Prefill and Decode Time", "first token to last token"),
    View("prompt_len", "Prompt length", "histogram", "vllm:request_prompt_tokens", "short",
         "Request Prompt Length", "prompt tokens per finished request", heatmap=True),
    View("gen_len", "Generation length", "histogram", "vllm:request_generation_tokens", "short",
         "Request Generation Length", "generated tokens per finished request", heatmap=True),
    View("max_gen", "Max generation tokens", "histogram", "vllm:request_max_num_generation_tokens", "short",
         "Max Generation Token in Sequence Group", "the most tokens any sequence of a request generated"),
    View("batch", "Iteration batch size (tokens per step)", "histogram", "vllm:iteration_tokens_total", "short",
         "", "tokens scheduled per engine step (prefill completions count whole prompts)", heatmap=True),
    View("request_rate", "Request rate", "rate", "vllm:request_success_total", "reqps", "",
         "finished requests per second", legend="requests/s"),
    View("finish", "Finish reasons", "by_label", "vllm:request_success_total", "short", "Finish Reason",
         "finished requests per window by finished_reason", label="finished_reason"),
    View("tokens", "Token throughput", "rate", "vllm:generation_tokens_total", "short", "Token Throughput",
         "generation and prompt tokens per second", legend="generation tokens/s", extra=(("prompt tokens/s", "vllm:prompt_tokens_total"),)),
    View("prefix_hit", "Prefix-cache hit rate", "ratio", "vllm:prefix_cache_hits_total", "percentunit", "",
         "cached prompt tokens / queried prompt tokens", denominator="vllm:prefix_cache_queries_total"),
    View("running", "Requests running", "gauge", "vllm:num_requests_running", "short", "Scheduler State",
         "requests in the running batch"),
    View("waiting", "Requests waiting", "gauge", "vllm:num_requests_waiting", "short", "Scheduler State",
         "requests waiting for capacity"),
    View("kv_usage", "KV-cache usage", "gauge", "vllm:kv_cache_usage_perc", "percentunit", "Cache Utilization",
         "KV blocks in use (max over the group)", agg="max"),
)
BY_KEY = {v.key: v for v in VIEWS}


def group_labels(grouping: str = "model") -> tuple[str, ...]:
    if grouping not in GROUPINGS:
        raise ValueError(f"unknown grouping {grouping!r} (one of {', '.join(GROUPINGS)})")
    return GROUPINGS[grouping]


def spelled(metric: str, prefix: str = "vllm:") -> str:
    """`vllm:<name>` written with another spelling of the prefix (`vllm_`, `ray_vllm:`, `ray_vllm_`) for PromQL."""
    if prefix not in ("vllm:", "vllm_", "ray_vllm:", "ray_vllm_"):
        raise ValueError(f"unknown metric prefix {prefix!r} (vllm:, vllm_, ray_vllm:, ray_vllm_)")
    return prefix + metric.removeprefix("vllm:") if metric.startswith("vllm:") else metric


def promql(view: View, *, grouping: str = "model", selector: str = SELECTOR, window: str = WINDOW,
           prefix: str = "vllm:") -> list[tuple[str, str]]:
    """[(series name, PromQL)] of a view: what Grafana runs and `evaluate()` computes. `prefix` spells the
    metric names as the Prometheus holding them does (an OpenTelemetry pipeline: `vllm_`)."""
    by = ", ".join(group_labels(grouping))
    _sel = lambda m, s: f"{spelled(m, prefix)}{{{s}}}" if s else spelled(m, prefix)  # noqa: E731
    rate = lambda m: f"sum by ({by}) (rate({_sel(m, selector)}[{window}]))"  # noqa: E731
    if view.kind == "histogram":
        out = [(f"P{q * 100:g}", f"histogram_quantile({q:g}, sum by (le, {by}) "
                                 f"(rate({_sel(view.metric + '_bucket', selector)}[{window}])))") for q in QUANTILES]
        return out + [("mean", f"{rate(view.metric + '_sum')} / {rate(view.metric + '_count')}")]
    if view.kind == "rate":
        return [(view.legend, rate(view.metric)),
                *((name, rate(m)) for name, m in view.extra)]
    if view.kind == "by_label":
        return [(view.label, f"sum by ({by}, {view.label}) (increase({_sel(view.metric, selector)}[{window}]))")]
    if view.kind == "ratio":
        return [("ratio", f"{rate(view.metric)} / {rate(view.denominator)}")]
    return [(view.agg, f"{view.agg} by ({by}) ({_sel(view.metric, selector)})")]


def heatmap_promql(view: View, *, selector: str = SELECTOR, window: str = WINDOW, prefix: str = "vllm:") -> str:
    """Observations per bucket per window, as vLLM's heatmaps query them (Grafana de-cumulates `le`)."""
    return f"sum by (le) (increase({spelled(view.metric + '_bucket', prefix)}{{{selector}}}[{window}]))"


def by_labels(samples: pd.DataFrame, grouping: str = "model") -> tuple[str, ...]:
    """The grouping's labels for this frame: `instance` is the scrape target where no label carries it."""
    labels = group_labels(grouping)
    if "instance" in labels and not any("instance" in d for d in samples["labels"].head(1000)):
        return tuple("target" if b == "instance" else b for b in labels)
    return labels


def _long(frame: pd.DataFrame, series: str, value=None) -> pd.DataFrame:
    cols = {"ts": frame["ts"].to_numpy(dtype=np.int64), "group": frame["group"].to_numpy(dtype=object),
            "series": series, "value": frame["value"].to_numpy(dtype=float) if value is None else value}
    for c in ("bucket_lo", "bucket_hi"):
        cols[c] = frame[c].to_numpy(dtype=float) if c in frame else np.nan
    return pd.DataFrame(cols)


def _ratio(num: pd.DataFrame, den: pd.DataFrame, series: str) -> pd.DataFrame:
    m = num.merge(den, on=["ts", "group"], suffixes=("", "_den"))
    with np.errstate(divide="ignore", invalid="ignore"):
        value = m["value"].to_numpy(dtype=float) / m["value_den"].to_numpy(dtype=float)
    return _long(m, series, np.where(np.isfinite(value), value, np.nan))


def evaluate(samples: pd.DataFrame, view: View, eval_ts: np.ndarray, window_ns: int, *,
             grouping: str = "model", selector=None) -> pd.DataFrame:
    """`ts, group, series, value, bucket_lo, bucket_hi` of one view: every series `promql(view)` names."""
    by = by_labels(samples, grouping)
    kw = dict(by=by, selector=selector)
    parts = []
    if view.kind == "histogram":  # bucket rates once, then every quantile of them
        groups = Q.bucket_rates(samples, view.metric, eval_ts, window_ns, **kw)
        for (name, _), q in zip(promql(view), QUANTILES):
            rows = [Q.quantile_rows(q, labels, les, counts, eval_ts) for labels, les, counts in groups.values()]
            if rows:
                parts.append(_long(pd.concat([pd.DataFrame(r) for r in rows], ignore_index=True), name))
        parts.append(_ratio(Q.rate_range(samples, view.metric + "_sum", eval_ts, window_ns, **kw),
                            Q.rate_range(samples, view.metric + "_count", eval_ts, window_ns, **kw), "mean"))
    elif view.kind == "rate":
        for (name, _), metric in zip(promql(view), (view.metric, *(m for _, m in view.extra))):
            parts.append(_long(Q.rate_range(samples, metric, eval_ts, window_ns, **kw), name))
    elif view.kind == "by_label":
        r = Q.rate_range(samples, view.metric, eval_ts, window_ns, by=(*by, view.label), selector=selector,
                         is_rate=False)
        parts.append(_long(r, view.label).assign(series=[d.get(view.label, "") for d in r["labels"]],
                                                 group=[Q.group_name({k: v for k, v in d.items() if k != view.label})
                                                        for d in r["labels"]]))
    elif view.kind == "ratio":
        parts.append(_ratio(Q.rate_range(samples, view.metric, eval_ts, window_ns, **kw),
                            Q.rate_range(samples, view.denominator, eval_ts, window_ns, **kw), "ratio"))
    else:
        parts.append(_long(Q.instant_range(samples, view.metric, eval_ts, agg=view.agg, **kw), view.agg))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return out.dropna(subset=["value"]).reset_index(drop=True) if len(out) else _empty()


def metrics_of(view: View) -> tuple[str, ...]:
    """The sample metric names a view reads."""
    if view.kind == "histogram":
        return tuple(view.metric + s for s in ("_bucket", "_sum", "_count"))
    return (view.metric, *(m for _, m in view.extra), *((view.denominator,) if view.denominator else ()))


def _per_view(samples: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """{view key: the rows of the metrics it reads}, from one pass over the frame."""
    index = samples.groupby("metric", sort=False, observed=True).indices
    out = {}
    for v in VIEWS:
        rows = [index[m] for m in metrics_of(v) if m in index]
        out[v.key] = samples.iloc[np.sort(np.concatenate(rows))] if rows else samples.iloc[:0]
    return out


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"ts": pd.Series(dtype="int64"), **{c: pd.Series(dtype=object) for c in ("group", "series")},
                         **{c: pd.Series(dtype=float) for c in ("value", "bucket_lo", "bucket_hi")}})


def heatmap(samples: pd.DataFrame, view: View, eval_ts: np.ndarray, window_ns: int, *, selector=None) -> pd.DataFrame:
    """`ts, le, value`: observations per bucket (not cumulative) in each window, pooled like `heatmap_promql`."""
    groups = Q.bucket_rates(samples, view.metric, eval_ts, window_ns, by=(), selector=selector)
    rows = []
    for _, les, rates in groups.values():
        per_bucket = np.diff(np.nan_to_num(rates) * window_ns / Q.NS, axis=1, prepend=0.0)
        for j, le in enumerate(les):
            rows.append(pd.DataFrame({"ts": eval_ts, "le": le, "value": per_bucket[:, j]}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["ts", "le", "value"])


def default_grid(samples: pd.DataFrame, window_s: float | None = None, max_points: int = 600) -> tuple[np.ndarray, int]:
    """(eval times, window ns) as Grafana picks them: at most `max_points` steps (`$__interval`) and the window
    `$__rate_interval` = max(step + scrape interval, 4 scrape intervals), unless `window_s` is given."""
    ts = np.unique(samples["ts"].to_numpy(dtype=np.int64))
    interval = int(np.median(np.diff(ts))) if len(ts) > 1 else 15 * Q.NS
    step = max(interval, -(-(int(ts[-1]) - int(ts[0])) // max_points)) if len(ts) else interval
    window = int(window_s * Q.NS) if window_s else max(step + interval, 4 * interval)
    start = min(int(ts[0]) + window, int(ts[-1])) if len(ts) else 0
    return Q.grid(start, int(ts[-1]) if len(ts) else 0, step), window


def compute(samples: pd.DataFrame, *, grouping: str = "model", window_s: float | None = None,
            eval_ts: np.ndarray | None = None, selector=None) -> dict[str, pd.DataFrame]:
    """{view key: `evaluate()` frame} for every view, on one grid (default: `default_grid`)."""
    if not len(samples):
        return {v.key: _empty() for v in VIEWS}
    grid_ts, window = default_grid(samples, window_s)
    eval_ts = grid_ts if eval_ts is None else np.asarray(eval_ts, dtype=np.int64)
    per_view = _per_view(samples)
    return {v.key: evaluate(per_view[v.key], v, eval_ts, window, grouping=grouping, selector=selector)
            for v in VIEWS}


def summary(samples: pd.DataFrame, *, grouping: str = "model", selector=None) -> pd.DataFrame:
    """Whole-run numbers per group: each view evaluated once, at the last scrape, over the whole run (the
    PromQL of `promql(view, window=<run length>)` as an instant query). Columns: view, group, series, value,
    bucket_lo, bucket_hi, text (a quantile printed no finer than its bucket)."""
    if not len(samples):
        return pd.DataFrame(columns=["view", "group", "series", "value", "bucket_lo", "bucket_hi", "text"])
    t0, t1 = int(samples["ts"].min()), int(samples["ts"].max())
    at, window = np.array([t1], dtype=np.int64), max(t1 - t0, 1)
    rows, per_view = [], _per_view(samples)
    for v in VIEWS:
        r = evaluate(per_view[v.key], v, at, window, grouping=grouping, selector=selector)
        if v.kind == "gauge":  # a gauge's whole-run number is its peak, not its last value
            r = _gauge_peak(per_view[v.key], v, grouping, selector)
        rows.append(r.assign(view=v.key))
    out = pd.concat(rows, ignore_index=True)
    out["text"] = [_text(BY_KEY[k], s, x, lo, hi) for k, s, x, lo, hi in
                   zip(out["view"], out["series"], out["value"], out["bucket_lo"], out["bucket_hi"])]
    return out[["view", "group", "series", "value", "bucket_lo", "bucket_hi", "text"]]


def _gauge_peak(samples, view: View, grouping: str, selector) -> pd.DataFrame:
    ts = np.unique(samples["ts"].to_numpy(dtype=np.int64))
    if not len(ts):
        return _empty()
    r = evaluate(samples, view, ts, 0, grouping=grouping, selector=selector)
    if not len(r):
        return r
    peak = r.groupby("group", sort=True)["value"].max().reset_index()
    return peak.assign(ts=int(ts[-1]), series="peak", bucket_lo=np.nan, bucket_hi=np.nan)


def _text(view: View, series: str, value: float, lo: float, hi: float) -> str:
    if value != value:
        return "n/a"
    if view.unit == "s" and series.startswith("P"):
        return Q.format_quantile(value, lo, hi)
    if view.unit == "s":
        return Q.format_seconds(value)
    if view.unit == "percentunit":
        return f"{value:.1%}"
    if series.startswith("P") and lo == lo:
        return f"{lo:g}-{hi:g}" if lo > 0 else f"<= {hi:g}"
    return f"{value:.3g}"
