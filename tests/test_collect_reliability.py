"""Faults of `stallscope collect` with real processes: two collectors on one store, a store that
refuses every write, a target slower than the interval (kill -9 mid-write: tests/test_collect_cli.py)."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import threading
import time

from misbehaving_server import MetricsServer
from stallscope.collectors import loader, store
from test_collect_cli import CLI, TEXT, count_scrapes, start

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
