"""Read an Nsight Systems SQLite export (nsys 2022.1 to 2026.2) into typed frames.

nsys creates tables lazily, so every table is optional: we look in `sqlite_master` first and note what
is missing instead of failing. Kernel names are ids into `StringIds`; NVTX names are
`coalesce(StringIds[textId], text)`; a kernel's launching API call is the runtime row with the same
`correlationId` in the same process (`globalTid & 0xFFFFFFFFFF000000 == globalPid`). Times stay integer
ns on the trace clock; `session_start_ns` (from TARGET_INFO_SESSION_START_TIME) maps them to wall time.

    >>> trace = read_export("sample_traces/starvation.sqlite")      # doctest: +SKIP
    >>> trace.kernels[["start_ns", "dur_ns", "name"]].head()          # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import sqlite3
from itertools import chain
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from stallscope.core.errors import TraceError
from stallscope.core.schema import validate

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NVTX = "NVTX_EVENTS"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # renamed in nsys 2023.4
log = logging.getLogger(__name__)
PID_MASK = 0xFFFFFFFFFF000000  # globalTid -> globalPid
CHUNK_ROWS = 250_000
MAX_NS = 2 ** 60  # a time past this is not on a trace clock (and end - start could overflow int64)

SQL_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
SQL_COUNT = "SELECT count(*) FROM {table}"  # table names come from sqlite_master, never from input
SQL_COLUMNS = "SELECT name FROM pragma_table_info(?)"
SQL_META = "SELECT name, value FROM {table}"
SQL_CAPTURE_GRAPH_MODE = "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%CUDA_GRAPH_TRACE_OPTIONS:MODE'"
SQL_STRINGS = "SELECT id, coalesce(value, '') FROM StringIds"
KERNEL_IDS = "deviceId, contextId, streamId, coalesce(demangledName, -1), gridX"
SQL_KERNELS = """
SELECT k.start, k.end, {ids}, coalesce(k.globalPid, 0), coalesce(k.graphNodeId, -1), -1
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
"""
# (RUNTIME has none of the id columns, so they need no table prefix.)
# the launching call: same correlationId in the same process (globalTid & 0xFFFFFFFFFF000000 == globalPid)
SQL_KERNELS_WITH_LAUNCH = """
SELECT k.start, k.end, {ids}, coalesce(k.globalPid, 0), coalesce(k.graphNodeId, -1), coalesce(r.start, -1)
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
       ON r.correlationId = k.correlationId AND (r.globalTid & ?) = k.globalPid
"""
ID_COLUMNS = ["device_id", "context_id", "stream_id", "name_id", "grid_x"]
SQL_SHORT_NAMES = "SELECT DISTINCT demangledName, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL"
SQL_RUNTIME_NAMES = "SELECT nameId, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY nameId"
SQL_MEMOPS = """
SELECT start, end, deviceId, contextId, streamId, coalesce(globalPid, 0), bytes
FROM {table}
"""
SQL_GRAPH_TRACE = """
SELECT start, end, deviceId, contextId, streamId, coalesce(globalPid, 0), graphId, graphExecId
FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE
"""
SQL_NVTX = """
SELECT n.start, n.end, n.eventType, coalesce(s.value, n.text) AS name,
       coalesce(n.globalTid, 0), coalesce(n.domainId, 0)
