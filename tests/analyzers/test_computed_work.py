"""Analyzers read computed work (issue 15, vLLM 0.33): prefix-cache hits, deferred waiting requests,
speculative decoding and sleeping engines, on exposition text from a prometheus_client registry with
vLLM 0.33's names and labels (v1/metrics/loggers.py, v1/spec_decode/metrics.py)."""

import numpy as np
import pandas as pd
import pytest
from prometheus_client import Counter, Gauge

from expo_frames import T0_NS, VllmMetrics, simulate_starvation
from stallscope.analyzers import decode_starvation, kv_pressure, scheduler_stall, signals
from stallscope.analyzers.diagnose import diagnose
from stallscope.core.config import load_thresholds

NS = 10**9
LAB = ["model_name", "engine"]


class Vllm033(VllmMetrics):
    """VllmMetrics plus the 0.33 families these analyzers read."""

    def __init__(self, *, by_source: bool = True, by_reason: bool = True, spec: bool = False, sleep: bool = False):
        super().__init__()
        r, lab = self.registry, self.labels
        if by_source:
            fam = Counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", LAB + ["source"],
                          registry=r)
            self.source = {s: fam.labels(**lab, source=s) for s in ("local_compute", "local_cache_hit",
                                                                      "external_kv_transfer")}
        if by_reason:
            fam = Gauge("vllm:num_requests_waiting_by_reason", "Number of waiting requests by reason.",
                        LAB + ["reason"], registry=r)
            self.reason = {s: fam.labels(**lab, reason=s) for s in ("capacity", "deferred")}
        if spec:
            self.drafts, self.draft_tokens, self.accepted = (
                Counter(f"vllm:spec_decode_num_{n}", h, LAB, registry=r).labels(**lab) for n, h in (
                    ("drafts", "Number of spec decoding drafts."),
                    ("draft_tokens", "Number of draft tokens."),
                    ("accepted_tokens", "Number of accepted tokens.")))
        if sleep:
            fam = Gauge("vllm:engine_sleep_state", "Engine sleep state", LAB + ["sleep_state"], registry=r)
            self.sleep = {s: fam.labels(**lab, sleep_state=s) for s in ("awake", "weights_offloaded", "discard_all")}

    def prefill(self, total: int, cached: int):
        """One prompt's prefill completing: vLLM counts every source at the output step (loggers.py)."""
        self.prompt.inc(total)
        if hasattr(self, "source"):
            self.source["local_compute"].inc(total - cached)
            self.source["local_cache_hit"].inc(cached)

    def wait(self, capacity: int, deferred: int):
        self.waiting.set(capacity + deferred)  # vLLM's total = capacity + deferred (loggers.py)
        if hasattr(self, "reason"):
            self.reason["capacity"].set(capacity)
            self.reason["deferred"].set(deferred)


def shared_prefix_run(*, by_source: bool, seconds: int = 60):
    """16 streams whose decode step is slow (0.3 s ITL, memory-bound), and 4 prompts/s of 2000 tokens of which
    1950 hit the prefix cache: prompt_tokens_total reads 8000 tokens/s, the computed work 200 tokens/s."""
    m = Vllm033(by_source=by_source)
    frames = []
    for i in range(seconds):
        m.running.set(16)
        for _ in range(3):  # ~3 steps of 0.3 s per second
            for _ in range(16):
                m.itl.observe(0.3)
            m.generation.inc(16)
            m.iteration.observe(16 + 50 + 16)  # 16 decodes + one prompt's 50 computed tokens (+ its first token)
        for _ in range(4):
            m.prefill(2000, 1950)
            m.prefill_time.observe(0.3)
            m.ttft.observe(0.35)
        frames.append(m.scrape(T0_NS + i * NS))
    return pd.concat(frames, ignore_index=True)


def kinds(samples):
    return list(diagnose([("", {"samples": samples})]).findings_frame()["kind"].unique())


def test_a_long_shared_prefix_is_not_prefill_load_when_vllm_splits_out_the_computed_tokens():
    with_source = shared_prefix_run(by_source=True)
    sig = signals.compute(with_source)
    assert np.nanmax(sig["prompt_rate"]) == pytest.approx(200, rel=0.05)
    assert set(sig["prompt_computed"].dropna()) == {1.0}
    assert np.nanmax(sig["long_prefill_rate"]) == 0  # iteration_tokens_total counts computed tokens only
    assert kinds(with_source) == ["itl_high"]
    # the same run read through prompt_tokens_total alone: 8000 tokens/s of "prefill load"
    older = shared_prefix_run(by_source=False)
    assert np.nanmax(signals.compute(older)["prompt_rate"]) == pytest.approx(8000, rel=0.05)
    assert kinds(older) == ["decode_starvation"]


def test_the_cost_per_prompt_token_divides_the_prefill_time_by_the_computed_tokens():
    computed = decode_starvation.estimate_cost(signals.compute(shared_prefix_run(by_source=True)))
    total = decode_starvation.estimate_cost(signals.compute(shared_prefix_run(by_source=False)))
    # 4 x 0.3 s of prefill per second over 200 computed tokens, not over 8000 prompt tokens; each request's
    # prefill time is one 0.3 s step (ITL P50) whose decode work is taken out, which leaves nothing here, so
    # the estimate stops at its floor, a quarter of the raw ratio
    assert computed["prefill_s_per_token"] == pytest.approx(0.25 * 1.2 / 200, rel=0.05)
    assert total["prefill_s_per_token"] == pytest.approx(0.25 * 1.2 / 8000, rel=0.05)
    assert "computed prompt token" in computed["source"]
    assert "could not separate cached tokens" in total["source"]


