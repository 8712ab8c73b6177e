"""fp16 ("auto") and fp8 KV storage: logit deviation against float32 KV, measured and bounded.

The figures are recorded in docs/kv-precision.md (same prompt, same seed, tiny model).
"""

from __future__ import annotations

import numpy as np
import pytest

from stallscope.refserver.config import EngineConfig
from stallscope.refserver.engine import LLMEngine
from stallscope.engine.request import Request, SamplingParams
from stallscope.engine.scheduler import SchedulerOutput


def logits_at_every_position(dtype: str, prompt: list[int], model: str = "tiny") -> np.ndarray:
    """Prefill `prompt` in one pass through the paged cache of `dtype`; logits of all positions (n, vocab)."""
    engine = LLMEngine(EngineConfig(model=model, kv_cache_dtype=dtype, kv_cache_mb=8))
    req = Request("p", prompt, SamplingParams(max_tokens=1), 0)
    assert engine.kv_cache_manager.allocate_slots(req, len(prompt))
    out = SchedulerOutput()
    out.add(req, len(prompt))
    ids, pos, meta, _, _ = engine.model_runner.prepare(out)
    runner = engine.model_runner
    return runner.model.forward(ids, pos, meta, runner.cache, np.arange(len(prompt)))


@pytest.fixture(scope="module")
def reference():
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, 256, 300)]
    return prompt, logits_at_every_position("float32", prompt)


@pytest.mark.parametrize("dtype,max_dev,mean_dev,agree", [
    ("auto", 0.01, 0.001, 0.99),
    ("fp16", 0.01, 0.001, 0.99),
    ("fp8", 1.0, 0.05, 0.95),
])
def test_logit_deviation_against_float32_kv(reference, dtype, max_dev, mean_dev, agree):
    prompt, ref = reference
    got = logits_at_every_position(dtype, prompt)
    dev = np.abs(got - ref)
    print(f"{dtype}: max |dlogit| {dev.max():.4g}, mean {dev.mean():.4g}, "
          f"argmax agreement {(got.argmax(1) == ref.argmax(1)).mean():.3f}, logit std {ref.std():.3g}")
    assert dev.max() <= max_dev and dev.mean() <= mean_dev
    assert (got.argmax(1) == ref.argmax(1)).mean() >= agree
    assert dev.mean() > 1e-6                          # the storage really is lossy


def test_fp8_deviates_more_than_fp16(reference):
    prompt, ref = reference
    fp16 = np.abs(logits_at_every_position("auto", prompt) - ref).mean()
    fp8 = np.abs(logits_at_every_position("fp8", prompt) - ref).mean()
    assert fp8 > 5 * fp16
