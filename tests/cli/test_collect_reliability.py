"""Faults of `stallscope collect` with real processes: two collectors on one store, a store that
refuses every write, a target slower than the interval (kill -9 mid-write: tests/test_collect_cli.py)."""

from __future__ import annotations

import json
import logging
import math
import re
import sqlite3
import subprocess
import threading
import time

import numpy as np

from misbehaving_server import MetricsServer
from stallscope.cli import main
from stallscope.collectors import loader, store
from test_collect_cli import CLI, TEXT, count_scrapes, start
import pytest

pytestmark = pytest.mark.slow   # the fault suite runs real collector processes (~9 s)

PER_SCRAPE = 299  # samples of TEXT, with up and scrape_duration_seconds


def stored(err: str) -> tuple[int, int]:
    m = re.search(r"stored (\d+) scrapes \((\d+) failed\)", err)
    assert m, err
    return int(m[1]), int(m[2])


def test_two_collectors_opened_before_either_wrote_both_keep_every_scrape(tmp_path):
    db = tmp_path / "two.db"
    store.Store(db).close()  # the file exists, with no series yet
    second = threading.Event()

    def script(n):
        if n >= 1:
            second.set()
        second.wait(30)  # hold the first answer until the other collector asks: both opened the store
        return ("ok", TEXT)

    with MetricsServer(script) as srv:
        procs = [start(db, srv.url, "--duration", "3") for _ in range(2)]
        outs = [p.communicate(timeout=60)[1] for p in procs]
        requests = srv.requests
    for p, err in zip(procs, outs):
        assert p.returncode == 0, err
        assert "UNIQUE constraint" not in err, err
    counts = [stored(err) for err in outs]
    assert all(n >= 5 and failed == 0 for n, failed in counts), counts
    assert count_scrapes(db) == sum(n for n, _ in counts) == requests
    s = loader.load(db)["vllm"]["samples"]
    assert len(s) == requests * PER_SCRAPE  # every scrape complete, each series once
    con = store.connect_ro(db)
    assert con.execute("SELECT count(*) FROM series").fetchone()[0] == PER_SCRAPE
    con.close()


def test_a_store_that_refuses_every_write_exits_2_with_one_named_line_per_failure(tmp_path):
    db = tmp_path / "full.db"
    store.Store(db).close()
    con = sqlite3.connect(db)
    con.execute("CREATE TRIGGER full BEFORE INSERT ON scrapes BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
    con.commit()
    con.close()
    with MetricsServer(lambda n: ("ok", TEXT)) as srv:
        r = subprocess.run([*CLI, "--target", f"vllm={srv.url}", "--interval", "0.2s", "--db", str(db),
                            "--duration", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith(f"stallscope: error: stored no scrapes in {db} (")
    assert "failed; last: cannot write scrape of vllm to" in lines[-1] and "database or disk is full" in lines[-1]
    failures = [ln for ln in lines[1:-1]]
    assert failures and all(ln.startswith(f"cannot write scrape of vllm to {db}: ") for ln in failures), lines
    assert "Traceback" not in r.stderr


def scrapes_jsonl(path, overrides: dict[int, dict[str, str]], n=20):
    """A scrapes.jsonl of `n` scrapes of TEXT; scrape i sets every series of each family in overrides[i]."""
    lines = []
    for i in range(n):
        text = TEXT
        for family, value in overrides.get(i, {}).items():
            text = "\n".join(ln.rsplit(" ", 1)[0] + " " + value if ln.startswith(family + "{") else ln
                             for ln in text.splitlines()) + "\n"
        lines.append(json.dumps({"ts": 1_700_000_000 + i, "target": "vllm", "text": text}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_non_finite_gauges_are_missing_for_the_analyzers_with_one_warning_per_series(tmp_path, caplog, capsys):
    src = scrapes_jsonl(tmp_path / "s.jsonl", {5: {"vllm:num_requests_running": "+Inf"},
                                              6: {"vllm:num_requests_running": "NaN", "vllm:kv_cache_usage_perc": "-Inf"},
                                              7: {"vllm:kv_cache_usage_perc": "+Inf"}})
    db = tmp_path / "s.db"
    assert main(["collect", "--import", str(src), "--db", str(db)]) == 0
    con = store.connect_ro(db)
    raw = store.read(con)["vllm"]["samples"]  # the store keeps what was scraped, as Prometheus does
    con.close()
    running = raw[raw.metric == "vllm:num_requests_running"].value.tolist()
    assert running[5] == math.inf and math.isnan(running[6]) and len(running) == 20
    for source in (src, db):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert main(["analyze", str(source), "--format", "json"]) in (0, 1)
        report = json.loads(capsys.readouterr().out)
        assert report["findings"] is not None
        warned = [r.getMessage() for r in caplog.records if "non-finite" in r.getMessage()]
        assert warned == [
            'target vllm: vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} '
            "has 2 non-finite values (+Inf, NaN); treated as missing",
            'target vllm: vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} '
            "has 2 non-finite values (+Inf, -Inf); treated as missing"]
    frames = loader.load(db)
    s = frames["vllm"]["samples"]
    assert np.isfinite(s.value).all() and len(s[s.metric == "vllm:num_requests_running"]) == 18


def test_a_target_slower_than_the_interval_warns_once_and_the_run_ends_by_the_duration(tmp_path):
    """Each scrape takes 2 s at a 0.5 s interval for --duration 3: the second scrape would end at
    4.5 s, so it is not started; the run ends at ~2 s, not past the duration (before: 4.6 s, 2 scrapes)."""
    db = tmp_path / "slow.db"
    first: list[float] = []

    def script(n):
        first.append(time.monotonic())
        return ("slow", 2.0, TEXT)

    with MetricsServer(script) as srv:
        r = subprocess.run([*CLI, "--target", f"vllm={srv.url}", "--interval", "0.5s", "--timeout", "5s",
                            "--db", str(db), "--duration", "3"], capture_output=True, text=True, timeout=60)
        ended = time.monotonic()
        requests = srv.requests
    assert r.returncode == 0, r.stderr
    assert requests == 1 and stored(r.stderr) == (1, 0)
    assert ended - first[0] < 3.0, ended - first[0]
    slow = [ln for ln in r.stderr.splitlines() if "longer than the 0.5 s interval" in ln]
    assert len(slow) == 1 and slow[0].startswith("target vllm: a scrape took 2.0 s"), r.stderr
