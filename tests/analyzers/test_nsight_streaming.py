"""Streaming an Nsight export in kernel batches gives the report of the whole-frame read, whatever the batch
size: summary (median, stddev), gaps, steps, stalls and findings are exact across batch boundaries."""

import json
import os
import statistics
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nsys_cases import CNN, LLAMA_SIM, SAMPLE_TRACES, TRAIN, TRT, VIDEO, kernel_export, nsys_sample

from stallscope.analyzers.kernel_summary import DurationCounts, summary_frame
from stallscope.analyzers.nsys_report import build_report
from stallscope.collectors.arrow_sqlite import LaunchIndex, _merge_runs, _runs
from stallscope.collectors.nsight_sqlite import open_export, read_export

FUZZ = settings(max_examples=int(os.environ.get("STALLSCOPE_FUZZ_EXAMPLES", "12")), deadline=None,
                suppress_health_check=list(HealthCheck))


def _report(trace, **kw) -> dict:
    rep = build_report(trace, **kw)
    rep["findings"] = [repr(f) for f in rep["findings"]]
    return json.loads(json.dumps(rep, default=str))


CASES = [(nsys_sample(CNN), 1), (nsys_sample(TRT), 1), (nsys_sample(LLAMA_SIM), 50), (nsys_sample(VIDEO), 333),
         (nsys_sample(TRAIN), 97), (SAMPLE_TRACES / "starvation.sqlite", 64), (SAMPLE_TRACES / "chunked.sqlite", 128),
         (SAMPLE_TRACES / "cuda_graphs.sqlite", 5)]


@pytest.mark.parametrize("path,rows", CASES, ids=[f"{p.stem}-{r}" for p, r in CASES])
@pytest.mark.parametrize("gap_ns", [500_000_000, 10_000])
def test_tiny_batches_give_the_whole_frame_report(path, rows, gap_ns):
    whole = _report(read_export(str(path)), gap_threshold_ns=gap_ns)
    streamed = _report(open_export(str(path)), gap_threshold_ns=gap_ns, batch_rows=rows)
    for section in whole:
        assert streamed[section] == whole[section], section
    assert whole["source"]["kernels"] > rows  # several batches, so boundaries were crossed


def test_streamed_starvation_trace_keeps_its_numbers():
    rep = build_report(open_export(str(SAMPLE_TRACES / "starvation.sqlite")), batch_rows=100)
    assert rep["source"]["kernels"] == 3803 and rep["steps"]["count"] == 81 and rep["steps"]["prefill_steps"] == 1
    (stall,) = [f for f in rep["findings"] if f.kind == "decode_starvation"]
    assert stall.evidence["prefill_tokens"] == 16384 and stall.evidence["steps_inside"] == 1
    top = stall.evidence["top_kernels"][0]  # the prefill step's GEMMs, re-read by row id
    assert (top["role"], top["instances"], top["total_ns"]) == ("gemm", 17, 1520258123)
    gemm = next(r for r in rep["kernel_summary"] if r["instances"] == 17)  # 4 layers x 4 + lm_head, prefill
    assert (gemm["med_ns"], gemm["avg_ns"], gemm["stddev_ns"]) == (104214147.0, 89426948.4, 35933143.0)


