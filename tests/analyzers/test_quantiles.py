"""Windowed rate/histogram_quantile with PromQL semantics: hand-computed cases, then a real Prometheus."""

import math
import time

import numpy as np
import pandas as pd
import pytest

from expo_frames import T0_NS, VllmMetrics, random_itl_run, to_openmetrics
from stallscope.analyzers import quantiles as Q
from stallscope.core.errors import InputError

NS = Q.NS


def test_rate_plain_counter_extrapolates_to_window_edges():
    # samples every 10 s from t=5 to t=55 inside a [0, 60] window: extrapolate 5 s at each end
    ts = np.arange(5, 60, 10) * NS
    v = np.array([10.0, 20, 30, 40, 50, 60])
    r = Q.series_rate(ts, v, np.array([60 * NS]), 60 * NS)
    # increase 50 over 50 s sampled, extrapolated to 60 s -> 60, / 60 s = 1.0
    assert r[0] == pytest.approx(1.0, abs=1e-12)


def test_rate_stops_extrapolation_at_counter_zero_point():
    ts = np.array([30, 40, 50, 60]) * NS
    v = np.array([1.0, 11, 21, 31])
    # to_start = 30 s > 1.1 x 10 s -> half a spacing (5 s); zero point is 1 s before the first sample -> 1 s
    inc = Q.series_rate(ts, v, np.array([60 * NS]), 60 * NS, is_rate=False)
    assert inc[0] == pytest.approx(30.0 * (30 + 1) / 30, abs=1e-12)


def test_rate_counts_value_lost_at_a_reset():
    ts = np.array([0, 10, 20, 30, 40, 50, 60]) * NS
    v = np.array([100.0, 110, 120, 5, 15, 25, 35])  # restart between 20 and 30 s
    inc = Q.series_rate(ts, v, np.array([60 * NS]), 60 * NS, is_rate=False)
    assert inc[0] == pytest.approx(35 - 100 + 120, abs=1e-12)


def test_rate_needs_two_samples_in_window():
    ts = np.array([0, 100]) * NS
    r = Q.series_rate(ts, np.array([1.0, 2.0]), np.array([50 * NS, 100 * NS]), 60 * NS)
    assert np.isnan(r).all()


def test_window_is_closed_on_both_ends_like_prometheus_2():
    ts = np.array([0, 30, 60]) * NS
    v = np.array([0.0, 30, 60])
    closed = Q.series_rate(ts, v, np.array([60 * NS]), 60 * NS, is_rate=False)
    opened = Q.series_rate(ts, v, np.array([60 * NS]), 60 * NS, is_rate=False, left_open=True)
    assert closed[0] == pytest.approx(60.0)
    assert opened[0] == pytest.approx(30.0 + 30.0)  # 30..60 sampled, extrapolated 30 s to the start (< 1.1 x 30)


def test_bucket_quantile_interpolates_and_reports_its_bucket():
    les = np.array([0.3, 0.5, 0.8, np.inf])
    counts = np.array([[90.0, 95, 100, 100], [0, 0, 0, 10], [0, 0, 0, 0]])
    v, lo, hi = Q.bucket_quantile(0.99, les, counts)
    # row 0: rank 99 falls in (0.5, 0.8]: 0.5 + 0.3 * (99-95)/(100-95)
    assert v[0] == pytest.approx(0.74) and (lo[0], hi[0]) == (0.5, 0.8)
    # row 1: every observation is in +Inf: the highest finite bound
    assert v[1] == 0.8 and lo[1] == 0.8 and math.isinf(hi[1])
    assert np.isnan(v[2])  # no observations -> NaN
    v, lo, hi = Q.bucket_quantile(0.99, les, np.array([[100.0, 100, 100, 100]]))
    assert v[0] == pytest.approx(0.297) and Q.format_quantile(v[0], lo[0], hi[0]) == "<= 300 ms"


def test_bucket_quantile_forces_monotonic_counts_and_needs_inf():
    les = np.array([0.1, 0.2, 0.3, 0.4, np.inf])
    v, _, _ = Q.bucket_quantile(0.6, les, np.array([[1.0, 4, 3, 6, 8]]))  # the 3 is raised to 4
    assert v[0] == pytest.approx(0.3 + 0.1 * (4.8 - 4) / (6 - 4))  # 0.36 without the fix
    les = np.array([0.1, 0.2, np.inf])
    v, _, _ = Q.bucket_quantile(0.5, np.array([0.1, 0.2]), np.array([[1.0, 2.0]]))
    assert np.isnan(v[0])
    assert Q.bucket_quantile(1.5, les, np.array([[1.0, 2, 3]]))[0][0] == math.inf


def test_format_quantile_never_prints_false_precision():
    assert Q.format_quantile(0.257, 0.2, 0.3) == "200 ms-300 ms"
    assert Q.format_quantile(95.0, 80.0, math.inf) == "> 80 s"
    assert Q.format_quantile(float("nan"), float("nan"), float("nan")) == "n/a"


def test_selector_parsing_and_errors():
    assert Q.parse_selector('model_name=~"llama.*",engine="0"') == [("model_name", "=~", "llama.*"),
                                                                  ("engine", "=", "0")]
    with pytest.raises(InputError, match="bad selector"):
        Q.parse_selector("model_name=llama")
    with pytest.raises(InputError, match="bad regex"):
        Q.parse_selector('model_name=~"("')


def test_quantile_range_on_a_scraped_histogram():
    m = VllmMetrics()
    frames = []
    for i in range(7):  # 10 s scrapes; 100 fast observations each, then 10 of 1.2 s from scrape 4 on
        for _ in range(100):
            m.itl.observe(0.02)
        if i >= 4:
            for _ in range(10):
                m.itl.observe(1.2)
        frames.append(m.scrape(T0_NS + i * 10 * NS))
    samples = pd.concat(frames, ignore_index=True)
    out = Q.quantile_range(samples, "vllm:inter_token_latency_seconds", 0.99,
                           np.array([T0_NS + 30 * NS, T0_NS + 60 * NS]), 30 * NS)
    assert list(out["group"]) == ["all", "all"]
    # first window: only 0.02 s observations -> inside (0.01, 0.025]
    assert (out["bucket_lo"][0], out["bucket_hi"][0]) == (0.01, 0.025)
    # last window: 1 in 11 observations is 1.2 s -> P99 in (1.0, 2.5]
    assert (out["bucket_lo"][1], out["bucket_hi"][1]) == (1.0, 2.5)
    assert out["value"][1] == pytest.approx(1.0 + 1.5 * ((0.99 * 330 - 300) / 30))


@pytest.mark.slow
def test_matches_a_real_prometheus_server(tmp_path):
    from promserver import PrometheusServer, backfill_openmetrics

    t0 = (int(time.time()) // 3600 - 3) * 3600 * NS  # inside the default retention
    samples = random_itl_run(7, t0_ns=t0)
    buckets = samples[samples["metric"] == "vllm:inter_token_latency_seconds_bucket"]
    storage = tmp_path / "tsdb"
    backfill_openmetrics(to_openmetrics(buckets), storage, tmp_path)
    start, end, step = t0 + 20 * NS, t0 + 440 * NS, 7 * NS  # steps fall on and between scrapes
    eval_ts = Q.grid(start, end, step)
    with PrometheusServer(tmp_path, storage=storage) as prom:
        cases = [(0.99, "1m", ()), (0.5, "1m", ()), (0.9, "30s", ("engine",)), (0.99, "2m", ("engine",))]
        for q, w, by in cases:
            by_clause = ", ".join(("le",) + by)
            expr = f"histogram_quantile({q}, sum by ({by_clause}) (rate(vllm:inter_token_latency_seconds_bucket[{w}])))"
            theirs = prom.query_range(expr, start / NS, end / NS, step / NS)
            ours = Q.quantile_range(samples, "vllm:inter_token_latency_seconds", q, eval_ts,
                                    int(Q.parse_duration(w) * NS), by=by)
            assert theirs and len(theirs) == len({g for g in ours["group"]})
            for series in theirs:
                labels = series["metric"]
                mine = ours[ours["labels"].map(lambda d: all(d.get(k) == v for k, v in labels.items()))]
                mine = mine.dropna(subset=["value"]).set_index("ts")["value"]
                got = {int(round(float(t) * 1000)) * 1_000_000: float(v) for t, v in series["values"]}
                assert sorted(got) == sorted(mine.index), f"{expr}: different evaluation points"
                worst = max(abs(got[t] - mine[t]) for t in got)
                assert worst <= 1e-9, f"{expr} {labels}: max difference {worst}"
        # the plain counter rate too, per series
        expr = 'rate(vllm:inter_token_latency_seconds_bucket{le="+Inf"}[1m])'
        theirs = prom.query_range(expr, start / NS, end / NS, step / NS)
        assert len(theirs) == 2
        ours = Q.rate_range(buckets[np.isinf(buckets["le"])], "vllm:inter_token_latency_seconds_bucket",
                            eval_ts, 60 * NS, by=("engine",))
        for series in theirs:
            mine = ours[ours["labels"].map(lambda d: d.get("engine") == series["metric"]["engine"])]
            mine = mine.dropna(subset=["value"]).set_index("ts")["value"]
            got = {int(round(float(t) * 1000)) * 1_000_000: float(v) for t, v in series["values"]}
            assert sorted(got) == sorted(mine.index)
            assert max(abs(got[t] - mine[t]) for t in got) <= 1e-9


def test_max_over_time_is_the_largest_sample_in_the_closed_window():
    # against the definition, sample by sample: jittered scrapes, NaN samples, windows with no sample at all
    rng = np.random.default_rng(7)
    ts = np.cumsum(rng.integers(1, 4, 300)) * Q.NS
    v = rng.random(300)
    v[rng.random(300) < 0.1] = np.nan
    eval_ts = np.arange(-5, 1000, 3) * Q.NS
    for window in (0, 1, 2, 7):
        got = Q.series_max_over_time(ts, v, eval_ts, window * Q.NS)
        for t, g in zip(eval_ts, got):
            inside = v[(ts >= t - window * Q.NS) & (ts <= t)]
            want = np.nanmax(inside) if np.isfinite(inside).any() else np.nan
            assert (np.isnan(g) and np.isnan(want)) or g == want, (t, window, g, want)
