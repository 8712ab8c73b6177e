"""Workload model: length distributions from histograms, arrivals, and bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stallscope.analyzers.workload import LengthDist, Workload, workload_from_samples
from stallscope.core.errors import InputError

from expo_frames import LES, exposition, samples_frame

def test_workload_from_histograms():
    # 0..60 s: 30 prompts of 21-50 tokens, 10 of 1001-2000; 40 outputs of 101-200
    before = exposition([0] * 12, [0] * 12)
    p_after = [0, 0, 0, 0, 0, 30, 30, 30, 30, 30, 40, 40]
    g_after = [0, 0, 0, 0, 0, 0, 0, 40, 40, 40, 40, 40]
    frame = samples_frame([(1000.0, before), (1060.0, exposition(p_after, g_after))])
    w = workload_from_samples(frame, source="fixture")
    assert w.rate_hz == pytest.approx(40 / 60)
    assert w.prompt_tokens.lo == (20.0, 1000.0) and w.prompt_tokens.hi == (50.0, 2000.0)
    assert w.prompt_tokens.p == pytest.approx((0.75, 0.25))
    assert w.output_tokens.mean() == pytest.approx(150.5)
    assert w.long_threshold_tokens == 200  # 4 x the median bucket's upper bound (50)
    assert w.is_long(1500) and not w.is_long(40)
    arrivals = w.open_arrivals(np.random.default_rng(7))
    assert 25 <= len(arrivals) <= 60  # Poisson(40) over 60 s
    assert all(0 < t < 60 for t, *_ in arrivals)
    assert sum(1 for _, p, _, _ in arrivals if p > 1000) > 0


def test_counter_reset_counts_post_reset_value():
    zero = exposition([0] * 12, [0] * 12)
    mid = exposition([0, 0, 0, 0, 0, 10, 10, 10, 10, 10, 10, 10], [0, 0, 0, 0, 10] + [10] * 7)
    # server restarted: counters restart from 0 and reach 4
    after = exposition([0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4], [0, 0, 0, 0, 4] + [4] * 7)
    w = workload_from_samples(samples_frame([(0, zero), (30, mid), (60, after)]))
    assert w.rate_hz == pytest.approx(14 / 60)


def test_inf_bucket_mass_lands_above_last_bound():
    d = LengthDist.from_buckets([100, 1000, math.inf], [0, 0, 5])
    assert d.lo == (1000.0,) and d.hi == (1250.0,)
    s = d.sample(np.random.default_rng(0), 200)
    assert s.min() >= 1001 and s.max() <= 1250


def test_sampling_matches_bucket_masses():
    d = LengthDist.from_buckets([10, 100], [30, 100])
    s = d.sample(np.random.default_rng(3), 4000)
    assert ((s >= 1) & (s <= 10)).mean() == pytest.approx(0.3, abs=0.03)
    assert s.max() <= 100 and s.min() >= 1


def test_fixed_and_empirical():
    assert LengthDist.fixed(32).sample(np.random.default_rng(0)) == 32
    d = LengthDist.empirical([16, 16, 64, 64, 64, 2048])
    assert d.p == pytest.approx((2 / 6, 3 / 6, 1 / 6))
    assert set(d.sample(np.random.default_rng(0), 100).tolist()) <= {16, 64, 2048}


def test_periodic_long_prompts_and_sessions():
    w = Workload(LengthDist.fixed(32), LengthDist.fixed(128), sessions=8, long_prompt_tokens=2048,
                 long_every_s=3.0, long_first_s=0.5, duration_s=10.0)
    arrivals = w.open_arrivals(np.random.default_rng(0))
    assert [t for t, *_ in arrivals] == [0.5, 3.5, 6.5, 9.5]
    assert all(kind == "long" and p == 2048 for _, p, _, kind in arrivals)
    assert w.long_threshold_tokens == 128 and w.draw(np.random.default_rng(0)) == (32, 128)


@pytest.mark.parametrize("kwargs,match", [
    ({"duration_s": 0}, "duration must be > 0 s, got 0"),
    ({"rate_hz": -1.0}, "must be >= 0"),
    ({}, "workload has no arrivals"),
])
def test_bad_workloads(kwargs, match):
    with pytest.raises(InputError, match=match):
        Workload(LengthDist.fixed(8), LengthDist.fixed(8), **kwargs)


def test_bad_lengths_and_missing_histograms():
    with pytest.raises(InputError, match="token count must be >= 1, got 0"):
        LengthDist.fixed(0)
    frame = samples_frame([(0, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n"),
                           (10, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2.0\n")])
    with pytest.raises(InputError, match="histogram `vllm:request_prompt_tokens` not found"):
        workload_from_samples(frame)
    flat = exposition([0] * 12, [0] * 12)
    with pytest.raises(InputError, match="no observations in the window"):
        workload_from_samples(samples_frame([(0, flat), (10, flat)]))
    with pytest.raises(InputError, match="one scrape"):
        workload_from_samples(samples_frame([(0, flat)]))


def test_workload_rebuilt_from_a_step_trace_and_from_step_counts():
    from stallscope.analyzers.step_cost import StepCostModel
    from stallscope.analyzers.whatif import simulate
    from stallscope.analyzers.workload import workload_from_step_counts, workload_from_steps

    w = Workload(LengthDist.fixed(40), LengthDist.fixed(10), sessions=3, duration_s=2.0)
    res = simulate(w, StepCostModel(intercept_s=0.01), max_num_batched_tokens=32, record_steps=True)
    steps = pd.DataFrame(res.steps)
    rebuilt = workload_from_steps(steps)
    assert rebuilt.prompt_tokens.p == (1.0,) and rebuilt.prompt_tokens.hi == (40.0,)   # chunks 32 + 8
    assert rebuilt.output_tokens.hi == (10.0,)
    assert rebuilt.rate_hz == pytest.approx(len(res.requests) / (res.steps[-1]["end_ns"] / 1e9), rel=1e-6)
    coarse = workload_from_step_counts(steps.drop(columns="num_scheduled_tokens"))
    # the median prefill step is a chunk (32-token budget less a decode or two), not a prompt: coarse
    assert coarse.sessions == 3 and coarse.long_prompt_tokens == 31
    with pytest.raises(InputError, match="no per-request token counts"):
        workload_from_steps(steps.drop(columns="num_scheduled_tokens"))
