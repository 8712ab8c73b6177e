"""Detectors on deterministic engine simulations exported through vLLM's real metric names and buckets."""

import numpy as np
import pandas as pd
import pytest

from expo_frames import T0_NS, VllmMetrics, simulate_kv_pressure, simulate_starvation
from stallscope.analyzers import decode_starvation, kv_pressure, memory_bound, scheduler_stall, signals
from stallscope.analyzers import step_stalls
from stallscope.analyzers.diagnose import diagnose
from stallscope.analyzers.advice import chunk_budget, chunked_prefill_recommendation, kv_recommendation
from stallscope.analyzers.finding import Finding, severity_rank, to_frame
from stallscope.core.config import load_thresholds
from stallscope.core.errors import InputError
from stallscope.core.schema import validate

NS = 10**9


def find_all(frames: dict):
    """The findings frame of one group through the one diagnosis."""
    return diagnose([("", frames)]).findings_frame()


@pytest.fixture(scope="module")
def unchunked():
    return simulate_starvation(60)


@pytest.fixture(scope="module")
def chunked():
    return simulate_starvation(60, chunk=128)


def test_unchunked_long_prompts_are_decode_starvation_with_the_offending_steps(unchunked):
    samples, steps = unchunked
    out = find_all({"samples": samples, "steps": steps})
    validate(out, "findings")
    assert set(out["kind"]) == {"decode_starvation"}
    first = out.iloc[0]
    # the first long prompt arrives at 5 s; its 2048-token step ends at 5.0 + 2.078 s
    assert first["start_ns"] <= T0_NS + 7 * NS <= first["end_ns"]
    ev = first["evidence"]
    assert ev["offending_steps"][0]["num_prefill_tokens"] == 2048
    assert ev["offending_steps"][0]["gap_s"] == pytest.approx(2.078, abs=1e-3)
    assert ev["itl_stall_share_max"] > 0.15  # 8 streams x 2.08 s of a ~6 s window
    # the fitted cost is 30 ms + 1 ms/token: the largest multiple of 64 under 200 ms is 128 -> 158 ms steps
    assert ev["max_num_batched_tokens"] == 128
    assert "--enable-chunked-prefill --max-num-batched-tokens 128" in first["recommendation"]


def test_per_observation_p99_alone_misses_an_isolated_stall_the_time_share_catches(unchunked):
    samples, _ = unchunked
    th = load_thresholds()
    eval_ts, _ = signals.choose_grid(samples, th)
    sig = signals.compute(samples, thresholds=th, eval_ts=eval_ts, window_ns=30 * NS)
    # in a 30 s window, 8-16 stalled samples among ~8000 sit below the P99 rank...
    p99_only = sig["itl_p99"] > th["itl_slo_s"]
    stalled, _ = decode_starvation.flags(sig, th)
    assert stalled.sum() > p99_only.sum() >= 0
    assert not p99_only.iloc[-1] and stalled[-1]


def test_chunked_prefill_run_is_not_flagged(chunked):
    samples, steps = chunked
    out = find_all({"samples": samples, "steps": steps})
    assert len(out) == 0
    assert len(step_stalls.find_stalls(steps, min_gap_s=0.2)) == 0


def test_high_itl_without_prefill_is_not_starvation():
    samples, steps = simulate_starvation(30, long_tokens=100, per_token_s=0.0, decode_step_s=0.3)
    out = find_all({"samples": samples})
    assert list(out["kind"].unique()) == ["itl_high"]
    assert out.iloc[0]["evidence"]["likely_cause"] == "memory_bound_decode"
    assert "not decode starvation" in out.iloc[0]["explanation"]


def test_prefill_rate_alone_counts_as_load_when_above_threshold(unchunked):
    samples, _ = unchunked
    th = load_thresholds(prefill_tokens_rate_high=100)
    sig = signals.compute(samples, thresholds=th)
    sig["long_prefill_rate"] = 0.0  # only the prompt-token rate is left
    _, prefill = decode_starvation.flags(sig, th)
    assert prefill.any() and not prefill.all()


