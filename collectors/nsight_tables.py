"""The tables of an Nsight Systems export besides the kernels, each read whole into one frame: memcpy/memset,
NVTX ranges, whole-graph launches, profiler overhead, GPU metrics and GPU info, with a note per absent
table; and the row rules every table shares (`DroppedRows`: a row that ends before it starts or lies off
the trace clock is dropped and counted; `pid_of`: the process id inside a serialized globalPid/globalTid).

These tables hold a few rows per engine step, not per kernel; nsight_sqlite.py reads the kernels.

    >>> with connections("serve.sqlite") as (conn, adb):                 # doctest: +SKIP
    ...     nvtx = nvtx_frame(conn, adb, strings={})
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pyarrow as pa

from stallscope.collectors.arrow_sqlite import arrow_batches, decoded_texts, int_columns

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NVTX = "NVTX_EVENTS"
log = logging.getLogger(__name__)
PID_MASK = 0xFFFFFFFFFF000000  # globalTid -> globalPid
MAX_NS = 2 ** 60  # a time past this is not on a trace clock (and end - start could overflow int64)

SQL_COLUMNS = "SELECT name FROM pragma_table_info(?)"
SQL_MEMOPS = "SELECT start, end, deviceId, contextId, streamId, coalesce(globalPid, 0), bytes FROM {table}"
SQL_GRAPH_TRACE = """
SELECT start, end, deviceId, contextId, streamId, coalesce(globalPid, 0), graphId, graphExecId
FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE
"""
SQL_NVTX = """
SELECT start, end, eventType, coalesce(textId, -1), CAST(text AS BLOB), coalesce(globalTid, 0), coalesce(domainId, 0)
FROM NVTX_EVENTS WHERE end IS NOT NULL AND eventType IN (59, 60, 70, 71)
"""
SQL_NVTX_DOMAINS = """
SELECT coalesce(domainId, 0), coalesce(globalTid, 0) & ?, text FROM NVTX_EVENTS WHERE eventType = 75
"""
SQL_OVERHEAD = """
SELECT p.start, p.end, (p.globalTid >> 24) & 16777215 FROM PROFILER_OVERHEAD AS p
JOIN StringIds AS s ON s.id = p.nameId
WHERE s.value IN ('CUDA profiling data flush overhead', 'CUDA profiling stop overhead', 'CUDA profiling overhead')
"""
SQL_GPU_METRICS = """
SELECT g.typeId & 255, t.metricName, avg(g.value), count(*)
FROM GPU_METRICS AS g JOIN TARGET_INFO_GPU_METRICS AS t ON t.typeId = g.typeId AND t.metricId = g.metricId
GROUP BY 1, 2 ORDER BY 1, 2
"""
GPU_INFO_COLUMNS = {"id": "device_id", "name": "name", "smCount": "sm_count", "totalMemory": "memory_bytes",
                    "memoryBandwidth": "memory_bandwidth_bytes_per_s", "clockRate": "clock_hz",
                    "computeMajor": "compute_major", "computeMinor": "compute_minor", "chipName": "chip"}


def int_frame(adb, sql: str, names: list[str], table: str, params=None) -> pd.DataFrame:
    """An all-integer query as one frame of int64 columns `names`."""
    parts = [int_columns(b, names, table) for b in arrow_batches(adb, sql, params)]
    return pd.DataFrame({n: np.concatenate([p[n] for p in parts]) if parts else np.zeros(0, np.int64) for n in names})


def strip_api_version(name: str) -> str:
    """`cudaLaunchKernel_v7000` -> `cudaLaunchKernel` (nsys appends the API version to runtime names)."""
    head, sep, tail = name.rpartition("_v")
    return head if sep and tail.isdigit() else name


def pid_of(global_id) -> np.ndarray:
    """Process id from a serialized globalPid/globalTid: bits 24..47."""
    return (np.asarray(global_id, dtype=np.int64) >> 24) & 0xFFFFFF


def signed64(mask: int) -> int:
    """An unsigned 64-bit mask as the signed integer SQLite binds."""
    return mask - (1 << 64) if mask >= 1 << 63 else mask  # SQLite integers are signed 64-bit


class DroppedRows:
    """Counts implausible rows across batches; `warn` logs one line per kind, as for one read."""

    WHAT = ("that end before they start (a negative duration is no GPU time)",
            "with a time outside 0..2^60 ns (not a trace clock)")

    def __init__(self, table: str):
        self.table, self.counts = table, [0, 0]

    def keep(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Rows to keep: a row that ends before it starts (nsys's reports would take the negative
        end - start as GPU time) or lies outside 0..2^60 ns (36 years of trace clock) is dropped."""
        reversed_ = end < start
        outside = ~reversed_ & ((start < 0) | (end >= MAX_NS))
        self.counts[0] += int(reversed_.sum())
        self.counts[1] += int(outside.sum())
        return ~(reversed_ | outside)

    def warn(self) -> None:
        for n, what in zip(self.counts, self.WHAT):
            if n:
                log.warning("%s: dropped %d row%s %s", self.table, n, "s" * (n != 1), what)


def drop_implausible(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """`df` without the rows DroppedRows drops (one warning per kind)."""
    dropped = DroppedRows(table)
    keep = dropped.keep(df["start_ns"].to_numpy(), df["end_ns"].to_numpy())
    dropped.warn()
    return df if keep.all() else df[keep].reset_index(drop=True)


def memops_frame(adb, tables) -> pd.DataFrame:
    """memcpy and memset rows (`kind`), in start order, with `pid` and `dur_ns`."""
    cols = ["start_ns", "end_ns", "device_id", "context_id", "stream_id", "global_pid", "bytes"]
    frames = []
    for table, kind in ((MEMCPY, "memcpy"), (MEMSET, "memset")):
        if table in tables:
            df = drop_implausible(int_frame(adb, SQL_MEMOPS.format(table=table), cols, table), table)
            frames.append(df.assign(kind=kind))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        {c: np.zeros(0, np.int64) for c in cols}).assign(kind=pd.Series(dtype=object))
    df["pid"] = pid_of(df["global_pid"])
    df["dur_ns"] = df["end_ns"] - df["start_ns"]
    return df.sort_values("start_ns", kind="stable").reset_index(drop=True)


