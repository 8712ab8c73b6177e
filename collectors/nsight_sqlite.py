"""Read an Nsight Systems SQLite export (nsys 2022.1 to 2026.2) column by column, as Arrow record batches.

nsys creates tables lazily, so every table is optional: we look in `sqlite_master` first and note what
is missing instead of failing. Row tables (kernels, runtime, memcpy/memset, NVTX, graph launches) come
through `adbc-driver-sqlite` as Arrow batches, never as Python tuples; the small tables (metadata,
StringIds, GPU info, profiler overhead) through `sqlite3`. Kernel names are ids into `StringIds`,
resolved once per distinct id; NVTX names are `coalesce(StringIds[textId], text)`; a kernel's launching
API call is the runtime row with the same `correlationId` in the same process (`globalTid &
0xFFFFFFFFFF000000 == globalPid`), joined in numpy through `LaunchIndex`. Times stay integer ns on the
trace clock; `session_start_ns` (TARGET_INFO_SESSION_START_TIME) maps them to wall time.

`open_export(path)` reads everything but the kernels (the other tables: nsight_tables.py); then
`export.kernel_batches(rows)` yields the kernels as frames in start order, `rows` at a time (bounded
memory); `read_export(path)` is both, concatenated into one frame.

    >>> trace = read_export("sample_traces/starvation.sqlite")      # doctest: +SKIP
    >>> trace.kernels[["start_ns", "dur_ns", "name"]].head()          # doctest: +SKIP
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

import numpy as np
import pandas as pd

from stallscope.collectors.arrow_sqlite import (BATCH_ROWS, LaunchIndex, arrow_batches, connections, int_columns,
                                                 prefetched, trim_heap)
from stallscope.collectors.nsight_tables import (GRAPH_TRACE, KERNEL, MEMCPY, MEMSET, NVTX, PID_MASK, RUNTIME,
                                                 DroppedRows, empty_nvtx, gpus_frame, graph_frame, memops_frame,
                                                 metrics_frame, missing_notes, nvtx_frame, overhead_frame, pid_of,
                                                 signed64, strip_api_version)
from stallscope.core.errors import TraceError
from stallscope.core.schema import validate

__all__ = ["BATCH_ROWS", "KERNEL", "MEMCPY", "MEMSET", "NVTX", "PID_MASK", "RUNTIME", "GRAPH_TRACE", "NsysTrace",
           "Progress", "UnsortedKernels", "arrow_batches", "connections", "check_sqlite_file", "in_start_order",
           "kernel_frame", "launch_calls", "named_kernels", "open_export", "read_export", "signed64",
           "strip_api_version"]
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # renamed in nsys 2023.4

SQL_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
SQL_COUNT = "SELECT count(*) FROM {table}"  # table names come from sqlite_master, never from input
SQL_META = "SELECT name, value FROM {table}"
SQL_CAPTURE_GRAPH_MODE = "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%CUDA_GRAPH_TRACE_OPTIONS:MODE'"
SQL_STRINGS = "SELECT id, coalesce(value, '') FROM StringIds"
KERNEL_COLUMNS = ["start_ns", "end_ns", "device_id", "context_id", "stream_id", "name_id", "short_id", "grid_x",
                  "global_pid", "graph_node_id", "correlation_id", "row_id"]
SQL_KERNELS = """
SELECT start, end, deviceId, contextId, streamId, coalesce(demangledName, -1), coalesce(shortName, -1), gridX,
       coalesce(globalPid, 0), coalesce(graphNodeId, -1), coalesce(correlationId, -1), rowid