def test_kv_pressure_flags_the_full_cache_with_capacity_figures():
    samples = simulate_kv_pressure()
    out = find_all({"samples": samples})
    assert list(out["kind"]) == ["kv_pressure"]
    f = out.iloc[0]
    assert f["severity"] == "critical"  # 0.5 preemptions/s >= 0.1
    assert T0_NS + 39 * NS <= f["start_ns"] <= T0_NS + 41 * NS
    assert T0_NS + 89 * NS <= f["end_ns"] <= T0_NS + 100 * NS
    assert f["evidence"]["kv_capacity_tokens"] == 16000 and f["evidence"]["kv_capacity_tokens_fp8"] == 32000
    assert "16,000" in f["recommendation"] and "32,000" in f["recommendation"]
    assert f["evidence"]["max_num_seqs"] == 20  # floor(24 x 0.8 / 0.95)


def test_a_queue_for_blocks_without_preemptions_says_so_and_names_no_max_num_seqs():
    # a pool scraped at 96 % with requests waiting and nothing preempted: it ran out, and the harm is the queue
    f = to_frame(kv_pressure.detect(signals.compute(s := simulate_kv_pressure(usage=0.96, preempt=False)),
                                    samples=s)).iloc[0]
    assert (f["kind"], f["severity"]) == ("kv_pressure", "warning")
    assert f["evidence"]["preemptions_per_s_max"] == 0 and "max_num_seqs" not in f["evidence"]
    assert f["evidence"]["kv_capacity_tokens"] == 16000
    assert f["evidence"]["kv_free_tokens_min"] == pytest.approx(0.04 * 16000)
    assert "held 96% of its blocks" in f["explanation"] and "ran full" not in f["explanation"]
    assert "No request was preempted" in f["explanation"] and "about 640 of 16,000 tokens free" in f["explanation"]
    assert "preempts the newest" not in f["explanation"]
    assert f["recommendation"].startswith("`--kv-cache-dtype fp8`")
    assert "a lower `--max-num-seqs` would not help" in f["recommendation"]
    # the preempting pool keeps the preemption text and the --max-num-seqs figure
    g = to_frame(kv_pressure.detect(signals.compute(s := simulate_kv_pressure()), samples=s)).iloc[0]
    assert "Preemptions reached" in g["explanation"] and "No request was preempted" not in g["explanation"]
    assert "lowering `--max-num-seqs`" in g["recommendation"] and "would not help" not in g["recommendation"]


def test_a_queue_beside_a_pool_never_scraped_full_is_near_full_not_pressure():
    # held-out 93's pool: 84 % of the blocks with requests waiting, nothing preempted; its step trace peaked at
    # 0.845. The scrapes cannot say it ran out, nor whether the requests waited for blocks or for the budget
    out = to_frame(kv_pressure.detect(signals.compute(s := simulate_kv_pressure(usage=0.84, preempt=False)),
                                      samples=s))
    assert list(out["kind"]) == ["kv_near_full"] and list(out["severity"]) == ["info"]
    f = out.iloc[0]
    assert f["evidence"]["kv_usage_max"] == pytest.approx(0.84) and f["evidence"]["waiting_max"] == 4
    assert f["evidence"]["kv_free_tokens_min"] == pytest.approx(0.16 * 16000)
    assert "do not show that it ran out" in f["explanation"] and "token budget" in f["explanation"]
    assert "About 2,560 of 16,000 tokens were free" in f["explanation"]
    assert f["recommendation"].startswith("none on this evidence") and "`--kv-cache-dtype fp8`" in f["recommendation"]
    # an fp8 pool is not told to turn fp8 on
    s = simulate_kv_pressure(usage=0.84, preempt=False, cache_dtype="fp8")
    rec = to_frame(kv_pressure.detect(signals.compute(s), samples=s)).iloc[0]["recommendation"]
    assert "--gpu-memory-utilization" in rec and "fp8" not in rec
    # one scrape at 0.97 among them, off the grid's instants (before its first point): the pool ran out
    s = simulate_kv_pressure(usage=0.84, preempt=False, pressure=(0.0, 90.0), spike=(1.0, 0.97))
    sig = signals.compute(s)
    assert sig["kv_usage"].max() == pytest.approx(0.84)   # the grid's instants miss it
    out = to_frame(kv_pressure.detect(sig, samples=s))
    assert list(out["kind"]) == ["kv_pressure"] and list(out["severity"]) == ["warning"]
    assert out.iloc[0]["evidence"]["kv_usage_max"] == pytest.approx(0.97)


