"""One Nsight Systems export -> the report the CLI prints: kernel summary, GPU gaps, steps, findings.

`build_report(trace)` is a pure function of the collector's NsysTrace (JSON-ready dict with the
top-level keys `kernel_summary`, `gpu_gaps`, `steps`, `findings` (stallscope.analyzers.finding.Finding),
plus `source`, `kernel_roles`, `gpu_metrics`); `stallscope.render.text.nsys_text` lays it out as tables.

    >>> report = build_report(read_export("sample_traces/starvation.sqlite"))   # doctest: +SKIP
    >>> [f.kind for f in report["findings"]]                                 # doctest: +SKIP
    ['decode_starvation']
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers.gpu_gaps import DEFAULT_THRESHOLD_NS
from stallscope.analyzers.kernel_roles import ROLES
from stallscope.analyzers.nsys_scan import kernel_summary, scan_kernels, stall_rows
from stallscope.analyzers.trace_stalls import cuda_graph_findings, find_decode_starvation
from stallscope.collectors.nsight_sqlite import BATCH_ROWS, KERNEL, RUNTIME, Progress, launch_calls
from stallscope.core.errors import TraceError

PERCENTILES = (50, 90, 99)


def no_kernels_message(trace) -> str:
    """One line: what the kernel-less export holds and why it has no kernels."""
    counts = {"CUDA API calls": sum(trace.runtime_names.values()),
              "memcpy": int((trace.memops["kind"] == "memcpy").sum()),
              "memset": int((trace.memops["kind"] == "memset").sum()), "NVTX ranges": len(trace.nvtx)}
    have = ", ".join(f"{v} {k}" for k, v in counts.items() if v) or "no CUDA activity at all"
    launches = launch_calls(trace.runtime_names)
    if RUNTIME not in trace.tables:
        why = "CUDA tracing was off (capture with `nsys profile --trace=cuda`)"
    elif launches == 0:
        why = ("none of its CUDA API calls launched a kernel, so the capture window closed before the first "
               "kernel ran (nsys creates tables lazily: no kernel rows, no table); capture longer or move "
               "--capture-range/--delay")
    else:
        why = (f"{launches} launch calls were traced but no kernel records reached the report (process killed "
               "before CUPTI flushed its buffers; end the capture with the app running or set "
               "--cuda-flush-interval)")
    return (f"{trace.path!r} (nsys {trace.version}) has no {KERNEL} table: {why}. It holds {have}; "
            "kernel summary, steps and stall detection need kernels")


def _dist(values: np.ndarray) -> dict:
    if len(values) == 0:
        return {f"p{p}_ns": None for p in PERCENTILES} | {"mean_ns": None, "max_ns": None}
    out = {f"p{p}_ns": int(np.percentile(values, p)) for p in PERCENTILES}
    return out | {"mean_ns": int(values.mean()), "max_ns": int(values.max())}


def _steps_section(steps: pd.DataFrame, info: dict) -> dict:
    dur = (steps["end_ns"] - steps["start_ns"]).to_numpy()
    decode_only = (steps["is_decode"] & ~steps["has_prefill"]).to_numpy(dtype=bool) if len(steps) else np.array([], bool)
    return {"count": int(len(steps)), "source": info["source"], "layers_guess": info["layers_guess"],
            "prefill_steps": int(steps["has_prefill"].sum()) if len(steps) else 0,
            "decode_only_steps": int(decode_only.sum()),
            "duration": _dist(dur), "decode_only_duration": _dist(dur[decode_only]),
            "prefill_tokens": int(steps["num_prefill_tokens"].sum()) if steps["num_prefill_tokens"].notna().any() else None,
            "decode_tokens": int(steps["num_decode_tokens"].sum()) if steps["num_decode_tokens"].notna().any() else None}


def _records(frame: pd.DataFrame) -> list[dict]:
    """The frame's rows as dicts of Python scalars (numpy ones unwrapped)."""
    return [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()} for row in frame.to_dict("records")]


def _source(trace) -> dict:
    return {"kind": "nsys", "path": trace.path, "nsys_version": trace.version,
            "schema_version": trace.meta.get("EXPORT_SCHEMA_VERSION"),
            "session_start_utc_ns": trace.session_start_ns, "cuda_graph_trace_mode": trace.graph_trace_mode}


def kernel_summary_report(trace, *, batch_rows: int = BATCH_ROWS, progress: Progress | None = None) -> dict:
    """Only the kernel summary (`--report kern_sum`): `source` and `kernel_summary` of build_report."""
    if KERNEL not in trace.tables:
        raise TraceError(no_kernels_message(trace))
    summary = kernel_summary(trace, batch_rows=batch_rows, progress=progress)
    return {"source": _source(trace) | {"kernels": int(summary["instances"].sum()), "tables_missing": list(trace.missing)},
            "kernel_summary": _records(summary)}


def build_report(trace, *, gap_threshold_ns: int = DEFAULT_THRESHOLD_NS, stall_factor: float = 3.0,
                 roles_table: dict | None = None, itl_slo_ns: int = 200_000_000, batch_rows: int = BATCH_ROWS,
                 progress: Progress | None = None) -> dict:
    """The report of one export (findings as `list[Finding]`, the rest JSON-ready); TraceError when it has
    no kernel table. A trace from `open_export` is streamed `batch_rows` kernels at a time (bounded
    memory); one from `read_export` is analysed as its one frame. Both give the same report."""
    if KERNEL not in trace.tables:
        raise TraceError(no_kernels_message(trace))
    scan = scan_kernels(trace, gap_threshold_ns=gap_threshold_ns, roles_table=roles_table, batch_rows=batch_rows,
                        progress=progress)
    findings = find_decode_starvation(
        scan.steps, lambda intervals: stall_rows(trace, scan, intervals), k=stall_factor, itl_slo_ns=itl_slo_ns,
        session_start_ns=trace.session_start_ns) + cuda_graph_findings(
        trace.graph_launches, scan.kernel_ns, mode=trace.graph_trace_mode,
        graph_launch_calls=trace.runtime_names.get("cudaGraphLaunch", 0))
    total = float(scan.role_ns.sum()) or 1.0
    metrics = trace.gpu_metrics[["device_id", "metric", "value"]].round({"value": 3})
    return {
        "source": _source(trace) | {
                   "kernels": scan.kernels, "memops": int(len(trace.memops)), "nvtx_ranges": int(len(trace.nvtx)),
                   "graph_launches": int(len(trace.graph_launches)), "kernels_with_launch_call": scan.with_launch,
                   "tables_missing": list(trace.missing), "gpus": _records(trace.gpus),
                   "synthetic": trace.meta.get("SYNTHETIC")},
        "kernel_summary": _records(scan.summary),
        "kernel_roles": [{"role": r, "total_ns": int(ns), "instances": int(n), "time_pct": round(100.0 * ns / total, 1)}
                         for r, ns, n in zip(ROLES, scan.role_ns, scan.role_count) if n],
        "gpu_gaps": {"threshold_ns": int(gap_threshold_ns), "count": int(len(scan.gaps)),
                     "total_ns": int(scan.gaps["duration_ns"].sum()), "gaps": _records(scan.gaps)},
        "steps": _steps_section(scan.steps, scan.info),
        "gpu_metrics": _records(metrics),
        "findings": findings,
    }