FROM CUPTI_ACTIVITY_KIND_KERNEL
"""
COLUMN_SETS = {  # what each reader of kernel batches needs: (SELECT, column names)
    "all": (SQL_KERNELS, KERNEL_COLUMNS),
    "report": ("""SELECT start, end, deviceId, contextId, streamId, coalesce(demangledName, -1), gridX,
                  coalesce(globalPid, 0), coalesce(correlationId, -1), rowid FROM CUPTI_ACTIVITY_KIND_KERNEL""",
               [c for c in KERNEL_COLUMNS if c not in ("short_id", "graph_node_id")]),
    "summary": ("SELECT start, end, coalesce(demangledName, -1) FROM CUPTI_ACTIVITY_KIND_KERNEL",
                ["start_ns", "end_ns", "name_id"]),
}
SQL_ROWS_BETWEEN = "rowid BETWEEN ? AND ?"  # OR-ed, one per range: SQLite seeks each on the row-id b-tree
MAX_RANGES = 100  # ranges per query (2 bound parameters each)
REREAD_ROWS = 32_768  # rows per batch of a re-read: a few stalls' kernels at a time
SQL_ORDER = " ORDER BY start, rowid"  # only for an export whose rows are not already in start order
# the launching call: same correlationId in the same process (globalTid & 0xFFFFFFFFFF000000 == globalPid)
SQL_LAUNCHES = """
SELECT correlationId, globalTid & ?, start FROM CUPTI_ACTIVITY_KIND_RUNTIME
WHERE correlationId IS NOT NULL AND globalTid IS NOT NULL AND start IS NOT NULL
"""
SQL_RUNTIME_NAMES = "SELECT nameId, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY nameId"
SQL_SESSION_START = "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1"
Progress = Callable[[str, int, int], None]  # (table, rows done, rows total)


@dataclass(frozen=True)
class NsysTrace:
    """Everything read from one export. Frames are empty (with their columns) when a table is absent.
    `kernels` is None on an export opened for streaming (`open_export`): use `kernel_batches`."""

    path: str
    tables: frozenset
    meta: dict
    kernels: pd.DataFrame | None
    memops: pd.DataFrame
    nvtx: pd.DataFrame
    graph_launches: pd.DataFrame
    overhead: pd.DataFrame
    gpu_metrics: pd.DataFrame  # mean value and samples per (device_id, metric)
    gpus: pd.DataFrame
    runtime_names: dict  # API name without version suffix -> calls; filled only when kernels are absent or
    #                      whole-graph launches were traced without a GRAPH_TRACE table
    session_start_ns: int | None  # Unix-epoch ns of trace time 0, when the export records it
    graph_trace_mode: str | None  # --cuda-graph-trace mode from META_DATA_CAPTURE (`Graph`, `Node`), None if unrecorded
    missing: list = field(default_factory=list)  # one sentence per absent table
    strings: dict = field(default_factory=dict, repr=False)  # StringIds: id -> text
    kernel_rows: int = 0  # rows in the kernel table (before implausible rows are dropped)

    @property
    def version(self) -> str:
        return str(self.meta.get("EXPORT_PRODUCT_VERSION", "unknown"))

    def kernel_batches(self, rows: int = BATCH_ROWS, *, with_launches: bool = True, launch_value=None,
                       progress: Progress | None = None, ordered: bool = False,
                       columns: str = "all") -> Iterator[pd.DataFrame]:
        """The kernels, `rows` at a time, in start order (ties in table order), as `kernel_frame`s.

        nsys writes rows in start order; where a file's are not, UnsortedKernels is raised at the first
        row out of order and the caller starts over with `ordered=True` (SQLite sorts, on disk).
        `launch_value(masked globalPid, launch start) -> int64 array` replaces `launch_ns` by a smaller
        per-launch value (the step range that holds the call), so the join keeps O(runs) memory.
        `columns`: a COLUMN_SETS key; "summary" (start, end, name id) comes in table order, unchecked.
        The runtime table is read by a second thread while the first kernel batches are read ahead."""
        if KERNEL not in self.tables:
            return
        sql, names = COLUMN_SETS[columns]
        with_launches = with_launches and "correlation_id" in names
        with connections(self.path) as (conn, adb), connections(self.path) as (_, adb_runtime), \
                ThreadPoolExecutor(1) as pool:
            launches = (pool.submit(LaunchIndex.read, arrow_batches(adb_runtime, SQL_LAUNCHES, (signed64(PID_MASK),)),
                                    launch_value, RUNTIME)
                        if with_launches and RUNTIME in self.tables else None)
            batches = arrow_batches(adb, sql + (SQL_ORDER if ordered else ""), rows=rows)
            with closing(prefetched(batches)) as ahead:
                yield from _kernel_frames(ahead, names, self, launches, progress)

    def kernel_rows_between(self, ranges: list[tuple[int, int]]) -> Iterator[pd.DataFrame]:
        """Kernel frames (no launch calls) of the rows whose row ids lie in the (first, last) `ranges`."""
        if KERNEL not in self.tables:
            return
        dropped = DroppedRows(KERNEL)  # counted and warned about by the full read already
        with connections(self.path) as (conn, adb):
            for i in range(0, len(ranges), MAX_RANGES):
                part = ranges[i:i + MAX_RANGES]
                sql = SQL_KERNELS + " WHERE " + " OR ".join([SQL_ROWS_BETWEEN] * len(part))
                for batch in arrow_batches(adb, sql, tuple(int(v) for r in part for v in r), rows=REREAD_ROWS):
                    yield kernel_frame(int_columns(batch, KERNEL_COLUMNS, KERNEL), dropped, None)

    def name_of(self, ids: np.ndarray, *, short: bool = False) -> np.ndarray:
        """Object array of the strings behind StringIds ids (unknown demangled ids are named as such)."""
        miss = (lambda i: "") if short else (lambda i: f"<unknown string id {i}>")
        return np.array([self.strings.get(int(i), miss(int(i))) for i in ids], dtype=object)


class UnsortedKernels(Exception):
    """The kernel table's rows are not in start order: read it again with `ordered=True`."""


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