def test_kv_high_without_waiting_or_preemption_is_not_pressure():
    m = VllmMetrics()
    frames = []
    for i in range(30):
        m.kv.set(0.9)
        m.running.set(10)
        frames.append(m.scrape(T0_NS + i * NS))
    sig = signals.compute(pd.concat(frames, ignore_index=True))
    assert len(kv_pressure.detect(sig)) == 0


def test_a_full_pool_with_nobody_waiting_is_info_with_its_numbers():
    # one scrape at 0.968 in 40 s (a pool full for one step between scrapes), and 30 s at 0.97 with 10
    # running and nothing waiting: each is the pool seen full, neither is measured harm
    for usage, full_from, full_to, windows in ((0.968, 20, 21, 1), (0.97, 5, 35, None)):
        m = VllmMetrics()
        frames = []
        for i in range(40):
            m.kv.set(usage if full_from <= i < full_to else 0.6)
            m.running.set(10)
            frames.append(m.scrape(T0_NS + i * NS))
        samples = pd.concat(frames, ignore_index=True)
        out = to_frame(kv_pressure.detect(signals.compute(samples), samples=samples))
        assert list(out["kind"]) == ["kv_pressure"] and list(out["severity"]) == ["info"]
        f = out.iloc[0]
        assert f["evidence"]["kv_usage_max"] == pytest.approx(usage) and f["evidence"]["kv_usage_full"] == 0.95
        assert f["evidence"]["waiting_max"] == 0 and f["evidence"]["preemptions_per_s_max"] == 0
        if windows is not None:
            assert f["evidence"]["windows_full"] == windows
        assert f"read {usage:.0%} full" in f["explanation"] and "not pressure" in f["explanation"]
        assert T0_NS + full_from * NS <= f["start_ns"] <= f["end_ns"] <= T0_NS + (full_to + 30) * NS


def test_frequent_preemptions_are_pressure_even_when_scrapes_miss_the_full_pool():
    # Every scrape lands just after a victim's blocks were freed (usage 0.7), but 1 preemption/s for
    # 30 s means allocations kept failing: V1 preempts only when the pool is full.
    m = VllmMetrics()
    frames = []
    for i in range(60):
        m.kv.set(0.7)
        m.running.set(12)
        if 15 <= i < 45:
            m.preemptions.inc()
        frames.append(m.scrape(T0_NS + i * NS))
    out = to_frame(kv_pressure.detect(signals.compute(pd.concat(frames, ignore_index=True))))
    assert list(out["kind"]) == ["kv_pressure"]
    assert out.iloc[0]["severity"] == "critical"
    assert out.iloc[0]["evidence"]["preemptions_per_s_max"] >= 0.9
    assert out.iloc[0]["evidence"]["kv_usage_max"] == pytest.approx(0.7)
    # the text does not claim the scrapes saw the pool over the threshold, and the advice does not "lower"
    # --max-num-seqs from 12 to floor(12 x 0.8 / 0.7) = 13
    assert "read at most 70% of its blocks in the scrapes (under the 80% threshold)" in out.iloc[0]["explanation"]
    assert "max_num_seqs" not in out.iloc[0]["evidence"]
    assert "below the observed peak of 12 running requests" in out.iloc[0]["recommendation"]


def _frozen_run(frozen_from: int, n: int, waiting: int = 3) -> pd.DataFrame:
    """6 RUNNING streams generating 100 tokens/s until `frozen_from` s, then nothing at all moves."""
    m = VllmMetrics()
    frames = []
    for i in range(n):
        m.running.set(6)
        m.waiting.set(waiting if i >= frozen_from else 0)
        if i < frozen_from:
            m.generation.inc(100)
        frames.append(m.scrape(T0_NS + i * NS))
    return pd.concat(frames, ignore_index=True)