FROM NVTX_EVENTS AS n LEFT JOIN StringIds AS s ON s.id = n.textId
WHERE n.end IS NOT NULL AND n.eventType IN (59, 60, 70, 71)
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
SELECT g.timestamp, g.typeId & 255, t.metricName, g.value
FROM GPU_METRICS AS g JOIN TARGET_INFO_GPU_METRICS AS t ON t.typeId = g.typeId AND t.metricId = g.metricId
"""
SQL_SESSION_START = "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1"
GPU_INFO_COLUMNS = {"id": "device_id", "name": "name", "smCount": "sm_count", "totalMemory": "memory_bytes",
                    "memoryBandwidth": "memory_bandwidth_bytes_per_s", "clockRate": "clock_hz",
                    "computeMajor": "compute_major", "computeMinor": "compute_minor", "chipName": "chip"}

Progress = Callable[[str, int, int], None]  # (table, rows done, rows total)


@dataclass(frozen=True)
class NsysTrace:
    """Everything read from one export. Frames are empty (with their columns) when a table is absent."""

    path: str
    tables: frozenset
    meta: dict
    kernels: pd.DataFrame
    memops: pd.DataFrame
    nvtx: pd.DataFrame
    graph_launches: pd.DataFrame
    overhead: pd.DataFrame
    gpu_metrics: pd.DataFrame
    gpus: pd.DataFrame
    runtime_names: dict  # API name without version suffix -> calls; filled only when kernels are absent or
    #                      whole-graph launches were traced without a GRAPH_TRACE table
    session_start_ns: int | None  # Unix-epoch ns of trace time 0, when the export records it
    graph_trace_mode: str | None  # --cuda-graph-trace mode from META_DATA_CAPTURE (`Graph`, `Node`), None if unrecorded
    missing: list = field(default_factory=list)  # one sentence per absent table

    @property
    def version(self) -> str:
        return str(self.meta.get("EXPORT_PRODUCT_VERSION", "unknown"))


def check_sqlite_file(path: str) -> None:
    """Raise TraceError unless `path` is a complete SQLite file (header magic and declared size)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise TraceError(f"cannot read nsys export {path!r}: {exc.strerror}") from None
    if not header.startswith(b"SQLite format 3\x00"):
        raise TraceError(f"{path!r} is not an SQLite file (export the report with `nsys export --type sqlite`)")
    if len(header) < 100:
        raise TraceError(f"{path!r} is truncated: {size} bytes, shorter than the 100-byte SQLite header")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    header_size_valid = header[24:28] == header[92:96]  # "in-header database size" is trusted only then
    if header_size_valid and pages and size < pages * page_size:
        raise TraceError(f"{path!r} is truncated: {size} bytes, but its header declares {pages} pages "
                         f"of {page_size} bytes ({pages * page_size} bytes)")


def _connect(path: str) -> sqlite3.Connection:
    uri = "file:" + os.path.abspath(path).replace("?", "%3f").replace("#", "%23") + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")  # StringIds may hold invalid UTF-8
    return conn


def _rows(conn, sql, params=()) -> list:
    return conn.execute(sql, params).fetchall()


def _int_matrix(conn, sql, params, ncols, *, table="", total=0, progress: Progress | None = None) -> np.ndarray:
    """Fetch integer rows chunk by chunk straight into an (n, ncols) int64 array (no list of tuples kept)."""
    cur = conn.execute(sql, params)
    parts, done = [], 0
    while True:
        chunk = cur.fetchmany(CHUNK_ROWS)
        if not chunk:
            break
        try:
            parts.append(np.fromiter(chain.from_iterable(chunk), dtype=np.int64, count=len(chunk) * ncols))
        except (TypeError, ValueError, OverflowError):
            raise TraceError(f"{table} holds a NULL or a value that is not a 64-bit integer among its times "
                             f"and ids: {_first_bad(chunk)!r}; not an nsys export") from None
        done += len(chunk)
        if progress:
            progress(table, done, total)
    return np.concatenate(parts).reshape(-1, ncols) if parts else np.zeros((0, ncols), dtype=np.int64)


def _first_bad(rows) -> object:
    return next((v for row in rows for v in row if not isinstance(v, int) or not -2 ** 63 <= v < 2 ** 63), None)


def _int_columns(rows, names: list[str], table: str = "") -> pd.DataFrame:
    try:
        arr = rows if isinstance(rows, np.ndarray) else np.array(rows, dtype=np.int64).reshape(-1, len(names))
    except (TypeError, ValueError, OverflowError):
        raise TraceError(f"{table} holds a NULL or a value that is not a 64-bit integer among its times and "
                         f"ids: {_first_bad(rows)!r}; not an nsys export") from None
    return pd.DataFrame({n: arr[:, i] for i, n in enumerate(names)})