def nvtx_frame(conn, adb, strings: dict) -> pd.DataFrame:
    """NVTX push/pop and start/end ranges in start order: `name` (registered string or inline text), `pid`, `domain`."""
    ints = ["start_ns", "end_ns", "event_type", "text_id", "global_tid", "domain_id"]
    parts, texts = [], []
    for batch in arrow_batches(adb, SQL_NVTX):
        parts.append(int_columns(pa.RecordBatch.from_arrays(
            [batch.column(i) for i in (0, 1, 2, 3, 5, 6)], names=ints), ints, NVTX))
        texts.append(decoded_texts(batch.column(4)))
    if not parts:
        return empty_nvtx()
    df = pd.DataFrame({n: np.concatenate([p[n] for p in parts]) for n in ints})
    text = np.concatenate(texts)
    uniq, inverse = np.unique(df["text_id"].to_numpy(), return_inverse=True)
    registered = np.array([strings.get(int(i)) for i in uniq], dtype=object)[inverse]
    df["name"] = np.where(pd.isna(registered), text, registered)
    df["pid"] = pid_of(df["global_tid"])
    domains = {(int(d), int(p)): str(t) for d, p, t in conn.execute(SQL_NVTX_DOMAINS, (signed64(PID_MASK),))}
    gpid = df["global_tid"].to_numpy(dtype=np.int64) & signed64(PID_MASK)
    df["domain"] = [domains.get((d, p), "") if d else "" for d, p in zip(df["domain_id"], gpid)] if domains else ""
    df = df.drop(columns="text_id")
    return df.sort_values("start_ns", kind="stable").reset_index(drop=True)


def gpus_frame(conn, tables) -> pd.DataFrame:
    """TARGET_INFO_GPU with the columns this export has (names from GPU_INFO_COLUMNS)."""
    if "TARGET_INFO_GPU" not in tables:
        return pd.DataFrame(columns=list(GPU_INFO_COLUMNS.values()))
    have = {r[0] for r in conn.execute(SQL_COLUMNS, ("TARGET_INFO_GPU",))}
    cols = [c for c in GPU_INFO_COLUMNS if c in have]
    sql = "SELECT " + ", ".join(cols) + " FROM TARGET_INFO_GPU"  # names from a fixed allow-list
    return pd.DataFrame(conn.execute(sql).fetchall(), columns=[GPU_INFO_COLUMNS[c] for c in cols])


def missing_notes(tables) -> list[str]:
    """One sentence per absent table that limits the analysis."""
    notes = []
    if KERNEL not in tables:
        notes.append(f"no {KERNEL} table: no kernel ran inside the capture (nsys creates tables lazily)")
    if RUNTIME not in tables:
        notes.append(f"no {RUNTIME} table: kernels cannot be tied to their launch calls")
    if NVTX not in tables:
        notes.append(f"no {NVTX} table: no NVTX ranges (steps come from the kernel pattern)")
    if MEMCPY not in tables and MEMSET not in tables:
        notes.append("no memcpy/memset tables: GPU gaps use kernels only")
    if "TARGET_INFO_GPU" not in tables:
        notes.append("no TARGET_INFO_GPU table: GPU model and SM count unknown")
    if "GPU_METRICS" not in tables:
        notes.append("no GPU_METRICS table: capture with --gpu-metrics-devices=all for SM/tensor activity")
    if "TARGET_INFO_SESSION_START_TIME" not in tables:
        notes.append("no TARGET_INFO_SESSION_START_TIME table: times cannot be aligned to wall time")
    return notes


def empty_nvtx() -> pd.DataFrame:
    cols = {"start_ns": "int64", "end_ns": "int64", "event_type": "int64", "name": object,
            "global_tid": "int64", "domain_id": "int64", "pid": "int64", "domain": object}
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})


GRAPH_COLUMNS = ["start_ns", "end_ns", "device_id", "context_id", "stream_id", "global_pid", "graph_id", "graph_exec_id"]


def graph_frame(adb, tables) -> pd.DataFrame:
    """Whole-graph launches (CUPTI_ACTIVITY_KIND_GRAPH_TRACE) with `pid`."""
    graphs = (int_frame(adb, SQL_GRAPH_TRACE, GRAPH_COLUMNS, GRAPH_TRACE) if GRAPH_TRACE in tables
              else pd.DataFrame(columns=GRAPH_COLUMNS))
    graphs["pid"] = pid_of(graphs["global_pid"])
    return graphs


def overhead_frame(conn, tables) -> pd.DataFrame:
    """Profiler overhead that stalls CUDA (flush, stop), as (start_ns, end_ns, pid)."""
    rows = conn.execute(SQL_OVERHEAD).fetchall() if {"PROFILER_OVERHEAD", "StringIds"} <= tables else []
    return pd.DataFrame(rows, columns=["start_ns", "end_ns", "pid"])


def metrics_frame(conn, tables) -> pd.DataFrame:
    """Mean value and sample count per (device_id, GPU metric)."""
    rows = conn.execute(SQL_GPU_METRICS).fetchall() if {"GPU_METRICS", "TARGET_INFO_GPU_METRICS"} <= tables else []
    return pd.DataFrame(rows, columns=["device_id", "metric", "value", "samples"])
