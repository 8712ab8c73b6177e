"""analyzers/trace_steps.py on the synthetic serving traces: vLLM NVTX steps and the kernel-pattern fallback."""

import sqlite3
import statistics

import pytest
from nsys_cases import SAMPLE_TRACES

from stallscope.analyzers.kernel_roles import classify
from stallscope.analyzers.trace_steps import reconstruct_steps, steps_from_kernels
from stallscope.collectors.nsight_sqlite import read_export
from stallscope.core.schema import validate


def _load(name):
    trace = read_export(str(SAMPLE_TRACES / f"{name}.sqlite"))
    return trace, classify(trace.kernels)


def _nvtx_ranges(name):
    with sqlite3.connect(SAMPLE_TRACES / f"{name}.sqlite") as conn:
        return conn.execute("SELECT start, end, text FROM NVTX_EVENTS ORDER BY start").fetchall()


@pytest.mark.parametrize("name,count,prefill_steps", [("starvation", 81, 1), ("chunked", 112, 32)])
def test_nvtx_steps_carry_token_counts(name, count, prefill_steps):
    trace, k = _load(name)
    steps, info = reconstruct_steps(k, trace.nvtx, trace.graph_launches)
    validate(steps, "steps")
    ranges = _nvtx_ranges(name)
    assert info == {"source": "nvtx:vllm-execute", "layers_guess": 4}
    assert len(steps) == len(ranges) == count
    assert int(steps["has_prefill"].sum()) == prefill_steps
    assert steps["num_decode_tokens"].tolist() == [32.0] * count
    expected_prefill = sum(int(t.split("(")[1].split(")")[0]) for _, _, t in ranges)
    assert steps["num_prefill_tokens"].sum() == expected_prefill == 16384
    # every kernel is inside the range of the call that launched it: step span == NVTX range
    assert steps["start_ns"].tolist() == [s for s, _, _ in ranges]
    assert steps["end_ns"].tolist() == [e for _, e, _ in ranges]
    assert steps["num_kernels"].sum() == len(k)
    assert (steps["gpu_busy_ns"] <= steps["end_ns"] - steps["start_ns"]).all()


def test_gpu_busy_is_the_union_of_kernel_time():
    trace, k = _load("starvation")
    steps, _ = reconstruct_steps(k, trace.nvtx)
    s = steps.iloc[0]
    inside = k[(k["start_ns"] >= s.start_ns) & (k["end_ns"] <= s.end_ns)]
    assert s.gpu_busy_ns == inside["dur_ns"].sum()  # generator never overlaps kernels
    assert s.num_kernels == len(inside) == 47  # 4 layers x 11 + final norm, lm_head, argmax


def test_kernel_pattern_fallback_finds_the_same_steps():
    trace, k = _load("starvation")
    nvtx, _ = reconstruct_steps(k, trace.nvtx)
    fallback = steps_from_kernels(k)
    assert len(fallback) == len(nvtx) == 81
    assert fallback["has_prefill"].tolist() == nvtx["has_prefill"].tolist()
    dur_nvtx = (nvtx["end_ns"] - nvtx["start_ns"]).to_numpy()
    dur_fb = (fallback["end_ns"] - fallback["start_ns"]).to_numpy()
    assert abs(statistics.median(dur_fb) - statistics.median(dur_nvtx)) < 0.01 * statistics.median(dur_nvtx)
    assert fallback.loc[fallback["has_prefill"], "max_attention_grid_x"].tolist() == [128]  # ceil(16384 / 128)


def test_cuda_graph_trace_steps_from_graph_launches():
    trace, k = _load("cuda_graphs")
    steps, info = reconstruct_steps(k, trace.nvtx, trace.graph_launches)
    assert info["source"] == "kernels" and len(steps) == 81
    decode_only = steps[steps["is_decode"] & ~steps["has_prefill"]]
    assert len(decode_only) == 80 and (decode_only["num_kernels"] == 4).all()  # graph + norm, lm_head, argmax


def test_without_launch_calls_kernels_go_to_the_range_they_start_in():
    trace = read_export(str(SAMPLE_TRACES / "starvation.sqlite"), with_launches=False)
    assert trace.kernels["launch_ns"].isna().all()
    steps, _ = reconstruct_steps(classify(trace.kernels), trace.nvtx)
    ranges = _nvtx_ranges("starvation")
    assert steps["num_kernels"].tolist() == [47.0] * 40 + [43.0] + [47.0] * 40
    assert steps["end_ns"].tolist() == [e for _, e, _ in ranges]


def test_vllm_nvtx_scopes_ranges_give_steps_without_token_counts():
    trace, k = _load("starvation")
    nvtx = trace.nvtx.assign(name="gpu_model_runner: forward")  # VLLM_NVTX_SCOPES_FOR_PROFILING=1 naming
    steps, info = reconstruct_steps(k, nvtx)
    assert info["source"] == "nvtx:vllm-scopes" and len(steps) == 81
    assert steps["num_prefill_tokens"].isna().all()
    assert steps["has_prefill"].sum() == 1 and steps.loc[steps["has_prefill"], "max_attention_grid_x"].item() == 128


def test_detailed_vllm_step_names_parse():
    from stallscope.analyzers.trace_steps import VLLM_STEP

    m = VLLM_STEP.search("execute_544_context_1(sq512sk512sqsq262144sqsk262144)_generation_32(sq32sk40960sqsq32sqsk40960)")
    assert m.groups() == ("1", "512", "32", "32")
    assert VLLM_STEP.search("execute_context_0(0)_generation_32(32)").groups() == ("0", "0", "32", "32")


def test_group_busy_on_spans_too_long_for_the_offset_trick():
    """Spans past the per-group offset's int64 room (found by the fuzzer): each group's union, no endless recursion."""
    import numpy as np

    from stallscope.analyzers.step_agg import _group_busy
    far = 2**61
    sid = np.array([0, 0, 1, 1], dtype=np.int64)
    starts = np.array([0, 5, far, far + 100], dtype=np.int64)
    ends = np.array([10, 20, far + 50, far + 150], dtype=np.int64)
    assert _group_busy(sid, starts, ends, 2).tolist() == [20, 100]
    one = np.zeros(2, dtype=np.int64)                 # one group whose own span is 2^61 ns
    assert _group_busy(one, np.array([0, far], np.int64), np.array([10, far + 10], np.int64), 1).tolist() == [20]
