"""NVML (`nvidia-ml-py`, imported as `pynvml`) → the `gpu` frame, with the same canonical names as DCGM.

The idea: a `NvmlPoller` holds the device handles and, on Hopper and newer, the previous GPM sample;
each call reads utilization, memory, power, SM clock and temperature per GPU, plus the GPM tensor,
DRAM-bandwidth, SM and FP16 utilisations computed between the previous sample and this one (so the
first poll has no GPM rows). Units follow the schema: NVML percent → ratio, mW → W, MHz → Hz, bytes
stay bytes. The NVML module is injected (`nvml=`) so the polling runs in tests without a driver; by
default `pynvml` is imported lazily. A call that fails on one GPU (NotSupported, GpuIsLost) drops that
metric for that poll; only a failing `nvmlInit` raises, as `CollectorError("NVML not available: …")`.

    >>> poller = NvmlPoller()            # raises CollectorError without a driver
    >>> _, gpu = poller(time.time_ns())  # (None, gpu frame)
"""

from __future__ import annotations

import logging
import socket
import time

import pandas as pd

from stallscope.core.errors import CollectorError
from stallscope.core.schema import gpu_frame

log = logging.getLogger(__name__)
ARCH_HOPPER = 9  # NVML_DEVICE_ARCH_HOPPER
# GPM metric id (nvmlGpmMetricId_t) → canonical name; values are percent 0-100
GPM_METRICS = {
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": "tensor_active",
    "NVML_GPM_METRIC_DRAM_BW_UTIL": "dram_active",
    "NVML_GPM_METRIC_SM_UTIL": "sm_active",
    "NVML_GPM_METRIC_SM_OCCUPANCY": "sm_occupancy",
    "NVML_GPM_METRIC_GRAPHICS_UTIL": "gr_engine_active",
    "NVML_GPM_METRIC_FP16_UTIL": "fp16_active",
}


def open_nvml(nvml=None):
    """The initialised NVML module (`pynvml` unless one is injected), or CollectorError."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            raise CollectorError("NVML not available: nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise CollectorError(f"NVML not available: {exc} (NVML comes with the NVIDIA driver; without a GPU, "
                             "scrape dcgm-exporter with --target instead of --nvml)") from None
    return nvml


class NvmlPoller:
    """Callable `poller(ts_ns) -> (None, gpu_frame)` over every GPU NVML sees."""

    def __init__(self, nvml=None, hostname: str | None = None):
        self.nvml = open_nvml(nvml)
        self.hostname = hostname or socket.gethostname()
        self.devices = []  # (index, handle, uuid, model, gpm_supported)
        self._gpm_prev: dict[int, object] = {}
        self._warned: set[tuple[int, str]] = set()
        n = self.nvml.nvmlDeviceGetCount()
        for i in range(n):
            h = self.nvml.nvmlDeviceGetHandleByIndex(i)
            self.devices.append((i, h, self._try(i, "uuid", self.nvml.nvmlDeviceGetUUID, h) or "",
                                 self._try(i, "name", self.nvml.nvmlDeviceGetName, h) or "", self._gpm_supported(i, h)))

    def _try(self, gpu: int, what: str, fn, *args):
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if (gpu, what) not in self._warned:
                self._warned.add((gpu, what))
                log.warning("NVML %s on GPU %d unavailable: %s", what, gpu, exc)
            return None

    def _gpm_supported(self, i: int, h) -> bool:
        arch = self._try(i, "architecture", self.nvml.nvmlDeviceGetArchitecture, h)
        if arch is None or arch < ARCH_HOPPER:
            return False
        support = self._try(i, "GPM support", self.nvml.nvmlGpmQueryDeviceSupport, h)
        return bool(support is not None and support.isSupportedDevice)

    def __call__(self, ts: int | None = None):
        ts = time.time_ns() if ts is None else int(ts)
        nv = self.nvml
        rows: list[tuple[int, str, float]] = []
        for i, h, uuid, model, gpm in self.devices:
            util = self._try(i, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                rows += [(i, "gpu_util", util.gpu / 100.0), (i, "mem_copy_util", util.memory / 100.0)]
            mem = self._try(i, "memory", nv.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                rows += [(i, "fb_used_bytes", float(mem.used)), (i, "fb_free_bytes", float(mem.free))]
            for name, fn, args, factor in (
                ("power_w", nv.nvmlDeviceGetPowerUsage, (h,), 1e-3),
                ("sm_clock_hz", nv.nvmlDeviceGetClockInfo, (h, nv.NVML_CLOCK_SM), 1e6),
                ("gpu_temp_c", nv.nvmlDeviceGetTemperature, (h, nv.NVML_TEMPERATURE_GPU), 1.0),
            ):
                v = self._try(i, name, fn, *args)
                if v is not None:
                    rows.append((i, name, float(v) * factor))
            if gpm:
                rows += [(i, name, v) for name, v in self._gpm(i, h)]
        return None, self._frame(ts, rows)

    def _gpm(self, i: int, h) -> list[tuple[str, float]]:
        nv = self.nvml
        sample = self._try(i, "GPM sample", nv.nvmlGpmSampleAlloc)
        if sample is None:
            return []
        if self._try(i, "GPM sample", nv.nvmlGpmSampleGet, h, sample) is None:
            self._try(i, "GPM sample free", nv.nvmlGpmSampleFree, sample)
            return []
        prev, self._gpm_prev[i] = self._gpm_prev.get(i), sample
        if prev is None:
            return []
        try:
            names = [(getattr(nv, mid), name) for mid, name in GPM_METRICS.items()]
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = nv.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(names)
            mg.sample1, mg.sample2 = prev, sample
            for k, (mid, _) in enumerate(names):
                mg.metrics[k].metricId = mid
            got = self._try(i, "GPM metrics", nv.nvmlGpmMetricsGet, mg)
            if got is None:
                return []
            return [(name, got.metrics[k].value / 100.0) for k, (_, name) in enumerate(names)
                    if got.metrics[k].nvmlReturn == 0]
        finally:
            self._try(i, "GPM sample free", nv.nvmlGpmSampleFree, prev)

    def _frame(self, ts: int, rows: list[tuple[int, str, float]]) -> pd.DataFrame:
        info = {i: (uuid, model) for i, _, uuid, model, _ in self.devices}
        gpus, metric, value = zip(*rows) if rows else ((),) * 3
        return gpu_frame(ts, self.hostname, [str(i) for i in gpus], [info[i][0] for i in gpus],
                         [info[i][1] for i in gpus], metric, value)

    def close(self) -> None:
        for sample in self._gpm_prev.values():
            self._try(-1, "GPM sample free", self.nvml.nvmlGpmSampleFree, sample)
        self._gpm_prev.clear()
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass
