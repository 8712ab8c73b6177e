"""collectors/nsight_sqlite.py on the seven real exports (nsys 2022.1 -> 2026.2) and on bad input."""

import sqlite3

import pytest
from nsys_cases import nsys_sample
from nsys_cases import ALL, CNN, LLMC, TINY, TRAIN, TRT, VIDEO, WITH_KERNELS

from stallscope.cli import main
from stallscope.collectors.nsight_sqlite import read_export, strip_api_version
from stallscope.core.errors import TraceError
from stallscope.core.schema import validate

VERSIONS = {CNN: "2022.1.3.3", TRT: "2023.1.2.43", LLMC: "2024.2.3.38", TINY: "2026.1.1.204", VIDEO: "2026.2.1.210"}


def _sql(path, query, params=()):
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        return conn.execute(query, params).fetchall()


@pytest.mark.parametrize("name", ALL)
def test_every_sample_reads_with_counts_matching_plain_sql(name):
    path = nsys_sample(name)
    trace = read_export(str(path))
    tables = {r[0] for r in _sql(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    kernels = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0] if "CUPTI_ACTIVITY_KIND_KERNEL" in tables else 0
    assert len(trace.kernels) == kernels
    validate(trace.kernels, "kernels")
    memops = sum(_sql(path, f"SELECT count(*) FROM {t}")[0][0] for t in
                 ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET") if t in tables)
    assert len(trace.memops) == memops
    if name in VERSIONS:
        assert trace.version == VERSIONS[name]
    assert trace.session_start_ns == _sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]


@pytest.mark.parametrize("name", WITH_KERNELS)
def test_kernel_names_resolve_through_stringids_and_launches_join_on_correlation_and_pid(name):
    path = nsys_sample(name)
    trace = read_export(str(path))
    expected = sorted(_sql(path, """SELECT k.start, d.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName"""))
    got = sorted(zip(trace.kernels["start_ns"], trace.kernels["name"].astype(str), trace.kernels["short_name"].astype(str)))
    assert got == [(a, b, c) for a, b, c in expected]
    joined = _sql(path, """SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
        ON r.correlationId = k.correlationId AND (r.globalTid / 16777216) = (k.globalPid / 16777216)""")[0][0]
    assert int(trace.kernels["launch_ns"].notna().sum()) == joined


def test_missing_tables_are_named():
    tiny = read_export(str(nsys_sample(TINY)))
    assert any("NVTX_EVENTS" in m for m in tiny.missing) and tiny.nvtx.empty
    video = read_export(str(nsys_sample(VIDEO)))
    assert any("TARGET_INFO_GPU" in m for m in video.missing) and video.gpus.empty
    llmc = read_export(str(nsys_sample(LLMC)))
    assert llmc.kernels.empty and any("CUPTI_ACTIVITY_KIND_KERNEL" in m for m in llmc.missing)


def test_nvtx_names_coalesce_registered_strings_and_text():
    trt = read_export(str(nsys_sample(TRT)))  # TensorRT: registered strings (textId)
    assert "ExecutionContext::execute" in set(trt.nvtx["name"]) and set(trt.nvtx["domain"]) == {"TensorRT"}
    train = read_export(str(nsys_sample(TRAIN)))  # PyTorch text + NCCL textId
    names = set(train.nvtx["name"])
    assert any(n.startswith("aten::") for n in names)
    expected = _sql(nsys_sample(TRAIN), """SELECT count(*) FROM NVTX_EVENTS n
        LEFT JOIN StringIds s ON s.id = n.textId WHERE n.end IS NOT NULL AND n.eventType IN (59, 60, 70, 71)
        AND coalesce(s.value, n.text) LIKE 'nccl%'""")[0][0]
    assert expected > 0 and sum(n.startswith("nccl") for n in train.nvtx["name"]) == expected


def test_gpu_info_and_graph_mode():
    trt = read_export(str(nsys_sample(TRT)))
    assert len(trt.gpus) == 4 and trt.gpus["name"].str.contains("3090").all()
    assert read_export(str(nsys_sample(VIDEO))).graph_trace_mode == "Graph"


def test_api_version_suffix_is_stripped():
    assert strip_api_version("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert strip_api_version("cuLaunchKernelEx") == "cuLaunchKernelEx"


def _one_error_line(capsys, path) -> str:
    assert main(["analyze", "--nsys", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("stallscope: error: ") and "Traceback" not in err
    return err


def test_bad_inputs_each_give_one_line_and_exit_2(tmp_path, capsys):
    text = tmp_path / "notes.sqlite"
    text.write_text("hello, not a database\n")
    assert "not an SQLite file" in _one_error_line(capsys, text)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES (1)")
    assert "not an Nsight Systems export" in _one_error_line(capsys, other)
    assert "cannot read" in _one_error_line(capsys, tmp_path / "absent.sqlite")
    assert "cannot read" in _one_error_line(capsys, tmp_path)  # a directory
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    assert "not an SQLite file" in _one_error_line(capsys, empty)


def test_truncated_export_is_named(tmp_path, capsys):
    data = nsys_sample(TRT).read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[: len(data) // 2])
    err = _one_error_line(capsys, cut)
    assert "truncated" in err and str(len(data) // 2) in err
    with pytest.raises(TraceError, match="truncated"):
        read_export(str(cut))


def test_export_without_kernel_table_says_what_is_there_and_why(capsys):
    err = _one_error_line(capsys, nsys_sample(LLMC))
    assert "no CUPTI_ACTIVITY_KIND_KERNEL table" in err
    assert "none of its CUDA API calls launched a kernel" in err
    assert "1464 CUDA API calls, 72 memcpy, 98 memset" in err


def test_gpu_metrics_when_present():
    from nsys_cases import SAMPLE_TRACES

    from stallscope.analyzers.nsys_report import build_report

    path = SAMPLE_TRACES / "starvation.sqlite"
    expected = dict(_sql(path, """SELECT t.metricName, round(avg(g.value), 3) FROM GPU_METRICS g
        JOIN TARGET_INFO_GPU_METRICS t ON t.typeId = g.typeId AND t.metricId = g.metricId GROUP BY 1"""))
    trace = read_export(str(path))
    assert not any("GPU_METRICS" in m for m in trace.missing)
    got = {m["metric"]: m["value"] for m in build_report(trace)["gpu_metrics"]}
    assert got == pytest.approx(expected, abs=1e-3) and len(got) == 3
    assert {m["device_id"] for m in build_report(trace)["gpu_metrics"]} == {0}