def _kernel_frames(batches, names: list[str], trace: NsysTrace, launches: Future | None,
                   progress: Progress | None) -> Iterator[pd.DataFrame]:
    dropped, done, last = DroppedRows(KERNEL), 0, None
    in_order = "row_id" in names  # every reader but the summary needs start order
    for batch in batches:
        if isinstance(launches, Future):
            launches = launches.result()
            trim_heap()  # the runtime read's freed batches, before the kernel pass's own peak stacks on them
        frame = kernel_frame(int_columns(batch, names, KERNEL), dropped, launches)
        starts = frame["start_ns"].to_numpy()
        if in_order and len(starts) and ((last is not None and starts[0] < last) or np.any(starts[1:] < starts[:-1])):
            raise UnsortedKernels(trace.path)
        last = starts[-1] if len(starts) else last
        done += batch.num_rows
        if progress:
            progress(KERNEL, done, trace.kernel_rows)
        del batch  # the frame's columns keep the buffers they view; nothing else of this batch stays
        yield frame
        del frame  # before the next batch is read: one batch's frame alive at a time
    dropped.warn()


def in_start_order(run: Callable[[bool], object]) -> object:
    """`run(ordered)` once with the table as stored; again with ordered=True if its rows are out of order."""
    try:
        return run(False)
    except UnsortedKernels:
        return run(True)


def kernel_frame(cols: dict, dropped: DroppedRows, launches: LaunchIndex | None) -> pd.DataFrame:
    """One batch of kernel rows as a frame: ids as read, `dur_ns`, `pid` and `launch_ns` (NaN: no call;
    `launch_value` instead when the LaunchIndex holds values, not call starts)."""
    keep = dropped.keep(cols["start_ns"], cols["end_ns"])
    if not keep.all():
        cols = {k: v[keep] for k, v in cols.items()}
    df = pd.DataFrame(cols, copy=False)  # views of the Arrow buffers, not one consolidated copy
    df["dur_ns"] = cols["end_ns"] - cols["start_ns"]
    if "global_pid" in cols:
        df["pid"] = pid_of(cols["global_pid"])
    if "graph_node_id" in cols:
        node = cols["graph_node_id"]
        df["graph_node_id"] = np.where(node >= 0, node, np.nan)
    if launches is None:
        if "correlation_id" in cols:
            df["launch_ns"] = np.full(len(df), np.nan)
    else:
        found, value = launches.lookup(cols["global_pid"], cols["correlation_id"])
        df[launches.column] = np.where(found, value, np.nan)
    return df