def test_a_finding_from_prompt_tokens_total_says_it_could_not_separate_cached_tokens():
    old_samples, _ = simulate_starvation(60)  # an older vLLM: no prompt_tokens_by_source_total
    found = [f for f in decode_starvation.detect(signals.compute(old_samples)) if f.kind == "decode_starvation"]
    assert found and all(f.evidence["prompt_tokens_source"] == "prompt_tokens_total" for f in found)
    assert all("could not separate cached tokens" in f.explanation for f in found)
    new = [f for f in decode_starvation.detect(signals.compute(shared_prefix_run(by_source=True)),
                                               thresholds=load_thresholds(prefill_tokens_rate_high=100))
           if f.kind == "decode_starvation"]
    assert new and all(f.evidence["prompt_tokens_source"] == "local_compute" for f in new)
    # the cost per token the recommendation used is in the evidence: 1.2 s of prefill per 200 computed tokens,
    # less the four 0.3 s decode steps, floored at a quarter of the raw ratio
    assert all(f.evidence["prefill_s_per_token"] == pytest.approx(0.25 * 1.2 / 200, rel=0.05) for f in new)
    assert not any("could not separate" in f.explanation for f in new)


def waiting_run(capacity: int, deferred: int, *, by_reason: bool = True, asleep: bool = False, seconds: int = 40):
    """A full KV cache (0.95) and a frozen running set generating nothing, with requests waiting."""
    m = Vllm033(by_source=False, by_reason=by_reason, sleep=True)
    frames = []
    for i in range(seconds):
        m.kv.set(0.95)
        m.running.set(4)
        m.wait(capacity, deferred)
        m.sleep["awake"].set(0 if asleep else 1)
        m.sleep["weights_offloaded"].set(1 if asleep else 0)
        m.sleep["discard_all"].set(0)
        frames.append(m.scrape(T0_NS + i * NS))
    return signals.compute(pd.concat(frames, ignore_index=True))


def test_requests_deferred_for_lora_slots_or_kv_loads_are_not_kv_pressure_nor_a_stall():
    deferred = waiting_run(0, 5)
    assert np.nanmax(deferred["waiting"]) == 0 and np.nanmax(deferred["waiting_total"]) == 5
    # the pool reads 95% full, so that much is said, at info: nobody waits for capacity
    assert [(f.kind, f.severity, f.evidence["waiting_max"]) for f in kv_pressure.detect(deferred)] == [
        ("kv_pressure", "info", 0)]
    assert scheduler_stall.detect(deferred) == []
    capacity = waiting_run(3, 2, seconds=160)   # frozen past the 2 m hold of VLLMSchedulerStalled
    pressure = kv_pressure.detect(capacity)
    assert [f.kind for f in pressure] == ["kv_pressure"]
    assert pressure[0].evidence["waiting_max"] == 3 and pressure[0].evidence["waiting_total_max"] == 5
    assert [f.kind for f in scheduler_stall.detect(capacity)] == ["scheduler_stall"]
    # before vLLM 0.20 (no by-reason gauge) the total is all there is
    older = waiting_run(0, 5, by_reason=False)
    assert [f.kind for f in kv_pressure.detect(older)] == ["kv_pressure"]


def test_a_sleeping_engine_is_not_a_scheduler_stall():
    assert scheduler_stall.detect(waiting_run(3, 0, asleep=True, seconds=160)) == []
    assert [f.kind for f in scheduler_stall.detect(waiting_run(3, 0, asleep=False, seconds=160))] == ["scheduler_stall"]
    assert set(waiting_run(3, 0, asleep=True)["asleep"].dropna()) == {1.0}


def spec_decode_run(*, spec: bool, long_prompt: int = 0, seconds: int = 40):
    """128 running requests with 4 speculative tokens (3 accepted per draft on average): a pure decode step
    emits 128 x 4 = 512 tokens, more than the 2 x running cut of a non-speculative engine allows."""
    m = Vllm033(by_source=True, spec=spec)
    frames = []
    for i in range(seconds):
        m.running.set(128)
        for _ in range(10):
            m.iteration.observe(513 if spec else 128)  # 128 x (1 + 3) tokens plus one more from a bonus token
            m.generation.inc(512 if spec else 128)
            if spec:
                m.drafts.inc(128)
                m.draft_tokens.inc(128 * 4)
                m.accepted.inc(128 * 3)
        if long_prompt and i == 20:
            m.iteration.observe(long_prompt + 512)  # a long prefill completes among the decodes
            m.prefill(long_prompt, 0)
        frames.append(m.scrape(T0_NS + i * NS))
    return signals.compute(pd.concat(frames, ignore_index=True))


def test_speculative_decode_steps_are_not_long_prefills_but_a_real_one_still_is():
    sig = spec_decode_run(spec=True)
    assert np.nanmax(sig["tokens_per_output"]) == pytest.approx(4.0)
    assert np.nanmax(sig["long_prefill_rate"]) == 0  # the cut is 2 x 128 x 4 = 1024 tokens
    assert np.nanmax(spec_decode_run(spec=True, long_prompt=4096)["long_prefill_rate"]) > 0
    plain = spec_decode_run(spec=False)  # without speculation 128 tokens per step stay below the 512 cut
    assert np.nanmax(plain["long_prefill_rate"]) == 0 and plain["tokens_per_output"].isna().all()
