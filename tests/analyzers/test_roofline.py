"""Roofline figures against hand-computed values, and the `stallscope roofline` command."""

import json

import pandas as pd
import pytest

from stallscope.analyzers import roofline as R
from stallscope.cli import main
from stallscope.core.errors import InputError


def test_h100_ridge_uses_the_dense_figure():
    h100 = R.gpu_spec("H100-SXM")
    assert h100.ridge() == pytest.approx(989.4e12 / 3.35e12)  # 295.3, not the sparse 590
    assert round(h100.ridge()) == 295
    assert R.gpu_spec("NVIDIA H100 80GB HBM3") is h100  # the name DCGM reports
    assert R.gpu_spec("h200").name == "H200-SXM"
    with pytest.raises(InputError, match="no FP8"):
        R.gpu_spec("A100-SXM-80GB").peak_flops("fp8")


@pytest.mark.parametrize("name,params_b", [("llama-2-7b", 6.74), ("llama-3-8b", 8.03), ("llama-3-70b", 70.55),
                                           ("mistral-7b", 7.24), ("qwen2.5-7b", 7.62), ("qwen2.5-32b", 32.76)])
def test_model_parameter_counts_match_the_published_sizes(name, params_b):
    assert R.model_spec(name).num_params / 1e9 == pytest.approx(params_b, abs=0.01)


def test_kv_bytes_capacity_and_weight_floor_for_llama3_70b_tp4():
    m, g = R.model_spec("meta-llama/Meta-Llama-3-70B-Instruct"), R.gpu_spec("H100-SXM")
    assert m.kv_bytes_per_token("auto") == 2 * 80 * 8 * 128 * 2 == 327680
    assert m.kv_bytes_per_token("fp8") == 163840
    t = R.table(g, m, tp=4, batches=[1, 256])
    assert t["kv"]["auto"]["bytes_per_block"] == 327680 * 16
    budget = 4 * 80e9 * 0.9 - m.num_params * 2
    assert t["kv"]["auto"]["capacity_tokens"] == int(budget // 327680)
    assert t["kv"]["fp8"]["capacity_tokens"] == int(budget // 163840)  # N -> 2N
    assert t["weight_read_floor_s"] == pytest.approx(m.matmul_params * 2 / 4 / 3.35e12)
    assert 10e-3 < t["weight_read_floor_s"] < 11e-3
    b1, b256 = t["decode"]
    assert b1["intensity"] == pytest.approx(1.0, abs=0.02) and b1["bound"] == "memory"
    assert b256["intensity"] < t["ridge_flop_per_byte"]


def test_decode_intensity_grows_with_batch_and_crosses_the_ridge():
    m, g = R.model_spec("llama-3-8b"), R.gpu_spec("H100-SXM")
    short = [R.decode_point(m, b, context_len=0)["intensity"] for b in (1, 8, 64, 512)]
    assert short == pytest.approx([1, 8, 64, 512], rel=1e-9)  # 2 FLOP per 2-byte weight per request
    assert R.table(g, m, batches=[512], context_len=0)["decode"][0]["bound"] == "compute"


def test_refserver_presets_are_models():
    from stallscope.refserver.config import PRESETS

    small = R.model_spec("small")
    assert small.num_params == PRESETS["small"].num_params
    assert small.weight_dtype == "float32"


def test_measured_points_from_dcgm_ratios():
    rows = [{"ts": i, "hostname": "h", "gpu": "0", "uuid": "u", "model": "NVIDIA H100 80GB HBM3", "metric": m, "value": v}
            for i in range(3) for m, v in (("tensor_active", 0.1), ("dram_active", 0.5))]
    out = R.measured_points(pd.DataFrame(rows))
    assert out["gpu"] == "H100-SXM" and len(out["points"]) == 3
    assert out["points"]["intensity"].iloc[0] == pytest.approx(0.1 * 989.4e12 / (0.5 * 3.35e12))
    assert R.measured_points(pd.DataFrame(rows).assign(model="Tesla T4")) is None


def test_roofline_command_json_and_errors(capsys):
    assert main(["roofline", "--gpu", "H100-SXM", "--model", "llama-3-70b", "--tp", "4", "--batch", "1,8",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert round(out["ridge_flop_per_byte"]) == 295 and [p["batch"] for p in out["decode"]] == [1, 8]
    assert main(["roofline", "--model", "gpt-5"]) == 2
    assert "unknown model 'gpt-5'" in capsys.readouterr().err
    assert main(["roofline", "--batch", "0"]) == 2
    assert main(["roofline", "--tp", "0"]) == 2
    assert main(["roofline", "--model", "tiny"]) == 0
    assert "ridge" in capsys.readouterr().out


def test_measure_host_reports_positive_figures():
    m = R.measure_host(0.2)
    assert m["peak_flops"] > 1e8 and m["hbm_bytes_per_s"] > 1e8
    assert m["ridge_flop_per_byte"] == pytest.approx(m["peak_flops"] / m["hbm_bytes_per_s"])
