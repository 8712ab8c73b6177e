"""What-if simulator: it replays the reference scheduler exactly, its clock is the step-cost model,
and its latencies match hand-computed values on small workloads."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from stallscope.analyzers.step_cost import (
    StepCostModel, fit_step_cost, read_step_trace, trace_itl, trace_token_times,
)
from stallscope.analyzers.whatif import (
    predict, recommend, simulate, summarize,
)
from stallscope.analyzers.workload import LengthDist, Workload
from stallscope.core.errors import InputError
from stallscope.engine.config import SchedulerConfig
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.engine import LLMEngine
from stallscope.engine.request import SamplingParams

CONST = StepCostModel(intercept_s=0.010)                                   # every step 10 ms
LINEAR = StepCostModel(intercept_s=0.010, coef_s={"prefill_tokens": 1e-4})  # + 0.1 ms per prompt token


def fixed(prompt, output, **kw):
    return Workload(LengthDist.fixed(prompt), LengthDist.fixed(output), **kw)


def test_steady_sessions_constant_cost_exact():
    w = fixed(16, 32, sessions=2, duration_s=1.0)
    res = simulate(w, CONST, max_num_batched_tokens=512)
    s = summarize(res, w)
    # both prompts prefill in step 1 (first token at 10 ms), then one token per 10 ms step
    assert s["ttft_short_p50_s"] == pytest.approx(0.010) and s["ttft_short_p99_s"] == pytest.approx(0.010)
    assert s["itl_p50_s"] == pytest.approx(0.010) and s["itl_p99_s"] == pytest.approx(0.010)
    assert s["output_tok_s"] == pytest.approx(200.0, rel=0.02)   # 2 tokens per 10 ms
    assert s["num_long"] == 0 and s["num_unfinished"] == 0


def test_unchunked_long_prompt_stalls_decodes_by_its_prefill_step():
    w = fixed(16, 400, sessions=4, long_prompt_tokens=1000, long_output_tokens=2, long_every_s=1.0,
              long_first_s=0.5, duration_s=1.2)
    off = simulate(w, LINEAR, max_num_batched_tokens=2048, enable_chunked_prefill=False)
    gaps = np.concatenate([np.diff(r.token_times_s) for r in off.requests if r.kind == "session"])
    # the long prompt's whole prefill runs alone: 10 ms + 1000 x 0.1 ms; decodes wait that step
    # plus their own decode step (10 ms)
    assert gaps.max() == pytest.approx(0.010 + 0.100 + 0.010)
    on = simulate(w, LINEAR, max_num_batched_tokens=256, enable_chunked_prefill=True)
    gaps_on = np.concatenate([np.diff(r.token_times_s) for r in on.requests if r.kind == "session"])
    # chunked: 4 decodes + a 252-token chunk per step: 10 + 25.2 ms
    assert gaps_on.max() == pytest.approx(0.010 + 0.1e-3 * 252)


def test_trade_off_shape_in_prediction():
    w = fixed(32, 200, sessions=6, long_prompt_tokens=1800, long_output_tokens=4, long_every_s=0.4, duration_s=6.0)
    cost = StepCostModel(intercept_s=0.004, coef_s={"prefill_tokens": 4e-5, "decode_reqs": 2e-4})
    p = predict(w, cost, [128, 256, 512, 1024, 2048], include_unchunked=True, noise=False)
    chunked = p[p["enable_chunked_prefill"]]
    assert list(p["max_num_batched_tokens"]) == [128, 256, 512, 1024, 2048, 2048]
    assert chunked["ttft_long_p50_s"].is_monotonic_decreasing          # smaller budget: long TTFT up
    assert chunked["itl_p99_s"].is_monotonic_increasing                 # smaller budget: ITL P99 down
    assert chunked["output_tok_s"].iloc[0] < chunked["output_tok_s"].iloc[-1]  # and slightly less throughput
    off = p[~p["enable_chunked_prefill"]].iloc[0]
    assert off["itl_p99_s"] > chunked["itl_p99_s"].max()


def test_policy_is_the_engines_scheduler(tmp_path):
    """Same requests, all at t=0: the simulated steps equal the real engine's step trace, step for step."""
    w = fixed(20, 24, sessions=4, long_prompt_tokens=100, long_output_tokens=8, long_every_s=10.0,
              long_first_s=0.0, duration_s=1e-6)
    sim = simulate(w, CONST, max_num_batched_tokens=64, shape=SchedulerConfig(max_num_seqs=8, block_size=16,
                                                                            num_gpu_blocks=10, max_model_len=144),
                   record_steps=True)
    trace = tmp_path / "steps.jsonl"
    cfg = EngineConfig(model="tiny", max_num_batched_tokens=64, max_num_seqs=8, block_size=16,
                       kv_cache_mb=(10.5 * EngineConfig().bytes_per_block) / 2**20, step_trace=str(trace),
                       enable_prefix_caching=False,             # the simulator's requests carry no token ids
                       max_model_len=144)                       # 9 usable blocks: vLLM's startup check
    engine = LLMEngine(cfg)
    assert engine.kv_cache_manager.num_gpu_blocks == 10
    engine.add_request("sim-0", [7] * 100, SamplingParams(max_tokens=8, ignore_eos=True))
    for i in range(1, 5):
        engine.add_request(f"sim-{i}", [5] * 20, SamplingParams(max_tokens=24, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    if hasattr(engine, "close"):
        engine.close()
    real = [json.loads(line) for line in trace.read_text().splitlines()]
    keys = ("num_prefill_tokens", "num_decode_tokens", "num_running", "num_waiting", "num_preempted",
            "num_scheduled_tokens")
    assert [{k: s[k] for k in keys} for s in sim.steps] == [{k: s[k] for k in keys} for s in real]
    assert sim.num_preemptions == 1  # 10 blocks (9 besides the null block) are too few for all five: preemption ran


def test_fit_of_a_simulated_trace_recovers_the_model(tmp_path):
    cost = StepCostModel(intercept_s=0.003, coef_s={"prefill_tokens": 3e-5, "decode_reqs": 5e-4,
                                                    "kv_tokens_read": 2e-7}, gap_s=0.001)
    w = Workload(LengthDist.from_buckets([50, 200, 1500], [40, 90, 100]), LengthDist.fixed(40), rate_hz=6.0,
                 duration_s=20.0)
    res = simulate(w, cost, max_num_batched_tokens=256, record_steps=True)
    path = tmp_path / "sim.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in res.steps))
    fit = fit_step_cost(read_step_trace(path))
    assert fit.mape < 1e-3
    for k, v in cost.coef_s.items():
        assert fit.coef_s[k] == pytest.approx(v, rel=0.01), k
    assert fit.gap_s == pytest.approx(0.001, abs=2e-6)


def test_noise_replays_residuals_deterministically():
    noisy = StepCostModel(intercept_s=0.010, residuals=(0.5, 1.5))
    w = fixed(16, 50, sessions=1, duration_s=0.5)
    a = summarize(simulate(w, noisy, max_num_batched_tokens=64, seed=3), w)
    b = summarize(simulate(w, noisy, max_num_batched_tokens=64, seed=3), w)
    np.testing.assert_equal(a, b)
    itl = np.diff(simulate(w, noisy, max_num_batched_tokens=64, seed=3).requests[0].token_times_s)
    assert set(np.round(itl, 6)) == {0.005, 0.015}


def test_kv_pool_pressure_preempts_and_still_finishes():
    w = fixed(100, 60, sessions=6, duration_s=2.0)
    res = simulate(w, CONST, max_num_batched_tokens=512, shape=SchedulerConfig(num_gpu_blocks=30, block_size=16))
    assert res.num_preemptions > 0
    assert summarize(res, w)["num_unfinished"] == 0


def test_recommend_largest_budget_meeting_slo_and_fallback():
    p = pd.DataFrame({"max_num_batched_tokens": [256, 512, 1024, 2048, 2048],
                      "enable_chunked_prefill": [True, True, True, True, False],
                      "itl_p99_s": [0.05, 0.12, 0.19, 0.5, 0.01], "ttft_long_p99_s": [4, 3, 2, 1, 1]})
    rec = recommend(p, 0.2, headroom=0)
    assert rec["max_num_batched_tokens"] == 1024 and rec["meets_slo"] and rec["within_headroom"]
    assert rec["flags"] == "--enable-chunked-prefill --max-num-batched-tokens 1024"
    # the default keeps 20 % of the SLO free: 0.19 s > 0.16 s, so 512 (0.12 s)
    rec = recommend(p, 0.2)
    assert rec["max_num_batched_tokens"] == 512 and rec["meets_slo"] and rec["within_headroom"]
    assert "SLO 0.2 s less 20% headroom" in rec["reason"]
    # the headroom wins over a larger budget inside the bare SLO: 256 (0.05 s <= 0.104 s), not 512
    assert recommend(p, 0.13)["max_num_batched_tokens"] == 256
    # none inside the headroom: the largest inside the bare SLO, flagged as without headroom
    tight = recommend(p.iloc[1:], 0.13)
    assert tight["max_num_batched_tokens"] == 512 and tight["meets_slo"] and not tight["within_headroom"]
    assert "without the 20% headroom (0.104 s)" in tight["reason"]
    with pytest.raises(InputError, match=r"headroom must be in \[0, 1\), got 1"):
        recommend(p, 0.2, headroom=1)
    strict = recommend(p, 0.01)
    # none meets: the lowest predicted ITL P99 (not the smallest budget), its TTFT cost in the reason
    assert strict["max_num_batched_tokens"] == 256 and not strict["meets_slo"]
    assert "no simulated budget meets" in strict["reason"] and "TTFT P99 of 4.00 s" in strict["reason"]
    with pytest.raises(InputError, match="ITL SLO must be > 0 s, got 0"):
        recommend(p, 0)


def test_bad_budgets():
    w = fixed(16, 8, sessions=1, duration_s=0.1)
    with pytest.raises(InputError, match=r"budgets must be positive integers, got \[0, 64\]"):
        predict(w, CONST, [64, 0])
    with pytest.raises(InputError, match="max_num_batched_tokens must be >= 1, got 0"):
        simulate(w, CONST, max_num_batched_tokens=0)


def test_token_times_rebuilt_from_a_trace_match_the_simulation():
    """trace_token_times (the measured side of the validation) recovers every simulated token time."""
    w = Workload(LengthDist.from_buckets([20, 300, 600], [10, 16, 20]), LengthDist.fixed(12), rate_hz=8.0,
                 duration_s=3.0)
    shape = SchedulerConfig(num_gpu_blocks=40, scheduler_reserve_full_isl=False)   # admission by the first chunk
    res = simulate(w, LINEAR, max_num_batched_tokens=128, shape=shape, record_steps=True)
    assert res.num_preemptions > 0        # recompute chunks are in the trace too
    rebuilt = trace_token_times(pd.DataFrame(res.steps))
    for r in res.requests:
        assert rebuilt[r.request_id] == [int(round(t * 1e9)) for t in r.token_times_s], r.request_id
    itl = trace_itl(pd.DataFrame(res.steps))
    assert len(itl) == sum(len(r.token_times_s) - 1 for r in res.requests)


def test_request_overhead_shifts_ttft():
    w = fixed(16, 4, sessions=1, duration_s=1.0)
    s = summarize(simulate(w, CONST, max_num_batched_tokens=64, request_overhead_s=0.05), w)
    assert s["ttft_short_p50_s"] == pytest.approx(0.06) and s["itl_p99_s"] == pytest.approx(0.010)
    # each request: 50 ms in flight + 4 steps of 10 ms, the next sent at the last token: a 90 ms cycle,
    # so sends at 0, 0.09, ..., 0.99 -> 12 requests start within the 1 s window
    assert s["num_requests"] == 12


def test_a_freeze_p99_cannot_see_still_bounds_the_budget():
    """Two long prompts in 8 s: their 160 ms whole-prompt steps are 12 ITL samples among thousands, so every
    budget meets a 50 ms P99; the slowest step of a long prompt's prefill still has to fit the SLO."""
    from stallscope.analyzers.budget import inputs_from_frames, recommend_budget

    w = fixed(16, 100, sessions=6, long_prompt_tokens=1500, long_output_tokens=4, long_every_s=4.0, duration_s=8.0)
    res = simulate(w, LINEAR, max_num_batched_tokens=2048, enable_chunked_prefill=False, record_steps=True,
                   shape=SchedulerConfig(num_gpu_blocks=2000))
    out = recommend_budget(inputs_from_frames(pd.DataFrame(res.steps)), 0.05)
    preds, rec = out["predictions"].set_index("max_num_batched_tokens"), out["recommendation"]
    assert (preds["itl_p99_s"] <= 0.04).all()                        # P99 alone would pick 4,096: one whole step
    assert preds.loc[4096, "slowest_step_s"] == pytest.approx(0.16, abs=0.002)
    assert rec["max_num_batched_tokens"] == 256 and rec["predicted_slowest_step_s"] == pytest.approx(0.035, abs=1e-4)


def test_analyze_takes_the_starvation_budget_from_the_simulation():
    """A starvation trace (chunking off, long prompts): the trace alone yields the budget, and the
    decode_starvation finding's recommendation and evidence carry it."""
    from stallscope.analyzers.advice import budget_advisor
    from stallscope.analyzers.budget import inputs_from_frames, recommend_budget

    w = fixed(16, 100, sessions=6, long_prompt_tokens=1500, long_output_tokens=4, long_every_s=0.5, duration_s=8.0)
    res = simulate(w, LINEAR, max_num_batched_tokens=2048, enable_chunked_prefill=False, record_steps=True,
                   shape=SchedulerConfig(num_gpu_blocks=2000))
    steps = pd.DataFrame(res.steps)
    inputs = inputs_from_frames(steps)
    res = recommend_budget(inputs, 0.05)
    rec = res["recommendation"]
    # a chunk step is 10 ms + 0.1 ms per scheduled prompt token: 256 -> ~35 ms, 512 -> ~61 ms > 50 ms
    assert rec["max_num_batched_tokens"] == 256 and rec["meets_slo"]
    assert rec["predicted_itl_p99_s"] == pytest.approx(0.0354, abs=0.002)
    # 256 is also the largest multiple of 64 whose slowest long-prompt step fits 40 ms (the SLO less 20 %):
    # 256 - 6 decodes = 250 prompt tokens -> 35 ms; 320 -> 314 -> 41.4 ms
    assert inputs.cost.mape < 1e-6 and res["budgets"] == [256, 512, 1024, 2048, 4096]
    assert rec["predicted_slowest_step_s"] == pytest.approx(0.0352, abs=1e-4) and rec["step_bound_s"] == pytest.approx(0.04)
    assert inputs.cost.coef_s["prefill_tokens"] == pytest.approx(1e-4)   # two prompt sizes: no attention term
    text, evidence = budget_advisor(steps, None, 0.05)()
    assert "--max-num-batched-tokens 256" in text and "simulating" in text
    assert evidence["max_num_batched_tokens"] == 256
    assert evidence["budget_source"] == "what-if simulation of the step trace"
    assert evidence["whatif_budgets"] == [256, 512, 1024, 2048, 4096]
    assert evidence["expected_step_s"] == pytest.approx(rec["predicted_slowest_step_s"])
    # without per-request detail (an nsys steps frame) there is no simulated advice
    assert budget_advisor(steps.drop(columns="num_scheduled_tokens"), None, 0.05) is None


def test_long_prompts_paced_by_session_progress_as_repro_does():
    # 2 sessions of 16-token prompts; a 300-token prompt once the sessions streamed 20 tokens each since
    # the previous long prompt's first token. Constant 10 ms steps: each step gives each session a token.
    w = fixed(16, 1000, sessions=2, long_prompt_tokens=300, long_output_tokens=2, long_every_tokens=20,
              long_every_s=99.0, duration_s=2.0)
    res = simulate(w, CONST, max_num_batched_tokens=64, record_steps=True)
    longs = sorted((r for r in res.requests if r.kind == "long"), key=lambda r: r.arrival_s)
    assert len(longs) >= 3
    first_tokens = [r.token_times_s[0] for r in longs]
    for prev_first, nxt in zip(first_tokens, longs[1:]):
        # 20 tokens each for 2 sessions = 20 more steps of 10 ms after the previous long got its token
        assert nxt.arrival_s == pytest.approx(prev_first + 20 * 0.010, abs=1e-9)
    assert longs[0].arrival_s == pytest.approx(0.010 * 20, abs=1e-9)   # 20 steps from the start


def test_seeded_runs_pool_their_requests_for_quantiles():
    """predict(seeds=k) computes each P99 over the requests of all k runs, as the validation pools its
    measured rounds; throughput is tokens over the summed run time."""
    w = fixed(16, 24, sessions=3, long_prompt_tokens=600, long_output_tokens=2, long_every_s=0.3, duration_s=2.0)
    noisy = StepCostModel(intercept_s=0.010, coef_s={"prefill_tokens": 1e-4}, residuals=tuple(np.linspace(0.5, 3.0, 11)))
    runs = [simulate(w, noisy, max_num_batched_tokens=128, seed=k) for k in (7, 8)]
    ttft = [r.token_times_s[0] - r.arrival_s for run in runs for r in run.requests
            if r.arrival_s < w.duration_s and len(r.token_times_s) >= r.max_tokens]
    itl = np.concatenate([np.diff(r.token_times_s) for run in runs for r in run.requests
                          if r.arrival_s < w.duration_s and len(r.token_times_s) >= r.max_tokens])
    row = predict(w, noisy, [128], seed=7, seeds=2).iloc[0]
    assert row["ttft_p99_s"] == pytest.approx(np.percentile(ttft, 99))
    assert row["itl_p99_s"] == pytest.approx(np.percentile(itl, 99))
    per_run = [summarize(run, w) for run in runs]
    assert row["ttft_p99_s"] != pytest.approx(np.mean([s["ttft_p99_s"] for s in per_run]))  # not a mean of P99s
    assert row["num_requests"] == pytest.approx(np.mean([s["num_requests"] for s in per_run]))
