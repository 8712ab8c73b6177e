"""Step-cost model: feature reconstruction from step traces, the NNLS fit, its error report, roofline."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from stallscope.analyzers.step_cost import (
    StepCostModel, busy_gaps_s, fit_step_cost, read_step_trace, roofline_cost, step_features,
)
from stallscope.core.errors import InputError
from step_traces import TRUE, synthetic_trace



def test_fit_recovers_known_coefficients(tmp_path):
    steps = read_step_trace(synthetic_trace(tmp_path / "steps.jsonl"))
    model = fit_step_cost(steps, source="synthetic")
    assert model.n_steps == 300
    assert model.intercept_s == pytest.approx(TRUE["intercept"], rel=0.02)
    for name in ("prefill_tokens", "decode_reqs", "kv_tokens_read", "prefill_attn_pairs", "prefill_reqs"):
        assert model.coef_s[name] == pytest.approx(TRUE[name], rel=0.05), name
    assert model.coef_s.get("decode_kv_padded", 0.0) < 1e-9  # not in the truth: (nearly) dropped
    assert model.mape < 0.01 and model.r2 > 0.999
    assert model.gap_s == pytest.approx(0.0003, abs=1e-6)


def test_fit_error_reflects_noise(tmp_path):
    steps = read_step_trace(synthetic_trace(tmp_path / "steps.jsonl", noise=0.2))
    model = fit_step_cost(steps)
    # uniform ±20% multiplicative noise has mean |error| 10%; the fit cannot do much better or worse
    assert 0.07 < model.mape < 0.13
    assert 0.8 < model.r2 < 0.999
    assert len(model.residuals) == 300 and np.mean(model.residuals) == pytest.approx(1.0, abs=0.03)


def test_features_rebuild_context_and_recompute():
    steps = pd.DataFrame({
        "step": [0, 1, 2, 3, 4], "start_ns": [0, 10, 20, 30, 40], "end_ns": [5, 15, 25, 35, 45],
        "num_prefill_tokens": [100.0, 28.0, 0.0, 129.0, 0.0], "num_decode_tokens": [0.0, 0.0, 1.0, 0.0, 1.0],
        "num_scheduled_tokens": [{"a": 100}, {"a": 28}, {"a": 1}, {"a": 129}, {"a": 1}],
    })
    f = step_features(steps)
    # chunk 100 at 0, chunk 28 at 100, decode at 128, preempted -> recompute 129 from 0, decode at 129
    assert f["kv_tokens_read"].tolist() == [100, 128, 129, 129, 130]
    assert f["prefill_attn_pairs"].tolist() == [100 * 100, 28 * 128, 0, 129 * 129, 0]
    assert f["duration_s"].tolist() == [5e-9] * 5


def test_nsys_like_frame_without_request_detail_fits_token_terms():
    rng = np.random.default_rng(1)
    pf = rng.integers(0, 2048, 50).astype(float)
    dec = rng.integers(1, 64, 50).astype(float)
    dur_ns = ((0.002 + 1e-5 * pf + 2e-4 * dec) * 1e9).astype("int64")
    start = np.cumsum(dur_ns + 1000) - dur_ns
    frame = pd.DataFrame({"step": np.arange(50), "start_ns": start, "end_ns": start + dur_ns,
                          "num_prefill_tokens": pf, "num_decode_tokens": dec})
    model = fit_step_cost(frame, source="nsys")
    assert set(model.coef_s) == {"prefill_tokens", "decode_reqs"}
    assert model.coef_s["prefill_tokens"] == pytest.approx(1e-5, rel=1e-3)
    assert model.predict(prefill_tokens=1000, decode_reqs=10) == pytest.approx(0.014, rel=1e-3)


def test_coefficients_never_negative():
    # duration falls with decode count in this (unphysical) trace: NNLS drops the term instead
    rng = np.random.default_rng(5)
    pf = rng.integers(0, 2000, 40).astype(float)
    dec = rng.integers(1, 20, 40).astype(float)
    dur = 3e6 + 1e4 * pf - 5e4 * dec
    frame = pd.DataFrame({"step": range(40), "start_ns": np.arange(40) * 10**9, "num_prefill_tokens": pf,
                          "num_decode_tokens": dec})
    frame["end_ns"] = frame["start_ns"] + dur.astype("int64")
    model = fit_step_cost(frame)
    assert all(c >= 0 for c in model.coef_s.values()) and model.intercept_s >= 0
    assert "decode_reqs" not in model.coef_s and model.coef_s["prefill_tokens"] > 0


def test_old_traces_pool_size_reads_as_num_gpu_blocks(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"start_ns": 0, "end_ns": 5, "num_prefill_tokens": 3, "num_decode_tokens": 0,
                                "kv_blocks_total": 96}) + "\n")
    frame = read_step_trace(path)
    assert "kv_blocks_total" not in frame and frame["num_gpu_blocks"].tolist() == [96.0]


def test_busy_gap_ignores_idle_periods():
    frame = pd.DataFrame({"start_ns": [0, 1_000_000, 2_000_000, 900_000_000], "end_ns": [900_000, 1_900_000, 2_900_000, 901_000_000],
                          "num_running": [1.0, 1.0, 0.0, 1.0], "num_waiting": [0.0, 0.0, 0.0, 0.0]})
    assert busy_gaps_s(frame).tolist() == pytest.approx([100e-6, 100e-6])   # not the idle 0.9 s


def test_busy_gaps_of_steps_without_a_queue_column_count_the_running_alone():
    """A vLLM log's iteration lines state the running requests but no queue: the same frame without
    `num_waiting` has the same busy gaps."""
    frame = pd.DataFrame({"start_ns": [0, 1_000_000, 2_000_000, 900_000_000], "end_ns": [900_000, 1_900_000, 2_900_000, 901_000_000],
                          "num_running": [1.0, 1.0, 0.0, 1.0]})
    assert busy_gaps_s(frame).tolist() == pytest.approx([100e-6, 100e-6])


@pytest.mark.parametrize("content,match", [
    ("not json\n", r"steps.jsonl:1: not JSON"),
    ('{"start_ns": 1, "end_ns": 2, "num_prefill_tokens": 3}\n', r"steps.jsonl:1: field `num_decode_tokens` missing"),
    ("[1, 2]\n", r"steps.jsonl:1: expected a JSON object"),
    ("\n", r"has no steps"),
])
def test_bad_step_traces_name_the_problem(tmp_path, content, match):
    path = tmp_path / "steps.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=match):
        read_step_trace(path)


def test_missing_trace_and_too_few_steps(tmp_path):
    with pytest.raises(InputError, match="step trace not found: .*nope.jsonl"):
        read_step_trace(tmp_path / "nope.jsonl")
    steps = read_step_trace(synthetic_trace(tmp_path / "s.jsonl", n_steps=5))
    with pytest.raises(InputError, match="5 usable steps, need at least 8"):
        fit_step_cost(steps)


def test_roofline_compute_vs_memory_bound():
    m = roofline_cost(peak_flops=989.4e12, hbm_bytes_s=3.35e12, n_params=8.0e9, weight_bytes=16.0e9,
                      kv_bytes_per_token=131072, n_layers=32, hidden_size=4096, efficiency=1.0)
    decode = m.predict(decode_reqs=32, kv_tokens_read=32 * 1000)
    assert decode == pytest.approx((16e9 + 131072 * 32000) / 3.35e12, rel=1e-9)  # HBM-bound
    prefill = m.predict(prefill_tokens=8192, kv_tokens_read=8192, prefill_attn_pairs=8192 * 8192)
    flops = 2 * 8e9 * 8192 + 4 * 32 * 4096 * 8192 * 8192
    assert prefill == pytest.approx(flops / 989.4e12, rel=1e-9)  # compute-bound
    assert m.summary()["kind"] == "roofline"
    with pytest.raises(InputError, match="peak_flops must be > 0, got 0"):
        roofline_cost(peak_flops=0, hbm_bytes_s=1, n_params=1, weight_bytes=1, kv_bytes_per_token=1,
                      n_layers=1, hidden_size=1)


def test_predict_vectorised_matches_scalar():
    m = StepCostModel(intercept_s=0.001, coef_s={"prefill_tokens": 1e-5})
    assert m.predict(prefill_tokens=np.array([0, 100])).tolist() == pytest.approx([0.001, 0.002])


def test_busy_gaps_never_span_two_concatenated_traces():
    one = pd.DataFrame({"start_ns": [0, 10_000_000, 20_000_000], "end_ns": [8_000_000, 18_000_000, 28_000_000],
                        "num_running": [1.0, 1.0, 1.0], "num_waiting": [0.0, 0.0, 0.0]})
    two = one.assign(start_ns=one["start_ns"] + 600 * 10**9, end_ns=one["end_ns"] + 600 * 10**9)
    both = pd.concat([one.assign(trace="r0"), two.assign(trace="r1")], ignore_index=True)
    assert busy_gaps_s(both).tolist() == pytest.approx([0.002] * 4)
    # without the trace column the 10-minute hole is still no engine overhead: longer than any step
    assert busy_gaps_s(both.drop(columns="trace")).tolist() == pytest.approx([0.002] * 4)


def test_a_prefix_cache_hit_is_context_the_first_chunk_attends_to():
    """A request scheduled with 1,024 cached tokens computes 64 more that attend to all 1,088; one scheduled again
    after its decode is unaffected; a request without a hit starts at 0."""
    steps = pd.DataFrame({"start_ns": [0, 10, 20], "end_ns": [5, 15, 25], "num_prefill_tokens": [64 + 32, 0, 0],
                          "num_decode_tokens": [0, 2, 2],
                          "num_scheduled_tokens": [{"a": 64, "b": 32}, {"a": 1, "b": 1}, {"a": 1, "b": 1}],
                          "num_cached_tokens": [{"a": 1024, "b": 0}, {}, {}]})
    f = step_features(steps)
    assert f["prefill_attn_pairs"].tolist()[0] == 64 * (1024 + 64) + 32 * 32
    assert f["prefill_reqs"].tolist() == [2, 0, 0]
    assert f["kv_tokens_read"].tolist() == [1024 + 64 + 32, (1088 + 1) + (32 + 1), (1089 + 1) + (33 + 1)]


def test_prefill_terms_the_trace_cannot_separate_are_dropped(tmp_path):
    """Every prefill a whole prompt of one size from context 0: tokens, attention pairs and requests are
    collinear, so only the per-token term is fitted (the trace's own average per token)."""
    lines, t = [], 1_700_000_000_000_000_000
    for step in range(60):          # step 0 admits the four decoding requests (one token each)
        rid, prefill = f"r{step}", step % 3 == 1
        sched = {rid: 1200} if prefill else {f"d{k}": 1 for k in range(4)}
        dur = 0.004 + (1200 * 2e-5 + 1200 * 1200 * 1e-8 if prefill else 4 * 3e-4)
        lines.append({"step": step, "start_ns": t, "end_ns": t + int(dur * 1e9), "num_prefill_tokens": 1200 if prefill else 4 * (step == 0),
                      "num_decode_tokens": 0 if prefill or step == 0 else 4, "num_running": 5, "num_waiting": 0, "num_preempted": 0,
                      "kv_blocks_used": 0, "num_gpu_blocks": 512, "num_scheduled_tokens": sched})
        t += int(dur * 1e9) + 300_000
    path = tmp_path / "steps.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    model = fit_step_cost(read_step_trace(path))
    assert "prefill_attn_pairs" not in model.coef_s and "prefill_reqs" not in model.coef_s
    whole = model.predict(prefill_tokens=1200, kv_tokens_read=1200)
    assert whole == pytest.approx(0.004 + 1200 * 2e-5 + 1200 * 1200 * 1e-8, rel=0.02)     # 42.4 ms, as measured
