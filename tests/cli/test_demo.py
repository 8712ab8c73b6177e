"""`stallscope demo` end to end (short load), its bad inputs, and `stallscope dashboard` serving its store."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import requests

from stallscope.cli import main


@pytest.mark.slow
def test_demo_runs_both_arms_collects_analyzes_reports_and_serves(demo_run):  # noqa: F811
    out, stderr = demo_run.out, demo_run.stderr
    assert demo_run.url.startswith("http://127.0.0.1:"), stderr[-2000:]
    for n in range(1, 6):
        assert f"[{n}/5]" in stderr
    summary = json.loads((out / "run" / "summary.json").read_text())
    assert summary["arm_order"] == ["off", "on"] and summary["scenario"] == "starvation"
    for arm in ("off", "on"):
        assert (out / "run" / arm / "steps.jsonl").stat().st_size > 0
    con = sqlite3.connect(out / "stallscope.db")
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()
    assert tables, "the store has no tables"
    assert "off/vllm" in demo_run.stdout and "on/vllm" in demo_run.stdout
    assert int(demo_run.stdout.split("findings: ")[1].split()[0]) > 0
    html = (out / "report.html").read_text()
    assert "off/vllm" in html and len(html) > 10_000
    page = requests.get(demo_run.url, timeout=30)            # the dashboard it serves, on loopback
    assert page.status_code == 200 and "stallscope" in page.text


@pytest.mark.parametrize("argv, message", [
    (["--port", "70000"], "--port must be 0-65535, got 70000"),
    (["--duration", "0"], "--duration must be in (0, 600] seconds, got 0.0"),
    (["--long-every", "-1"], "--long-every must be positive, got -1.0"),
])
def test_demo_bad_input(argv, message, capsys, tmp_path):
    assert main(["demo", "--no-dashboard", "--out", str(tmp_path / "d"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stallscope: error:") and message in err and err.count("\n") == 1


def test_demo_out_must_be_a_directory(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    assert main(["demo", "--no-dashboard", "--out", str(tmp_path / "file")]) == 2
    assert f"--out {tmp_path / 'file'} exists and is not a directory" in capsys.readouterr().err


@pytest.mark.slow
def test_dashboard_command_serves_the_demo_store(demo_run):  # noqa: F811
    out = demo_run.out
    server = subprocess.Popen([sys.executable, "-m", "stallscope.cli", "dashboard", "--db", str(out / "stallscope.db"),
                               "--port", "0", "--no-live"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()                      # blocks until the URL is printed (or exit)
        assert line.startswith("stallscope dashboard: http://127.0.0.1:"), line + server.stderr.read()
        url = line.split()[-1]
        page = requests.get(url, timeout=30)
        assert page.status_code == 200 and "stallscope" in page.text
        deps = requests.get(url + "_dash-dependencies", timeout=30)
        assert deps.status_code == 200 and "overview-findings" in deps.text and "latency-itl" in deps.text
    finally:
        server.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 20
        while server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0


def test_run_directory_source_keeps_arms_apart(demo_run):  # noqa: F811
    from stallscope.dashboards.data import DataSource

    out = demo_run.out
    src = DataSource.from_run(out / "run")
    assert sorted(src.frames()["samples"]["target"].unique()) == ["off/vllm", "on/vllm"]
    assert src.step_targets() == ["off", "on"]
    found = src.findings()                 # which arm an 8 s run flags is the analyzers' business (issue 6)
    assert len(found) and set(found["target"]) <= {"off/vllm", "on/vllm"}
    assert set(found["kind"]) & {"decode_starvation", "itl_high", "scheduler_stall"}
    series = src.quantiles("vllm:inter_token_latency_seconds", grouping="engine")["series"].unique()
    assert sorted(series) == ["off/vllm model_name=tiny engine=0", "on/vllm model_name=tiny engine=0"]
    # pooled per model by default (docs/grafana.md, "One grouping"), as vLLM's own panels pool
    assert list(src.quantiles("vllm:inter_token_latency_seconds")["series"].unique()) == ["model_name=tiny"]


def test_demo_run_gets_one_budget_from_whatif_analyze_and_the_dashboard(demo_run, capsys):  # noqa: F811
    """On a real demo run, `whatif --from`, `analyze`'s decode_starvation findings, the What-if page and
    the Overview findings of the dashboard the demo serves all recommend the same budget."""
    from stallscope.dashboards import data
    from stallscope.dashboards.app import create_app, page_module
    from stallscope.dashboards.data import DataSource

    run = demo_run.out / "run"
    assert main(["whatif", "--from", str(run), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rec, budgets = out["recommendation"], [p["max_num_batched_tokens"] for p in out["predictions"]]
    assert {256, 512, 1024, 2048, 4096} <= set(budgets) and min(budgets) >= 16   # + the `on` arm's own budget
    main(["analyze", str(run), "--format", "json"])
    named = {f["evidence"]["max_num_batched_tokens"] for f in json.loads(capsys.readouterr().out)["findings"]
             if f["kind"] == "decode_starvation"}
    for src in (DataSource.from_run(run), DataSource.from_db(demo_run.out / "stallscope.db", live=False).with_run(run)):
        create_app(src)
        data.use(src)
        res = page_module("whatif").result(src)
        assert res["budgets"] == budgets
        assert res["recommendation"]["max_num_batched_tokens"] == rec["max_num_batched_tokens"]
        assert res["recommendation"]["meets_slo"] == rec["meets_slo"]
        found = src.findings()
        named |= {e["max_num_batched_tokens"] for e in found[found["kind"] == "decode_starvation"]["evidence"]}
    assert named <= {rec["max_num_batched_tokens"]}


@pytest.mark.slow
def test_prometheus_source_feeds_the_pages(tmp_path):
    """A real Prometheus scrapes a loopback exposition; the dashboard reads it back through query_range."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from promserver import PrometheusServer
    from stallscope.dashboards import data
    from stallscope.dashboards.app import create_app, page_module
    from stallscope.dashboards.data import DataSource

    hits = {"n": 0}

    class Exposition(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server API
            hits["n"] += 1
            n = 100 * hits["n"]
            body = ("# TYPE vllm:kv_cache_usage_perc gauge\n"
                    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
                    "# TYPE vllm:inter_token_latency_seconds histogram\n"
                    f'vllm:inter_token_latency_seconds_bucket{{engine="0",le="0.05",model_name="m"}} {n}\n'
                    f'vllm:inter_token_latency_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {n}\n'
                    f'vllm:inter_token_latency_seconds_sum{{engine="0",model_name="m"}} {n * 0.03}\n'
                    f'vllm:inter_token_latency_seconds_count{{engine="0",model_name="m"}} {n}\n').encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    target = ThreadingHTTPServer(("127.0.0.1", 0), Exposition)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    try:
        with PrometheusServer(tmp_path, scrape={"vllm": f"127.0.0.1:{target.server_port}"}, interval="1s") as prom:
            prom.wait_for_scrape("vllm")
            prom.wait_for(lambda: hits["n"] >= 8, timeout=40, what="8 scrapes")
            src = DataSource.from_prometheus(prom.url, selector='model_name="m"', since_s=120, live=False)
            kv = src.gauge("vllm:kv_cache_usage_perc")
            assert len(kv) >= 2 and set(kv["value"]) == {0.5}
            create_app(src)
            data.use(src)
            usage = page_module("kv_cache").update(0)[0]
            assert set(usage.data[0].y) == {0.5}
            itl = page_module("latency").update(0)[0]
            p99 = [t for t in itl.data if (t.name or "").startswith("P99")][0]
            assert {tuple(b) for b in p99.customdata} == {(0.0, 0.05)}          # all in the first bucket
    finally:
        target.shutdown()
        target.server_close()


def test_live_store_refreshes_while_it_is_written(demo_run, tmp_path):  # noqa: F811
    """Import half of a repro arm's scrapes, open the store live, import the rest: the pages see it."""
    from stallscope.collectors.importer import import_run
    from stallscope.dashboards.data import DataSource

    lines = (demo_run.out / "run" / "off" / "scrapes.jsonl").read_text().splitlines(keepends=True)
    half = len(lines) // 2
    (tmp_path / "a.jsonl").write_text("".join(lines[:half]))
    (tmp_path / "b.jsonl").write_text("".join(lines[half:]))
    db = tmp_path / "live.db"
    import_run(tmp_path / "a.jsonl", db)
    src = DataSource.from_db(db, live=True)
    first = src.health()["samples"].sum()
    assert src.version == 1 and first > 0
    import_run(tmp_path / "b.jsonl", db)
    last_ns = int(round(json.loads(lines[-1])["ts"] * 1e9))
    deadline = time.monotonic() + 60         # each probe change reloads in the background, until it settles
    while src.health()["last_scrape_ns"].max() != last_ns and time.monotonic() < deadline:
        time.sleep(0.1)
    assert src.version >= 2 and src.health()["samples"].sum() > first
    assert src.health()["last_scrape_ns"].max() == last_ns
