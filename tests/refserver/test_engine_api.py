"""The engine's public contract: add/abort/step, RequestOutput, StepStats, step trace, weights, sampling."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from stallscope.core.errors import InputError
from stallscope.refserver.config import PRESETS, EngineConfig
from stallscope.refserver.engine import LLMEngine
from stallscope.engine.request import SamplingParams
from stallscope.engine.stats import StepStats
from stallscope.engine.step_trace import read_step_trace
from stallscope.refserver.weights import init_weights, save_npz
from conftest import ROOT


def drain(engine, limit=500):
    tokens, outs, stats = {}, [], []
    for _ in range(limit):
        if not engine.has_unfinished_requests():
            break
        o, s = engine.step()
        outs += o
        stats.append(s)
        for out in o:
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
    return tokens, outs, stats


def test_step_stats_fields_are_exactly_the_documented_step_trace_columns():
    doc = (ROOT / "docs" / "step-trace.md").read_text()
    documented = re.findall(r"^\| `(\w+)` \|", doc, flags=re.M)
    assert [f.name for f in dataclasses.fields(StepStats)] == documented


def test_outputs_stats_and_step_trace(tmp_path):
    trace = tmp_path / "steps.jsonl"
    engine = LLMEngine(EngineConfig(model="tiny", max_num_batched_tokens=32, step_trace=str(trace)))
    engine.add_request("a", engine.tokenizer.encode("x" * 70), SamplingParams(max_tokens=3, ignore_eos=True),
                       arrival_ns=1)
    assert (engine.num_waiting(), engine.num_running()) == (1, 0)
    tokens, outs, stats = drain(engine)
    engine.close()
    assert [s.num_prefill_tokens for s in stats] == [32, 32, 6, 0, 0]
    assert [s.num_decode_tokens for s in stats] == [0, 0, 0, 1, 1]
    assert [s.step for s in stats] == [0, 1, 2, 3, 4] and all(s.end_ns >= s.start_ns for s in stats)
    assert stats[0].kv_blocks_used == 2 and stats[2].kv_blocks_used == 5 and stats[-1].kv_blocks_used == 0
    assert stats[0].num_running == 1 and stats[0].num_waiting == 0
    assert len(tokens["a"]) == 3 and [o.num_output_tokens for o in outs] == [1, 2, 3]
    first, last = outs[0], outs[-1]
    assert first.arrival_ns == 1 and first.first_scheduled_ns == stats[0].start_ns
    assert first.first_token_ns == stats[2].end_ns and last.first_token_ns == first.first_token_ns
    assert last.finished and last.finish_reason == "length" and last.num_prompt_tokens == 70
    assert read_step_trace(trace) == stats
    assert json.loads(trace.read_text().splitlines()[0])["num_scheduled_tokens"] == {"a": 32}
    assert [s.arrival_ns for s in stats] == [{"a": 1}, {}, {}, {}, {}]     # first scheduled in step 0 only


@pytest.mark.parametrize("prompt,params,message", [
    ([], SamplingParams(), "empty prompt"),
    ([1] * 2048, SamplingParams(), "max-model-len 2048"),
    ([300], SamplingParams(), "outside the vocabulary"),
])
def test_add_request_rejects_bad_input(prompt, params, message):
    engine = LLMEngine(EngineConfig(model="tiny"))
    with pytest.raises(InputError, match=message):
        engine.add_request("a", prompt, params)


def test_duplicate_ids_pools_too_small_and_bad_config_are_rejected():
    with pytest.raises(InputError, match="holds fewer than 2 blocks of 32768 bytes"):
        LLMEngine(EngineConfig(model="tiny", kv_cache_mb=0.03, kv_cache_dtype="float32"))
    # 0.1 MiB of float32 KV on `tiny` is 3 blocks of 16 tokens: the null block leaves 32 tokens, so vLLM 0.33's
    # startup check refuses the model's 2,048-token context and names the longest that fits.
    with pytest.raises(InputError, match=r"leaves 2 usable blocks \(32 tokens\) but one request of --max-model-len "
                                         r"2048 needs 128; raise --kv-cache-mb to 4\.04 or set --max-model-len 32"):
        LLMEngine(EngineConfig(model="tiny", kv_cache_mb=0.1, kv_cache_dtype="float32"))
    engine = LLMEngine(EngineConfig(model="tiny", kv_cache_mb=0.1, kv_cache_dtype="float32", max_model_len=32))
    engine.add_request("a", [1, 2], SamplingParams())
    with pytest.raises(InputError, match="duplicate request_id 'a'"):
        engine.add_request("a", [1, 2], SamplingParams())
    engine.add_request("b", [1] * 31, SamplingParams(max_tokens=100))    # capped at max_model_len: it fits
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.requests == {} and engine.kv_cache_manager.num_used_blocks == 0
    for kwargs, message in [({"max_num_batched_tokens": 8}, "smaller than --block-size 16"),
                            ({"model": "huge"}, "unknown model 'huge'"),
                            ({"kv_cache_dtype": "int4"}, "unknown --kv-cache-dtype 'int4'"),
                            ({"max_model_len": 1}, "--max-model-len")]:
        with pytest.raises(InputError, match=message):
            EngineConfig(**kwargs)
    for kwargs in [{"max_tokens": 0}, {"temperature": -1.0}, {"top_p": 0.0}]:
        with pytest.raises(InputError):
            SamplingParams(**kwargs)


def test_weights_npz_round_trip_and_wrong_shapes(tmp_path):
    mc = PRESETS["tiny"]
    path = tmp_path / "w.npz"
    save_npz(path, init_weights(mc, seed=5))
    greedy = SamplingParams(max_tokens=6, ignore_eos=True)
    outs = []
    for cfg in (EngineConfig(model="tiny", seed=5), EngineConfig(model="tiny", seed=9, weights=str(path))):
        engine = LLMEngine(cfg)
        engine.add_request("a", [5, 6, 7], greedy)
        outs.append(drain(engine)[0]["a"])
    assert outs[0] == outs[1]
    bad = init_weights(mc)
    bad["layers.1.o_proj"] = bad["layers.1.o_proj"][:, :10]
    save_npz(path, bad)
    with pytest.raises(InputError, match=r"'layers.1.o_proj' has shape \(256, 10\), model 'tiny' needs \(256, 256\)"):
        LLMEngine(EngineConfig(model="tiny", weights=str(path)))


def test_seeded_sampling_is_reproducible_and_differs_from_greedy():
    def gen(params):
        engine = LLMEngine(EngineConfig(model="tiny"))
        engine.add_request("a", [10, 20, 30], params)
        return drain(engine)[0]["a"]
    hot = SamplingParams(max_tokens=20, temperature=1.5, top_p=0.95, seed=3, ignore_eos=True)
    assert gen(hot) == gen(hot)
    assert gen(hot) != gen(dataclasses.replace(hot, seed=4))
    assert gen(hot) != gen(SamplingParams(max_tokens=20, ignore_eos=True))
    assert all(0 <= t < 256 or t == 257 for t in gen(hot))


def test_engine_never_imports_the_metrics_library():
    code = ("import sys; import stallscope.refserver.engine; "
            "sys.exit(1 if 'prometheus_client' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_presets_have_the_documented_sizes():
    assert 2e6 <= PRESETS["tiny"].num_params <= 5e6
    assert 100e6 <= PRESETS["small"].num_params <= 150e6
    w = init_weights(PRESETS["tiny"])
    assert sum(a.size for a in w.values()) == PRESETS["tiny"].num_params
    assert all(a.dtype == np.float32 for a in w.values())


def test_blas_threads_are_fixed_for_every_step():
    from threadpoolctl import ThreadpoolController

    from stallscope.refserver.model_runner import fix_blas_threads

    blas = ThreadpoolController().select(user_api="blas")
    before = max(lc.num_threads for lc in blas.lib_controllers)
    try:
        engine = LLMEngine(EngineConfig(model="tiny", blas_threads=1))
        assert engine.model_runner.blas_threads == 1
        # a 1,024-token step: the old per-step rule (one thread per 256 tokens) would raise the count here
        engine.add_request("a", [1] * 1024, SamplingParams(max_tokens=2, ignore_eos=True))
        drain(engine)
        assert [lc.num_threads for lc in ThreadpoolController().select(user_api="blas").lib_controllers] == [1]
    finally:
        fix_blas_threads(before)
