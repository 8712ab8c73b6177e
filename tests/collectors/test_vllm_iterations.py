"""The steps a vLLM server logs with `--enable-logging-iteration-details`: vLLM 0.33's line in its text and JSON
formats, times placed by the rule written once (collectors/vllm_log.py), the reference server's own lines against
its step trace, and any text (one line, never a traceback)."""

from __future__ import annotations

import calendar
import io
import json
import threading

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from stallscope.cli.refserver import iteration_logger
from stallscope.collectors.vllm_log import read_iterations
from stallscope.core.errors import InputError
from stallscope.engine.step_trace import read_records
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.server_thread import ServerThread

LOGS = FIXTURES / "vllm_logs"
MS = 10**6


def utc_ns(*parts) -> int:
    return calendar.timegm(parts) * 10**9


def test_the_text_log_gives_each_step_its_tokens_and_exact_duration():
    steps = read_iterations(LOGS / "v0_33_0_iterations.log", year=2026)
    t = utc_ns(2026, 12, 4, 16, 15, 0)
    # the dummy step and engine 001's step are left out; the multimodal step's encoder clause reads
    assert steps["iteration"].tolist() == [0, 1, 2, 3, 4, 6]
    assert steps["num_prefill_tokens"].tolist() == [512, 510, 178, 0, 0, 64]
    assert steps["num_decode_tokens"].tolist() == [0, 2, 2, 3, 3, 3]
    assert steps["num_running"].tolist() == [2, 3, 3, 3, 3, 4]
    # 16:15:00's three steps cover 155.95 ms of the second: each follows the last by its own time and a third of
    # the 844.05 ms left (281.35 ms); 16:15:01's two cover 17.45 ms (491.275 ms each); 16:15:03's one ends at that
    # second's start, after 1.98 s the engine had nothing to log
    assert (steps["end_ns"] - t).tolist() == [342_750_000, 688_150_000, 10**9, 1_500_025_000, 2 * 10**9, 3 * 10**9]
    assert ((steps["end_ns"] - steps["start_ns"]) / MS).round(2).tolist() == [61.4, 64.05, 30.5, 8.75, 8.7, 15.25]
    assert steps["kv_cache_usage"].round(6).tolist() == [0.012, 0.02, 0.023, 0.023, 0.024, 0.026]
    assert steps.attrs["time_resolution_ns"] == 10**9


def test_the_json_log_keeps_milliseconds_and_its_own_years():
    steps = read_iterations(LOGS / "v0_33_0_iterations_json.log", year=1999)   # the JSON format states its year
    # a 412 ms step logged at .950 ends within that millisecond; the next is held to its own tick
    assert (steps["end_ns"] - utc_ns(2026, 12, 31, 23, 59, 59)).tolist() == [951 * MS, 1010 * MS]
    assert steps["num_prefill_tokens"].tolist() == [2048, 0]
    assert steps.attrs["time_resolution_ns"] == MS


def test_a_text_log_across_new_year_steps_its_year_back(tmp_path):
    line = ("(APIServer pid=1) INFO {} [loggers.py:200] Engine 000: Iteration({}): 0 context requests, 0 context "
            "tokens, 1 generation requests, 1 generation tokens, iteration elapsed time: 10.00 ms, GPU KV cache "
            "usage: 0.0%\n")
    log = tmp_path / "vllm.log"
    log.write_text(line.format("12-31 23:59:59", 0) + line.format("01-01 00:00:00", 1))
    steps = read_iterations(log, year=2027)
    assert steps["start_ns"].tolist() == [utc_ns(2026, 12, 31, 23, 59, 59) + 990 * MS, utc_ns(2027, 1, 1, 0, 0, 0) + 990 * MS]


def test_a_servers_clock_offset_moves_every_step(tmp_path):
    steps = read_iterations(LOGS / "v0_33_0_iterations.log", year=2026, utc_offset_s=3600)   # UTC+1
    assert int(steps["end_ns"].iloc[0]) == utc_ns(2026, 12, 4, 15, 15, 0) + 342_750_000


def test_a_log_without_iteration_lines_has_no_steps():
    assert read_iterations(LOGS / "v0_33_0_chunked640.log") is None