def test_scheduler_stall_is_nothing_moving_for_longer_than_the_alert_hold():
    # 185 s with requests RUNNING and no token of any kind: longer than for.VLLMSchedulerStalled (2m)
    sig = signals.compute(_frozen_run(15, 200))
    out = to_frame(scheduler_stall.detect(sig))
    assert list(out["kind"]) == ["scheduler_stall"] and out.iloc[0]["severity"] == "critical"
    window = sig.attrs["window_ns"]
    assert T0_NS + 15 * NS - window <= out.iloc[0]["start_ns"] <= T0_NS + 20 * NS
    assert out.iloc[0]["evidence"]["episode"]["nothing_moves_s"] > 120
    assert "Decided by: no output and no computed prompt token" in out.iloc[0]["explanation"]


def test_a_young_freeze_with_nothing_moving_is_a_stall_in_progress_not_a_stuck_engine():
    # 25 s frozen at the end of the data: one engine step still running (a whole prompt's prefill with
    # chunked prefill off) until it outlasts the 2 m hold; the generation counter shows it before any ITL does
    found = diagnose([("", {"samples": _frozen_run(15, 40)})]).findings
    assert [f.kind for f in found] == ["decode_starvation"]
    f = found[0]
    assert f.evidence["ongoing"] and f.evidence["cause"] == "prefill" and f.severity == "critical"
    assert f.start_ns <= T0_NS + 17 * NS and f.end_ns == T0_NS + 39 * NS
    assert "frozen now, at the end of the data" in f.explanation
    # the same freeze is a stuck engine once it outlasts the hold the alert rule uses
    th = load_thresholds()
    th["for"] = {**th["for"], "VLLMSchedulerStalled": "10s"}
    assert [x.kind for x in diagnose([("", {"samples": _frozen_run(15, 40)})], thresholds=th).findings] == [
        "scheduler_stall"]


def _gpu_frame(dram, tensor, t0=T0_NS):
    rows = []
    for i, (d, t) in enumerate(zip(dram, tensor)):
        for metric, v in (("dram_active", d), ("tensor_active", t)):
            rows.append({"ts": t0 + i * NS, "hostname": "h<1>", "gpu": "0", "uuid": "GPU-1",
                         "model": "NVIDIA H100 80GB HBM3", "metric": metric, "value": v})
    return pd.DataFrame(rows)


def test_memory_bound_decode_is_info_and_needs_both_ratios():
    gpu = _gpu_frame([0.2] * 5 + [0.8] * 10 + [0.2] * 5, [0.5] * 5 + [0.1] * 10 + [0.5] * 5)
    out = to_frame(memory_bound.detect(gpu))
    assert list(out["kind"]) == ["memory_bound_decode"] and out.iloc[0]["severity"] == "info"
    assert (out.iloc[0]["start_ns"], out.iloc[0]["end_ns"]) == (T0_NS + 5 * NS, T0_NS + 14 * NS)
    assert out.iloc[0]["evidence"]["dram_active_mean"] == pytest.approx(0.8)
    assert "batch" in out.iloc[0]["explanation"]
    busy_tensor = _gpu_frame([0.8] * 10, [0.6] * 10)
    assert len(memory_bound.detect(busy_tensor)) == 0


def test_step_stalls_ground_truth_and_precision_recall(unchunked):
    samples, steps = unchunked
    stalls = step_stalls.find_stalls(steps, min_gap_s=0.2)
    assert list(stalls["cause"].unique()) == ["prefill"]
    assert len(stalls) == 6  # long prompts at 5, 15, ..., 55 s
    th = load_thresholds()
    eval_ts, window = signals.choose_grid(samples, th)
    sig = signals.compute(samples, thresholds=th, eval_ts=eval_ts, window_ns=window)
    stalled, prefill = decode_starvation.flags(sig, th)
    truth = step_stalls.window_truth(stalls, eval_ts, window, scrape_ts=samples["ts"].to_numpy())
    p, r = step_stalls.precision_recall(stalled & prefill, truth)
    assert p >= 0.9 and r >= 0.9


