"""The Grafana dashboard against a real Prometheus: the reference server under a short load, a real dcgm-exporter
capture served on loopback, the rendered rule files loaded; every panel query returns data, and the numbers the
Dash page and the HTML report show equal Prometheus's within bucket resolution."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import requests

from conftest import FIXTURES, ROOT
from misbehaving_server import wait_until
from promserver import FakePrometheus, PrometheusServer, free_port
from stallscope.analyzers import request_views as RV
from stallscope.analyzers.sources import diagnose_sources
from stallscope.collectors import scrape_loop, store
from stallscope.core.config import load_thresholds
from stallscope.dashboards.data import DataSource
from stallscope.rules import grafana as G

LOAD_S = 20
DCGM = FIXTURES / "dcgm_samples" / "l40s_full_upcloud_driver595.txt"
RATE_INTERVAL = "10s"  # Grafana's $__rate_interval at a 1 s scrape and a short time range: >= 4 scrapes


def _up(url: str) -> bool:
    try:
        return requests.get(url + "/metrics", timeout=1).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(Prometheus, store path, load start s, end s): refserver + loadgen, scraped by Prometheus and the store."""
    tmp = tmp_path_factory.mktemp("grafana")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp / "refserver.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "stallscope.cli", "refserver", "--model", "tiny", "--port",
                               str(port), "--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048"],
                              stdout=log, stderr=subprocess.STDOUT)
    body = DCGM.read_bytes()
    stack = contextlib.ExitStack()
    dcgm = stack.enter_context(FakePrometheus(lambda _path: (200, body), content_type="text/plain; version=0.0.4"))
    rules = sorted((ROOT / "rules").glob("*.rules.yaml"))
    try:
        wait_until(lambda: _up(url), timeout=90, poll=0.2, what="refserver /metrics")
        with PrometheusServer(tmp, scrape={"vllm": f"127.0.0.1:{port}", "dcgm": dcgm.url.removeprefix("http://")},
                              interval="1s", rule_files=rules) as prom:
            stop = threading.Event()
            db = tmp / "s.db"
            with store.Store(db) as st:
                loop = threading.Thread(target=scrape_loop.run, args=(
                    [scrape_loop.Target("vllm", url + "/metrics", timeout_s=2)], st, 1.0), kwargs={"stop": stop})
                loop.start()
                prom.wait_for_scrape("vllm")
                prom.wait_for_scrape("dcgm")
                wait_until(lambda: _last_scrape_ns(db) > 0, what="a store scrape before the load")
                t_start = time.time()
                subprocess.run([sys.executable, "-m", "stallscope.cli", "loadgen", "--url", url, "--sessions", "4",
                                "--short-prompt-tokens", "24", "--shared-prefix-tokens", "32", "--max-tokens", "24",
                                "--long-prompt-tokens", "800", "--long-every", "4", "--long-max-tokens", "2",
                                "--duration", str(LOAD_S), "--no-progress", "--seed", "3"],
                               check=True, timeout=LOAD_S + 120, capture_output=True)
                t_end = time.time()
                prom.wait_for(lambda: float(prom.query("timestamp(vllm:generation_tokens_total)")[0]["value"][1])
                              > t_end + 2.2, what="a Prometheus scrape after the load")
                wait_until(lambda: _last_scrape_ns(db) > (t_end + 2.2) * 1e9, what="a store scrape after the load")
                stop.set()
                loop.join(10)
            yield prom, db, t_start, t_end
    finally:
        stack.close()
        server.terminate()
        server.wait(20)
        log.close()


def _last_scrape_ns(db) -> int:
    if not db.exists():
        return 0
    con = store.connect_ro(db)
    try:
        return con.execute("SELECT coalesce(max(ts), 0) FROM scrapes").fetchone()[0]
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.needs_tool("prometheus", "promtool")
def test_every_dashboard_query_returns_data(run):
    prom, _, t_start, t_end = run
    doc = json.loads(G.to_json(G.build(load_thresholds())))
    exprs = G.expressions(doc)
    empty = []
    for title, expr in exprs:
        result = prom.query_range(G.fixed(expr, {"$__rate_interval": RATE_INTERVAL}), t_start, t_end + 2, 1)
        finite = [v for s in result for _, v in s["values"] if math.isfinite(float(v))]
        if title.startswith("annotation"):
            continue  # ALERTS exist only while an alert is pending or firing; the query itself was accepted
        if not finite:
            empty.append(f"{title}: {expr[:120]}")
    assert not empty, "panels without data:\n" + "\n".join(empty)
    assert len(exprs) > 70


def _prom_at(prom, expr: str, at_s: float, window_ms: int) -> dict[str, float]:
    result = prom.query(G.fixed(expr, {"$__rate_interval": f"{window_ms}ms"}), at_s)
    return {s["metric"].get("model_name", "") + "|" + s["metric"].get("finished_reason", ""): float(s["value"][1])
            for s in result}


@pytest.mark.slow
@pytest.mark.needs_tool("prometheus", "promtool")
def test_dash_and_report_numbers_equal_prometheus_within_bucket_resolution(run):
    prom, db, _, _ = run
    dash = DataSource.from_db(db, live=False).request_views()["summary"]
    report = diagnose_sources([("db", str(db))]).request_views["summary"]
    cols = ["view", "group", "series", "value"]
    assert dash[cols].equals(report[cols])  # the two faces: one computation
    samples = store.read(store.connect_ro(db), None, None, None)["vllm"]["samples"]
    t0, t1 = int(samples["ts"].min()), int(samples["ts"].max())
    window_ms = (t1 - t0) // 1_000_000
    checked = 0
    for v in RV.VIEWS:
        if v.kind == "gauge":
            continue
        mine = dash[dash["view"] == v.key]
        for (name, expr) in RV.promql(v):
            got = _prom_at(prom, expr, t1 / 1e9, window_ms)
            for row in mine[mine["series"] == (name if v.kind != "by_label" else mine["series"])].itertuples():
                key = row.group.removeprefix("model_name=") + "|" + (row.series if v.kind == "by_label" else "")
                if key not in got or not math.isfinite(row.value):
                    continue
                p = got[key]
                if name.startswith("P"):  # a quantile: inside the bucket the analyzer reports, and (nearly) equal
                    assert row.bucket_lo <= p <= row.bucket_hi, (v.key, name, p, row)
                    assert p == pytest.approx(row.value, rel=0.02), (v.key, name)
                else:  # means and ratios are extrapolation-free; rates differ by the scrape phase (< 1 s of W)
                    rel = 0.02 if name in ("mean", "ratio") else 0.1
                    assert p == pytest.approx(row.value, rel=rel, abs=1e-9), (v.key, name, p, row.value)
                checked += 1
    assert checked >= 45, checked
    e2e = dash[(dash["view"] == "e2e") & (dash["series"] == "P99")]
    assert len(e2e) == 1 and np.isfinite(e2e["value"]).all()
