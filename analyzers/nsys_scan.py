"""One pass over an Nsight trace's kernels, batch by batch in start order, in memory that does not grow
with the trace: everything `nsys_report.build_report` needs from the kernels.

Per batch: classify by name id (each distinct name matched once), then feed the exact accumulators:
per-name duration counts (kernel summary), per-role time, steps (`StepBuilder`), GPU gaps
(`GapScanner`, with graph launches and memcpy/memset merged in by start time) and a coarse index of
where each 1,024 rows lie in time. The stall scan needs the kernels inside each stall: `stall_rows`
reads again only the rows whose chunks overlap a stall (`WHERE rowid BETWEEN`), a few pages.

    >>> scan = scan_kernels(open_export("serve.sqlite"), gap_threshold_ns=500_000_000)   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pandas as pd

from stallscope.analyzers.gpu_gaps import _OPS, GapScanner
from stallscope.analyzers.kernel_roles import ROLES, BatchClassifier
from stallscope.analyzers.kernel_summary import DurationCounts, summary_frame
from stallscope.analyzers.trace_steps import StepBuilder, graph_ops, steps_info
from stallscope.collectors.arrow_sqlite import release_unused_memory, trim_heap
from stallscope.collectors.nsight_sqlite import BATCH_ROWS, NsysTrace, Progress, in_start_order

CHUNK = 1024  # rows per entry of the time index for the second read
TRIM_EVERY = 8  # batches between returns of the heap's free pages (measured: 4 and 8 cap the peak alike)


@dataclass
class KernelScan:
    """What one pass over the kernels leaves: report-ready pieces and what the stall scan's re-read needs."""

    summary: pd.DataFrame
    role_ns: np.ndarray  # per ROLES entry: summed duration (ns)
    role_count: np.ndarray
    steps: pd.DataFrame
    info: dict
    gaps: pd.DataFrame
    kernels: int
    with_launch: int
    kernel_ns: int
    graphs: pd.DataFrame = field(repr=False)  # graph launches as classified ops
    classifier: BatchClassifier = field(repr=False)
    chunks: np.ndarray = field(repr=False)  # (first row id, last row id, first start, max end) per CHUNK rows
    ordered: bool = False  # rows came sorted by SQLite, so row ids are not in time order


def scan_kernels(trace: NsysTrace, *, gap_threshold_ns: int, roles_table: dict | None = None,
                 batch_rows: int = BATCH_ROWS, progress: Progress | None = None) -> KernelScan:
    """The pass, over `trace.kernels` when the trace was read whole, else over its kernel batches."""
    scan = in_start_order(lambda ordered: _scan(trace, gap_threshold_ns, roles_table, batch_rows, progress, ordered))
    release_unused_memory()  # the batches are gone: the stall scan's re-read starts from the kept figures
    return scan


def _batches(trace: NsysTrace, builder: StepBuilder, rows: int, progress, ordered) -> Iterator[pd.DataFrame]:
    if trace.kernels is not None:
        return iter([trace.kernels.copy()])  # classified in place: leave the caller's frame as it was
    # the launch join keeps, per run of consecutive calls, only the step range that holds them
    value = builder.index.launch_value if builder.index is not None else _no_range
    return trace.kernel_batches(rows, launch_value=value, progress=progress, ordered=ordered, columns="report")


def _no_range(gpid: np.ndarray, start: np.ndarray) -> np.ndarray:
    return np.full(len(start), -1, np.int64)


