"""sample_traces/ is reproducible from scripts/make_sample_traces.py, small, and marked synthetic."""

import importlib.util
import sqlite3

import pytest
from conftest import ROOT
from nsys_cases import SAMPLE_TRACES

NAMES = ["starvation", "chunked", "cuda_graphs"]


def _dump(path):
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_sample_traces", ROOT / "scripts" / "make_sample_traces.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path_factory.mktemp("traces")
    mod.main(str(out))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_committed_trace_equals_generator_output(regenerated, name):
    committed = SAMPLE_TRACES / f"{name}.sqlite"
    assert committed.stat().st_size < 1_000_000
    assert _dump(committed) == _dump(regenerated / f"{name}.sqlite")


@pytest.mark.parametrize("name", NAMES)
def test_traces_say_they_are_synthetic_and_are_lazy(name):
    with sqlite3.connect(SAMPLE_TRACES / f"{name}.sqlite") as conn:
        meta = dict(conn.execute("SELECT name, value FROM META_DATA_EXPORT"))
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        assert "not a GPU capture" in meta["SYNTHETIC"] and meta["EXPORT_SCHEMA_VERSION"] == "3.16.1"
        for t in tables:  # nsys creates tables lazily: none is empty
            assert conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] > 0, t
