"""Soak: 128 concurrent streams for 30 s against `tiny` -- no 5xx, no hung stream, every KV block back."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stallscope.refserver.config import EngineConfig
from stallscope.refserver.loadgen import LoadSpec, run_load
from stallscope.refserver.server_thread import ServerThread


@pytest.mark.slow
def test_128_streams_for_30_seconds():
    config = EngineConfig(model="tiny", max_model_len=1024, max_num_seqs=128, max_num_batched_tokens=512)
    with ServerThread(config) as srv:
        spec = LoadSpec(url=srv.url, sessions=128, duration_s=30.0, long_prompt_tokens=600, long_every_s=7.5,
                        seed=11, max_tokens=24, short_prompt_tokens=24, long_max_tokens=8, drain_s=60,
                        request_timeout_s=90)
        result = asyncio.run(run_load(spec, progress=False))
        engine = srv.engine
        deadline = time.monotonic() + 20
        while (engine.kv_cache_manager.num_used_blocks or engine.has_unfinished_requests()) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        used = engine.kv_cache_manager.num_used_blocks
        text = httpx.get(srv.url + "/metrics").text
    statuses = result["by_status"]
    assert not [s for s in statuses if s.startswith("5")], statuses
    req = result["requests"]
    assert req["failed"] == 0 and req["incomplete"] == 0, req  # every stream ended with [DONE]
    assert req["sent"] >= 128 and result["long"]["count"] == 3
    assert used == 0
    gauges = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert gauges["vllm:kv_cache_usage_perc"] == 0.0 and gauges["vllm:num_requests_running"] == 0.0
    finished = sum(s.value for f in text_string_to_metric_families(text) if f.name == "vllm:request_success"
                   for s in f.samples if s.labels.get("finished_reason") == "length")
    assert finished == req["completed"]
