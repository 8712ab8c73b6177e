"""Block pool bookkeeping and the bytes-per-token formula."""

from __future__ import annotations

import pytest

from stallscope.refserver.config import EngineConfig
from stallscope.engine.kv_cache_manager import KVCacheManager
from stallscope.engine.request import Request, SamplingParams


def req(rid, n):
    return Request(rid, [0] * n, SamplingParams(), 0)


def test_blocks_are_allocated_on_demand_and_freed():
    kv = KVCacheManager(num_blocks=8, block_size=16)
    a = req("a", 40)
    assert kv.allocate_slots(a, 16) and len(kv.get_block_table("a")) == 1
    a.num_computed_tokens = 16
    assert kv.allocate_slots(a, 24) and len(kv.get_block_table("a")) == 3
    assert (kv.num_used_blocks, kv.num_free_blocks) == (3, 5)
    b = req("b", 200)
    assert kv.num_new_blocks_needed(b, 200) == 13 > kv.num_free_blocks and not kv.allocate_slots(b, 200)
    assert kv.get_block_table("b") == [] and kv.num_free_blocks == 5      # a failed allocation changes nothing
    kv.free(a)
    assert kv.num_free_blocks == 8 and kv.ref_cnt == [0] * 8
    kv.free(a)                                                              # unknown/finished: no-op
    assert kv.num_free_blocks == 8


def test_block_tables_do_not_overlap():
    kv = KVCacheManager(num_blocks=10, block_size=4)
    for rid, n in [("a", 9), ("b", 12), ("c", 5)]:
        assert kv.allocate_slots(req(rid, n), n)
    tables = [kv.get_block_table(r) for r in "abc"]
    flat = [b for t in tables for b in t]
    assert [len(t) for t in tables] == [3, 3, 2] and len(set(flat)) == 8 == kv.num_used_blocks


@pytest.mark.parametrize("dtype,nbytes", [("float32", 4), ("auto", 2), ("fp16", 2), ("fp8", 1)])
def test_bytes_per_block_formula(dtype, nbytes):
    cfg = EngineConfig(model="small", kv_cache_dtype=dtype, block_size=16, kv_cache_mb=64)
    # small: 7 layers x 2 kv heads x 64 head_dim x 2 (K, V) x dtype bytes
    assert cfg.bytes_per_token == 7 * 2 * 64 * 2 * nbytes
    assert cfg.bytes_per_block == 16 * cfg.bytes_per_token
    assert cfg.num_gpu_blocks == 64 * 2**20 // cfg.bytes_per_block
