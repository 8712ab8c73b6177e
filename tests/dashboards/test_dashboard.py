"""Dashboard callbacks as plain functions over small schema frames, the data layer, the token gate and the CLI."""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
from pathlib import Path

import dash
import numpy as np
import pandas as pd
import pytest

import dashboard_frames as F
from conftest import ROOT
from stallscope.cli import main
from stallscope.dashboards import data, views
from stallscope.dashboards.app import PAGES_FOLDER, create_app, page_module
from stallscope.dashboards.data import DataSource, downsample

PAGES = sorted(p.stem for p in PAGES_FOLDER.glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def app():
    return create_app(DataSource.from_frames(F.all_frames(), name="synthetic"))


@pytest.fixture
def source(app):
    return data.use(DataSource.from_frames(F.all_frames(), name="synthetic"))


def _traces(fig, name_part=""):
    return [t for t in fig.data if (t.name or "").startswith(name_part)]


def test_every_page_has_a_callback_test():
    tested = {name[len("test_"):-len("_callback")] for name in globals() if name.endswith("_callback")}
    assert PAGES == ["fleet", "gpu", "kv_cache", "latency", "overview", "requests", "trace", "whatif"]
    assert set(PAGES) <= tested, f"pages without a callback test: {set(PAGES) - tested}"


def test_the_navigation_has_one_place_per_page(app):
    orders = [page["order"] for page in dash.page_registry.values()]
    assert len(orders) == len(PAGES) and len(set(orders)) == len(orders), orders
    names = [page["name"] for page in sorted(dash.page_registry.values(), key=lambda p: p["order"])]
    assert names == ["Overview", "Latency", "KV cache", "Requests", "GPU", "Trace", "What-if", "Fleet"]


def test_fleet_callback(app):
    """The heat map of the source's fleet triage; a click focuses that replica and opens its Latency page."""
    from stallscope.analyzers import fleet as A

    ts = np.arange(10, dtype=np.int64) * 60 * 10**9
    masks = {"pod=a": {"kv_pressure": np.r_[np.zeros(4), np.full(4, 3.0), np.zeros(2)]}, "pod=b": {}}
    ranked = A.triage(masks, {"pod=a": {"pod": "a"}, "pod=b": {"pod": "b"}}, ts, 60 * 10**9, 60 * 10**9)
    report = A.FleetReport(ranked, int(ts[0]), int(ts[-1]), 60 * 10**9, 60 * 10**9, ("pod",), "raw", masks=masks)
    src = data.use(DataSource.from_frames(F.all_frames(), name="synthetic"))
    fleet = page_module("fleet")
    fig, summary = fleet.update(0)
    assert fig == {} and "needs a Prometheus source" in summary
    src.fleet, src._focus = (lambda: report), {}
    fig, summary = fleet.update(0)
    assert summary.startswith("2 replicas, 1 with episodes; query path: raw")
    assert list(fig.data[0].y) == ["pod=a", "pod=b"] and fig.data[0].z[0][5] == 3  # kv_pressure critical
    assert fleet.open_replica({"points": [{"y": "pod=a", "x": 0}]}) == "/latency"
    assert src._focus == {"pod": "a"} and src.name.endswith("[pod=a]")
    assert fleet.open_replica({"points": [{"y": "pod=zzz"}]}) is dash.no_update


def test_overview_callback(source):
    cards, timeline, health = page_module("overview").update(0)
    assert len(cards) == 3 and cards[0].children == "2 findings: 1 critical, 1 warning"
    cards = cards[1:]
    first = cards[0].children
    assert first[0].children[0].children == "critical" and first[0].children[1].children == "decode_starvation"
    assert "--enable-chunked-prefill --max-num-batched-tokens 512" in str(cards[0])
    assert "itl_p99_s = 1" in first[3].children[1].children
    assert sorted(t.name for t in timeline.data) == ["critical", "warning"]
    assert timeline.data[0].hovertext[0] == "vllm"
    assert "&lt;script&gt;" in timeline.data[1].hovertext[0]          # escaped for plotly
    rows = health.children[1:]
    assert [c.children for c in rows[0].children[:2]] == ["vllm", "up"]
    assert rows[0].children[4].children == "4,440"


def test_requests_callback(source):
    from stallscope.analyzers import request_views as RV

    *figs, options = page_module("requests").update("model", 0)
    assert len(figs) == len(RV.VIEWS) + sum(v.heatmap for v in RV.VIEWS)
    assert options == [{"label": "small", "value": "small"}]        # the model picker
    picked = page_module("requests").update("model", 0, ["other"])[[v.key for v in RV.VIEWS].index("itl")]
    assert not [t for t in picked.data if (t.name or "").startswith("P99")]  # another model: nothing of small
    itl = figs[[v.key for v in RV.VIEWS].index("itl")]
    lines = {t.name: t for t in itl.data if t.name}
    assert set(lines) == {f"{s} model_name=small" for s in ("P50", "P90", "P95", "P99", "mean")}
    assert any(shape.y0 == 0.2 for shape in itl.layout.shapes)  # the ITL SLO line of thresholds.yaml
    want = RV.compute(source.frames()["samples"])["itl"]        # the page shows the analyzer's numbers
    p99 = want[want["series"] == "P99"]["value"].to_numpy()
    np.testing.assert_allclose(lines["P99 model_name=small"].y, p99)
    by_engine = page_module("requests").update("engine", 0)[[v.key for v in RV.VIEWS].index("itl")]
    assert "P99 engine=0,model_name=small,target=vllm" in {t.name for t in by_engine.data}


def test_latency_pools_per_model_and_drills_down(source):
    pooled, _ = page_module("latency").update(0, "model")
    assert {t.name for t in pooled.data if (t.name or "").startswith("P99")} == {"P99 model_name=small"}
    drilled, _ = page_module("latency").update(0, "engine")
    assert {t.name for t in drilled.data if (t.name or "").startswith("P99")} == {"P99 vllm model_name=small engine=0"}


def test_latency_callback(source):
    itl, ttft = page_module("latency").update(0)
    p99 = _traces(itl, "P99")[0]
    p50 = _traces(itl, "P50")[0]
    bounds = np.array(p99.customdata)
    assert set(map(tuple, bounds)) <= {(0.025, 0.05), (0.75, 1.0)}
    assert np.nanmax(np.array(p99.y, dtype=float)) <= 1.0 and np.nanmax(np.array(p99.y, dtype=float)) > 0.75
    assert set(map(tuple, np.array(p50.customdata))) == {(0.025, 0.05)}
    stalls = _traces(itl, "stall")[0]
    stall_s = (np.array(stalls.x) * 1e6 - F.T0_NS) // 10**9 % 120
    assert len(stall_s) > 0 and (stall_s < 80).all()                 # inside the 60 s window after a spike
    spikes = _traces(itl, "prefill spike")[0]
    assert list(spikes.x).count(None) == 5                           # one span per 120 s over 600 s
    assert spikes.x[0] == F.T0_NS / 1e6 and spikes.x[2] == (F.T0_NS + 15 * 10**9) / 1e6   # rates at 5..15 s
    assert any(s.y0 == 0.2 for s in itl.layout.shapes if s.type == "line")
    assert _traces(ttft, "P99") and any(s.y0 == 2.0 for s in ttft.layout.shapes if s.type == "line")


def test_kv_cache_callback(source):
    usage, running, waiting, preempt = page_module("kv_cache").update(0)
    assert 0.9 <= max(usage.data[0].y) <= 0.94 and min(usage.data[0].y) >= 0.33
    assert any(s.y0 == 0.8 for s in usage.layout.shapes)
    assert set(running.data[0].y) == {15.0, 16.0} and max(waiting.data[0].y) == 3.0
    assert max(preempt.data[0].y) == pytest.approx(0.2)             # one preemption in a 5 s interval
    assert sum(np.array(preempt.data[0].y) > 0) == 4                 # spikes at 120..480 s (0 s has no previous sample)


def test_gpu_callback(source):
    tensor_dram, sm, power, roof = page_module("gpu").update(0)
    assert sorted(t.name for t in tensor_dram.data) == ["node-1 gpu0 dram", "node-1 gpu0 tensor",
                                                         "node-1 gpu1 dram", "node-1 gpu1 tensor"]
    assert len(sm.data) == 2 and max(power.data[0].y) == 650.0 and min(power.data[0].y) == 380.0
    assert roof.layout.title.text.startswith("Roofline")


def test_trace_callback(source):
    trace = page_module("trace")
    assert trace.arms(0, None) == ([], None)                          # one trace: no arm picker
    fig, summary = trace.update(None, None, 0)
    assert summary == "400 steps shown of this range, 8 stalls, 8 with prefill"
    prefill = _traces(fig, "prefill")[0]
    assert len(prefill.y) == 8 and set(prefill.y) == {600.0}
    assert len(_traces(fig, "stall")[0].x) == 8
    # Zoom: the first 1.5 s holds steps 0..49 (49 decode steps of 30 ms, then a 600 ms prefill)
    lo = pd.Timestamp(F.T0_NS, unit="ns", tz="UTC")
    relayout = {"xaxis.range[0]": str(lo.tz_localize(None)), "xaxis.range[1]": str((lo + pd.Timedelta("1.4s")).tz_localize(None))}
    assert trace.zoom_range(relayout) == (F.T0_NS, F.T0_NS + 1_400_000_000)
    fig, summary = trace.update(relayout, None, 0)
    assert summary.startswith("47 steps") and "0 stalls" in summary
    assert trace.zoom_range({"xaxis.autorange": True}) == (None, None)


def test_trace_callback_picks_an_arm():
    two = pd.concat([F.steps(100).assign(target="off"), F.steps(60).assign(target="on")], ignore_index=True)
    data.use(DataSource.from_frames({"steps": two}))
    trace = page_module("trace")
    assert trace.arms(0, None) == ([{"label": "off", "value": "off"}, {"label": "on", "value": "on"}], "off")
    assert trace.arms(0, "on")[1] == "on"
    fig, summary = trace.update(None, "on", 0)
    assert summary == "60 steps shown of this range, 1 stalls, 1 with prefill"
    assert fig.layout.title.text == "Engine steps of arm on"


@pytest.mark.parametrize("name, steps, prefill, stalls", [("starvation.sqlite", 81, 1, 1), ("chunked.sqlite", 112, 32, 0)])
def test_trace_page_from_an_nsys_export(app, name, steps, prefill, stalls):
    data.use(DataSource.from_frames({}).with_trace(ROOT / "sample_traces" / name))
    fig, summary = page_module("trace").update(None, None, 0)
    assert summary == f"{steps} steps shown of this range, {stalls} stalls, {prefill} with prefill"
    assert sum(len(t.y) for t in fig.data if t.name in ("prefill", "decode")) == steps


def test_whatif_callback(source):
    whatif = page_module("whatif")
    body = whatif.update(0)
    assert body.id == "whatif-ready" and "400 recorded steps" in body.children


def test_downsample_keeps_spikes_and_bounds_points():
    ts = np.arange(100_000, dtype=np.int64) * 1_000_000_000
    frame = pd.DataFrame({"ts": ts, "series": "a", "value": np.zeros(100_000)})
    frame.loc[54_321, "value"] = 7.0
    out = downsample(frame, 1000)
    assert len(out) == 1000 and out["value"].max() == 7.0 and out["ts"].is_monotonic_increasing
    assert downsample(frame.head(10), 1000) is not None and len(downsample(frame.head(10), 1000)) == 10


def test_24h_source_is_downsampled_per_page():
    src = DataSource.from_frames(F.all_frames(duration_s=86_400, interval_s=5), max_points=500)
    assert src.gauge("vllm:kv_cache_usage_perc").groupby("series").size().max() <= 500
    q = src.quantiles("vllm:inter_token_latency_seconds")
    assert q.groupby(["series", "q"]).size().max() <= 500
    assert q[q["q"] == 0.99]["upper"].max() == 1.0                 # the stall buckets survive
    assert src.gpu_metric("power_w").groupby("series").size().max() <= 500


def test_live_source_reloads_when_the_probe_changes():
    import time
    stamp = {"v": 20}
    frames = F.all_frames(duration_s=60)

    def load():
        s = frames["samples"]
        return {"samples": s[s["ts"] <= F.T0_NS + stamp["v"] * 10**9]}
    src = DataSource(load, name="live", probe=lambda: stamp["v"], live=True)
    assert src.health()["samples"].iloc[0] == 5 * 37 and src.version == 1    # 5 scrapes of 37 rows
    stamp["v"] = 40                                  # the store grew: reloaded in the background
    deadline = time.monotonic() + 30
    while src.version < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert src.version == 2 and src.health()["samples"].iloc[0] == 9 * 37
    assert DataSource(load, name="static", probe=lambda: stamp["v"], live=False).version == 1


def test_series_names_and_figures_escape_markup():
    from stallscope.render import figures as figs
    frame = pd.DataFrame({"ts": [F.T0_NS], "series": ['<img src=x onerror="alert(1)">'], "value": [1.0]})
    fig = figs.lines(frame, "t <b>", "y")
    assert fig.data[0].name == "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" and fig.layout.title.text == "t &lt;b&gt;"
    assert views.series_name("vllm", {"model_name": "m", "le": "1", "engine": "0"}) == "vllm model_name=m engine=0"


def test_step_trace_jsonl_is_read(tmp_path):
    path = tmp_path / "steps.jsonl"
    rows = [{"step": i, "start_ns": F.T0_NS + i * 10**7, "end_ns": F.T0_NS + (i + 1) * 10**7, "num_prefill_tokens": 0,
             "num_decode_tokens": 4, "num_prefill_reqs": 0, "num_decode_reqs": 4, "num_running": 4, "num_waiting": 0,
             "num_preempted": 0, "kv_blocks_used": 9, "kv_blocks_total": 64, "num_scheduled_tokens": {"a": 1}}
            for i in range(3)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    steps = views.load_steps(path)
    assert steps["num_decode_tokens"].tolist() == [4.0, 4.0, 4.0] and steps["start_ns"].dtype == np.int64
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1}\n')
    with pytest.raises(Exception, match="bad.jsonl:1: field `start_ns` missing"):
        views.load_steps(bad)


# --- the token gate -------------------------------------------------------------------------------
def test_requests_without_the_token_get_401():
    app = create_app(DataSource.from_frames(F.all_frames(duration_s=60)), auth_token="s3cret-token")
    assert app.server.debug is False and not app.config.get("dev_tools_ui")
    client = app.server.test_client()
    assert client.get("/").status_code == 401
    assert client.get("/_dash-layout").status_code == 401
    assert client.post("/_dash-update-component", json={}).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer wrong-token"}).status_code == 401
    assert client.get("/", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    first = client.get("/latency?token=s3cret-token")
    assert first.status_code == 302 and first.headers["Location"] == "/latency"
    assert "HttpOnly" in first.headers["Set-Cookie"]
    page = client.get("/latency")                                    # the cookie now carries it
    assert page.status_code == 200 and b"s3cret-token" not in page.data
    assert client.get("/_dash-layout").status_code == 200


def test_real_server_answers_401_without_token():
    import requests
    from dashboard_browser import served

    app = create_app(DataSource.from_frames(F.all_frames(duration_s=60)), auth_token="s3cret-token")
    with served(app) as base:
        assert requests.get(base + "/", timeout=10).status_code == 401
        assert requests.get(base + "/", headers={"Authorization": "Bearer s3cret-token"}, timeout=10).status_code == 200


def test_token_is_required_off_loopback(monkeypatch):
    from stallscope.dashboards.auth import is_loopback, resolve_token
    from stallscope.core.errors import InputError

    monkeypatch.delenv("STALLSCOPE_AUTH_TOKEN", raising=False)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")
    assert resolve_token("127.0.0.1", None) is None
    with pytest.raises(InputError, match="--host 0.0.0.0 is not a loopback address"):
        resolve_token("0.0.0.0", None)
    monkeypatch.setenv("STALLSCOPE_AUTH_TOKEN", "from-the-env")
    assert resolve_token("0.0.0.0", None) == "from-the-env"


# --- the command's bad inputs: one line, exit 2 ------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--db", "/no/such.db"], "store not found: /no/such.db"),
    (["--run", "/no/such/run"], "run directory not found: /no/such/run"),
    (["--prometheus", "ftp://x"], "--prometheus must be an http(s) URL, got 'ftp://x'"),
    (["--run", ".", "--host", "10.1.2.3"], "--host 10.1.2.3 is not a loopback address"),
    (["--run", ".", "--port", "70000"], "--port must be 0-65535, got 70000"),
    (["--run", ".", "--trace", "/no/trace.jsonl"], "trace file not found: /no/trace.jsonl"),
    (["--run", ".", "--server-log", "/no/vllm.log"], "--server-log /no/vllm.log: cannot read it"),
    (["--run", ".", "--max-num-batched-tokens", "0"], "--max-num-batched-tokens must be >= 1, got 0"),
])
def test_dashboard_command_bad_input(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("STALLSCOPE_AUTH_TOKEN", raising=False)
    assert main(["dashboard", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stallscope: error:") and message in err and err.count("\n") == 1


def test_dashboard_command_rejects_a_trace_that_is_not_an_export(tmp_path, capsys):
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not a database")
    run = tmp_path / "run"
    run.mkdir()
    text = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 1.0\n'
    (run / "scrapes.jsonl").write_text(json.dumps({"ts": 1764400000, "target": "vllm", "text": text}) + "\n")
    assert main(["dashboard", "--run", str(run), "--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stallscope: error:") and err.count("\n") == 1 and "bad.sqlite" in err


def test_dashboard_command_needs_a_source():
    out = subprocess.run([sys.executable, "-m", "stallscope.cli", "dashboard"], capture_output=True, text=True)
    assert out.returncode == 2 and "one of the arguments --db --run --prometheus is required" in out.stderr


def test_a_server_log_configures_targets_a_run_directory_does_not(tmp_path):
    from conftest import FIXTURES
    from expo_frames import simulate_starvation, write_arm
    from stallscope.analyzers.chunking import from_server_log
    from stallscope.collectors.vllm_log import read_server_config

    texts = []
    _, steps = simulate_starvation(40, chunk=None, texts=texts)
    write_arm(tmp_path / "off", texts, steps)
    log = FIXTURES / "vllm_logs" / "v0_33_0_nochunk.log"
    source = DataSource.from_run(tmp_path / "off").with_chunking(from_server_log(read_server_config(log)))
    found = source.snapshot().memo[("findings",)]
    starved = found[found["kind"] == "decode_starvation"]
    assert len(starved) and all(f"chunked prefill off (server log: {log}:6)" in e for e in starved["explanation"])
    plain = DataSource.from_run(tmp_path / "off").snapshot().memo[("findings",)]
    assert not any("server log" in e for e in plain["explanation"])


def test_a_server_logs_iteration_lines_are_the_stores_steps(tmp_path):
    """`dashboard --db store --server-log vllm.log`: the log's per-step lines are the Trace page's steps, and the
    findings' offending steps; a run directory keeps its own step trace."""
    import argparse
    import time as _time

    from expo_frames import iteration_log, simulate_starvation, write_arm
    from stallscope.cli.dashboard import build_source
    from stallscope.collectors.importer import import_run

    texts = []
    _, steps = simulate_starvation(40, chunk=None, texts=texts)
    write_arm(tmp_path / "off", texts)
    import_run(tmp_path / "off", tmp_path / "store.db")
    log = tmp_path / "vllm.log"
    log.write_text(iteration_log(steps))
    year = _time.gmtime(int(steps["end_ns"].iloc[-1]) // 10**9).tm_year
    os.utime(log, (0, calendar.timegm((year, 12, 31, 0, 0, 0))))   # the text format's year: the file's
    args = argparse.Namespace(db=str(tmp_path / "store.db"), run=None, prometheus=None, trace=None, no_live=True,
                              server_log=str(log), chunked_prefill=False, max_num_batched_tokens=None)
    snap = build_source(args).snapshot()
    assert len(snap.frames["steps"]) == len(steps)
    found = snap.memo[("findings",)]
    starved = found[found["kind"] == "decode_starvation"]
    assert len(starved) and starved["evidence"].iloc[0]["offending_steps"][0]["num_prefill_tokens"] == 2048
