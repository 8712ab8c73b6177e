"""Block pool bookkeeping and the bytes-per-token formula."""

from __future__ import annotations

import pytest

from stallscope.refserver.config import EngineConfig
from stallscope.engine.kv_cache_manager import KVCacheManager
from stallscope.engine.request import Request, SamplingParams


def req(rid, n):
    return Request(rid, [0] * n, SamplingParams(), 0)


def test_blocks_are_allocated_on_demand_and_freed():
    kv = KVCacheManager(num_blocks=9, block_size=16)                 # block 0 is the null block: 8 usable
    a = req("a", 40)
    assert kv.allocate_slots(a, 16) and len(kv.get_block_table("a")) == 1
    a.num_computed_tokens = 16
    assert kv.allocate_slots(a, 24) and len(kv.get_block_table("a")) == 3
    assert (kv.num_used_blocks, kv.num_free_blocks) == (3, 5)
    b = req("b", 200)
    assert kv.num_new_blocks_needed(b, 200) == 13 > kv.num_free_blocks and not kv.allocate_slots(b, 200)
    assert kv.get_block_table("b") == [] and kv.num_free_blocks == 5      # a failed allocation changes nothing
    kv.free(a)
    assert kv.num_free_blocks == 8 and kv.ref_cnt == [0] * 9
    kv.free(a)                                                              # unknown/finished: no-op
    assert kv.num_free_blocks == 8


def test_block_tables_do_not_overlap():
    kv = KVCacheManager(num_blocks=11, block_size=4)
    for rid, n in [("a", 9), ("b", 12), ("c", 5)]:
        assert kv.allocate_slots(req(rid, n), n)
    tables = [kv.get_block_table(r) for r in "abc"]
    flat = [b for t in tables for b in t]
    assert [len(t) for t in tables] == [3, 3, 2] and len(set(flat)) == 8 == kv.num_used_blocks and 0 not in flat


@pytest.mark.parametrize("dtype,nbytes", [("float32", 4), ("auto", 2), ("fp16", 2), ("fp8", 1)])
def test_bytes_per_block_formula(dtype, nbytes):
    cfg = EngineConfig(model="small", kv_cache_dtype=dtype, block_size=16, kv_cache_mb=64)
    # small: 7 layers x 2 kv heads x 64 head_dim x 2 (K, V) x dtype bytes
    assert cfg.bytes_per_token == 7 * 2 * 64 * 2 * nbytes
    assert cfg.bytes_per_block == 16 * cfg.bytes_per_token
    assert cfg.num_gpu_blocks == 64 * 2**20 // cfg.bytes_per_block


def admit(kv, r):
    """What the scheduler does for a waiting request: take its cache hit, allocate the rest."""
    hits, num_hit = kv.get_computed_blocks(r)
    assert kv.allocate_slots(r, r.num_tokens - num_hit, hits)
    r.num_computed_tokens = r.num_tokens
    return num_hit


def tokens_req(rid, tokens):
    return Request(rid, tokens, SamplingParams(), 0)


def test_a_shared_prefix_is_reused_by_reference_and_the_last_token_is_always_computed():
    kv = KVCacheManager(num_blocks=9, block_size=4, enable_caching=True)
    a = tokens_req("a", list(range(10)))                      # blocks [0..3] [4..7] full, [8, 9] partial
    assert admit(kv, a) == 0 and kv.num_used_blocks == 3
    b = tokens_req("b", list(range(8)) + [50, 51, 52])      # shares both full blocks
    assert admit(kv, b) == 8 and kv.get_block_table("b")[:2] == kv.get_block_table("a")[:2]
    assert [kv.ref_cnt[x] for x in kv.get_block_table("b")] == [2, 2, 1] and kv.num_used_blocks == 4
    c = tokens_req("c", list(range(8)))                     # all 8 tokens cached: the cap recomputes block 2
    assert admit(kv, c) == 4
    d = tokens_req("d", [9] + list(range(1, 8)))            # same second block, other parent: no hit
    assert admit(kv, d) == 0


def test_freed_blocks_stay_cached_until_evicted_least_recently_used_first():
    kv = KVCacheManager(num_blocks=5, block_size=4, enable_caching=True)   # 4 usable blocks
    a, b = tokens_req("a", list(range(9))), tokens_req("b", [7] * 5)
    admit(kv, a), kv.free(a)                                # a's 2 full blocks cached and free, freed first
    admit(kv, b), kv.free(b)
    assert kv.num_free_blocks == 4 and kv.usage == 0.0 and len(kv.cached_block_hash_to_block) == 3
    again = tokens_req("a2", list(range(9)))
    assert admit(kv, again) == 8 and kv.usage == 0.75       # a's blocks come back from the free queue
    kv.free(again)
    e = tokens_req("e", [1] * 13)                           # 4 new blocks: every cached block is evicted
    assert admit(kv, e) == 0 and kv.cached_block_hash_to_block.keys() == {h for h in kv.block_hashes(e)}
    kv.free(e)
    assert admit(kv, tokens_req("a3", list(range(9)))) == 0


def test_eviction_takes_the_least_recently_freed_block():
    kv = KVCacheManager(num_blocks=5, block_size=2, enable_caching=True)   # 4 usable blocks
    a, b = tokens_req("a", [1, 2, 3]), tokens_req("b", [5, 6, 7])
    admit(kv, a), admit(kv, b)
    kv.free(a), kv.free(b)                                 # free queue: a's tail, a's block, b's tail, b's block
    admit(kv, tokens_req("c", [9, 9, 9]))                  # 2 new blocks: the free queue's front goes first
    assert admit(kv, tokens_req("b2", [5, 6, 7])) == 2     # b's block survived, a's did not
    kv.free("b2"), kv.free("c")
    assert admit(kv, tokens_req("a2", [1, 2, 3])) == 0


def test_with_caching_off_nothing_is_hashed_or_hit():
    kv = KVCacheManager(num_blocks=9, block_size=4)
    a = tokens_req("a", list(range(10)))
    admit(kv, a)
    assert admit(kv, tokens_req("b", list(range(10)))) == 0 and kv.cached_block_hash_to_block == {}
