"""Issue 20 in the engine, no HTTP: a request whose sampling raises finishes alone with "error", its blocks
freed, and every other request in the batch produces exactly the tokens it would have produced without it."""

from __future__ import annotations

from test_engine_api import drain
from test_server import sample

from stallscope.engine.request import SamplingParams
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.engine import LLMEngine
from stallscope.refserver.metrics import EngineMetrics

BAD_SEED = 666
GOOD = {f"g{i}": (f"prompt number {i} " * (i + 1), SamplingParams(max_tokens=12, ignore_eos=True))
        for i in range(5)}
GOOD["s"] = ("a sampled neighbour", SamplingParams(max_tokens=12, temperature=0.8, seed=7, ignore_eos=True))


def run(with_bad: bool, fail_on_call: int = 3):
    engine = LLMEngine(EngineConfig(model="tiny", max_num_batched_tokens=48))   # chunked prompts interleave
    sampler, real, calls = engine.model_runner.sampler, engine.model_runner.sampler._sample_one, []

    def poisoned(row, p, rng):
        if p.seed == BAD_SEED:
            calls.append(1)
            if len(calls) == fail_on_call:
                raise FloatingPointError("poisoned sampling row")
        return real(row, p, rng)

    sampler._sample_one = poisoned
    for rid, (prompt, params) in GOOD.items():
        engine.add_request(rid, engine.tokenizer.encode(prompt), params)
        if with_bad and rid == "g1":
            engine.add_request("bad", engine.tokenizer.encode("poison"),
                               SamplingParams(max_tokens=12, temperature=1.0, seed=BAD_SEED, ignore_eos=True))
    tokens, outs, stats = drain(engine)
    return engine, tokens, outs, stats


def test_a_request_whose_sampling_raises_finishes_alone_with_error():
    _, clean, clean_outs, _ = run(with_bad=False)
    engine, tokens, outs, stats = run(with_bad=True)
    assert {rid: tokens[rid] for rid in GOOD} == clean
    assert all(len(clean[rid]) == 12 for rid in GOOD)
    assert [o.finish_reason for o in outs if o.finished and o.request_id in GOOD] == \
        [o.finish_reason for o in clean_outs if o.finished] and {o.finish_reason for o in clean_outs} == {None, "length"}
    bad = [o for o in outs if o.request_id == "bad"]
    assert len(tokens["bad"]) == 2                                  # two tokens, then its third sample raised
    assert [(o.finished, o.finish_reason) for o in bad] == [(False, None), (False, None), (True, "error")]
    assert bad[-1].new_token_ids == () and bad[-1].num_output_tokens == 2
    assert engine.kv_cache_manager.num_used_blocks == 0 and stats[-1].kv_blocks_used == 0
    assert engine.requests == {} and not engine.has_unfinished_requests()


def test_an_error_finish_is_counted_under_finished_reason_error():
    engine = LLMEngine(EngineConfig(model="tiny"))
    metrics = EngineMetrics("tiny", max_model_len=512, cache_info={"block_size": 16})
    engine.model_runner.sampler._sample_one = lambda row, p, rng: 1 // 0
    for rid, params in [("ok", SamplingParams(max_tokens=3, ignore_eos=True)), ("bad", SamplingParams(max_tokens=3, temperature=1))]:
        engine.add_request(rid, [65, 66, 67], params)
        metrics.on_add(rid, max_tokens=3, num_prompt_tokens=3, arrival_ns=0)
    while engine.has_unfinished_requests():
        metrics.record_step(*engine.step())
    text = metrics.exposition().decode()
    assert [sample(text, "vllm:request_success_total", finished_reason=r) for r in ("error", "length", "abort")] \
        == [1, 1, 0]
    assert sample(text, "vllm:request_generation_tokens_sum") == 3      # the bad one never got a token
