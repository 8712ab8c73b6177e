"""The load generator: vllm-bench-serve figures from chunk times, loopback-only, and a short real run."""

from __future__ import annotations

import asyncio

import pytest

from stallscope.cli import main
from stallscope.core.errors import InputError
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.loadgen import (LoadSpec, RequestRecord, _Load, check_loopback, request_metrics, run_load,
                                          summarize)
from stallscope.refserver.server_thread import ServerThread


@pytest.mark.parametrize("url", ["http://10.1.2.3:8000", "http://example.com", "http://0.0.0.0:8000",
                                 "ftp://127.0.0.1:8000", "127.0.0.1:8000"])
def test_refuses_non_loopback_urls(url):
    with pytest.raises(InputError, match="loopback|--url must look like"):
        check_loopback(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:9", "http://[::1]:8000",
                                 "http://127.0.0.2:1"])
def test_accepts_loopback_urls(url):
    check_loopback(url)


def test_cli_bad_input_is_one_line_exit_2(capsys):
    assert main(["loadgen", "--url", "http://192.168.0.1:8000", "--no-progress"]) == 2
    assert main(["loadgen", "--sessions", "0"]) == 2
    assert main(["loadgen", "--duration", "7200"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("stallscope: error:") for line in err)
    assert "192.168.0.1" in err[0] and "--sessions" in err[1] and "--duration" in err[2]


def test_request_metrics_follow_vllm_bench_serve():
    rec = RequestRecord("short", 32, 4, start_ts=100.0, chunk_ts=[100.5, 100.6, 100.8, 101.1], output_tokens=4,
                        status=200, done=True)
    m = request_metrics(rec)
    assert m["ttft"] == pytest.approx(0.5) and m["e2e"] == pytest.approx(1.1)
    assert m["itls"] == pytest.approx([0.1, 0.2, 0.3])
    assert m["tpot"] == pytest.approx(0.2)  # (1.1 - 0.5) / (4 - 1)


def test_summarize_splits_kinds_and_skips_failed():
    short = [RequestRecord("short", 8, 3, 0.0, [1.0, 1.1, 1.3], 3, 200, done=True),
             RequestRecord("short", 8, 3, 0.0, [2.0, 2.4, 2.5], 3, 200, done=True)]
    long = [RequestRecord("long", 900, 2, 0.0, [5.0, 6.0], 2, 200, done=True)]
    failed = [RequestRecord("short", 8, 3, 0.0, [], 0, 503, error="full"),
              RequestRecord("short", 8, 3, 0.0, [9.0], 0, 200)]  # cut at the deadline
    out = summarize(short + long + failed, elapsed_s=4.0, window=(0.0, 5.0))
    assert out["requests"] == {"sent": 5, "completed": 3, "failed": 1, "incomplete": 1}
    assert out["by_status"] == {"200": 4, "503": 1}
    assert out["total_output_tokens"] == 8 and out["completed_output_tok_s"] == 2.0
    assert out["output_tok_s"] == 7 / 5.0  # chunks inside the 5 s window, the cut request's included
    assert out["short"]["count"] == 2 and out["long"]["count"] == 1
    assert out["short"]["ttft_s"]["p50"] == pytest.approx(2.0)  # 1.0, 2.0 and the cut request's 9.0
    assert out["short"]["e2e_s"]["count"] == 2 and out["short"]["e2e_s"]["p50"] == pytest.approx(1.9)
    # short ITLs pooled: 0.1, 0.2, 0.4, 0.1 -> sorted 0.1, 0.1, 0.2, 0.4; P50 = 0.15, P90 = 0.34 (linear)
    assert out["short"]["itl_s"]["p50"] == pytest.approx(0.15)
    assert out["short"]["itl_s"]["p90"] == pytest.approx(0.34)
    assert out["long"]["ttft_s"]["p99"] == pytest.approx(5.0) and out["long"]["itl_s"]["p50"] == pytest.approx(1.0)
    assert out["all"]["itl_s"]["count"] == 5


@pytest.mark.slow
def test_short_run_against_the_real_server():
    with ServerThread(EngineConfig(model="tiny", max_model_len=1024)) as srv:
        spec = LoadSpec(url=srv.url, sessions=3, duration_s=2.5, long_prompt_tokens=300, long_every_s=1.0,
                        seed=3, max_tokens=8, short_prompt_tokens=16, long_max_tokens=4, drain_s=30)
        result = asyncio.run(run_load(spec, progress=False))
        used = srv.engine.kv_cache_manager.num_used_blocks
    req = result["requests"]
    assert req["failed"] == 0 and req["incomplete"] == 0 and req["completed"] == req["sent"] >= 5
    assert result["long"]["count"] == 2  # fired at 1 s and 2 s
    for rec in result["records"]:
        assert rec["done"] and rec["output_tokens"] == rec["max_tokens"] == len(rec["chunk_ts"])
        if rec["kind"] == "short":
            assert 4 <= rec["max_tokens"] <= 12 and rec["prompt_tokens"] == 16
    assert result["all"]["itl_s"]["count"] == sum(r["output_tokens"] - 1 for r in result["records"])
    assert result["output_tok_s"] > 0 and used == 0


@pytest.mark.slow
def test_long_prompts_paced_by_session_progress():
    with ServerThread(EngineConfig(model="tiny", max_model_len=1024)) as srv:
        spec = LoadSpec(url=srv.url, sessions=2, duration_s=3.0, long_prompt_tokens=200, long_every_tokens=5,
                        seed=5, max_tokens=8, short_prompt_tokens=16, long_max_tokens=1, drain_s=30)
        result = asyncio.run(run_load(spec, progress=False))
    records = result["records"]
    longs = [r for r in records if r["kind"] == "long"]
    short_ts = sorted(t for r in records if r["kind"] == "short" for t in r["chunk_ts"])
    assert len(longs) >= 2 and result["requests"]["failed"] == 0
    mark = 0.0
    for rec in longs:  # each long prompt waits for 5 tokens per session after the previous one's first token
        assert sum(mark < t <= rec["start_ts"] for t in short_ts) >= 5 * 2
        mark = rec["chunk_ts"][0]


def test_shared_prefix_starts_every_session_prompt_and_leaves_the_rest_unchanged():
    plain = _Load(LoadSpec(url="http://127.0.0.1:1", seed=4, short_prompt_tokens=8), None, "m")
    shared = _Load(LoadSpec(url="http://127.0.0.1:1", seed=4, short_prompt_tokens=8, shared_prefix_tokens=40),
                   None, "m")
    bodies = [shared.new_request("short")[0]["prompt"] for _ in range(3)]
    assert all(len(p) == 48 and p[:40] == bodies[0][:40] for p in bodies) and bodies[0][40:] != bodies[1][40:]
    assert [plain.new_request("short")[0]["prompt"] for _ in range(3)] == [p[40:] for p in bodies]
    assert shared.records[0].prompt_tokens == 48
    assert len(shared.new_request("long")[0]["prompt"]) == 1536           # long prompts get no prefix
    with pytest.raises(InputError, match="--shared-prefix-tokens must be at least 0, got -1"):
        LoadSpec(url="http://127.0.0.1:1", shared_prefix_tokens=-1).validate()


@pytest.mark.slow
def test_a_shared_prefix_hits_the_servers_prefix_cache():
    import httpx

    with ServerThread(EngineConfig(model="tiny", max_model_len=1024)) as srv:
        spec = LoadSpec(url=srv.url, sessions=2, duration_s=1.5, long_prompt_tokens=20, long_every_s=10.0, seed=1,
                        max_tokens=4, short_prompt_tokens=8, shared_prefix_tokens=64, drain_s=30)
        result = asyncio.run(run_load(spec, progress=False))
        text = httpx.get(srv.url + "/metrics").text
    shorts = [r for r in result["records"] if r["kind"] == "short"]
    hits = next(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:prefix_cache_hits_total"))
    assert len(shorts) >= 3 and hits >= 64 * (len(shorts) - 2)     # all but the first two find the prefix cached