class _Pass:
    """The accumulators of one pass; `add` takes one batch and keeps nothing of it but figures."""

    def __init__(self, trace: NsysTrace, builder: StepBuilder, gap_threshold_ns: int, roles_table: dict | None):
        self.trace, self.builder = trace, builder
        self.classifier = BatchClassifier(trace.name_of, roles_table)
        self.counts, self.gaps = DurationCounts(), GapScanner(gap_threshold_ns)
        self.role_ns, self.role_count = np.zeros(len(ROLES), np.int64), np.zeros(len(ROLES), np.int64)
        self.graphs = graph_ops(trace.graph_launches).reset_index(drop=True)
        self.merger = _Merger(self.graphs, trace.memops)
        self.chunks, self.n, self.with_launch, self.kernel_ns = [], 0, 0, 0

    def add(self, batch: pd.DataFrame) -> None:
        k, flipped = self.classifier.classify(batch)
        self.builder.flip_to_decode(flipped)
        dur, role = k["dur_ns"].to_numpy(), k["role"].cat.codes.to_numpy()
        self.counts.add(k["name_id"].to_numpy(), dur)
        self.role_ns += _sum_by(role, dur, len(ROLES))
        self.role_count += np.bincount(role, minlength=len(ROLES))
        self.with_launch += int(k["launch_value" if "launch_value" in k else "launch_ns"].notna().sum())
        self.kernel_ns += int(dur.sum())
        g, m = self.merger.take(int(k["start_ns"].iloc[-1]) if len(k) else None)
        ops, kpos = _with_graphs(k, g)
        self.builder.add(k, ops, kpos)
        self.classifier.remember(self.builder.handle)
        _add_gaps(self.gaps, k, g, m, self.n)
        if self.trace.kernels is None:
            self.chunks.append(_chunk_index(k))
        self.n += len(k)

    def finish(self, ordered: bool) -> KernelScan:
        g, m = self.merger.take(None)
        if len(g) and self.builder.index is None:
            self.builder.add(self.graphs.iloc[:0], g, np.zeros(0, np.int64))
        _add_gaps(self.gaps, None, g, m, self.n)
        steps = self.builder.steps()
        return KernelScan(summary=_summary(self.trace, self.counts), role_ns=self.role_ns, role_count=self.role_count,
                          steps=steps, info=steps_info(steps), gaps=self.gaps.result(self.trace.overhead),
                          kernels=self.n, with_launch=self.with_launch, kernel_ns=self.kernel_ns, graphs=self.graphs,
                          classifier=self.classifier, ordered=ordered, chunks=np.concatenate(self.chunks)
                          if self.chunks else np.zeros((0, 4), np.int64))


def _scan(trace, gap_threshold_ns, roles_table, batch_rows, progress, ordered) -> KernelScan:
    builder = StepBuilder(trace.nvtx)
    acc = _Pass(trace, builder, gap_threshold_ns, roles_table)
    for i, batch in enumerate(_batches(trace, builder, batch_rows, progress, ordered), 1):
        acc.add(batch)
        del batch  # gone before the next batch is built: one batch in memory, not two
        if i % TRIM_EVERY == 0:
            trim_heap()
    return acc.finish(ordered)


