"""Decode-starvation findings on the synthetic serving traces, and no false alarms on real non-LLM traces."""

import json
import sqlite3
import statistics

import pytest
from nsys_cases import nsys_sample
from nsys_cases import CNN, LLAMA_SIM, SAMPLE_TRACES, TINY, TRAIN, TRT, VIDEO

from stallscope.analyzers.nsys_report import build_report
from stallscope.cli import main
from stallscope.collectors.nsight_sqlite import read_export


def _report(path, **kw):
    return build_report(read_export(str(path)), **kw)


def test_starvation_trace_gives_one_finding_with_evidence():
    findings = _report(SAMPLE_TRACES / "starvation.sqlite")["findings"]
    assert [f.kind for f in findings] == ["decode_starvation"]
    f = findings[0]
    with sqlite3.connect(SAMPLE_TRACES / "starvation.sqlite") as conn:
        ranges = conn.execute("SELECT start, end, text FROM NVTX_EVENTS ORDER BY start").fetchall()
    i = next(n for n, r in enumerate(ranges) if r[2].startswith("execute_context_1(16384)"))
    start, end = ranges[i][:2]
    median = statistics.median(e - s for s, e, _ in ranges[:i])  # the 40 decode steps before it
    ev = f.evidence
    assert (f.start_ns, f.end_ns, ev["duration_ns"]) == (start, end, end - start)
    assert 1.85e9 < ev["duration_ns"] < 1.95e9
    assert ev["median_decode_step_ns"] == int(median) and 31e6 < median < 33e6
    assert ev["prefill_tokens"] == 16384 and ev["decode_streams"] == 32
    assert ev["decode_steps_delayed"] == (end - start) // int(median)
    assert ev["decode_delay_ns"] == int(end - start - median)
    assert ev["top_kernels"][0]["role"] == "gemm" and ev["top_kernels"][0]["total_ns"] > 1e9
    assert f.severity == "critical" and "--max-num-batched-tokens" in f.recommendation
    assert ev["start_utc_ns"] == 1764400000000000000 + start


def test_chunked_prefill_trace_has_no_finding():
    report = _report(SAMPLE_TRACES / "chunked.sqlite")
    assert report["findings"] == []
    assert report["steps"]["prefill_steps"] == 32


def test_cuda_graph_trace_detects_the_stall_and_asks_for_node_tracing():
    findings = _report(SAMPLE_TRACES / "cuda_graphs.sqlite")["findings"]
    kinds = [f.kind for f in findings]
    assert kinds == ["decode_starvation", "cuda_graphs_hidden"]
    stall, graphs = findings
    assert stall.evidence["prefill_tokens"] is None and stall.evidence["prefill_tokens_estimate"] == 16384
    assert "--cuda-graph-trace=node" in graphs.recommendation
    assert graphs.evidence["graph_launches"] == 80 + 4 * 9  # 80 decode graphs + 9 pieces x 4 layers
    assert graphs.evidence["cuda_graph_trace_mode"] == "Graph"


def test_higher_stall_factor_than_the_stall_silences_it():
    assert _report(SAMPLE_TRACES / "starvation.sqlite", stall_factor=70)["findings"] == []


@pytest.mark.parametrize("name", [CNN, TRT, TRAIN, VIDEO, LLAMA_SIM, TINY])
def test_no_false_alarm_on_traces_without_llm_serving_structure(name):
    report = _report(nsys_sample(name), gap_threshold_ns=1_000_000)
    assert [f for f in report["findings"] if f.kind == "decode_starvation"] == []
    assert report["steps"]["decode_only_steps"] == 0


def test_cli_json_has_the_documented_keys(capsys):
    # 1 when --fail-on (default critical) sees the critical finding; 0 where the flag does not exist
    assert main(["analyze", "--nsys", str(SAMPLE_TRACES / "starvation.sqlite"), "--format", "json"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    assert {"kernel_summary", "gpu_gaps", "steps", "findings"} <= set(out)
    row = out["kernel_summary"][0]
    assert list(row) == ["name", "time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"]
    totals = [r["total_ns"] for r in out["kernel_summary"]]
    assert totals == sorted(totals, reverse=True)
    assert out["steps"]["count"] == 81 and out["steps"]["duration"]["max_ns"] > 1.8e9
    assert set(out["findings"][0]) == {"kind", "severity", "start_ns", "end_ns", "evidence", "explanation", "recommendation"}


def test_cli_text_prints_summary_steps_and_finding(capsys):
    assert main(["analyze", "--nsys", str(SAMPLE_TRACES / "starvation.sqlite")]) in (0, 1)
    out = capsys.readouterr().out
    assert "Kernel summary" in out and "Steps: 81 from nvtx:vllm-execute" in out
    assert "[critical] decode_starvation" in out and "16384 prompt tokens" in out


def test_cli_exits_0_without_findings(capsys):
    assert main(["analyze", "--nsys", str(SAMPLE_TRACES / "chunked.sqlite"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []


def test_cli_without_a_source_is_a_usage_error(capsys):
    assert main(["analyze"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stallscope: error: nothing to analyze") and "--nsys FILE" in err


def test_progress_bar_callback_sees_every_kernel_row(monkeypatch):
    import io

    from stallscope.analyzers.nsys_report import build_report
    from stallscope.cli import analyze
    from stallscope.collectors.nsight_sqlite import open_export

    monkeypatch.setattr(analyze, "LARGE_FILE_BYTES", 0)  # treat the sample as a large file
    path = str(SAMPLE_TRACES / "starvation.sqlite")
    monkeypatch.setattr(analyze.sys, "stderr", io.StringIO())  # not a terminal: no bar
    assert analyze._progress_for(path)[0] is None
    tty = io.StringIO()
    tty.isatty = lambda: True
    monkeypatch.setattr(analyze.sys, "stderr", tty)
    callback, bar = analyze._progress_for(path)
    assert callback is not None
    with bar:
        report = build_report(open_export(path), progress=callback, batch_rows=1000)  # streamed: 4 batches
    (task,) = bar.tasks
    assert task.completed == task.total == report["source"]["kernels"] == 3803
    assert task.fields["mb_s"] > 0