def _factorize_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct ids, index of each id among them) like np.unique(return_inverse=True), in O(n) for the
    small non-negative StringIds ids (falls back to sorting otherwise)."""
    if len(ids) == 0 or ids.min() < 0 or ids.max() > 50_000_000:
        return np.unique(ids, return_inverse=True)
    present = np.bincount(ids)
    uniq = np.nonzero(present)[0]
    lut = np.zeros(len(present), dtype=np.int64)
    lut[uniq] = np.arange(len(uniq))
    return uniq, lut[ids]


def _names(uniq: np.ndarray, inverse: np.ndarray, strings: dict) -> pd.Categorical:
    """Categorical of the strings behind integer ids (`np.unique` output): one lookup per distinct id."""
    labels = np.array([strings.get(int(i), f"<unknown string id {int(i)}>") for i in uniq] or [""], dtype=object)
    cats, label_code = np.unique(labels, return_inverse=True)
    return pd.Categorical.from_codes(label_code[inverse] if len(uniq) else inverse, categories=cats)


def strip_api_version(name: str) -> str:
    """`cudaLaunchKernel_v7000` -> `cudaLaunchKernel` (nsys appends the API version to runtime names)."""
    head, sep, tail = name.rpartition("_v")
    return head if sep and tail.isdigit() else name


def _columns(arr: np.ndarray) -> dict:
    """Columns of the kernel query as named int64 arrays."""
    names = ["start_ns", "end_ns", *ID_COLUMNS, "global_pid", "graph_node_id", "launch_ns"]
    return {n: arr[:, i] for i, n in enumerate(names)}


def read_kernels(conn, strings: dict, *, with_launches: bool, progress: Progress | None = None,
                 total: int = 0) -> pd.DataFrame:
    """Kernels with resolved names (`name` = demangled, `short_name`) and, when asked, the launch call start."""
    sql, params = (SQL_KERNELS_WITH_LAUNCH, (_signed(PID_MASK),)) if with_launches else (SQL_KERNELS, ())
    arr = _int_matrix(conn, sql.format(ids=KERNEL_IDS), params, 5 + len(ID_COLUMNS), table=KERNEL, total=total, progress=progress)
    cols = _columns(arr)
    keep = _plausible(cols["start_ns"], cols["end_ns"], KERNEL)
    if not keep.all():
        cols = {k: v[keep] for k, v in cols.items()}
    order = None if np.all(cols["start_ns"][1:] >= cols["start_ns"][:-1]) else np.argsort(cols["start_ns"], kind="stable")
    if order is not None:
        cols = {k: v[order] for k, v in cols.items()}
    uniq, inverse = _factorize_ids(cols.pop("name_id"))
    short_of = dict(conn.execute(SQL_SHORT_NAMES).fetchall())  # demangled id -> short id (one per name)
    df = pd.DataFrame(cols)
    df["dur_ns"] = df["end_ns"] - df["start_ns"]
    df["pid"] = _pid(df["global_pid"])
    df["name"] = _names(uniq, inverse, strings)
    df["short_name"] = _names(uniq, inverse, {i: strings.get(short_of.get(i), "") for i in short_of})
    df["graph_node_id"] = df["graph_node_id"].where(df["graph_node_id"] >= 0).astype("float64")
    df["launch_ns"] = df["launch_ns"].where(df["launch_ns"] >= 0).astype("float64")
    return validate(df, "kernels")


def _pid(global_id: pd.Series) -> np.ndarray:
    """Process id from a serialized globalPid/globalTid: bits 24..47."""
    return (global_id.to_numpy(dtype=np.int64) >> 24) & 0xFFFFFF


def _signed(mask: int) -> int:
    return mask - (1 << 64) if mask >= 1 << 63 else mask  # SQLite integers are signed 64-bit


def _memops(conn, tables) -> pd.DataFrame:
    cols = ["start_ns", "end_ns", "device_id", "context_id", "stream_id", "global_pid", "bytes"]
    frames = []
    for table, kind in ((MEMCPY, "memcpy"), (MEMSET, "memset")):
        if table in tables:
            df = _drop_implausible(_int_columns(_rows(conn, SQL_MEMOPS.format(table=table)), cols, table), table)
            df["kind"] = kind
            frames.append(df)
    df = pd.concat(frames, ignore_index=True) if frames else _int_columns([], cols).assign(kind=pd.Series(dtype=object))
    df["pid"] = _pid(df["global_pid"])
    df["dur_ns"] = df["end_ns"] - df["start_ns"]
    return df.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _plausible(start: np.ndarray, end: np.ndarray, table: str) -> np.ndarray:
    """Rows to keep: a row that ends before it starts (nsys's reports would take the negative end - start
    as GPU time) or lies outside 0..2^60 ns (36 years of trace clock) is dropped, with one warning each."""
    reversed_ = end < start
    outside = ~reversed_ & ((start < 0) | (end >= MAX_NS))
    for mask, what in ((reversed_, "that end before they start (a negative duration is no GPU time)"),
                       (outside, "with a time outside 0..2^60 ns (not a trace clock)")):
        n = int(mask.sum())
        if n:
            log.warning("%s: dropped %d row%s %s", table, n, "s" * (n != 1), what)
    return ~(reversed_ | outside)


def _drop_implausible(df: pd.DataFrame, table: str) -> pd.DataFrame:
    keep = _plausible(df["start_ns"].to_numpy(), df["end_ns"].to_numpy(), table)
    return df if keep.all() else df[keep].reset_index(drop=True)


def _nvtx(conn) -> pd.DataFrame:
    rows = _rows(conn, SQL_NVTX)
    df = pd.DataFrame(rows, columns=["start_ns", "end_ns", "event_type", "name", "global_tid", "domain_id"])
    for col in ("start_ns", "end_ns", "event_type", "global_tid", "domain_id"):
        df[col] = df[col].astype("int64")
    df["name"] = df["name"].fillna("").astype(object)
    df["pid"] = _pid(df["global_tid"])
    domains = {(int(d), int(p)): str(t) for d, p, t in _rows(conn, SQL_NVTX_DOMAINS, (_signed(PID_MASK),))}
    gpid = df["global_tid"].to_numpy(dtype=np.int64) & _signed(PID_MASK)
    df["domain"] = [domains.get((d, p), "") if d else "" for d, p in zip(df["domain_id"], gpid)]
    return df.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _gpus(conn, tables) -> pd.DataFrame:
    if "TARGET_INFO_GPU" not in tables:
        return pd.DataFrame(columns=list(GPU_INFO_COLUMNS.values()))
    have = {r[0] for r in conn.execute(SQL_COLUMNS, ("TARGET_INFO_GPU",))}
    cols = [c for c in GPU_INFO_COLUMNS if c in have]
    sql = "SELECT " + ", ".join(cols) + " FROM TARGET_INFO_GPU"  # names from a fixed allow-list
    return pd.DataFrame(conn.execute(sql).fetchall(), columns=[GPU_INFO_COLUMNS[c] for c in cols])


def _missing(tables) -> list[str]:
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


def read_export(path: str, *, with_launches: bool = True, progress: Progress | None = None) -> NsysTrace:
    """Read one nsys SQLite export. Raises TraceError for files that are not a readable nsys export.

    A missing kernel table is not an error here (the export is still valid); callers that need kernels
    check `trace.kernels.empty` and `trace.missing`.
    """
    check_sqlite_file(path)
    try:
        conn = _connect(path)
        try:
            return _read(conn, path, with_launches=with_launches, progress=progress)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise TraceError(f"{path!r} is not a readable SQLite database ({exc}); the file may be truncated "
                         "or damaged: export it again with `nsys export --type sqlite`") from None


def _read(conn, path, *, with_launches, progress) -> NsysTrace:
    tables = frozenset(r[0] for r in conn.execute(SQL_TABLES))
    meta_table = next((t for t in META_TABLES if t in tables), None)
    if meta_table is None and not ("StringIds" in tables and any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables)):
        raise TraceError(f"{path!r} is an SQLite file but not an Nsight Systems export "
                         f"(no {' or '.join(META_TABLES)} table, no StringIds/CUPTI tables)")
    meta = dict(conn.execute(SQL_META.format(table=meta_table)).fetchall()) if meta_table else {}
    strings = dict(conn.execute(SQL_STRINGS).fetchall()) if "StringIds" in tables else {}
    if KERNEL in tables:
        total = conn.execute(SQL_COUNT.format(table=KERNEL)).fetchone()[0] if progress else 0
        kernels = read_kernels(conn, strings, with_launches=with_launches and RUNTIME in tables,
                               progress=progress, total=total)
    else:
        kernels = read_kernels_empty()
    graph_launches = pd.DataFrame(
        _rows(conn, SQL_GRAPH_TRACE) if GRAPH_TRACE in tables else [],
        columns=["start_ns", "end_ns", "device_id", "context_id", "stream_id", "global_pid", "graph_id",
                 "graph_exec_id"])
    graph_launches["pid"] = _pid(graph_launches["global_pid"])
    overhead = pd.DataFrame(_rows(conn, SQL_OVERHEAD) if {"PROFILER_OVERHEAD", "StringIds"} <= tables else [],
                            columns=["start_ns", "end_ns", "pid"])
    metrics = pd.DataFrame(
        _rows(conn, SQL_GPU_METRICS) if {"GPU_METRICS", "TARGET_INFO_GPU_METRICS"} <= tables else [],
        columns=["ts", "device_id", "metric", "value"])
    runtime_names: dict[str, int] = {}
    mode = conn.execute(SQL_CAPTURE_GRAPH_MODE).fetchone() if "META_DATA_CAPTURE" in tables else None
    # call counts serve two questions only: why no kernels, and graph launches without GRAPH_TRACE
    if RUNTIME in tables and (kernels.empty or (GRAPH_TRACE not in tables and mode and mode[0] == "Graph")):
        for name_id, calls in conn.execute(SQL_RUNTIME_NAMES):
            key = strip_api_version(str(strings.get(name_id, f"<unknown string id {name_id}>")))
            runtime_names[key] = runtime_names.get(key, 0) + calls
    session = None
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = conn.execute(SQL_SESSION_START).fetchone()
        session = int(row[0]) if row and row[0] is not None else None
    return NsysTrace(
        path=path, graph_trace_mode=str(mode[0]) if mode else None, tables=tables, meta=meta, kernels=kernels, memops=_memops(conn, tables),
        nvtx=_nvtx(conn) if NVTX in tables else _nvtx_empty(), graph_launches=graph_launches,
        overhead=overhead, gpu_metrics=metrics, gpus=_gpus(conn, tables), runtime_names=runtime_names,
        session_start_ns=session, missing=_missing(tables))


def read_kernels_empty() -> pd.DataFrame:
    z = np.zeros(0, dtype=np.int64)
    df = pd.DataFrame({c: z for c in ["start_ns", "end_ns", "device_id", "context_id", "stream_id", "grid_x",
                                      "global_pid", "dur_ns", "pid"]})
    df = df.assign(name=pd.Series(dtype=object), short_name=pd.Series(dtype=object),
                   graph_node_id=pd.Series(dtype="float64"), launch_ns=pd.Series(dtype="float64"))
    return validate(df, "kernels")


def _nvtx_empty() -> pd.DataFrame:
    cols = {"start_ns": "int64", "end_ns": "int64", "event_type": "int64", "name": object,
            "global_tid": "int64", "domain_id": "int64", "pid": "int64", "domain": object}
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})


def launch_calls(runtime_names: dict) -> int:
    """How many recorded API calls launch GPU work (kernels or whole graphs)."""
    return sum(n for name, n in runtime_names.items() if "Launch" in name or name.startswith("cuGraphLaunch"))
