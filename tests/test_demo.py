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
def test_demo_runs_both_arms_collects_analyzes_and_reports(demo_run):  # noqa: F811
    out, proc = demo_run
    assert proc.returncode == 0, proc.stderr[-2000:]
    for n in range(1, 6):
        assert f"[{n}/5]" in proc.stderr
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
    assert "decode_starvation" in proc.stdout and "off/vllm" in proc.stdout
    html = (out / "report.html").read_text()
    assert "decode_starvation" in html and len(html) > 10_000


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
    out, proc = demo_run
    assert proc.returncode == 0
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
