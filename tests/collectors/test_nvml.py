"""NVML polling with an injected NVML module (no driver can exist here), and the real no-driver error."""

from __future__ import annotations

import types

import pytest

from stallscope.core import schema
from stallscope.collectors import scrape_loop, store
from stallscope.collectors.nvml import NvmlPoller, open_nvml
from stallscope.core.errors import CollectorError


class NVMLError(Exception):
    def __init__(self, value):
        self.value = value

    def __str__(self):
        return {3: "Not Supported", 9: "Driver Not Loaded", 15: "GPU is lost"}.get(self.value, "Unknown Error")


def fake_nvml(devices, *, init_error=None):
    """A stand-in for `pynvml` with the calls NvmlPoller makes; `devices` is a list of dicts."""
    m = types.SimpleNamespace(NVMLError=NVMLError, NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0,
                              NVML_GPM_METRICS_GET_VERSION=1, calls=[], freed=0, live_samples=set())
    for i, name in enumerate(["GRAPHICS_UTIL", "SM_UTIL", "SM_OCCUPANCY", "ANY_TENSOR_UTIL", "DRAM_BW_UTIL",
                              "FP16_UTIL"]):
        setattr(m, f"NVML_GPM_METRIC_{name}", [1, 2, 3, 5, 10, 13][i])

    def fail_or(value, dev, key):
        if isinstance(dev.get(key), NVMLError):
            raise dev[key]
        return value

    def init():
        if init_error:
            raise init_error
    m.nvmlInit = init
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlDeviceGetCount = lambda: len(devices)
    m.nvmlDeviceGetHandleByIndex = lambda i: devices[i]
    m.nvmlDeviceGetUUID = lambda h: h["uuid"]
    m.nvmlDeviceGetName = lambda h: h["name"]
    m.nvmlDeviceGetArchitecture = lambda h: h["arch"]
    m.nvmlGpmQueryDeviceSupport = lambda h: types.SimpleNamespace(isSupportedDevice=int(h["arch"] >= 9))
    m.nvmlDeviceGetUtilizationRates = lambda h: fail_or(types.SimpleNamespace(gpu=h["util"], memory=h["mem_util"]), h, "util_err")
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=h["used"], free=h["free"], total=h["used"] + h["free"])
    m.nvmlDeviceGetPowerUsage = lambda h: fail_or(h["power_mw"], h, "power_err")
    m.nvmlDeviceGetClockInfo = lambda h, which: h["sm_mhz"]
    m.nvmlDeviceGetTemperature = lambda h, sensor: h["temp"]

    def sample_alloc():
        s = types.SimpleNamespace(id=len(m.calls), busy=None)
        m.calls.append("alloc")
        m.live_samples.add(id(s))
        return s

    def sample_get(h, s):
        s.busy = dict(h["gpm"])
        h["gpm"] = {k: v + 10 for k, v in h["gpm"].items()}  # the next interval is busier
        return s

    def sample_free(s):
        m.freed += 1
        m.live_samples.discard(id(s))

    class MetricsGet:
        def __init__(self):
            self.metrics = [types.SimpleNamespace(metricId=0, value=0.0, nvmlReturn=0) for _ in range(98)]

    def metrics_get(mg):
        assert mg.version == 1 and mg.sample1 is not mg.sample2
        for k in range(mg.numMetrics):
            mid = mg.metrics[k].metricId
            if mid == 13:
                mg.metrics[k].nvmlReturn = 3  # FP16 not supported: stays missing
            else:
                mg.metrics[k].value = mg.sample1.busy.get(mid, 0.0)
        return mg
    m.nvmlGpmSampleAlloc, m.nvmlGpmSampleGet, m.nvmlGpmSampleFree = sample_alloc, sample_get, sample_free
    m.c_nvmlGpmMetricsGet_t, m.nvmlGpmMetricsGet = MetricsGet, metrics_get
    return m


