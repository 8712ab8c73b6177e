"""dcgm-exporter exposition → gpu frame, checked against every real capture in tests/fixtures/dcgm_samples."""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from stallscope.core import schema
from stallscope.collectors import dcgm

DCGM = FIXTURES / "dcgm_samples"  # real captures, each with its source on its first line

MIB = 1 << 20


def capture(name: str):
    return dcgm.parse((DCGM / name).read_text(), ts=11)


def value(df, metric, gpu="0", **cols):
    rows = df[(df.metric == metric) & (df.gpu == gpu)]
    for k, v in cols.items():
        rows = rows[rows[k] == v]
    assert len(rows) == 1, (metric, gpu, cols, len(rows))
    return rows.value.item()


def test_t4_gpu_util_over_reports_against_gr_engine():
    df = capture("t4_under_load_ericsson_driver590.txt")
    assert value(df, "gpu_util") == pytest.approx(0.91)
    assert value(df, "gr_engine_active") == pytest.approx(0.156205)
    assert value(df, "tensor_active") == pytest.approx(0.005822)
    assert value(df, "dram_active") == pytest.approx(0.092781)
    assert value(df, "mem_copy_util") == pytest.approx(0.73)
    assert value(df, "fb_used_bytes") == 5120 * MIB
    assert value(df, "fb_free_bytes") == 9791 * MIB
    assert value(df, "sm_clock_hz") == 660e6
    assert value(df, "power_w") == pytest.approx(68.244)
    assert value(df, "gpu_temp_c") == 74
    assert value(df, "pcie_rx_bytes_s") == 6935930
    row = df.iloc[0]
    assert (row.hostname, row.uuid, row.model) == ("cp-bm14r7", "GPU-6d5c0ac5-74d7-3130-46f1-e93ed57f469a", "Tesla T4")
    # fields this exporter never emitted stay missing (no zero rows)
    assert not {"sm_active", "sm_occupancy", "fp16_active", "xid_last", "nvlink_tx_bytes_s"} & set(df.metric)


def test_a100_mig_old_format_without_model_and_with_gpu_instance():
    df = capture("a100_mig_under_load_nvidia_docs_2.x_format.txt")
    assert set(df.model) == {""}
    whole = df[df.gpu_instance == ""]
    mig = df[df.gpu_instance == "13"]
    assert value(whole, "gr_engine_active") == pytest.approx(0.99563)
    assert value(whole, "tensor_active") == pytest.approx(0.92926)
    assert value(whole, "power_w") == pytest.approx(409.692)
    assert value(whole, "energy_j") == pytest.approx(319159.391)
    assert value(whole, "xid_last") == 0
    assert value(whole, "nvlink_total_bytes_s") == 0  # a rate already: never rate() it
    assert value(mig, "dram_active") == pytest.approx(0.800339)
    assert sorted(mig.metric) == ["dram_active", "gr_engine_active", "tensor_active", "xid_last"]


def test_vgpu_capture_has_no_prof_fields_and_keeps_unknown_ones():
    df = capture("a100_vgpu_grid_a100_40c_full_vks_driver580.txt")
    assert value(df, "fb_reserved_bytes") == 3220 * MIB
    assert value(df, "sm_clock_hz") == 1410e6
    assert value(df, "DCGM_FI_DEV_VGPU_LICENSE_STATUS") == 1
    assert not {"tensor_active", "dram_active", "gr_engine_active"} & set(df.metric)
    assert set(df.model) == {"GRID A100-40C"}


@pytest.mark.parametrize("name", ["h100_sxm_8gpu_k8s_sampled_aicr_2026-02-19.txt",
                                  "h100_sxm_8gpu_k8s_pod_uid_sampled_aicr_2026-03.txt"])
def test_h100_eight_gpus_with_pod_labels_on_some(name):
    df = capture(name)
    assert sorted(df.gpu.unique()) == [str(i) for i in range(8)]
    assert set(df.metric) == {"gpu_temp_c", "power_w", "gpu_util", "mem_copy_util"}
    assert set(df.model) == {"NVIDIA H100 80GB HBM3"}
    with_pod = df[df.pod != ""]
    assert len(with_pod) > 0 and set(with_pod.namespace) == {"dynamo-workload"} and set(with_pod.container) == {"main"}
    busy = df[df.metric == "power_w"].sort_values("value").iloc[-1]
    assert busy.pod.startswith("vllm-agg-0-vllmdecodeworker") and busy.value > 110


