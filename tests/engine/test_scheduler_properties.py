"""Hypothesis: scheduler invariants over random arrivals, lengths, shared prefixes, budgets, pools and
aborts, with prefix caching on and off (no model): block accounting never leaks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stallscope.engine.kv_cache_manager import KVCacheManager
from stallscope.engine.request import Request, RequestStatus, SamplingParams
from stallscope.engine.scheduler import Scheduler

MAX_MODEL_LEN = 256


@st.composite
def workloads(draw):
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    reqs = draw(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 120), st.integers(1, 20)),
                         min_size=1, max_size=12))
    shared = draw(st.lists(st.integers(0, 120), min_size=len(reqs), max_size=len(reqs)))
    need = max(-(-min(p + m, MAX_MODEL_LEN) // block_size) for _, p, m in reqs)
    return dict(
        block_size=block_size,
        budget=draw(st.integers(block_size, 128)),
        chunked=draw(st.booleans()),
        max_num_seqs=draw(st.integers(1, 8)),
        num_blocks=draw(st.integers(need + 1, need + 25)),   # + the null block; the engine rejects the rest
        reqs=reqs,
        prefix_len=shared,                              # leading tokens each prompt shares with the others
        caching=draw(st.booleans()),
        aborts=draw(st.dictionaries(st.integers(0, len(reqs) - 1), st.integers(0, 60), max_size=3)),
    )


def check_invariants(s: Scheduler, out, budget: int, chunked: bool) -> None:
    kv = s.kv
    limit = budget if chunked else max(budget, MAX_MODEL_LEN)
    assert out.total_num_scheduled_tokens <= limit, "token budget exceeded"
    assert all(n >= 1 for n in out.num_scheduled_tokens.values())
    assert kv.num_free_blocks + kv.num_used_blocks == kv.num_gpu_blocks - 1
    held = [b for t in kv.block_tables.values() for b in t]
    assert 0 not in held and all(len(t) == len(set(t)) for t in kv.block_tables.values())
    assert all(kv.ref_cnt[b] == held.count(b) for b in range(kv.num_gpu_blocks)), "ref_cnt != tables holding it"
    assert len(set(held)) == kv.num_used_blocks and all(kv.ref_cnt[b] == 0 for b in kv.free_block_queue)
    assert all(kv.block_hash[b] == h for h, b in kv.cached_block_hash_to_block.items())
    assert kv.enable_caching or not kv.cached_block_hash_to_block
    assert 0 <= out.prefix_cache_hits <= out.prefix_cache_queries and out.prefix_cache_hits % kv.block_size == 0
    for r in s.running:
        assert len(kv.get_block_table(r.request_id)) >= kv.blocks_for_tokens(r.num_computed_tokens)
    assert all(kv.get_block_table(r.request_id) == [] for r in s.waiting)
    assert len(s.running) <= s.max_num_seqs


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_scheduler_invariants_and_progress(w):
    kv = KVCacheManager(w["num_blocks"], w["block_size"], enable_caching=w["caching"])
    s = Scheduler(kv, max_num_batched_tokens=w["budget"], max_num_seqs=w["max_num_seqs"],
                  enable_chunked_prefill=w["chunked"], max_model_len=MAX_MODEL_LEN)
    reqs = [Request(f"r{i}", ([3] * min(n, p) + [4 + i] * p)[:p], SamplingParams(max_tokens=m), 0, eos_token_id=257)
            for i, ((_, p, m), n) in enumerate(zip(w["reqs"], w["prefix_len"]))]
    last_arrival = max(a for a, _, _ in w["reqs"])
    bound = last_arrival + 2 * sum(p + m for _, p, m in w["reqs"]) + 50
    for step in range(bound):
        for r, (arrival, _, _) in zip(reqs, w["reqs"]):
            if arrival == step:
                s.add_request(r)
        for i, at in w["aborts"].items():
            if at == step and reqs[i].status in (RequestStatus.WAITING, RequestStatus.RUNNING,
                                                 RequestStatus.PREEMPTED) and w["reqs"][i][0] <= step:
                s.finish_request(reqs[i], RequestStatus.FINISHED_ABORTED)
        out = s.schedule()
        check_invariants(s, out, w["budget"], w["chunked"])
        caught_up = {r.request_id: 5 for r in out.scheduled_requests
                     if r.num_computed_tokens + out.num_scheduled_tokens[r.request_id] == r.num_tokens}
        s.update_from_output(out, caught_up)
        if step >= last_arrival and not s.has_unfinished_requests():
            break
    assert not s.has_unfinished_requests(), f"requests still waiting after {bound} steps: {s.waiting}"
    assert all(r.is_finished for r in reqs)
    assert kv.num_free_blocks == kv.num_gpu_blocks - 1 and kv.block_tables == {} and sum(kv.ref_cnt) == 0
    for r, (_, p, m) in zip(reqs, w["reqs"]):
        if r.status is RequestStatus.FINISHED_LENGTH_CAPPED:
            assert r.num_output_tokens == min(m, MAX_MODEL_LEN - p)