def test_fail_on_severity_names_are_checked():
    assert [severity_rank(s) for s in ("info", "warning", "critical")] == [0, 1, 2]
    with pytest.raises(InputError, match="unknown severity 'fatal'"):
        severity_rank("fatal")
    with pytest.raises(InputError, match="unknown severity 'loud'"):
        Finding("x", "loud", 0, 1)


def test_chunk_budget_rounds_down_and_clamps():
    assert chunk_budget(0.2, 0.03, 0.001) == 128
    assert chunk_budget(0.2, 0.25, 0.001) == 64  # decode alone is over the SLO: the floor
    assert chunk_budget(0.2, 0.0, float("nan")) == 512
    assert np.isnan(step_stalls.precision_recall(np.zeros(3, bool), np.zeros(3, bool))[0])


def test_a_long_unchunked_prefill_step_is_starvation_not_a_scheduler_livelock():
    m = VllmMetrics()
    frames = []
    for i in range(40):
        m.running.set(6)
        frozen = 10 <= i < 20  # one 10 s prefill-only step: nothing is generated, one request waits
        m.waiting.set(1 if frozen else 0)
        if i == 20:
            m.iteration.observe(1206)  # the whole prompt lands in the step where its prefill completes
            m.prompt.inc(1200)
        if not frozen:
            m.generation.inc(60)
        frames.append(m.scrape(T0_NS + i * NS))
    sig = signals.compute(pd.concat(frames, ignore_index=True))
    assert len(scheduler_stall.detect(sig)) == 0
    found = decode_starvation.detect(sig)
    assert [f.kind for f in found] == ["decode_starvation"]
    assert "nothing moving" in found[0].evidence["decided_by"]
    th = load_thresholds()
    th["for"] = {**th["for"], "VLLMSchedulerStalled": "5s"}   # a hold shorter than the freeze: stuck
    assert [f.kind for f in scheduler_stall.detect(sig, thresholds=th)] == ["scheduler_stall"]


def test_the_simulated_budget_is_asked_for_only_by_a_starvation_finding(unchunked, chunked):
    calls = []

    def advice():
        calls.append(1)
        return "simulated", {"max_num_batched_tokens": 256, "budget_source": "sim"}

    samples, steps = chunked
    assert decode_starvation.detect(signals.compute(samples), steps=steps, budget_advice=advice) == [] and calls == []
    samples, steps = unchunked
    found = decode_starvation.detect(signals.compute(samples), steps=steps, budget_advice=advice)
    assert [f.kind for f in found] == ["decode_starvation"] * len(found) and len(calls) == len(found) >= 1
    for f in found:  # the simulated text replaces the fitted one; its evidence wins, the fit's stays beside it
        assert f.recommendation == "simulated" and f.evidence["budget_source"] == "sim"
        assert f.evidence["max_num_batched_tokens"] == 256 and f.evidence["expected_step_s"] > 0


def test_the_grid_sits_on_jittered_scrapes_and_its_last_point_reads_the_newest():
    """Scrapes every 500 ms +/- 4 ms (median 500 ms): a grid stepping 500 ms from the first scrape drifts
    against them, reading some scrapes twice and others never, and its last point falls before the newest
    scrape. Evaluated at the scrapes, every scrape after the first window is read once, the newest last."""
    jitter = np.tile([4, -4, 0, 0, -4], 24)[:100] * 1_000_000
    ts = T0_NS + np.cumsum(np.full(100, 500_000_000) + jitter)
    samples = pd.DataFrame({"ts": ts, "metric": "vllm:num_requests_running", "value": 1.0, "target": "vllm"})
    eval_ts, window = signals.choose_grid(samples, load_thresholds())
    assert eval_ts[-1] == ts[-1]
    assert list(eval_ts) == [t for t in ts if t >= ts[0] + window]