def _sum_by(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums of `values` per group 0..n-1 (float bincount while sums stay below 2^53)."""
    if len(values) == 0 or int(np.abs(values).max()) * len(values) < 2**53:
        return np.bincount(group, weights=values, minlength=n).astype(np.int64)
    out = np.zeros(n, np.int64)
    np.add.at(out, group, values)
    return out


class _Merger:
    """Hands out graph launches and memcpy/memset (held whole: one per step, not per kernel) by start
    time, so that they join the kernel batches in start order."""

    def __init__(self, graphs: pd.DataFrame, memops: pd.DataFrame):
        self.frames = [graphs, memops]  # the caller's frames, not copies: one row per step stays one
        self.order = [np.argsort(f["start_ns"].to_numpy(), kind="stable") for f in self.frames]
        self.starts = [f["start_ns"].to_numpy()[o] for f, o in zip(self.frames, self.order)]
        self.pos = [0, 0]

    def take(self, before: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Rows not handed out yet that start before `before` (all of them for None), with `_row`."""
        out = []
        for i, f in enumerate(self.frames):
            starts = self.starts[i]
            end = len(starts) if before is None else int(np.searchsorted(starts, before, side="left"))
            end = max(end, self.pos[i])
            rows = self.order[i][self.pos[i]:end]
            out.append(f.iloc[rows].assign(_row=rows))
            self.pos[i] = end
        return out[0], out[1]


def _with_graphs(k: pd.DataFrame, g: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Kernels and graph launches in start order (kernels first on ties), and each kernel's row there."""
    if not len(g):
        return k, np.arange(len(k))
    ops = pd.concat([k, g.drop(columns="_row")], ignore_index=True)
    order = np.argsort(ops["start_ns"].to_numpy(), kind="stable")
    pos = np.empty(len(ops), np.int64)
    pos[order] = np.arange(len(ops))
    return ops.iloc[order].reset_index(drop=True), pos[:len(k)]


def _add_gaps(gaps: GapScanner, k: pd.DataFrame | None, g: pd.DataFrame, m: pd.DataFrame, n: int) -> None:
    """Kernels (frame order: n onwards), graph launches and memops of this batch into the gap scan."""
    parts, src, idx = [], [], []
    for i, (f, rows) in enumerate(((k, None), (g, "_row"), (m, "_row"))):
        if f is None or not len(f):
            continue
        keep = (f["start_ns"] > 0).to_numpy()
        parts.append(f.loc[keep, _OPS])
        src.append(np.full(int(keep.sum()), i, np.int64))
        idx.append((np.arange(len(f)) + n if rows is None else f[rows].to_numpy())[keep])
    if parts:
        gaps.add(pd.concat(parts, ignore_index=True).astype("int64"), np.concatenate(src), np.concatenate(idx))


def _chunk_index(k: pd.DataFrame) -> np.ndarray:
    """(first row id, last row id, first start, max end) per CHUNK kernels of a batch."""
    if not len(k):
        return np.zeros((0, 4), np.int64)
    first = np.arange(0, len(k), CHUNK)
    rid, start, end = k["row_id"].to_numpy(), k["start_ns"].to_numpy(), k["end_ns"].to_numpy()
    last = np.r_[first[1:], len(k)] - 1
    return np.stack([rid[first], rid[last], start[first], np.maximum.reduceat(end, first)], axis=1)


def kernel_summary(trace: NsysTrace, *, batch_rows: int = BATCH_ROWS, progress: Progress | None = None) -> pd.DataFrame:
    """`nsys stats -r cuda_gpu_kern_sum` alone: three columns read, in any order, into duration counts."""
    counts = DurationCounts()
    batches = [trace.kernels] if trace.kernels is not None else trace.kernel_batches(
        batch_rows, with_launches=False, progress=progress, columns="summary")
    for k in batches:
        counts.add(k["name_id"].to_numpy(), k["dur_ns"].to_numpy())
    return _summary(trace, counts)


def _summary(trace: NsysTrace, counts: DurationCounts) -> pd.DataFrame:
    """The kernel summary, grouped by name string (ids that share a string merge)."""
    key, dur, cnt = counts.table()
    ids = np.unique(key)
    names, code = np.unique(trace.name_of(ids).astype(str), return_inverse=True)
    merged = DurationCounts()
    merged.add(code[np.searchsorted(ids, key)], dur, cnt)
    return summary_frame(merged, names.astype(object))


def stall_rows(trace: NsysTrace, scan: KernelScan, intervals: list[tuple[int, int]]) -> Iterator[pd.DataFrame]:
    """Frames (start_ns, end_ns, short_name, role) holding every kernel and graph launch that overlaps one
    of the sorted, disjoint `intervals`: the chunks of rows that overlap them, read again by row id."""
    yield scan.graphs
    if trace.kernels is not None:
        yield _roles(trace, scan, trace.kernels)
        return
    if scan.ordered:
        batches = trace.kernel_batches(with_launches=False, ordered=True)
    else:
        s, e = np.array([iv[0] for iv in intervals]), np.array([iv[1] for iv in intervals])
        c = scan.chunks
        j = np.searchsorted(e, c[:, 2], side="right")  # first interval that ends after the chunk's first start
        hit = c[(j < len(s)) & (s[np.minimum(j, len(s) - 1)] < c[:, 3])]
        batches = trace.kernel_rows_between(_row_ranges(hit))
    for batch in batches:
        yield _roles(trace, scan, batch)


def _row_ranges(chunks: np.ndarray) -> list[tuple[int, int]]:
    """Adjacent chunks' row ids joined into (first, last) ranges."""
    ranges: list[list[int]] = []
    for lo, hi in chunks[:, :2].tolist():
        if ranges and lo <= ranges[-1][1] + 1:
            ranges[-1][1] = max(ranges[-1][1], hi)
        else:
            ranges.append([lo, hi])
    return [(lo, hi) for lo, hi in ranges]


def _roles(trace: NsysTrace, scan: KernelScan, k: pd.DataFrame) -> pd.DataFrame:
    if "short_name" in k:
        short = k["short_name"]
    else:
        ids, inverse = np.unique(k["short_id"].to_numpy(), return_inverse=True)
        short = trace.name_of(ids, short=True)[inverse] if len(ids) else np.zeros(0, dtype=object)
    return pd.DataFrame({"start_ns": k["start_ns"].to_numpy(), "end_ns": k["end_ns"].to_numpy(), "short_name": short,
                         "role": np.asarray(ROLES, dtype=object)[scan.classifier.roles(k["name_id"].to_numpy())]})
