"""Columnar SQLite access for the Nsight reader: read-only ADBC (and sqlite3) connections, queries as Arrow
record batches, integer columns as zero-copy int64 numpy arrays, a read-ahead thread, and LaunchIndex,
the runs of consecutive ids that hold the launch join in O(runs) memory.

    >>> with connections("serve.sqlite") as (conn, adb):                               # doctest: +SKIP
    ...     rows = sum(b.num_rows for b in arrow_batches(adb, "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL"))
"""

from __future__ import annotations

import ctypes
import gc
import os
import queue
import sqlite3
import threading
from typing import Iterator

import adbc_driver_manager
import adbc_driver_sqlite.dbapi as adbc
import numpy as np
import pyarrow as pa

from stallscope.core.errors import TraceError

BATCH_ROWS = 262_144  # rows per batch: ~60 MB of kernel frames in flight, whatever the trace's size
PREFETCH = 2  # batches read ahead by a thread (the ADBC read runs outside the GIL)
DB_ERRORS = (adbc_driver_manager.Error, OSError, pa.ArrowException, sqlite3.DatabaseError)


def _uri(path: str) -> str:
    return "file:" + os.path.abspath(path).replace("?", "%3f").replace("#", "%23") + "?mode=ro"


def _damaged(path: str, exc: Exception) -> TraceError:
    return TraceError(f"{path!r} is not a readable SQLite database ({str(exc).strip()}); the file may be "
                      "truncated or damaged: export it again with `nsys export --type sqlite`")


class connections:
    """Context manager: (sqlite3 connection, ADBC connection), read-only; database errors -> TraceError."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self):
        try:
            self.conn = sqlite3.connect(_uri(self.path), uri=True)
            self.conn.text_factory = lambda b: b.decode("utf-8", "replace")  # StringIds may hold invalid UTF-8
            self.adb = adbc.connect(_uri(self.path))
        except DB_ERRORS as exc:
            raise _damaged(self.path, exc) from None
        return self.conn, self.adb

    def __exit__(self, kind, exc, tb):
        self.conn.close()
        self.adb.close()
        if kind is not None and issubclass(kind, DB_ERRORS) and not issubclass(kind, TraceError):
            if "Type mismatch" in str(exc) or "NULL" in str(exc):
                raise TraceError(f"{os.path.basename(self.path)!r} holds a NULL or a value that is not a 64-bit "
                                 f"integer among the times and ids of a table ({exc}); not an nsys export") from None
            raise _damaged(self.path, exc) from None
        return False


def arrow_batches(adb, sql: str, params=None, rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Record batches of `rows` rows of one query through ADBC (parameters bound, never formatted in)."""
    cur = adb.cursor()
    try:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(rows)})
        cur.execute(sql, params)
        yield from cur.fetch_record_batch()
    finally:
        cur.close()


def int_columns(batch: pa.RecordBatch, names: list[str], table: str) -> dict:
    """Columns of an all-integer batch as int64 numpy arrays (zero-copy); TraceError on NULLs or non-integers."""
    out = {}
    for name, col in zip(names, batch.columns):
        if col.null_count or not (pa.types.is_integer(col.type) or pa.types.is_null(col.type) and len(col) == 0):
            bad = "a NULL" if col.null_count else f"a {col.type} value"
            raise TraceError(f"{table} holds {bad} in its `{name}` column among the times and ids; not an nsys export")
        out[name] = col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return out


def prefetched(batches: Iterator, depth: int = PREFETCH) -> Iterator:
    """`batches`, read `depth` ahead by a worker thread; its errors are raised here. Close it (e.g.
    with contextlib.closing) so the worker stops before the connection it reads from."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop, done = threading.Event(), object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for batch in batches:
                if not put(batch):
                    return
            put(done)
        except BaseException as exc:  # handed to the reading thread, which raises it
            put(exc)

    worker = threading.Thread(target=work, name="nsys-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
            del item  # not held while waiting for the next one
    finally:
        stop.set()
        worker.join()


def decoded_texts(col: pa.Array) -> np.ndarray:
    """Object array of a BLOB column's texts (invalid UTF-8 replaced), decoded once per distinct value."""
    enc = col.dictionary_encode() if len(col) else pa.array([], pa.binary()).dictionary_encode()
    labels = np.array([b if isinstance(b, str) else b.decode("utf-8", "replace") for b in enc.dictionary.to_pylist()]
                      + [""], dtype=object)
    idx = enc.indices.fill_null(len(labels) - 1).to_numpy(zero_copy_only=False)
    return labels[idx]


