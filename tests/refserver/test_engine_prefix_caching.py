"""Prefix caching in the reference engine: same greedy tokens on and off; a shared prompt prefills once."""

from __future__ import annotations

import numpy as np

from stallscope.engine.request import SamplingParams
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.engine import LLMEngine


def prompt(seed, n):
    return [int(t) for t in np.random.default_rng(seed).integers(0, 256, n)]


def run(reqs, caching, **kw):
    """reqs: (arrival step, prompt, max_tokens). Returns (tokens per id, StepStats list)."""
    engine = LLMEngine(EngineConfig(model="tiny", kv_cache_dtype="float32", enable_prefix_caching=caching, **kw))
    tokens, stats = {}, []
    for step in range(1000):
        for i, (arrival, p, m) in enumerate(reqs):
            if arrival == step:
                engine.add_request(f"r{i}", p, SamplingParams(max_tokens=m, ignore_eos=True))
                tokens[f"r{i}"] = []
        outputs, st = engine.step()
        stats.append(st)
        for out in outputs:
            tokens[out.request_id].extend(out.new_token_ids)
        if step >= max(a for a, _, _ in reqs) and not engine.has_unfinished_requests():
            break
    assert engine.kv_cache_manager.num_used_blocks == 0
    return tokens, stats


def test_greedy_outputs_are_identical_with_prefix_caching_on_and_off():
    system = prompt(0, 70)
    reqs = [(0, system + prompt(1, 9), 12), (3, system + prompt(2, 20), 10), (3, system[:40] + prompt(3, 5), 8),
            (9, system + prompt(1, 9), 6), (20, prompt(4, 33), 5)]
    on, on_stats = run(reqs, True, max_num_batched_tokens=32)
    off, off_stats = run(reqs, False, max_num_batched_tokens=32)
    assert on == off and all(len(on[f"r{i}"]) == m for i, (_, _, m) in enumerate(reqs))
    cached = {rid: n for st in on_stats for rid, n in st.num_cached_tokens.items()}
    # r1 arrives while r0 still prefills its last chunk: r0's first 4 blocks (64 tokens) are cached by then
    assert cached == {"r0": 0, "r1": 64, "r2": 32, "r3": 64, "r4": 0}
    assert all(n == 0 for st in off_stats for n in st.num_cached_tokens.values())
    assert sum(st.prefix_cache_hits for st in on_stats) == 160 and sum(st.prefix_cache_queries for st in off_stats) == 0
    assert sum(st.num_prefill_tokens for st in on_stats) == sum(st.num_prefill_tokens for st in off_stats) - 160


def test_a_shared_1024_token_system_prompt_prefills_once():
    system = prompt(7, 1024)
    reqs = [(0, system + prompt(8, 20), 4), (10, system + prompt(9, 30), 4)]
    _, stats = run(reqs, True, max_num_batched_tokens=2048)
    first = next(st for st in stats if "r1" in st.arrival_ns)
    assert first.num_cached_tokens == {"r1": 1024} and first.num_scheduled_tokens == {"r1": 30}
    assert (first.prefix_cache_queries, first.prefix_cache_hits) == (1054, 1024)
    assert sum(st.num_scheduled_tokens.get("r1", 0) for st in stats) == 30 + 3     # the suffix, then 3 decodes


def test_the_flag_is_on_by_default_and_spelled_as_vllm_spells_it(capsys):
    from stallscope.cli import main

    assert EngineConfig().enable_prefix_caching and EngineConfig().scheduler_config.enable_prefix_caching
    assert EngineConfig.from_flags(["--no-enable-prefix-caching", "--block-size", "8"]).enable_prefix_caching is False
    assert EngineConfig.from_flags(["--enable-prefix-caching"]).enable_prefix_caching is True
    outs = []
    for flag in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
        assert main(["generate", "--prompt", "hello hello hello", "--max-tokens", "5", "--json", flag]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and '"steps": 5' in outs[0]
