"""Scheduler policy on its own (no model): budgets, order, prefill-first, preemption by recompute."""

from __future__ import annotations

from stallscope.engine.kv_cache_manager import KVCacheManager
from stallscope.engine.request import Request, RequestStatus, SamplingParams
from stallscope.engine.scheduler import Scheduler


def make(num_blocks=64, block_size=4, budget=32, chunked=True, max_num_seqs=16, max_model_len=512):
    kv = KVCacheManager(num_blocks, block_size)
    return Scheduler(kv, max_num_batched_tokens=budget, max_num_seqs=max_num_seqs,
                     enable_chunked_prefill=chunked, max_model_len=max_model_len)


def req(rid, prompt_len, max_tokens=4):
    return Request(rid, [1] * prompt_len, SamplingParams(max_tokens=max_tokens, ignore_eos=True), 0, eos_token_id=257)


def step(s):
    out = s.schedule()
    done = {r.request_id: 7 for r in out.scheduled_requests
            if r.num_computed_tokens + out.num_scheduled_tokens[r.request_id] == r.num_tokens}
    s.update_from_output(out, done)
    return out


def test_a_long_prompt_is_chunked_to_the_budget():
    s = make(budget=32)
    s.add_request(req("a", 100))
    plan = [step(s).num_scheduled_tokens for _ in range(5)]
    assert plan == [{"a": 32}, {"a": 32}, {"a": 32}, {"a": 4}, {"a": 1}]


def test_running_decodes_come_first_and_the_new_prompt_takes_what_is_left():
    s = make(budget=32)
    for rid in ("a", "b"):
        s.add_request(req(rid, 3, max_tokens=10))
    step(s)                                           # both prefilled (6 tokens)
    s.add_request(req("c", 100))
    out = step(s)
    assert list(out.num_scheduled_tokens.items()) == [("a", 1), ("b", 1), ("c", 30)]
    assert (out.num_decode_tokens, out.num_prefill_tokens, out.num_decode_reqs, out.num_prefill_reqs) == (2, 30, 2, 1)


def test_prefill_first_runs_the_whole_prompt_alone_while_decodes_wait():
    s = make(budget=16, chunked=False)
    s.add_request(req("a", 3, max_tokens=10))
    step(s)
    s.add_request(req("b", 100))
    out = step(s)
    assert out.num_scheduled_tokens == {"b": 100}     # over the 16-token budget, in one step; "a" waits
    assert out.num_decode_tokens == 0
    assert step(s).num_scheduled_tokens == {"a": 1, "b": 1}


def test_preemption_evicts_the_newest_running_request_and_recomputes_it():
    s = make(num_blocks=7, block_size=4, budget=64)   # 6 usable blocks besides the null block
    a, b = req("a", 8, max_tokens=10), req("b", 8, max_tokens=10)
    s.add_request(a)
    s.add_request(b)
    step(s)                                           # a, b hold 2 blocks each (8 tokens) + 1 output token
    s.add_request(req("c", 4))
    out = step(s)                                     # a, b need a 3rd block each: 6 blocks; c cannot be admitted
    assert out.num_scheduled_tokens == {"a": 1, "b": 1} and [r.request_id for r in s.waiting] == ["c"]
    for _ in range(3):                                # positions 9..11 fit the 3rd block
        assert step(s).preempted_request_ids == []
    out = step(s)
    # a (older) needs its 4th block: b, the newest running request, is preempted by recompute
    assert out.preempted_request_ids == ["b"]
    assert out.num_scheduled_tokens == {"a": 1}       # no admission in a step that preempted
    assert [r.request_id for r in s.waiting] == ["b", "c"] and b.status is RequestStatus.PREEMPTED
    assert b.num_computed_tokens == 0 and b.num_preemptions == 1 and b.num_output_tokens == 5
    assert s.kv.get_block_table("b") == [] and s.kv.num_used_blocks == 4