class LaunchIndex:
    """The runtime table's (process, correlationId) -> value map, as runs of consecutive correlation ids
    with one value: CUPTI numbers API calls in order, so a trace of N launches is a few runs per value.

    With the default value (the launch call's start) every call is its own run; with the step range that
    holds the call (trace_steps passes `launch_value`) a trace of any length needs O(steps) memory."""

    def __init__(self, runs: dict, column: str = "launch_ns"):
        self.runs = runs  # masked globalPid -> (first correlation id, last, value) arrays, sorted by first
        self.column = column  # the kernel frame column its values go to

    @classmethod
    def read(cls, batches, value_fn=None, table: str = "") -> "LaunchIndex":
        """From record batches of (correlation id, masked globalPid, call start)."""
        parts: dict = {}
        for batch in batches:
            cols = int_columns(batch, ["corr", "gpid", "start"], table)
            value = value_fn(cols["gpid"], cols["start"]) if value_fn else cols["start"]
            for gpid in np.unique(cols["gpid"]):
                sel = cols["gpid"] == gpid
                parts.setdefault(int(gpid), []).append(_runs(cols["corr"][sel], value[sel]))
                if len(parts[int(gpid)]) > 8:  # merge as we go: memory stays O(runs)
                    parts[int(gpid)] = [_merge_runs(parts[int(gpid)])]
        return cls({g: _merge_runs(p) for g, p in parts.items()}, "launch_value" if value_fn else "launch_ns")

    def lookup(self, gpid: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found, value) per kernel: whether its launch call was traced, and that call's value."""
        found, value = np.zeros(len(corr), bool), np.zeros(len(corr), np.int64)
        for g, (lo, hi, val) in self.runs.items():
            sel = np.nonzero(gpid == g)[0]
            pos = np.searchsorted(lo, corr[sel], side="right") - 1
            ok = (pos >= 0) & (corr[sel] <= hi[np.clip(pos, 0, None)])
            found[sel[ok]] = True
            value[sel[ok]] = val[pos[ok]]
        return found, value


def _runs(corr: np.ndarray, value: np.ndarray) -> tuple:
    """(lo, hi, value) runs of sorted consecutive ids with equal values (a repeated id keeps its first row)."""
    order = np.argsort(corr, kind="stable")
    c, v = corr[order], value[order]
    keep = np.r_[True, c[1:] != c[:-1]]
    c, v = c[keep], v[keep]
    new = np.r_[True, (c[1:] != c[:-1] + 1) | (v[1:] != v[:-1])]
    first = np.nonzero(new)[0]
    last = np.r_[first[1:] - 1, len(c) - 1]
    return c[first], c[last], v[first]


def _merge_runs(parts: list) -> tuple:
    lo, hi, val = (np.concatenate([p[i] for p in parts]) for i in range(3))
    order = np.argsort(lo, kind="stable")
    lo, hi, val = lo[order], hi[order], val[order]
    join = np.r_[False, (lo[1:] == hi[:-1] + 1) & (val[1:] == val[:-1])]
    first = np.nonzero(~join)[0]
    last = np.r_[first[1:] - 1, len(lo) - 1] if len(lo) else first
    return lo[first], hi[last], val[first]


def release_unused_memory() -> None:
    """Give the memory freed by finished batches back to the OS (Arrow's pool, then the C heap), so the
    next phase's peak does not stack on the last one's leftovers."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    trim_heap()


def trim_heap() -> None:
    """Return the C heap's free pages to the OS (glibc's malloc_trim; elsewhere nothing to do). Freed
    batches leave holes that malloc keeps; over a long pass their high-water mark creeps up with the
    number of batches, so a streaming pass calls this every few batches (a few ms each)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