def h200(i):
    return {"uuid": f"GPU-h200-{i}", "name": "NVIDIA H200", "arch": 9, "util": 87, "mem_util": 41,
            "used": 100 << 30, "free": 40 << 30, "power_mw": 512_345, "sm_mhz": 1980, "temp": 61 + i,
            "gpm": {5: 55.0, 10: 72.5, 2: 90.0, 3: 33.0, 1: 95.0}}


def a100():
    return {"uuid": "GPU-a100", "name": "NVIDIA A100-SXM4-80GB", "arch": 7, "util": 10, "mem_util": 5,
            "used": 1 << 30, "free": 79 << 30, "power_mw": 90_000, "sm_mhz": 1410, "temp": 40, "gpm": {}}


def values(df, gpu):
    rows = df[df.gpu == gpu]
    return dict(zip(rows.metric, rows.value))


def test_poll_units_and_gpm_from_the_second_poll_on_hopper():
    nv = fake_nvml([h200(0), a100()])
    poller = NvmlPoller(nvml=nv, hostname="node-1")
    _, first = poller(1_000)
    schema.validate(first, "gpu")
    assert values(first, "0") == {"gpu_util": 0.87, "mem_copy_util": 0.41, "fb_used_bytes": 100 * 2 ** 30,
                                  "fb_free_bytes": 40 * 2 ** 30, "power_w": 512.345, "sm_clock_hz": 1.98e9,
                                  "gpu_temp_c": 61.0}  # GPM needs two samples: missing, not zero
    _, second = poller(2_000)
    v = values(second, "0")
    assert v["tensor_active"] == pytest.approx(0.55) and v["dram_active"] == pytest.approx(0.725)
    assert v["sm_active"] == pytest.approx(0.90) and v["sm_occupancy"] == pytest.approx(0.33)
    assert v["gr_engine_active"] == pytest.approx(0.95)
    assert "fp16_active" not in v  # the metric's own return code said NotSupported
    assert "tensor_active" not in values(second, "1")  # Ampere: no GPM
    assert set(second.hostname) == {"node-1"} and set(second[second.gpu == "1"].model) == {"NVIDIA A100-SXM4-80GB"}
    assert second.ts.unique().tolist() == [2_000]
    poller.close()
    assert nv.live_samples == set() and nv.calls[-1] == "shutdown"


def test_a_failing_call_drops_that_metric_only():
    dev = h200(0)
    dev["power_err"] = NVMLError(15)
    dev["util_err"] = NVMLError(3)
    _, df = NvmlPoller(nvml=fake_nvml([dev]), hostname="n")(5)
    assert sorted(df.metric) == ["fb_free_bytes", "fb_used_bytes", "gpu_temp_c", "sm_clock_hz"]


def test_init_failure_is_a_collector_error_naming_nvml():
    with pytest.raises(CollectorError, match=r"^NVML not available: Driver Not Loaded \(NVML comes with the NVIDIA driver"):
        open_nvml(fake_nvml([], init_error=NVMLError(9)))


def test_real_pynvml_without_driver_raises_not_available():
    import ctypes.util

    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("NVIDIA driver present")
    with pytest.raises(CollectorError, match=r"^NVML not available: NVML Shared Library Not Found \(NVML comes with"):
        open_nvml()


def test_poller_as_a_scrape_loop_target_fills_the_gpu_frame(tmp_path):
    poller = NvmlPoller(nvml=fake_nvml([h200(0), h200(1)]), hostname="node-1")
    db = tmp_path / "n.db"
    with store.Store(db) as st:
        scrape_loop.run([scrape_loop.Target("nvml", poll=poller)], st, interval_s=0.1, duration_s=0.45)
    frames = store.read(store.connect_ro(db))
    g = frames["nvml"]["gpu"]
    assert sorted(g.gpu.unique()) == ["0", "1"]
    n = g.ts.nunique()
    assert n >= 3
    assert (g.groupby("ts").size().tolist() == [14] + [24] * (n - 1))  # 7 metrics × 2 GPUs, then + 5 GPM each
    temps = g[(g.metric == "gpu_temp_c") & (g.gpu == "1")].value
    assert set(temps) == {62.0}