def test_h100_pod_uid_concrete_values():
    df = capture("h100_sxm_8gpu_k8s_pod_uid_sampled_aicr_2026-03.txt")
    assert value(df, "power_w", "0") == pytest.approx(113.611)
    assert value(df, "gpu_temp_c", "7") == 26
    assert value(df, "power_w", "1") == pytest.approx(68.347)


@pytest.mark.parametrize("name,model,power,pcie_tx", [
    ("l40s_full_upcloud_driver595.txt", "NVIDIA L40S", 35.686, 175084),
    ("l4_full_kops_driver580.txt", "NVIDIA L4", 16.365, 112603),
])
def test_full_default_counter_captures(name, model, power, pcie_tx):
    df = capture(name)
    assert set(df.model) == {model}
    assert value(df, "power_w") == pytest.approx(power)
    assert value(df, "pcie_tx_bytes_s") == pcie_tx
    assert value(df, "sm_clock_hz") == 210e6
    assert "energy_j" in set(df.metric)  # a counter: the parser's `_total` is not in the name


def test_every_capture_validates_and_values_are_base_units():
    paths = sorted(DCGM.glob("*.txt"))
    assert len(paths) == 7
    for path in paths:
        df = dcgm.parse(path.read_text(), ts=1)
        schema.validate(df, "gpu")
        ratios = df[df.metric.isin(["gpu_util", "mem_copy_util", "tensor_active", "dram_active", "gr_engine_active"])]
        assert ratios.value.between(0, 1).all(), path.name


def test_hostname_lowercase_dcgm_46_renames_and_blank_sentinels():
    text = "\n".join([
        '# TYPE DCGM_FI_PROF_TENSOR_UTIL_RATIO gauge',
        'DCGM_FI_PROF_TENSOR_UTIL_RATIO{gpu="1",uuid="GPU-x",model_name="NVIDIA H200",hostname="n1"} 0.5',
        'DCGM_FI_DEV_BOARD_POWER_WATTS{gpu="1",uuid="GPU-x",model_name="NVIDIA H200",hostname="n1"} 650.250000',
        'DCGM_FI_DEV_GPU_TEMP_CELSIUS{gpu="1",uuid="GPU-x",model_name="NVIDIA H200",hostname="n1"} 55',
        'DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL{gpu="1",uuid="GPU-x",model_name="NVIDIA H200",hostname="n1"} 1200',
        'DCGM_FI_PROF_NVLINK_TX_BYTES{gpu="1",uuid="GPU-x",model_name="NVIDIA H200",hostname="n1"} 3000',
        'DCGM_FI_DEV_MEMORY_TEMP{gpu="1",uuid="GPU-x",model_name="NVIDIA H200",hostname="n1"} 9223372036854775794',
        'DCGM_FI_DEV_NVSWITCH_TEMP{nvswitch="0",hostname="n1"} 40',
        '',
    ])
    df = dcgm.parse(text, ts=2)
    assert set(df.hostname) == {"n1"} and set(df.model) == {"NVIDIA H200"} and set(df.uuid) == {"GPU-x"}
    assert dict(zip(df.metric, df.value)) == {
        "tensor_active": 0.5, "power_w": 650.25, "gpu_temp_c": 55, "nvlink_total_bytes_s": 1.2e9,
        "nvlink_tx_bytes_s": 3000}


def test_a_series_blank_in_one_scrape_is_kept_in_the_next_through_the_parse_cache():
    line = 'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",modelName="NVIDIA L4",Hostname="h"} %s\n'
    cache = dcgm.ParseCache()
    assert len(dcgm.parse(line % "9223372036854775794", ts=1, cache=cache)) == 0
    assert dcgm.parse(line % "3", ts=2, cache=cache).value.tolist() == [3 * MIB]


def test_blank_sentinels_of_counters_and_gauges():
    big = [float(0x7FFFFFF8), float(2 ** 47) + 1, 9.3e18, float("nan"), 12.0]
    assert dcgm.blank(big, False).tolist() == [True, True, True, True, False]
    assert dcgm.blank(big, True).tolist() == [False, False, True, True, False]