def named_kernels(trace: NsysTrace, frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `name` (demangled) and `short_name` categoricals: one string lookup per distinct id."""
    df = frame.copy()
    for col, ids, short in (("name", "name_id", False), ("short_name", "short_id", True)):
        uniq, inverse = np.unique(df[ids].to_numpy(), return_inverse=True)
        labels = trace.name_of(uniq, short=short) if len(uniq) else np.array([""], dtype=object)
        cats, code = np.unique(labels.astype(str), return_inverse=True)
        df[col] = pd.Categorical.from_codes(code[inverse] if len(uniq) else inverse, categories=cats)
    return validate(df, "kernels")


def open_export(path: str) -> NsysTrace:
    """Read one nsys SQLite export except its kernels (`kernel_batches` streams those). Raises
    TraceError for files that are not a readable nsys export; a missing kernel table is not an error
    here (the export is still valid): callers check `trace.tables` and `trace.missing`."""
    check_sqlite_file(path)
    with connections(path) as (conn, adb):
        return _read(conn, adb, path)


def read_export(path: str, *, with_launches: bool = True, progress: Progress | None = None) -> NsysTrace:
    """Read one nsys SQLite export, kernels included as one frame (`name`, `short_name` resolved)."""
    trace = open_export(path)
    frames = in_start_order(lambda ordered: list(trace.kernel_batches(
        with_launches=with_launches, progress=progress, ordered=ordered)))
    kernels = pd.concat(frames, ignore_index=True) if frames else kernel_frame(
        {c: np.zeros(0, np.int64) for c in KERNEL_COLUMNS}, DroppedRows(KERNEL), None)
    return replace(trace, kernels=named_kernels(trace, kernels))


def _read(conn, adb, path) -> NsysTrace:
    tables = frozenset(r[0] for r in conn.execute(SQL_TABLES))
    meta_table = next((t for t in META_TABLES if t in tables), None)
    if meta_table is None and not ("StringIds" in tables and any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables)):
        raise TraceError(f"{path!r} is an SQLite file but not an Nsight Systems export "
                         f"(no {' or '.join(META_TABLES)} table, no StringIds/CUPTI tables)")
    meta = dict(conn.execute(SQL_META.format(table=meta_table)).fetchall()) if meta_table else {}
    strings = dict(conn.execute(SQL_STRINGS).fetchall()) if "StringIds" in tables else {}
    kernel_rows = conn.execute(SQL_COUNT.format(table=KERNEL)).fetchone()[0] if KERNEL in tables else 0
    mode = conn.execute(SQL_CAPTURE_GRAPH_MODE).fetchone() if "META_DATA_CAPTURE" in tables else None
    runtime_names: dict[str, int] = {}
    # call counts serve two questions only: why no kernels, and graph launches without GRAPH_TRACE
    if RUNTIME in tables and (kernel_rows == 0 or (GRAPH_TRACE not in tables and mode and mode[0] == "Graph")):
        for name_id, calls in conn.execute(SQL_RUNTIME_NAMES):
            key = strip_api_version(str(strings.get(name_id, f"<unknown string id {name_id}>")))
            runtime_names[key] = runtime_names.get(key, 0) + calls
    session = None
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = conn.execute(SQL_SESSION_START).fetchone()
        session = int(row[0]) if row and row[0] is not None else None
    return NsysTrace(
        path=path, graph_trace_mode=str(mode[0]) if mode else None, tables=tables, meta=meta, kernels=None,
        memops=memops_frame(adb, tables), nvtx=nvtx_frame(conn, adb, strings) if NVTX in tables else empty_nvtx(),
        graph_launches=graph_frame(adb, tables), overhead=overhead_frame(conn, tables),
        gpu_metrics=metrics_frame(conn, tables), gpus=gpus_frame(conn, tables),
        runtime_names=runtime_names, session_start_ns=session, missing=missing_notes(tables), strings=strings,
        kernel_rows=kernel_rows)


def launch_calls(runtime_names: dict) -> int:
    """How many recorded API calls launch GPU work (kernels or whole graphs)."""
    return sum(n for name, n in runtime_names.items() if "Launch" in name or name.startswith("cuGraphLaunch"))
