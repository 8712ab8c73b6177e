"""Fleet push-down against a real Prometheus: the server-side signals equal `signals.compute` on the same data."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from expo_frames import simulate_kv_pressure, simulate_starvation, to_openmetrics
from stallscope.analyzers import quantiles as Q
from stallscope.analyzers import kv_pressure, signals
from stallscope.collectors.prometheus_fleet import Runner
from stallscope.core.config import load_thresholds
from stallscope.rules import fleet as F
from stallscope.rules import fleet_signals

NS = 1_000_000_000
# every column the detectors read, except prompt_computed (the push-down defines it by presence only),
# nothing_for_s and unserved_for_s (scrape-by-scrape scans with no PromQL form: cause evidence the drill-down
# computes) and the reference-window severity figures built on them (itl_ref_*: the drill-down's severity)
REFERENCE = ("itl_ref_count", "itl_ref_above", "itl_ref_above2", "itl_ref_share")
NOT_PUSHED = ("prompt_computed", "nothing_for_s", "unserved_for_s", *REFERENCE)
COMPARED = [c for c in signals.COLUMNS[2:] if c not in NOT_PUSHED]


def _assert_equal(local: pd.DataFrame, remote: pd.DataFrame, columns) -> dict:
    """Column by column: the same NaN pattern and values within 1e-9 (relative to the value); returns the
    number of finite points compared per column."""
    compared = {}
    assert len(local) == len(remote)
    for col in columns:
        a = local[col].to_numpy(dtype=float)
        b = remote[col].to_numpy(dtype=float)
        both = np.isfinite(a) & np.isfinite(b)
        assert (np.isnan(a) == np.isnan(b)).all(), f"{col}: NaN at {np.flatnonzero(np.isnan(a) != np.isnan(b))[:5]}"
        np.testing.assert_allclose(b[both], a[both], rtol=1e-9, atol=1e-9, err_msg=col)
        assert (np.isinf(a) == np.isinf(b)).all(), col
        compared[col] = int(both.sum())
    return compared


def _pushdown(prom_url, th, start, end, step, window, by):
    runner = Runner(prom_url, concurrency=2)
    frame, stats = fleet_signals.compute(runner, th, start / NS, end / NS, step / NS, window=window, by=by,
                                         matchers=[("model_name", "=", "m")])
    return frame, stats


@pytest.mark.slow
@pytest.mark.needs_tool("prometheus")
def test_pushdown_signals_equal_local_signals_on_a_starved_replica(tmp_path):
    from promserver import PrometheusServer, backfill_openmetrics

    t0 = (int(time.time()) // 3600 - 3) * 3600 * NS  # inside the default retention
    samples, _ = simulate_starvation(120, t0_ns=t0, streams=8, long_every_s=20.0, long_tokens=4096)
    storage = tmp_path / "tsdb"
    backfill_openmetrics(to_openmetrics(samples), storage, tmp_path)
    th = load_thresholds()
    window, step = "12s", 3 * NS  # steps fall on and between the 1 s scrapes: 3 s step, 12 s window
    start, end = t0 + 12 * NS + NS // 2, t0 + 118 * NS
    local = signals.compute(samples, thresholds=th, eval_ts=Q.grid(start, end, step), window_ns=12 * NS)
    with PrometheusServer(tmp_path, storage=storage) as prom:
        remote, stats = _pushdown(prom.url, th, start, end, step, window, ("model_name", "engine"))
    assert list(remote["target"].unique()) == ["model_name=m,engine=0"]
    assert (remote["ts"].to_numpy() == local["ts"].to_numpy()).all()
    compared = _assert_equal(local, remote, COMPARED)
    # the columns that drive the detectors were really compared, not all-NaN on both sides
    for col in ("itl_p99", "itl_p99_lo", "itl_stall_share", "prompt_rate", "gen_rate", "long_prefill_rate",
                "running", "waiting", "ttft_p99", "itl_above_slo_rate", "live_gen_rate", "live_prompt_rate",
                "live_mean_itl"):
        assert compared[col] >= 20, (col, compared[col])
    # the stall windows exist in both: the equality covers a detector decision, not only quiet windows
    assert (remote["itl_stall_share"] >= 0.01).sum() >= 5 and (remote["long_prefill_rate"] > 0).sum() >= 3
    assert stats["requests"] == len(F.signal_exprs(th)) + 1 and not stats["failures"]  # + long_prefill_rate
    assert set(signals.COLUMNS[2:]) - set(F.signal_exprs(th, iteration_cut="512.0")) - {
        "itl_p99_lo", "itl_p99_hi", "itl_p50_lo", "itl_p50_hi", "ttft_p99_lo", "ttft_p99_hi"} == {
        "nothing_for_s", "unserved_for_s", *REFERENCE}


@pytest.mark.slow
@pytest.mark.needs_tool("prometheus")
def test_pushdown_signals_equal_local_signals_under_kv_pressure(tmp_path):
    from promserver import PrometheusServer, backfill_openmetrics

    t0 = (int(time.time()) // 3600 - 3) * 3600 * NS
    samples = simulate_kv_pressure(150, t0_ns=t0, pressure=(40.0, 100.0))
    storage = tmp_path / "tsdb"
    backfill_openmetrics(to_openmetrics(samples), storage, tmp_path)
    th = load_thresholds()
    start, end, step = t0 + 15 * NS, t0 + 148 * NS, 2 * NS
    local = signals.compute(samples, thresholds=th, eval_ts=Q.grid(start, end, step), window_ns=15 * NS)
    with PrometheusServer(tmp_path, storage=storage) as prom:
        remote, _ = _pushdown(prom.url, th, start, end, step, "15s", ("model_name",))
    compared = _assert_equal(local, remote, COMPARED)
    for col in ("kv_usage", "waiting", "preempt_rate", "running", "gen_rate", "itl_p50"):
        assert compared[col] >= 30, (col, compared[col])
    assert (remote["kv_usage"] >= 0.8).sum() >= 20 and (remote["preempt_rate"] > 0).sum() >= 20


def test_stall_share_expression_sums_by_parts_per_bucket():
    """The per-`le` coefficients of itl_stall_share: lower edge of each bucket above the SLO, by parts."""
    expr = F.stall_share_expr(0.2, ["0.1", "0.2", "0.5", "+Inf"], "pod", "1m", (F.ITL,))
    # buckets above 0.2: (0.2, 0.5] weight 0.2 and (0.5, +Inf] weight 0.5 -> c(0.2) x -0.2, c(0.5) x (0.2 - 0.5),
    # c(+Inf) x 0.5; one selector reads the three buckets (the regex escapes `.` and `+`)
    assert ('label_replace(vector(-0.2), "le", "0.2", "", "") or label_replace(vector(-0.3), "le", "0.5", "", "") '
            'or label_replace(vector(0.5), "le", "+Inf", "", "")') in expr
    assert 'rate(vllm:inter_token_latency_seconds_bucket{le=~"0\\\\.2|0\\\\.5|\\\\+Inf"}[1m])' in expr
    assert expr.startswith("clamp((sum by (pod) (sum without (le) (") and expr.endswith(", 0, 1)")
    assert "time_per_output_token" not in expr


def test_signal_expressions_reuse_the_recording_rules_and_the_identity():
    th = load_thresholds()
    exprs = F.signal_exprs(th, by=("namespace", "pod"), window="2m", matchers=[("namespace", "=~", "prod-.*")])
    assert exprs["itl_p99"] == ('histogram_quantile(0.99, sum by (namespace, pod, le) ('
                                'rate(vllm:inter_token_latency_seconds_bucket{namespace=~"prod-.*"}[2m]) or '
                                'rate(vllm:time_per_output_token_seconds_bucket{namespace=~"prod-.*"}[2m])))')
    assert 'vllm:prompt_tokens_by_source_total{source="local_compute",namespace=~"prod-.*"}[2m]' in exprs["prompt_rate"]
    assert "long_prefill_rate" not in exprs
    assert F.iteration_cut(8) == "512.0" and F.iteration_cut(300) == "1024.0" and F.iteration_cut(1e9) == "+Inf"
    with pytest.raises(Exception, match="not a usable Prometheus label name"):
        F.label_list("pod, le")


def test_bucket_of_reads_the_bucket_a_quantile_lies_in():
    lo, hi = fleet_signals.bucket_of(np.array([0.05, 0.2, 0.25, 80.0, np.nan]), ["0.1", "0.2", "0.3", "80.0", "+Inf"])
    assert list(lo[:4]) == [0.0, 0.1, 0.2, 80.0] and list(hi[:4]) == [0.1, 0.2, 0.3, np.inf]
    assert np.isnan(lo[4]) and np.isnan(hi[4])


def _server_masks(prom_url, th, exprs, by, start, end, step, window):
    """{test: values per grid point (0 = none)} of fleet.episode_exprs evaluated by the server; the
    impaired test's tagged series as `impaired:<tag>`."""
    runner = Runner(prom_url)
    n = len(Q.grid(start, end, step))
    out = {}
    for kind, expr in F.episode_exprs(th, exprs, by, window=window).items():
        answer = runner.run([fleet_signals.Job("g", kind, expr, start / NS, end / NS, step / NS)])
        for labels, t, v in answer.series.get(kind, []):
            key = f"{kind}:{labels['stallscope_test']}" if "stallscope_test" in labels else kind
            got = out.setdefault(key, np.zeros(n))
            got[fleet_signals.grid_index(t, start / NS, step / NS)] = v
    return out


