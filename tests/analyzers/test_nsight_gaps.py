"""analyzers/gpu_gaps.py vs an independent sweep over the union of GPU intervals, on real exports."""

import sqlite3

import pandas as pd
import pytest
from nsys_cases import nsys_sample
from nsys_cases import ALL

from stallscope.analyzers.gpu_gaps import find_gaps, ops_frame
from stallscope.collectors.nsight_sqlite import read_export

OVERHEAD = ("CUDA profiling data flush overhead", "CUDA profiling stop overhead", "CUDA profiling overhead")


def _expected(path, threshold):
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        ops = []
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if t in tables:
                ops += conn.execute(f"SELECT start, end, (globalPid >> 24) & 16777215, deviceId FROM {t} WHERE start > 0").fetchall()
        over = conn.execute("""SELECT p.start, p.end, (p.globalTid >> 24) & 16777215 FROM PROFILER_OVERHEAD p
            JOIN StringIds s ON s.id = p.nameId WHERE s.value IN (?, ?, ?)""", OVERHEAD).fetchall() \
            if "PROFILER_OVERHEAD" in tables else []
    by = {}
    for s, e, pid, dev in ops:
        by.setdefault((pid, dev), []).append((s, e))
    gaps = []
    for (pid, dev), iv in by.items():
        lo, hi = min(s for s, _ in iv), max(e for _, e in iv)
        iv = iv + [(s, e) for s, e, p in over if p == pid and lo < s and e < hi]
        iv.sort()
        reach = iv[0][1]
        for s, e in iv[1:]:
            if s > reach and s - reach > threshold:
                gaps.append((s - reach, reach, pid, dev))
            reach = max(reach, e)
    return sorted(gaps, key=lambda g: (-g[0], g[1]))


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("threshold", [100_000, 1_000_000])
def test_gaps_match_independent_sweep(name, threshold):
    path = nsys_sample(name)
    trace = read_export(str(path), with_launches=False)
    got = find_gaps(ops_frame(trace.kernels, trace.memops), threshold_ns=threshold, overhead=trace.overhead)
    assert [(r.duration_ns, r.start_ns, r.pid, r.device_id) for r in got.itertuples()] == _expected(path, threshold)


def test_llama_sim_has_the_per_token_gaps():
    trace = read_export(str(nsys_sample("llama3_layer_sim_rtx4060ti_nsys2024.6.2.sqlite")))
    got = find_gaps(ops_frame(trace.kernels, trace.memops), threshold_ns=1_000_000)
    assert len(got) == 512 and (got["end_ns"] - got["start_ns"] == got["duration_ns"]).all()


def test_overlapping_streams_make_no_false_gap():
    ops = pd.DataFrame({"start_ns": [100, 110, 130, 900], "end_ns": [500, 120, 140, 950], "pid": [1, 1, 1, 1],
                        "device_id": [0, 0, 0, 0], "context_id": [1, 1, 1, 1]})
    got = find_gaps(ops, threshold_ns=0)
    assert got[["start_ns", "end_ns", "duration_ns"]].values.tolist() == [[500, 900, 400]]
    assert find_gaps(ops, threshold_ns=400).empty  # strictly greater than the threshold, as nsys