def test_max_num_seqs_caps_running():
    s = make(max_num_seqs=2)
    for rid in "abc":
        s.add_request(req(rid, 2))
    out = step(s)
    assert list(out.num_scheduled_tokens) == ["a", "b"] and len(s.running) == 2 and len(s.waiting) == 1


def test_finish_frees_blocks_and_reports_length():
    s = make()
    r = req("a", 5, max_tokens=2)
    s.add_request(r)
    while s.has_unfinished_requests():
        step(s)
    assert r.status is RequestStatus.FINISHED_LENGTH_CAPPED and r.output_token_ids == [7, 7]
    assert s.kv.num_free_blocks == s.kv.num_gpu_blocks - 1


def test_eos_and_stop_tokens_finish_with_stop():
    s = make()
    r = Request("a", [1, 2], SamplingParams(max_tokens=10), 0, eos_token_id=7)
    s.add_request(r)
    step(s)
    assert r.status is RequestStatus.FINISHED_STOPPED and r.finish_reason == "stop"


def test_engine_core_steps_any_executor_on_any_clock():
    """EngineCore: schedule -> execute -> update, dated by the clock it is given; chunks() as add() classed them."""
    from stallscope.engine.config import SchedulerConfig
    from stallscope.engine.core import EngineCore

    ticks, seen = iter(range(0, 1000, 10)), []

    def execute(out):
        seen.append(out.chunks())
        return {r.request_id: 7 for r in out.scheduled_requests
                if r.num_computed_tokens + out.num_scheduled_tokens[r.request_id] == r.num_tokens}

    core = EngineCore(SchedulerConfig(max_num_batched_tokens=8, block_size=4, num_gpu_blocks=16), execute,
                      lambda: next(ticks))
    core.scheduler.add_request(req("a", 10, max_tokens=2))
    stats = [core.step()[1] for _ in range(3)]
    assert seen == [[(0, 8, True)], [(8, 2, True)], [(10, 1, False)]]
    assert [(s.step, s.start_ns, s.end_ns) for s in stats] == [(0, 0, 10), (1, 20, 30), (2, 40, 50)]
    assert [s.num_scheduled_tokens for s in stats] == [{"a": 8}, {"a": 2}, {"a": 1}]
    assert stats[0].arrival_ns == {"a": 0} and stats[1].arrival_ns == {} and stats[2].num_gpu_blocks == 16
    assert not core.scheduler.has_unfinished_requests()   # 2 tokens: one after the prompt, one decode


def _admission_run(reserve_full_isl):
    kv = KVCacheManager(9, 4)                         # 8 usable blocks of 4 tokens
    s = Scheduler(kv, max_num_batched_tokens=16, max_num_seqs=16, max_model_len=512,
                  scheduler_reserve_full_isl=reserve_full_isl)
    s.add_request(req("a", 8, max_tokens=6))
    step(s)                                           # a holds 2 blocks, 6 free
    s.add_request(req("b", 28, max_tokens=2))         # all of b needs 7 blocks; its first 15-token chunk, 4
    plan = []
    while s.has_unfinished_requests() and len(plan) < 20:
        out = step(s)
        plan.append((out.num_scheduled_tokens, out.preempted_request_ids))
    return plan


def test_reserve_full_isl_admits_a_prompt_only_when_all_of_it_fits():
    plan = _admission_run(True)                       # vLLM 0.33's default: b waits for a's blocks
    assert plan[:6] == [({"a": 1}, [])] * 5 + [({"b": 16}, [])]
    assert not any(pre for _, pre in plan)


def test_without_reserve_full_isl_the_first_chunk_admits_and_the_next_preempts():
    plan = _admission_run(False)                      # admission by the first chunk thrashes
    assert plan[:4] == [({"a": 1, "b": 15}, []), ({"a": 1}, ["b"]), ({"a": 1, "b": 15}, []), ({"a": 1}, ["b"])]
