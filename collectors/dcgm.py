"""dcgm-exporter `/metrics` → the `gpu` frame: canonical metric names in base units.

The idea: one table maps every DCGM field spelling (the exporter's CSV names and the DCGM 4.6
renames, dcgm_nvml.md §1) to one canonical name and the factor that brings it to base units
(percent → ratio 0-1, MiB → bytes, MHz → Hz, MB/s → bytes/s). A field the exporter did not emit, or
emitted as a DCGM "blank" sentinel, gives no row: missing stays missing, never zero. The NVLink total
(`DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`, typed counter in the CSV) is already a rate: it becomes
`nvlink_total_bytes_s` and must never be `rate()`d. Labels: `Hostname`/`hostname`, `UUID`/`uuid`/
`gpu_uuid`, `modelName`/`model_name`, k8s `pod`/`namespace`/`container` (or the `--use-old-namespace`
`pod_name`/...), MIG `GPU_I_ID` → `gpu_instance`. Unknown fields are kept under their DCGM name.

    >>> df = parse(open("tests/fixtures/dcgm_samples/t4_under_load_ericsson_driver590.txt").read(), ts=0)
    >>> df.set_index("metric").loc[["gpu_util", "gr_engine_active"], "value"].tolist()
    [0.91, 0.156205]
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from stallscope.collectors.exposition import ParseCache, parse_rows, scrape  # noqa: F401 - scrape is public here
from stallscope.core.errors import CollectorError
from stallscope.core.schema import gpu_frame

MIB = 1 << 20
# canonical name → (factor to base units, every field spelling that carries it)
CANONICAL: dict[str, tuple[float, tuple[str, ...]]] = {
    "tensor_active": (1.0, ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO")),
    "dram_active": (1.0, ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO")),
    "sm_active": (1.0, ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO")),
    "sm_occupancy": (1.0, ("DCGM_FI_PROF_SM_OCCUPANCY",)),
    "gr_engine_active": (1.0, ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO")),
    "fp16_active": (1.0, ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_FP16_UTIL_RATIO")),
    "gpu_util": (0.01, ("DCGM_FI_DEV_GPU_UTIL",)),
    "mem_copy_util": (0.01, ("DCGM_FI_DEV_MEM_COPY_UTIL",)),
    "fb_used_bytes": (MIB, ("DCGM_FI_DEV_FB_USED",)),
    "fb_free_bytes": (MIB, ("DCGM_FI_DEV_FB_FREE",)),
    "fb_reserved_bytes": (MIB, ("DCGM_FI_DEV_FB_RESERVED",)),
    "power_w": (1.0, ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS")),
    "sm_clock_hz": (1e6, ("DCGM_FI_DEV_SM_CLOCK",)),
    "mem_clock_hz": (1e6, ("DCGM_FI_DEV_MEM_CLOCK",)),
    "gpu_temp_c": (1.0, ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS")),
    "memory_temp_c": (1.0, ("DCGM_FI_DEV_MEMORY_TEMP",)),
    "xid_last": (1.0, ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR")),
    "energy_j": (1e-3, ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",)),
    "pcie_tx_bytes_s": (1.0, ("DCGM_FI_PROF_PCIE_TX_BYTES",)),
    "pcie_rx_bytes_s": (1.0, ("DCGM_FI_PROF_PCIE_RX_BYTES",)),
    "nvlink_tx_bytes_s": (1.0, ("DCGM_FI_PROF_NVLINK_TX_BYTES",)),
    "nvlink_rx_bytes_s": (1.0, ("DCGM_FI_PROF_NVLINK_RX_BYTES",)),
    "nvlink_total_bytes_s": (1e6, ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL")),
}
# DCGM 4.6 `_RATIO` spelling of a percent field: already a ratio, so factor 1
CANONICAL_RATIO_RENAMES = {"DCGM_FI_DEV_GPU_UTIL_RATIO": "gpu_util"}
FIELDS: dict[str, tuple[str, float]] = {
    field: (name, factor) for name, (factor, fields) in CANONICAL.items() for field in fields}
FIELDS.update({field: (name, 1.0) for field, name in CANONICAL_RATIO_RENAMES.items()})

# the fields dcgm-exporter's CSVs type `counter` (dcgm_nvml.md §1), for sources that carry no TYPE (Prometheus)
COUNTERS = {f"DCGM_FI_DEV_{n}" for n in (
    "TOTAL_ENERGY_CONSUMPTION", "PCIE_REPLAY_COUNTER", "NVLINK_BANDWIDTH_TOTAL", "CORRECTABLE_REMAPPED_ROWS",
    "UNCORRECTABLE_REMAPPED_ROWS", "RETIRED_SBE", "RETIRED_DBE", "RETIRED_PENDING",
    *(f"{k}_VIOLATION" for k in ("POWER", "THERMAL", "SYNC_BOOST", "BOARD_LIMIT", "LOW_UTIL", "RELIABILITY")),
    *(f"ECC_{e}_{s}_TOTAL" for e in ("SBE", "DBE") for s in ("VOL", "AGG")),
    *(f"NVLINK_{k}_ERROR_COUNT_TOTAL" for k in ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")))}

# DCGM blank sentinels (dcgm_fields.h): int64 0x7ffffffffffffff0.., int32 0x7ffffff0.., fp64 2**47..
_BLANK_INT64 = float(0x7FFFFFFFFFFFFFF0)
_BLANK_GAUGE = ((float(0x7FFFFFF0), float(0x7FFFFFFF)), (float(2 ** 47), float(2 ** 47) + 16))

LABELS = {
    "hostname": ("Hostname", "hostname"),
    "uuid": ("UUID", "uuid", "gpu_uuid"),
    "model": ("modelName", "model_name"),
    "pod": ("pod", "pod_name"),
    "namespace": ("namespace", "pod_namespace"),
    "container": ("container", "container_name"),
}

COLUMNS = (*LABELS, "gpu", "gpu_instance")     # the gpu frame's string columns, but `metric`


def pick_label(labels: dict, names: tuple[str, ...]) -> str | None:
    for n in names:
        if n in labels:
            return labels[n]
    return None


def map_sample(name: str, labels: dict, counter: bool) -> tuple | None:
    """(canonical metric, factor to base units, `counter`, the gpu frame's string columns) of one DCGM
    series; None when it is not about one GPU (an NVSwitch or CPU entity)."""
    if "gpu" not in labels:
        return None
    if name.endswith("_total") and name[:-6].isupper():
        name = name[:-6]  # a counter suffix (prometheus_client's parser adds it); DCGM field names have none
    metric, factor = FIELDS.get(name, (name, 1.0))
    return metric, factor, counter, {**{k: pick_label(labels, v) for k, v in LABELS.items()},
                                     "gpu": labels["gpu"], "gpu_instance": labels.get("GPU_I_ID")}


def _map_families(families: list) -> list:
    return [map_sample(s.name, s.labels, fam.type == "counter") for fam in families for s in fam.samples]


def blank(values, counter) -> np.ndarray:
    """True where a value is NaN or a DCGM "blank" sentinel. A counter's only sentinel is int64's: its
    values legitimately pass the int32 and fp64 ones (energy in mJ)."""
    v = np.asarray(values, dtype=np.float64)
    gauge = np.zeros(v.shape, dtype=bool)
    for lo, hi in _BLANK_GAUGE:
        gauge |= (v >= lo) & (v <= hi)
    return np.isnan(v) | (v >= _BLANK_INT64) | (gauge & ~np.asarray(counter, dtype=bool))


def parse(text: str, ts: int | None = None, *, cache: ParseCache | None = None) -> pd.DataFrame:
    """Parse one dcgm-exporter exposition text into the `gpu` frame (schema.FRAMES["gpu"]).

    Optional columns `pod`, `namespace`, `container` and `gpu_instance` (MIG `GPU_I_ID`) appear only
    when some row carries a non-empty one; rows without them hold "".

        >>> line = 'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",modelName="NVIDIA L4",Hostname="h"} 2\\n'
        >>> parse(line, ts=0).value.item()
        2097152.0
    """
    if not isinstance(text, str):
        raise CollectorError(f"DCGM exposition must be text, got {type(text).__name__}")
    rows, values = parse_rows(text, _map_families, cache, what="DCGM exporter scrape")
    value = np.array(values, dtype=np.float64)
    keep = ~blank(value, [r[2] for r in rows])
    if not keep.all():  # missing stays missing: a blank gives no row
        rows, value = [r for r, k in zip(rows, keep) if k], value[keep]
    metric, factor, _, labels = zip(*rows) if rows else ((),) * 4
    with np.errstate(over="ignore"):  # 1e308 MiB is +Inf bytes: kept as scraped, dropped by the loader
        value = value * np.array(factor, dtype=np.float64)
    return gpu_frame(time.time_ns() if ts is None else int(ts), metric=metric, value=value,
                     **{c: [lab[c] for lab in labels] for c in COLUMNS})