@pytest.mark.slow
@pytest.mark.needs_tool("prometheus")
def test_episode_tests_on_the_server_equal_the_detectors_window_states(tmp_path):
    """Per grid point: the server's impaired test (with its severity), prefill load and KV-pressure test
    equal analyzers/episodes.window_states, the prefill-load evidence and kv_pressure's mask on the
    local signals."""
    from promserver import PrometheusServer, backfill_openmetrics
    from stallscope.analyzers import episodes

    t0 = (int(time.time()) // 3600 - 3) * 3600 * NS
    starved, _ = simulate_starvation(120, t0_ns=t0, streams=8, long_every_s=20.0, long_tokens=4096)
    kv = simulate_kv_pressure(120, t0_ns=t0 + 200 * NS, pressure=(30.0, 90.0))
    kv["labels"] = [{**lab, "model_name": "k"} for lab in kv["labels"]]
    # a queue near a pool at 84 % that one scrape reads at 97 %: near full (1) but for the windows holding it (2)
    near = simulate_kv_pressure(120, t0_ns=t0 + 400 * NS, pressure=(30.0, 90.0), usage=0.84, preempt=False,
                                spike=(60.0, 0.97))
    near["labels"] = [{**lab, "model_name": "n"} for lab in near["labels"]]
    storage = tmp_path / "tsdb"
    backfill_openmetrics(to_openmetrics(pd.concat([starved, kv, near], ignore_index=True)), storage, tmp_path)
    th = load_thresholds()
    by = ("model_name",)
    cases = [(starved, "m", t0 + 12 * NS, t0 + 118 * NS, 2 * NS, "12s"),
             (kv, "k", t0 + 215 * NS, t0 + 318 * NS, 2 * NS, "15s"),
             (near, "n", t0 + 415 * NS, t0 + 518 * NS, 2 * NS, "15s")]
    with PrometheusServer(tmp_path, storage=storage) as prom:
        for samples, model, start, end, step, window in cases:
            w_ns = int(Q.parse_duration(window) * NS)
            local = signals.compute(samples, thresholds=th, eval_ts=Q.grid(start, end, step), window_ns=w_ns)
            cut = F.iteration_cut(float(local["running"].max()))
            live = fleet_signals.live_window(window, 1.0)
            exprs = F.signal_exprs(th, by=by, window=window, matchers=[("model_name", "=", model)],
                                   iteration_cut=cut, live_window=live)
            got = _server_masks(prom.url, th, exprs, by, start, end, step, window)
            st = episodes.window_states(local, float(th["itl_slo_s"]))
            want = np.select([(st["missed"] | st["frozen"]) & (st["ratio"] >= 2), st["missed"] | st["frozen"],
                              st["interference"]], [3, 2, 1], 0)
            codes = F.impaired_codes(*(got.get(f"impaired:{t}", 0) for t in ("share", "p99", "frozen")))
            assert (codes == want).all(), (model, np.flatnonzero(codes != want), codes, want)
            load = (local["prompt_rate"].to_numpy() >= th["prefill_tokens_rate_high"]) | (
                local["long_prefill_rate"].to_numpy() > 0)
            assert ((got.get("load", np.zeros(len(load))) != 0) == load).all(), model
            kv_codes = kv_pressure.window_codes(local, th)
            assert (got.get("kv_pressure", 0) == kv_codes).all(), (model, got.get("kv_pressure"), kv_codes)
            if model != "m":   # both sides of each code were there to decide
                assert set(np.unique(kv_codes)) == ({0, 2, 3} if model == "k" else {0, 1, 2}), (model, kv_codes)
            decided = codes if model == "m" else got["kv_pressure"]  # decisions were really taken
            assert (decided > 0).sum() >= 10 and (decided == 0).sum() >= 10, (model, np.unique(decided, return_counts=True))