def test_rows_out_of_start_order_are_read_again_sorted(tmp_path):
    pid = 7 << 24
    rows = [(s, s + 50, 0, 1, 7, 1 + (s // 100) % 2, 1, 1, pid) for s in (900, 100, 500, 300, 700, 200, 800, 400)]
    path = kernel_export(tmp_path / "unsorted.sqlite", rows, {1: "gemm_kernel", 2: "rms_norm_kernel"})
    whole = _report(read_export(str(path)), gap_threshold_ns=10)
    streamed = _report(open_export(str(path)), gap_threshold_ns=10, batch_rows=3)
    assert streamed == whole
    assert whole["gpu_gaps"]["count"] == 7 and whole["gpu_gaps"]["gaps"][0]["start_ns"] == 550  # no kernel at 600
    assert whole["gpu_gaps"]["total_ns"] == 6 * 50 + 150


PID = 7 << 24
SANE_KERNEL = st.tuples(st.integers(1, 10**6), st.integers(0, 5000), st.integers(0, 1), st.integers(1, 3),
                        st.integers(1, 3), st.sampled_from([1, 4, 132]))


@FUZZ
@given(st.lists(SANE_KERNEL, min_size=1, max_size=60), st.integers(1, 9), st.sampled_from([0, 100, 10**9]))
def test_any_batch_size_gives_the_same_report(kernels, rows, gap_ns):
    data = [(s, s + d, dev, 1, stream, name, name, grid, PID) for s, d, dev, stream, name, grid in kernels]
    strings = {1: "flash_fwd_splitkv_kernel", 2: "flash_fwd_splitkv_combine_kernel", 3: "argmax_kernel"}
    with tempfile.TemporaryDirectory() as d:
        path = str(kernel_export(Path(d) / "k.sqlite", data, strings))
        assert _report(open_export(path), gap_threshold_ns=gap_ns, batch_rows=rows) == \
            _report(read_export(path), gap_threshold_ns=gap_ns)


def test_duration_counts_give_exact_median_and_sample_stddev_in_any_chunking():
    rng = np.random.default_rng(7)
    dur = rng.integers(1000, 1100, size=5001)  # few distinct values, many kernels
    key = rng.integers(0, 3, size=len(dur))
    counts = DurationCounts()
    for lo in range(0, len(dur), 313):
        counts.add(key[lo:lo + 313], dur[lo:lo + 313])
    table = summary_frame(counts, np.array(["a", "b", "c"], dtype=object)).set_index("name")
    for k, name in enumerate("abc"):
        v = dur[key == k].tolist()
        assert table.loc[name, "med_ns"] == round(statistics.median(v), 1)
        assert abs(table.loc[name, "stddev_ns"] - statistics.stdev(v)) <= 0.05 + 1e-9
        assert table.loc[name, "instances"] == len(v) and table.loc[name, "total_ns"] == sum(v)
    assert len(counts.table()[0]) <= 300  # one row per distinct (name, duration), not per kernel


def test_launch_index_keeps_runs_of_consecutive_calls():
    corr = np.array([5, 1, 2, 3, 4, 9, 10, 12])
    value = np.array([1, 0, 0, 0, 1, 2, 2, 2])  # the step range of each call
    runs = _merge_runs([_runs(corr[:4], value[:4]), _runs(corr[4:], value[4:])])
    assert [r.tolist() for r in runs] == [[1, 4, 9, 12], [3, 5, 10, 12], [0, 1, 2, 2]]
    index = LaunchIndex({0: runs})
    found, got = index.lookup(np.zeros(5, np.int64), np.array([3, 4, 11, 12, 6]))
    assert found.tolist() == [True, True, False, True, False] and got[found].tolist() == [0, 1, 2]


@pytest.mark.parametrize("path", [nsys_sample(TRAIN), nsys_sample(VIDEO), SAMPLE_TRACES / "starvation.sqlite"],
                         ids=lambda p: p.stem)
def test_report_kern_sum_is_the_full_reports_summary(path, capsys):
    from stallscope.cli import main

    assert main(["analyze", "--nsys", str(path), "--report", "kern_sum", "--format", "json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    full = _report(read_export(str(path)))
    assert alone["kernel_summary"] == full["kernel_summary"] and alone["findings"] == []
    assert alone["source"]["kernels"] == full["source"]["kernels"] > 3000


def test_report_kern_sum_without_kernels_is_one_line(capsys):
    from nsys_cases import LLMC

    from stallscope.cli import main

    assert main(["analyze", "--nsys", str(nsys_sample(LLMC)), "--report", "kern_sum"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no CUPTI_ACTIVITY_KIND_KERNEL table" in err


def test_duration_counts_past_the_packed_range_agree_with_the_packed_table():
    rng = np.random.default_rng(11)
    key, dur = rng.integers(0, 4, size=3000), rng.integers(0, 50, size=3000)
    packed, unpacked = DurationCounts(), DurationCounts()
    for lo in range(0, len(key), 500):
        packed.add(key[lo:lo + 500], dur[lo:lo + 500])
        big = lo == 1500  # a batch with a name id past 2^22 turns the table into the sorted-arrays form
        unpacked.add(np.r_[key[lo:lo + 500], 2**23] if big else key[lo:lo + 500],
                     np.r_[dur[lo:lo + 500], 7] if big else dur[lo:lo + 500])
    assert packed.code is not None and unpacked.code is None
    k, d, c = unpacked.table()
    assert (k[-1], d[-1], c[-1]) == (2**23, 7, 1)
    assert [a.tolist() for a in packed.table()] == [k[:-1].tolist(), d[:-1].tolist(), c[:-1].tolist()]
    assert int(c.sum()) == 3001 and len(k) <= 4 * 50 + 1
