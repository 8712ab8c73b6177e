"""Requests waiting beside a pool that is nearly full: KV pressure only when the free blocks cannot take one
admission. vLLM's `num_requests_waiting_by_reason{reason="capacity"}` also counts requests the token budget
holds back (held-out 21's 4.5 MiB pool: usage up to 0.92, six waiting, every such step at its 64-token budget)."""

import pandas as pd
from prometheus_client import Gauge

from expo_frames import T0_NS, VllmMetrics
from stallscope.analyzers import chunking as C
from stallscope.analyzers.diagnose import diagnose

NS = 10**9


def _nearly_full(usage=0.92, waiting=6, blocks=288, block_size=16):
    """60 one-second scrapes of a 4,608-token pool (cache_config_info) at `usage` with `waiting` requests
    from 10 s to 50 s, 23 running, no preemption."""
    m = VllmMetrics()
    Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
          ["block_size", "cache_dtype", "num_gpu_blocks", "engine"], registry=m.registry).labels(
        block_size=str(block_size), cache_dtype="auto", num_gpu_blocks=str(blocks), engine="0").set(1)
    frames = []
    for i in range(60):
        hot = 10 <= i < 50
        m.kv.set(usage if hot else 0.5)
        m.waiting.set(waiting if hot else 0)
        m.running.set(23)
        m.generation.inc(700)
        for _ in range(30):
            m.itl.observe(0.03)
        frames.append(m.scrape(T0_NS + i * NS))
    return pd.concat(frames, ignore_index=True)


def _kv(samples, chunking):
    return [f for f in diagnose([("", {"samples": samples, "chunking": chunking})]).findings if f.kind == "kv_pressure"]


def test_requests_the_token_budget_holds_back_beside_free_blocks_are_not_kv_pressure():
    """0.08 x 4,608 = 368 free tokens take a 64-token chunk: the wait is the budget's."""
    assert _kv(_nearly_full(), C.Chunking(True, 64, "flags")) == []


def test_requests_waiting_for_a_whole_prompt_the_free_blocks_cannot_hold_are_kv_pressure():
    """With chunking off a 1,536-token prompt needs all its blocks at once; 368 free tokens cannot take it."""
    found = _kv(_nearly_full(), C.Chunking(False, None, "run directory", long_prompt_tokens=1536))
    assert [f.severity for f in found] == ["warning"]
    assert found[0].evidence["admission_tokens"] == 1536 and found[0].evidence["kv_usage_max"] == 0.92


def test_a_chunk_larger_than_the_free_blocks_is_kv_pressure_and_unknown_sizes_count_every_wait():
    """Budget 512 against 368 free tokens: blocked. With no configuration and no prompt histograms, the
    admission size is unknown and any wait counts, as before."""
    assert len(_kv(_nearly_full(), C.Chunking(True, 512, "flags"))) == 1
    assert len(_kv(_nearly_full(), None)) == 1
