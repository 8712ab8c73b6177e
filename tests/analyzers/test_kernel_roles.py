"""analyzers/kernel_roles.py: shipped patterns, user extension, FlashAttention grid phase, split-KV."""

import pandas as pd
import pytest
from nsys_cases import nsys_sample
from nsys_cases import TRAIN

from stallscope.analyzers.kernel_roles import classify, load_table, role_of
from stallscope.collectors.nsight_sqlite import read_export
from stallscope.core.errors import ConfigError

NAMES = {
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4>>(flash::Flash_fwd_params)": "attention",
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...>>>(...)": "attention",
    "flashinfer::BatchDecodeWithPagedKVCacheKernel": "attention",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "gemm",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "small_gemm",
    "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN": "gemm",
    "nvjet_tst_8x64_64x16_4x1_v_bz_TNN": "small_gemm",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(...)": "small_gemm",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096>)": "collective",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)": "collective",
    "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, (int)8>(...)": "norm_elementwise",
    "triton_poi_fused_mul_silu_0": "norm_elementwise",
    "triton_red_fused_argmax_0": "sampling",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(...)": "norm_elementwise",
    "winogradForwardFilter4x4": "other",
}


@pytest.mark.parametrize("name,role", NAMES.items())
def test_shipped_patterns(name, role):
    assert role_of(name) == role


def _k(names, grid_x, stream=7):
    n = len(names)
    return pd.DataFrame({"start_ns": range(0, 10 * n, 10), "end_ns": range(5, 10 * n + 5, 10), "name": names,
                         "grid_x": grid_x, "stream_id": [stream] * n, "pid": [1] * n})


def test_flash_attention_grid_x_gives_the_phase_and_combine_marks_split_kv():
    k = classify(_k(["flash_fwd_splitkv_kernel", "flash_fwd_splitkv_kernel", "flash_fwd_splitkv_combine_kernel",
                     "flash_fwd_kernel", "flash_fwd_kernel"], [1, 128, 1, 3, 3]))
    # gridX==1 -> decode; gridX 128 -> prefill, but a combine right after it means split-KV decode.
    assert k["attention_phase"].tolist() == ["decode", "decode", "decode", "prefill", "prefill"]
    assert k["attention_core"].tolist() == [True, True, False, True, True]


def test_user_table_is_tried_first_and_extends_phases(tmp_path):
    extra = tmp_path / "roles.yaml"
    extra.write_text("roles:\n  - role: attention\n    patterns: ['my_custom_attn']\n"
                     "  - role: sampling\n    patterns: ['winograd']\n"
                     "attention_phase:\n  by_grid_x: ['my_custom_attn']\n")
    table = load_table(extra)
    assert role_of("winogradForwardFilter4x4", table) == "sampling"
    assert role_of("ncclDevKernel_SendRecv", table) == "collective"
    k = classify(_k(["my_custom_attn", "my_custom_attn"], [1, 9]), table)
    assert k["attention_phase"].tolist() == ["decode", "prefill"]


@pytest.mark.parametrize("text,match", [("roles: [{role: bogus, patterns: [x]}]", "unknown role 'bogus'"),
                                        ("roles: [{role: gemm, patterns: ['(']}]", "bad pattern '\\('"),
                                        ("roles: [", "not valid YAML"),
                                        ("attention_phase: {sideways: [x]}", "unknown attention_phase key")])
def test_bad_user_tables_name_the_problem(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_table(path)


def test_real_training_trace_roles():
    k = classify(read_export(str(nsys_sample(TRAIN)), with_launches=False).kernels)
    counts = k["role"].value_counts()
    assert counts["attention"] == 68 and counts["collective"] == 66 and counts.get("other", 0) == 0
    fa = k[k["short_name"].astype(str) == "flash_fwd_kernel"]
    assert (fa["grid_x"] > 1).all() and (fa["attention_phase"] == "prefill").all()  # long video sequences
