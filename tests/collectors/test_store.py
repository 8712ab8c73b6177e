"""The embedded store: round trips, time ranges, reopen, concurrent reads, and bad files."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from conftest import FIXTURES
from stallscope.collectors import dcgm, loader, store, vllm
from stallscope.core.errors import CollectorError

DCGM = FIXTURES / "dcgm_samples"  # real captures, each with its source on its first line

TEXT = (FIXTURES / "vllm_metrics" / "v0_10_2_multiprocess_2engines.txt").read_text()
S = 1_000_000_000


def fill(db, n=5):
    gtext = (DCGM / "a100_mig_under_load_nvidia_docs_2.x_format.txt").read_text()
    with store.Store(db) as st:
        for i in range(n):
            st.append("vllm", (100 + i) * S, 0.01 * (i + 1), samples=vllm.parse(TEXT, (100 + i) * S))
            st.append("dcgm", (100 + i) * S, 0.02, gpu=dcgm.parse(gtext, (100 + i) * S))
        st.append("vllm", 200 * S, 0.5, error="HTTP 503 from http://x/metrics")


def test_round_trip_is_exact(tmp_path):
    db = tmp_path / "s.db"
    fill(db)
    frames = loader.load(db)
    direct = vllm.parse(TEXT, 100 * S)
    got = frames["vllm"]["samples"]
    first = got[(got.ts == 100 * S) & ~got.metric.isin(["up", "scrape_duration_seconds"])].reset_index(drop=True)
    assert first.metric.tolist() == direct.metric.tolist()
    assert first.labels.tolist() == direct.labels.tolist()
    assert first.value.tolist() == direct.value.tolist()
    assert first["le"].fillna(-1).tolist() == direct["le"].fillna(-1).tolist()
    assert math.isinf(first["le"].max()) and set(first.target) == {"vllm"}
    up = got[got.metric == "up"].sort_values("ts")
    assert up.value.tolist() == [1, 1, 1, 1, 1, 0] and up.ts.iloc[-1] == 200 * S
    dur = got[got.metric == "scrape_duration_seconds"].sort_values("ts").value.tolist()
    assert dur == pytest.approx([0.01, 0.02, 0.03, 0.04, 0.05, 0.5])
    g = frames["dcgm"]["gpu"]
    assert len(g) == 5 * 21 and set(g.gpu_instance) == {"", "13"}
    mig = g[(g.gpu_instance == "13") & (g.metric == "dram_active")]
    assert mig.value.tolist() == [0.800339] * 5
    assert frames["dcgm"]["samples"].metric.unique().tolist() == ["up", "scrape_duration_seconds"]


def test_time_range_and_target_filter(tmp_path):
    db = tmp_path / "s.db"
    fill(db)
    frames = loader.load(db, start=101 * S, end=103 * S, targets=["vllm"])
    assert list(frames) == ["vllm"]
    assert sorted(frames["vllm"]["samples"].ts.unique()) == [101 * S, 102 * S, 103 * S]
    iso = loader.load(db, start="1970-01-01T00:01:41Z", end="1970-01-01T00:01:43Z", targets=["dcgm"])
    assert sorted(iso["dcgm"]["gpu"].ts.unique()) == [101 * S, 102 * S, 103 * S]
    assert len(loader.load(db, start=300 * S)["vllm"]["samples"]) == 0


def test_reopen_reuses_series_and_scrapes_table(tmp_path):
    db = tmp_path / "s.db"
    fill(db, n=2)
    fill(db, n=2)
    con = store.connect_ro(db)
    n_series = con.execute("SELECT count(*) FROM series WHERE frame = 'samples'").fetchone()[0]
    assert n_series == 516 + 2 * 2  # every vLLM series once (2 engines), plus up/scrape_duration per target
    sc = store.scrapes(con)
    assert len(sc) == 10 and sc.ok.sum() == 8
    assert sc[~sc.ok].error.tolist() == ["HTTP 503 from http://x/metrics"] * 2
    con.close()


def test_a_reader_process_sees_committed_scrapes_while_the_writer_holds_the_file(tmp_path):
    db = tmp_path / "s.db"
    st = store.Store(db)
    st.append("vllm", 1 * S, 0.01, samples=vllm.parse(TEXT, 1 * S))
    reader = textwrap.dedent(f"""
        from stallscope.collectors import loader
        f = loader.load({str(db)!r})
        print(f["vllm"]["samples"].ts.nunique())
    """)
    out = subprocess.run([sys.executable, "-c", reader], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "1", out.stderr
    st.append("vllm", 2 * S, 0.01, samples=vllm.parse(TEXT, 2 * S))
    out = subprocess.run([sys.executable, "-c", reader], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "2", out.stderr
    st.close()


def test_not_a_store_and_missing_store_are_collector_errors(tmp_path):
    bad = tmp_path / "x.db"
    bad.write_bytes(b"hello" * 100)
    with pytest.raises(CollectorError, match="is not a stallscope store"):
        loader.load(bad)
    with pytest.raises(CollectorError, match="is not a stallscope store"):
        store.Store(bad)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.close()
    with pytest.raises(CollectorError, match="is not a stallscope store"):
        loader.load(other)
    with pytest.raises(CollectorError, match="does not exist"):
        loader.load(tmp_path / "nope.db")
    with pytest.raises(CollectorError, match="is a directory"):
        store.Store(tmp_path)
    with pytest.raises(CollectorError, match="start 'yesterday-ish' is not a time"):
        loader.load(bad, start="yesterday-ish")


def test_every_store_table_and_column_is_documented():
    from conftest import ROOT

    doc = (ROOT / "docs" / "store.md").read_text()
    con = sqlite3.connect(":memory:")
    con.executescript(store.DDL)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert sorted(tables) == ["chunks", "meta", "scrapes", "series", "targets"]
    for table in tables:
        assert f"| `{table}` |" in doc, table
        for col in (r[1] for r in con.execute(f"PRAGMA table_info({table})")):
            assert f"`{col}`" in doc, (table, col)
