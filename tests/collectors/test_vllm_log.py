"""The scheduler configuration read from a vLLM server log: vLLM 0.33's startup lines in its text and JSON formats,
restarts, colour codes, the reference server's own log, and bad files (one line, exit 2 through `analyze`)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from stallscope.analyzers.chunking import from_server_log
from stallscope.cli.refserver import startup_log_lines
from stallscope.collectors.vllm_log import read_server_config
from stallscope.core.errors import InputError
from stallscope.refserver.config import EngineConfig

LOGS = FIXTURES / "vllm_logs"


@pytest.mark.parametrize("name,on,budget,lines", [
    ("v0_33_0_chunked640.log", True, 640, "6,7"),
    ("v0_33_0_colour_640.log", True, 640, "6,7"),
    ("v0_33_0_json_2048.log", True, 2048, "1,2"),
    ("v0_33_0_nochunk.log", False, None, "6"),
    ("v0_33_0_restart_512.log", True, 512, "14,15"),   # the last startup, not the first (640)
])
def test_the_last_startup_states_chunking_and_the_budget(name, on, budget, lines):
    got = read_server_config(LOGS / name)
    assert (got.enable_chunked_prefill, got.max_num_batched_tokens) == (on, budget)
    assert got.where == f"{LOGS / name}:{lines}"
    assert got.vllm_version == "0.33.0"
    c = from_server_log(got)
    assert c.source == "server log" and c.enabled is on and c.budget == budget
    assert c.holds_long_prefills(decodes=16) is (budget is None or budget - 16 >= 512)


def test_a_startup_still_in_progress_wins_over_the_one_before(tmp_path):
    # a restart whose API server logged its budget but whose engine had not started when the log was cut
    log = tmp_path / "vllm.log"
    text = (LOGS / "v0_33_0_nochunk.log").read_text()
    log.write_text(text + "(APIServer pid=7) INFO 12-04 11:00:00 [scheduler.py:311] Chunked prefill is enabled "
                   "with max_num_batched_tokens=384.\n")
    got = read_server_config(log)
    assert (got.enable_chunked_prefill, got.max_num_batched_tokens) == (True, 384)
    assert got.where == f"{log}:{len(text.splitlines()) + 1}"


@pytest.mark.parametrize("text,message", [
    ("INFO 12-04 09:12:01 [api_server.py:1873] vLLM API server version 0.33.0\n", "no vLLM startup line"),
    ("", "no vLLM startup line"),
    ("x Chunked prefill is enabled with max_num_batched_tokens=0.\n", "max_num_batched_tokens=0 is not a token budget"),
    ("x Initializing a V1 LLM engine (v0.33.0) with config: model='m', seed=0\n", "states no enable_chunked_prefill"),
])
def test_a_log_without_the_lines_is_one_named_error(tmp_path, text, message):
    log = tmp_path / "vllm.log"
    log.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        read_server_config(log)
    assert str(log) in str(err.value) and "\n" not in str(err.value)


def test_a_missing_file_is_one_named_error(tmp_path):
    with pytest.raises(InputError, match="cannot read it"):
        read_server_config(tmp_path / "absent.log")


@pytest.mark.parametrize("on,budget", [(True, 640), (True, 2048), (False, 4096)])
def test_the_reference_servers_startup_lines_read_back(tmp_path, on, budget):
    config = EngineConfig(model="tiny", max_num_batched_tokens=budget, enable_chunked_prefill=on)
    log = tmp_path / "server.log"
    log.write_text("stallscope refserver: banner\n" + "\n".join(startup_log_lines(config)) + "\n")
    got = read_server_config(log)
    assert (got.enable_chunked_prefill, got.max_num_batched_tokens) == (on, budget if on else None)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(
    st.text(max_size=200),
    st.sampled_from(["Chunked prefill is enabled with max_num_batched_tokens=", "Initializing a V1 LLM engine (v",
                     ") with config: ", "enable_chunked_prefill=", "True", "False", "\x1b[0m", "\x00", "\ud7ff"]),
    st.integers(-10, 10**30).map(str)), max_size=40))
def test_any_text_reads_or_is_one_named_error(tmp_path_factory, parts):
    log = tmp_path_factory.mktemp("fuzz") / "vllm.log"
    log.write_text("".join(parts), encoding="utf-8", errors="surrogatepass")
    try:
        got = read_server_config(log)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    assert got.enable_chunked_prefill in (True, False)
    assert got.max_num_batched_tokens is None or got.max_num_batched_tokens >= 1


def test_a_line_longer_than_the_read_size_keeps_the_numbers_after_it(tmp_path):
    log = tmp_path / "vllm.log"
    text = (LOGS / "v0_33_0_chunked640.log").read_text()
    log.write_text("x" * (3 << 20) + "\n" + text)
    assert read_server_config(log).where == f"{log}:7,8"
