"""DCGM ratios pushed down against a real Prometheus: per replica and GPU, the values the single-replica
path reads (`analyze --prometheus`'s pull through collectors/dcgm, memory_bound's instant series)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from stallscope.analyzers import memory_bound
from stallscope.collectors import prometheus_api
from stallscope.core.config import load_thresholds
from stallscope.rules import fleet as F

NS = 1_000_000_000
STEP = 60
BLANK = 2.0 ** 47  # DCGM's fp64 blank sentinel
# (pod, Hostname, gpu, spelling): replica a has two GPUs under dcgm-exporter's current names, replica b one
# GPU under DCGM 4.6's *_UTIL_RATIO aliases
GPUS = [("vllm-a", "node-a", "0", "current"), ("vllm-a", "node-a", "1", "current"), ("vllm-b", "node-b", "0", "alias")]
NAMES = {"current": {"dram_active": "DCGM_FI_PROF_DRAM_ACTIVE", "tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                     "sm_active": "DCGM_FI_PROF_SM_ACTIVE", "gpu_util": "DCGM_FI_DEV_GPU_UTIL"},
         "alias": {"dram_active": "DCGM_FI_PROF_DRAM_UTIL_RATIO", "tensor_active": "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
                   "sm_active": "DCGM_FI_PROF_SM_UTIL_RATIO", "gpu_util": "DCGM_FI_DEV_GPU_UTIL_RATIO"}}


def _series(k: int, n: int, blank_at: int) -> dict[str, np.ndarray]:
    """Ratios of GPU k over n scrapes: GPU 0 of replica a is memory bound (DRAM 0.7-0.8, tensor 0.1-0.15)
    in scrapes 80-159; GPU 1 of replica a reports one blank DRAM sample at `blank_at`."""
    rng = np.random.default_rng(k)
    dram, tensor = rng.uniform(0.2, 0.5, n), rng.uniform(0.3, 0.6, n)
    if k == 0:
        dram[80:160], tensor[80:160] = rng.uniform(0.7, 0.8, 80), rng.uniform(0.1, 0.15, 80)
    if k == 1:
        dram[blank_at] = BLANK
    util = np.rint(rng.uniform(40, 100, n))
    return {"dram_active": dram, "tensor_active": tensor, "sm_active": rng.uniform(0.2, 0.9, n),
            "gpu_util": util if GPUS[k][3] == "current" else util / 100}


def _openmetrics(t0: int, n: int, blank_at: int) -> str:
    lines: dict[str, list[str]] = {}
    for k, (pod, host, gpu, spelling) in enumerate(GPUS):
        lab = (f'Hostname="{host}",UUID="GPU-{k}",container="vllm",gpu="{gpu}",instance="10.1.0.{k}:9400",'
               f'job="dcgm",modelName="NVIDIA H100 80GB HBM3",namespace="prod",pod="{pod}"')
        for metric, values in _series(k, n, blank_at).items():
            name = NAMES[spelling][metric]
            lines.setdefault(name, []).extend(f"{name}{{{lab}}} {v!r} {t0 + 15 * i}" for i, v in enumerate(values.tolist()))
    body = "".join(f"# TYPE {name} gauge\n" + "\n".join(rows) + "\n" for name, rows in lines.items())
    return body + "# EOF\n"


@pytest.mark.needs_tool("prometheus")
def test_dcgm_ratios_pushed_down_equal_the_single_replica_pull(tmp_path):
    import fleet_data
    from promserver import PrometheusServer, promtool

    n, blank_at = 240, 120  # an hour at 15 s; the blank lands on a grid point (every 4th scrape)
    t0 = (int(time.time()) // 3600 - 3) * 3600
    (tmp_path / "dcgm.om").write_text(_openmetrics(t0, n, blank_at))
    fleet_data.backfill(tmp_path / "dcgm.om", tmp_path / "tsdb", promtool())
    grid = np.arange(t0 + STEP, t0 + 15 * (n - 1), STEP)
    th = load_thresholds()
    exprs = F.dcgm_exprs(th, matchers=[("namespace", "=", "prod")])
    with PrometheusServer(tmp_path, storage=tmp_path / "tsdb") as prom:
        remote = {col: {(s["metric"]["pod"], s["metric"]["gpu"]): s["values"]
                        for s in prom.query_range(expr, grid[0], grid[-1], STEP)} for col, expr in exprs.items()}
        gpu = prometheus_api.load(prom.url, int(grid[0] * NS), int(grid[-1] * NS), selector={"namespace": "prod"},
                                  step=f"{STEP}s")["dcgm"]["gpu"]
    host_pod = {host: pod for pod, host, _, _ in GPUS}

    def pushed(col, key):
        out = np.full(len(grid), np.nan)
        for t, v in remote[col].get(key, []):
            out[int(round((float(t) - grid[0]) / STEP))] = float(v)
        return out

    blank_point = int(np.flatnonzero(grid == t0 + 15 * blank_at)[0])
    for col in ("dram_active", "tensor_active", "sm_active", "gpu_util"):
        local = memory_bound._gpu_series(gpu, col, grid.astype(np.int64) * NS)
        assert len(local) == 3, col
        for (host, idx), (values, model) in local.items():
            got, key = pushed(col, (host_pod[host], idx)), (host_pod[host], idx)
            if col == "dram_active" and key == ("vllm-a", "1"):  # the blank: absent here, carried forward there
                assert np.isnan(got[blank_point]) and values[blank_point] == values[blank_point - 1]
                got[blank_point] = values[blank_point]
            assert np.isfinite(values).all() and np.isfinite(got).all(), (col, key)
            np.testing.assert_allclose(got, values, rtol=1e-9, atol=1e-12, err_msg=f"{col} {key}")
    dram = memory_bound._gpu_series(gpu, "dram_active", grid.astype(np.int64) * NS)
    tensor = memory_bound._gpu_series(gpu, "tensor_active", grid.astype(np.int64) * NS)
    for key in dram:
        want = (dram[key][0] >= th["dram_active_high"]) & (tensor[key][0] <= th["tensor_active_low"])
        got = pushed("memory_bound", (host_pod[key[0]], key[1])) == 1
        assert (got == want).all(), key
    assert set(remote["memory_bound"]) == {("vllm-a", "0")} and np.nansum(pushed("memory_bound", ("vllm-a", "0"))) == 20
