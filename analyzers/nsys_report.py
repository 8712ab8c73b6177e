"""One Nsight Systems export -> the report the CLI prints: kernel summary, GPU gaps, steps, findings.

`build_report(trace)` is a pure function of the collector's NsysTrace (JSON-ready dict with the
top-level keys `kernel_summary`, `gpu_gaps`, `steps`, `findings`, plus `source`, `kernel_roles`,
`gpu_metrics`); `render_text(report)` lays it out as plain-text tables. No plotting here.

    >>> report = build_report(read_export("sample_traces/starvation.sqlite"))   # doctest: +SKIP
    >>> [f["kind"] for f in report["findings"]]                                 # doctest: +SKIP
    ['decode_starvation']
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from stallscope.analyzers.gpu_gaps import DEFAULT_THRESHOLD_NS, find_gaps, ops_frame
from stallscope.analyzers.kernel_roles import classify
from stallscope.analyzers.kernel_summary import summarize
from stallscope.analyzers.trace_stalls import cuda_graph_findings, find_decode_starvation
from stallscope.analyzers.trace_steps import graph_ops, reconstruct_steps
from stallscope.collectors.nsight_sqlite import KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME, launch_calls
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
    out = []
    for row in frame.to_dict("records"):
        out.append({k: (v.item() if isinstance(v, np.generic) else v) for k, v in row.items()})
    return out


def build_report(trace, *, gap_threshold_ns: int = DEFAULT_THRESHOLD_NS, stall_factor: float = 3.0,
                 roles_table: dict | None = None, itl_slo_ns: int = 200_000_000) -> dict:
    """JSON-ready report for one export; TraceError when it has no kernel table."""
    if KERNEL not in trace.tables:
        raise TraceError(no_kernels_message(trace))
    kernels = classify(trace.kernels, roles_table)
    steps, info = reconstruct_steps(kernels, trace.nvtx, trace.graph_launches)
    ops = pd.concat([kernels, graph_ops(trace.graph_launches)], ignore_index=True) if len(trace.graph_launches) else kernels
    findings = pd.concat([
        find_decode_starvation(steps, ops, k=stall_factor, itl_slo_ns=itl_slo_ns,
                               session_start_ns=trace.session_start_ns),
        cuda_graph_findings(trace.graph_launches, kernels, mode=trace.graph_trace_mode,
                            graph_launch_calls=trace.runtime_names.get("cudaGraphLaunch", 0)),
    ], ignore_index=True)
    gaps = find_gaps(ops_frame(ops, trace.memops), threshold_ns=gap_threshold_ns, overhead=trace.overhead)
    by_role = kernels.groupby("role", observed=True)["dur_ns"].agg(["sum", "size"])
    total = float(by_role["sum"].sum()) or 1.0
    metrics = (trace.gpu_metrics.groupby(["device_id", "metric"])["value"].mean().round(3).reset_index()
               if len(trace.gpu_metrics) else pd.DataFrame())
    return {
        "source": {"kind": "nsys", "path": trace.path, "nsys_version": trace.version,
                   "schema_version": trace.meta.get("EXPORT_SCHEMA_VERSION"),
                   "session_start_utc_ns": trace.session_start_ns, "cuda_graph_trace_mode": trace.graph_trace_mode,
                   "kernels": int(len(kernels)), "memops": int(len(trace.memops)), "nvtx_ranges": int(len(trace.nvtx)),
                   "graph_launches": int(len(trace.graph_launches)),
                   "kernels_with_launch_call": int(kernels["launch_ns"].notna().sum()),
                   "tables_missing": list(trace.missing), "gpus": _records(trace.gpus),
                   "synthetic": trace.meta.get("SYNTHETIC")},
        "kernel_summary": _records(summarize(kernels)),
        "kernel_roles": [{"role": r, "total_ns": int(v["sum"]), "instances": int(v["size"]),
                          "time_pct": round(100.0 * v["sum"] / total, 1)} for r, v in by_role.iterrows()],
        "gpu_gaps": {"threshold_ns": int(gap_threshold_ns), "count": int(len(gaps)),
                     "total_ns": int(gaps["duration_ns"].sum()), "gaps": _records(gaps)},
        "steps": _steps_section(steps, info),
        "gpu_metrics": _records(metrics),
        "findings": [{k: f[k] for k in ("kind", "severity", "start_ns", "end_ns", "evidence", "explanation",
                                        "recommendation")} for f in _records(findings)],
    }


def _clip(name: str, n: int = 90) -> str:
    return name if len(name) <= n else name[: n - 3] + "..."  # like nsys's table output; JSON keeps full names


def _ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def _table(title: str, header: list[str], rows: list[list], console) -> None:
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, title_justify="left", show_lines=False)
    for i, h in enumerate(header):
        t.add_column(h, justify="left" if i == len(header) - 1 or h in ("role", "kind", "severity") else "right",
                     overflow="fold")
    for r in rows:
        t.add_row(*[Text(str(c)) for c in r])  # Text: kernel names are never parsed as markup
    console.print(t)


def render_text(report: dict, *, top: int = 15, width: int = 160) -> str:
    """Plain-text rendering of a build_report dict."""
    from rich.console import Console
    from rich.text import Text

    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system=None, highlight=False, emoji=False)
    src = report["source"]
    con.print(Text(f"nsys export {src['path']} (nsys {src['nsys_version']}, schema {src['schema_version']}): "
                   f"{src['kernels']} kernels, {src['memops']} memcpy/memset, {src['nvtx_ranges']} NVTX ranges, "
                   f"{src['graph_launches']} CUDA graph launches"))
    if src.get("synthetic"):
        con.print(Text(f"note: synthetic trace ({src['synthetic']})"))
    for note in src["tables_missing"]:
        con.print(Text(f"missing: {note}"))
    ks = report["kernel_summary"]
    _table(f"Kernel summary (cuda_gpu_kern_sum; top {min(top, len(ks))} of {len(ks)})",
           ["Time %", "Total (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"],
           [[r["time_pct"], r["total_ns"], r["instances"], r["avg_ns"], r["med_ns"], r["min_ns"], r["max_ns"],
             r["stddev_ns"], _clip(r["name"])] for r in ks[:top]], con)
    _table("Kernel roles", ["Time %", "Total (ms)", "Instances", "role"],
           [[r["time_pct"], _ms(r["total_ns"]), r["instances"], r["role"]] for r in report["kernel_roles"]], con)
    g = report["gpu_gaps"]
    _table(f"GPU gaps > {_ms(g['threshold_ns'])} ms: {g['count']} ({_ms(g['total_ns'])} ms idle)",
           ["Duration (ns)", "Start (ns)", "PID", "Device", "Context"],
           [[x["duration_ns"], x["start_ns"], x["pid"], x["device_id"], x["context_id"]] for x in g["gaps"][:top]], con)
    st = report["steps"]
    d, dd = st["duration"], st["decode_only_duration"]
    con.print(Text(f"Steps: {st['count']} from {st['source']} (layers ~{st['layers_guess']}); "
                   f"{st['prefill_steps']} with prefill, {st['decode_only_steps']} decode-only. Duration ms "
                   f"p50 {_ms(d['p50_ns'])}, p90 {_ms(d['p90_ns'])}, p99 {_ms(d['p99_ns'])}, max {_ms(d['max_ns'])}; "
                   f"decode-only p50 {_ms(dd['p50_ns'])}"))
    if report["gpu_metrics"]:
        _table("GPU metrics (mean)", ["Device", "Mean", "metric"],
               [[m["device_id"], m["value"], m["metric"]] for m in report["gpu_metrics"]], con)
    if not report["findings"]:
        con.print(Text("Findings: none"))
    for f in report["findings"]:
        con.print(Text(f"[{f['severity']}] {f['kind']} at {f['start_ns']}..{f['end_ns']} ns: {f['explanation']}"))
        tops = f["evidence"].get("top_kernels") or []
        if tops:
            con.print(Text("    top kernels: " + "; ".join(f"{t['name'][:60]} ({t['role']}) {_ms(t['total_ns'])} ms"
                                                       for t in tops)))
        con.print(Text(f"    recommendation: {f['recommendation']}"))
    return buf.getvalue()
