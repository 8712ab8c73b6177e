"""Plain-text renderings for `stallscope analyze`: the metric sources' Report and an Nsight export's report.

Rich tables on a recorded console; markup is never parsed from input strings (kernel names,
explanations). No analysis here: only layout of what the analyzers computed.
"""

from __future__ import annotations

import io

from stallscope.render.html import _iso


def report_text(report) -> str:
    """The sources, whole-run quantiles and findings of a stallscope.analyzers.diagnose.Report."""
    from rich.console import Console
    from rich.table import Table

    con = Console(record=True, file=io.StringIO(), width=120, highlight=False)
    src = Table(title="sources")
    for c in ("name", "source", "samples", "gpu rows", "steps", "from", "to"):
        src.add_column(c)
    for k, v in report.sources.items():
        src.add_row(k, v["source"], str(v["samples"]), str(v["gpu"]), str(v["steps"]), str(v["start"]), str(v["end"]))
    con.print(src)
    q = Table(title="whole-run quantiles (the bucket each falls in)")
    for c in ("target", "ITL P50", "ITL P99", "TTFT P50", "TTFT P99", "stream time in ITL gaps > SLO"):
        q.add_column(c)
    for t, v in report.quantiles.items():
        q.add_row(t, *(v.get(k, {}).get("text", "n/a") for k in ("itl_p50", "itl_p99", "ttft_p50", "ttft_p99",
                                                                  "itl_time_above_slo")))
    con.print(q)
    fs = report.findings
    con.print(f"[bold]findings: {len(fs)}[/]" if fs else "findings: none")
    for f in fs:
        con.print(f"[bold]{f.severity.upper()}[/] {f.kind} on {f.target or 'all'}  "
                  f"{_iso(f.start_ns)} - {_iso(f.end_ns)}", markup=True)
        con.print("  " + f.explanation, markup=False)
        con.print("  recommendation: " + f.recommendation, markup=False)
    return con.export_text()


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


def kern_sum_text(report: dict, *, top: int = 15, width: int = 160) -> str:
    """Plain-text rendering of `analyze --nsys FILE --report kern_sum`: the kernel summary table."""
    from rich.console import Console

    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system=None, highlight=False, emoji=False)
    ks = report["kernel_summary"]
    _table(f"Kernel summary (cuda_gpu_kern_sum; top {min(top, len(ks))} of {len(ks)}; "
           f"{report['source']['kernels']} kernels)",
           ["Time %", "Total (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"],
           [[r["time_pct"], r["total_ns"], r["instances"], r["avg_ns"], r["med_ns"], r["min_ns"], r["max_ns"],
             r["stddev_ns"], _clip(r["name"])] for r in ks[:top]], con)
    return buf.getvalue()


def nsys_text(report: dict, *, top: int = 15, width: int = 160) -> str:
    """Plain-text rendering of a stallscope.analyzers.nsys_report.build_report dict."""
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
        con.print(Text(f"[{f.severity}] {f.kind} at {f.start_ns}..{f.end_ns} ns: {f.explanation}"))
        tops = f.evidence.get("top_kernels") or []
        if tops:
            con.print(Text("    top kernels: " + "; ".join(f"{t['name'][:60]} ({t['role']}) {_ms(t['total_ns'])} ms"
                                                       for t in tops)))
        con.print(Text(f"    recommendation: {f.recommendation}"))
    return buf.getvalue()
