"""Chunked prefill and piggybacked batches compute the same logits as one whole prefill (tiny, float32 KV)."""

from __future__ import annotations

import numpy as np
import pytest

from stallscope.refserver.config import EngineConfig
from stallscope.refserver.engine import LLMEngine
from stallscope.engine.request import SamplingParams

PROMPT = list(np.random.default_rng(0).integers(0, 256, 300))
GREEDY = SamplingParams(max_tokens=8, ignore_eos=True)


def run(budget: int, requests: dict[str, tuple[list[int], int]], chunked: bool = True):
    """requests: id -> (prompt, step at which it arrives). Returns (tokens, logits, stats) per id."""
    engine = LLMEngine(EngineConfig(model="tiny", kv_cache_dtype="float32", max_num_batched_tokens=budget,
                                    enable_chunked_prefill=chunked), keep_logits=True)
    tokens = {rid: [] for rid in requests}
    all_stats, step = [], 0
    while step < 500 and (engine.has_unfinished_requests() or step <= max(a for _, a in requests.values())):
        for rid, (prompt, arrival) in requests.items():
            if arrival == step:
                engine.add_request(rid, prompt, GREEDY)
        outputs, stats = engine.step()
        all_stats.append(stats)
        for out in outputs:
            tokens[out.request_id].extend(out.new_token_ids)
        step += 1
    return tokens, {rid: np.stack(v) for rid, v in engine.logits.items()}, all_stats


@pytest.fixture(scope="module")
def whole():
    return run(2048, {"a": (PROMPT, 0)})


@pytest.mark.parametrize("budget", [16, 64, 512])
def test_chunked_prefill_matches_one_full_prefill(whole, budget):
    tokens, logits, stats = run(budget, {"a": (PROMPT, 0)})
    assert stats[0].num_prefill_tokens == min(budget, 300)          # it really was chunked
    assert sum(s.num_prefill_tokens for s in stats) == 300
    assert tokens["a"] == whole[0]["a"] and len(tokens["a"]) == 8
    assert np.abs(logits["a"] - whole[1]["a"]).max() <= 1e-4


def test_decodes_piggybacked_on_a_prefill_chunk_are_unchanged(whole):
    # "a" decodes while "b" (arriving at step 2) prefills in 64-token chunks in the same batches.
    tokens, logits, stats = run(64, {"a": (PROMPT[:40], 0), "b": (PROMPT, 2)})
    alone_a = run(64, {"a": (PROMPT[:40], 0)})
    mixed = [s for s in stats if s.num_prefill_tokens and s.num_decode_tokens]
    assert mixed, "no step mixed prefill and decode tokens"
    assert tokens["a"] == alone_a[0]["a"]
    assert np.abs(logits["a"] - alone_a[1]["a"]).max() <= 1e-4
    assert tokens["b"] == whole[0]["a"]
    assert np.abs(logits["b"] - whole[1]["a"]).max() <= 1e-4


def test_prefill_first_policy_gives_the_same_tokens_and_stalls_decodes(whole):
    tokens, logits, stats = run(16, {"a": (PROMPT[:40], 0), "b": (PROMPT, 2)}, chunked=False)
    assert tokens["b"] == whole[0]["a"]
    prefill_b = [s for s in stats if s.num_scheduled_tokens.get("b") == 300]
    assert len(prefill_b) == 1                                       # whole prompt in one step, budget 16
    assert prefill_b[0].num_decode_tokens == 0 and prefill_b[0].num_scheduled_tokens == {"b": 300}