def test_iteration_lines_without_a_time_are_one_named_error(tmp_path):
    log = tmp_path / "bare.log"
    log.write_text("Engine 000: Iteration(0): 1 context requests, 9 context tokens, 0 generation requests, 0 "
                   "generation tokens, iteration elapsed time: 1.00 ms, GPU KV cache usage: 0.1%\n")
    with pytest.raises(InputError, match=r"bare.log:1: iteration lines without a time"):
        read_iterations(log)


def test_a_missing_log_is_one_named_error(tmp_path):
    with pytest.raises(InputError, match="cannot read it"):
        read_iterations(tmp_path / "absent.log")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(
    st.text(max_size=120),
    st.sampled_from(["(APIServer pid=1) INFO 12-04 16:15:00 ", "INFO 13-45 25:61:61 ", '{"asctime": "2026-02-30 '
                     '10:00:00,123", "message": "', "Engine 000: Iteration(", "): 1 context requests, ",
                     " context tokens, 2 generation requests, ", " generation tokens, iteration elapsed time: ",
                     " ms, GPU KV cache usage: ", "%", " (dummy)", "\n", "\x1b[0m", "Engine 007: "]),
    st.integers(0, 10**25).map(str)), max_size=40))
def test_any_text_reads_or_is_one_named_error(tmp_path_factory, parts):
    log = tmp_path_factory.mktemp("fuzz") / "vllm.log"
    log.write_text("".join(parts), encoding="utf-8", errors="surrogatepass")
    try:
        steps = read_iterations(log, year=2026)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    if steps is not None:
        assert (steps["end_ns"] >= steps["start_ns"]).all()
        assert (np.diff(steps["end_ns"].to_numpy()) >= 0).all()      # steps never overlap


def test_the_reference_servers_lines_read_back_as_its_step_trace(tmp_path):
    """The server logs each step as vLLM does; read back, the log gives the trace's tokens, its durations to the
    0.01 ms the line prints, and its end times within the second the text format resolves."""
    trace, out = tmp_path / "steps.jsonl", io.StringIO()
    config = EngineConfig(model="tiny", max_num_batched_tokens=128, max_model_len=1024, step_trace=str(trace))
    with ServerThread(config, on_step=iteration_logger(out)) as srv, httpx.Client(base_url=srv.url, timeout=60) as client:
        def ask(prompt, n):
            r = client.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": n,
                                                     "ignore_eos": True, "temperature": 0})
            assert r.status_code == 200

        threads = [threading.Thread(target=ask, args=([5] * 300, 4)), threading.Thread(target=ask, args=("hi", 24))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    log = tmp_path / "server.log"
    log.write_text(out.getvalue())
    truth = [r for r in read_records(trace) if r["num_prefill_tokens"] + r["num_decode_tokens"] > 0]
    got = read_iterations(log)
    assert len(got) == len(truth) >= 4
    assert got["num_prefill_tokens"].tolist() == [r["num_prefill_tokens"] for r in truth]
    assert got["num_decode_tokens"].tolist() == [r["num_decode_tokens"] for r in truth]
    assert sum(got["num_prefill_tokens"]) >= 300                      # the 300-token prompt ran in 128-token chunks
    assert got["num_prefill_tokens"].max() <= 128
    duration = np.array([(r["end_ns"] - r["start_ns"]) / MS for r in truth])
    assert np.abs((got["end_ns"] - got["start_ns"]).to_numpy() / MS - duration).max() <= 0.006
    error_s = np.abs(got["end_ns"].to_numpy() - np.array([r["end_ns"] for r in truth])) / 1e9
    assert error_s.max() < 1.0
    assert json.dumps(got["iteration"].tolist()) == json.dumps([r["step"] for r in truth])


def test_a_date_no_calendar_has_is_left_out(tmp_path):
    line = ('{{"asctime": "2026-{} 10:00:00,000", "message": "Engine 000: Iteration({}): 1 context requests, 9 '
            'context tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 1.00 ms, GPU KV '
            'cache usage: 0.1%"}}\n')
    log = tmp_path / "vllm.log"
    log.write_text(line.format("02-30", 0) + line.format("03-01", 1))
    assert read_iterations(log)["iteration"].tolist() == [1]
    log.write_text(line.format("02-30", 0))
    with pytest.raises(InputError, match="no iteration line carries a valid date"):
        read_iterations(log)
