"""Property: no input makes `stallscope analyze` exit 3 or print a traceback (issue 20).

Hypothesis varies what reaches each reader — vLLM exposition text, DCGM text, Prometheus API JSON and
Nsight kernel rows — with NaN, ±Inf, 1e308, end < start, NULL names, 100 KB names and repeated
families; `stallscope analyze` runs in-process (stallscope.cli.main) and must exit 0, 1 or 2.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from nsys_cases import kernel_export
from promserver import FakePrometheus, matrix
from stallscope.cli import main
import pytest

pytestmark = pytest.mark.slow   # Hypothesis runs `analyze` hundreds of times (~25 s)

VLLM = (FIXTURES / "vllm_metrics" / "v0_33_0_custom_itl_buckets.txt").read_text()
DCGM = (FIXTURES / "dcgm_samples" / "t4_under_load_ericsson_driver590.txt").read_text()
FAMILIES = sorted({ln.split("{")[0].split(" ")[0] for ln in VLLM.splitlines() if ln and ln[0] != "#"})
FIELDS = sorted({ln.split("{")[0] for ln in DCGM.splitlines() if ln.startswith("DCGM_FI_")})
# 12 examples each keep the file under ~40 s; STALLSCOPE_FUZZ_EXAMPLES=500 searches harder
FUZZ = settings(max_examples=int(os.environ.get("STALLSCOPE_FUZZ_EXAMPLES", "12")), deadline=None,
                suppress_health_check=list(HealthCheck))

NASTY = st.sampled_from(["NaN", "+Inf", "-Inf", "1e308", "-1e308", "0", "-1", "5e-324", "1e20", "-0"])
VALUE = st.one_of(NASTY, st.floats(allow_nan=True, allow_infinity=True).map(repr).map(
    lambda r: {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}.get(r, r)))
LONG_NAME = "vllm:" + "x" * 100_000


def analyze(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    logging.disable(logging.WARNING)  # warnings are the point of some inputs; only the exit code is checked here
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["analyze", *args])
    finally:
        logging.disable(logging.NOTSET)
    text = out.getvalue() + err.getvalue()
    assert rc in (0, 1, 2), text[-2000:]
    assert "Traceback" not in text and "internal error" not in text, text[-2000:]
    return rc, text


def override(text: str, changes: dict[str, str]) -> str:
    return "\n".join(ln.rsplit(" ", 1)[0] + " " + changes[ln.split("{")[0].split(" ")[0]]
                     if ln and ln[0] != "#" and ln.split("{")[0].split(" ")[0] in changes else ln
                     for ln in text.splitlines()) + "\n"


# the gauges the detectors do arithmetic on, drawn more often than the rest
HOT = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
       "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_SM_ACTIVE"]


@st.composite
def scrape_texts(draw, base: str, names: list[str]) -> list[str]:
    """6 to 10 scrapes of `base`, each with some families set to nasty values, some with extra lines."""
    texts, family = [], st.sampled_from([n for n in HOT if n in names]) | st.sampled_from(names)
    for _ in range(draw(st.integers(6, 10))):
        text = override(base, draw(st.dictionaries(family, VALUE, max_size=6)))
        extra = draw(st.lists(st.sampled_from(["repeat", "long", "garbage", "empty"]), max_size=2))
        if "repeat" in extra:  # a family emitted twice
            name = draw(st.sampled_from(names))
            text += "".join(ln + "\n" for ln in base.splitlines() if ln.startswith(name))
        if "long" in extra:
            text += f"{LONG_NAME} {draw(VALUE)}\n"
        if "garbage" in extra:
            text += "not { a metric\n"
        if "empty" in extra:
            text = ""
        texts.append(text)
    return texts


def jsonl(root: Path, target: str, texts: list[str], also: dict[str, str] | None = None) -> Path:
    lines = []
    for i, text in enumerate(texts):
        lines.append(json.dumps({"ts": 1_700_000_000 + i, "target": target, "text": text}))
        for other, t in (also or {}).items():
            lines.append(json.dumps({"ts": 1_700_000_000 + i, "target": other, "text": t}))
    path = root / "scrapes.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@FUZZ
@given(scrape_texts(VLLM, FAMILIES))
@example([VLLM] * 5 + [override(VLLM, {"vllm:num_requests_running": "+Inf"})] + [VLLM] * 4)  # exit 3 before
@example([override(VLLM, {"vllm:kv_cache_usage_perc": "NaN", "vllm:num_requests_waiting": "1e308"})] * 8)
def test_vllm_exposition_never_makes_analyze_exit_3(texts):
    with tempfile.TemporaryDirectory() as d:
        path = jsonl(Path(d), "vllm", texts)
        analyze(str(path), "--format", "json")
        db = Path(d) / "s.db"  # the same scrapes through the store
        assert main(["collect", "--import", str(path), "--db", str(db)]) in (0, 2)
        if db.exists():
            analyze("--db", str(db))


@FUZZ
@given(scrape_texts(DCGM.split("\n", 1)[1], FIELDS))
def test_dcgm_text_never_makes_analyze_exit_3(texts):
    with tempfile.TemporaryDirectory() as d:
        analyze(str(jsonl(Path(d), "dcgm", texts, also={"vllm": VLLM})))


SAMPLE = st.tuples(st.one_of(st.floats(1.6e9, 1.7e9), st.sampled_from([0, -1, 1e308, float("nan"), "x", None])),
                   st.one_of(VALUE, st.sampled_from(["abc", None, 3, [1]])))
SERIES = st.fixed_dictionaries({
    "metric": st.fixed_dictionaries({"__name__": st.sampled_from(FAMILIES + FIELDS + ["up", LONG_NAME])},
                                    optional={"job": st.sampled_from(["vllm", "dcgm"]), "gpu": st.just("0"),
                                              "le": st.sampled_from(["0.1", "+Inf", "x"]),
                                              "engine": st.just("0")}),
    "values": st.lists(SAMPLE, max_size=5)})
ANSWER = st.one_of(
    st.builds(lambda s: (200, matrix(*s)), st.lists(SERIES, max_size=4)),
    st.sampled_from([(200, b"[1,2,3]"), (200, b"null"), (200, b"{}"), (200, b'{"status":"success","data":{}}'),
                     (503, b'{"status":"error","errorType":"unavailable","error":"x"}'), (200, b"\xff\xfe"),
                     (200, matrix({"metric": {"__name__": "vllm:x"}, "values": [[1, "1"]]})[:-5])]),
    st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=5),
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
                     ["status", "data", "result", "resultType", "metric", "values"]), c, max_size=3),
                 max_leaves=12).map(lambda o: (200, json.dumps(o).encode())))


@FUZZ
@given(st.lists(ANSWER, min_size=3, max_size=3))
def test_prometheus_api_json_never_makes_analyze_exit_3(answers):
    calls = []

    def answer(path):
        calls.append(path)
        return answers[min(len(calls) - 1, 2)] if "query_range" in path else (200, b'{"status":"success","data":{}}')

    with FakePrometheus(answer) as prom:
        analyze("--prometheus", prom.url, "--since", "1600000000000000000", "--until", "1700000000000000000")


TIME = st.one_of(st.integers(0, 10**10), st.sampled_from([2**62, 2**63 - 1, -(2**63), -5, 1e308, None, "t", 1.5]))
NAME_ID = st.one_of(st.integers(1, 3), st.sampled_from([None, 99, -1]))
KERNEL = st.tuples(TIME, TIME, st.sampled_from([0, 1, None]), st.just(1), st.integers(1, 3), NAME_ID, NAME_ID,
                   st.sampled_from([1, 132, 0]), st.sampled_from([7 << 24, 0, None]))
STRINGS = st.fixed_dictionaries({1: st.sampled_from(["gemm_kernel", "flash_fwd_kernel", "", "x" * 100_000]),
                                 2: st.sampled_from(["rms_norm_kernel", "nccl", None]),
                                 3: st.sampled_from(["attn", "é\ufffd", None])})


@FUZZ
@given(st.lists(KERNEL, max_size=30), STRINGS, st.booleans())
@example([(0, 2**62, 0, 1, 1, 1, 1, 1, 7 << 24), (10, 20, 0, 1, 1, 2, 2, 1, 7 << 24)],  # endless recursion before
         {1: "gemm_kernel", 2: "nccl", 3: "attn"}, False)
@example([(500, 100, 0, 1, 1, 1, 1, 1, 7 << 24), (10, None, 0, 1, 1, None, None, 1, 7 << 24)],
         {1: None, 2: "x" * 100_000, 3: None}, False)
def test_nsight_kernel_rows_never_make_analyze_exit_3(kernels, strings, sane):
    if sane:  # mostly well-formed rows, so the analyzers past the reader run too
        kernels = [(s, e, d if d is not None else 0, c, st_, n if n in (1, 2, 3) else 1, m, g, 7 << 24)
                   for s, e, d, c, st_, n, m, g, _ in kernels
                   if isinstance(s, int) and isinstance(e, int) and 0 <= s <= 2**62 and 0 <= e <= 2**62]
    with tempfile.TemporaryDirectory() as d:
        analyze("--nsys", str(kernel_export(Path(d) / "k.sqlite", kernels, strings)))


NASTY_INT = st.one_of(st.integers(0, 10**7), st.sampled_from([None, "t", 1.5, -1, 2**63 - 1, b"\xff"]))
RUNTIME_ROW = st.tuples(NASTY_INT, NASTY_INT, NASTY_INT)  # correlationId, start (end = start + 1), globalTid
NVTX_ROW = st.tuples(NASTY_INT, NASTY_INT, st.sampled_from([59, 60, 75, None]), st.sampled_from([1, 99, None, "x"]),
                     st.sampled_from(["execute_context_1(512)_generation_2(2)", b"\xff\xfe", None, "", 7]))


@FUZZ
@given(st.lists(RUNTIME_ROW, max_size=20), st.lists(NVTX_ROW, max_size=20))
def test_nsight_runtime_and_nvtx_rows_never_make_analyze_exit_3(runtime, nvtx):
    """The columnar reader's launch join (runtime rows) and NVTX names (text, blobs, bad UTF-8): any
    value gives a report or one error line, never a traceback."""
    import sqlite3

    pid = 7 << 24
    kernels = [(s, s + 40, 0, 1, 7, 1 + s % 2, 1, 1 + s % 3, pid) for s in range(100, 3000, 100)]
    with tempfile.TemporaryDirectory() as d:
        path = kernel_export(Path(d) / "k.sqlite", kernels, {1: "flash_fwd_kernel", 2: "argmax_kernel"})
        con = sqlite3.connect(path)
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = rowid")
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId)")
        con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 1)",
                        [(s, s + 1 if isinstance(s, int) and s < 2**62 else s, tid, c) for c, s, tid in runtime])
        con.execute("CREATE TABLE NVTX_EVENTS (start, end, eventType, textId, text, globalTid, domainId)")
        con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, 0)",
                        [(s, e, t, i, x, pid) for s, e, t, i, x in nvtx])
        con.commit()
        con.close()
        analyze("--nsys", str(path))
        analyze("--nsys", str(path), "--report", "kern_sum")
