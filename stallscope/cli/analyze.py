"""`stallscope analyze`: diagnose recorded data offline and print findings.

One function per source turns its input into a `SourceResult` (report sections + findings); `run`
merges the results of every source given on the command line and prints them as text or JSON.
Sources: `--nsys FILE` (an Nsight Systems SQLite export), and run directories, `--db` stores and
`--prometheus` APIs (`analyze_metrics`), on one timeline; `--html` writes the standalone report and
`--fail-on` sets exit 1. A new source adds its flags in `add_arguments`, a `_from_<source>(args,
progress) -> SourceResult`, and an entry in `SOURCES`; output merging and exit codes need no change.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

LARGE_FILE_BYTES = 128 * 1024 * 1024  # show a progress bar for exports this big (~2 s and more)


@dataclass
class SourceResult:
    """One source's top-level sections, findings (list[Finding]), text for --format text, whether its
    findings are on the wall clock (JSON: target, ISO times), and the metric sources' Report (--html)."""

    sections: dict
    findings: list = field(default_factory=list)
    text: str = ""
    wall_clock: bool = True
    report: object = None


def add_arguments(parser) -> None:
    parser.add_argument("--nsys", metavar="FILE", help="an Nsight Systems SQLite export (`nsys export --type sqlite`)")
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default text)")
    parser.add_argument("--gap-ms", type=float, default=500.0,
                        help="report GPU idle gaps longer than this, ms (default 500, as `nsys analyze -r gpu_gaps`)")
    parser.add_argument("--stall-factor", type=float, default=3.0,
                        help="a step or decode-free interval longer than this x the rolling median decode step "
                             "is a stall (default 3)")
    parser.add_argument("--kernel-roles", metavar="YAML", help="extra kernel-role patterns, tried before the shipped ones")
    parser.add_argument("--top", type=int, default=15, help="rows of each table in text output (default 15)")
    parser.add_argument("--report", choices=["all", "kern_sum"], default="all",
                        help="with --nsys: everything (default), or only the kernel summary, as "
                             "`nsys stats -r cuda_gpu_kern_sum` (3 columns read: the fastest answer)")
    from stallscope.cli import analyze_metrics

    analyze_metrics.add_arguments(parser)  # RUN_DIR, --db, --prometheus, --html, --fail-on, ...
    from stallscope.cli import analyze_fleet

    analyze_fleet.add_arguments(parser)  # --fleet, --group-by, --concurrency, --max-memory, --header, ...


def _progress_for(path: str):
    """A (callback, context manager) pair: a rich bar (kernel rows, MB/s) on stderr for exports big
    enough to take more than ~2 s, when stderr is a terminal; else no-op."""
    from contextlib import nullcontext

    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    if size < LARGE_FILE_BYTES or not sys.stderr.isatty():
        return None, nullcontext()
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("reading {task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("rows  {task.fields[mb_s]:,.0f} MB/s"), TimeElapsedColumn(),
                   console=Console(file=sys.stderr), transient=True)
    tasks: dict[str, int] = {}

    def update(table: str, done: int, total: int) -> None:
        if table not in tasks:
            tasks[table] = bar.add_task(table, total=total or None, mb_s=0.0)
        elapsed = bar.tasks[tasks[table]].elapsed or 0.0
        mb_s = size * done / max(total, 1) / 1e6 / elapsed if elapsed else 0.0  # share of the file read so far
        bar.update(tasks[table], completed=done, mb_s=mb_s)

    return update, bar


def _from_nsys(args) -> SourceResult:
    from stallscope.analyzers.kernel_roles import load_table
    from stallscope.analyzers.nsys_report import build_report
    from stallscope.collectors.nsight_sqlite import open_export
    from stallscope.core.config import load_thresholds
    from stallscope.core.errors import InputError

    if args.gap_ms < 0 or args.stall_factor <= 1:
        raise InputError(f"--gap-ms must be >= 0 and --stall-factor > 1 (got {args.gap_ms}, {args.stall_factor})")
    roles = load_table(args.kernel_roles) if args.kernel_roles else None
    slo_ns = int(float(load_thresholds()["itl_slo_s"]) * 1e9)
    trace = open_export(args.nsys)  # everything but the kernels, which build_report streams in batches
    callback, bar = _progress_for(args.nsys)
    if getattr(args, "report", "all") == "kern_sum":
        return _kern_sum(trace, args, callback, bar)
    with bar:
        report = build_report(trace, gap_threshold_ns=int(args.gap_ms * 1e6), stall_factor=args.stall_factor,
                              roles_table=roles, itl_slo_ns=slo_ns, progress=callback)
    from stallscope.render.text import nsys_text

    text = nsys_text(report, top=args.top) if args.format == "text" else ""
    return SourceResult(sections=report, findings=report.pop("findings"), text=text, wall_clock=False)


def _kern_sum(trace, args, callback, bar) -> SourceResult:
    from stallscope.analyzers.nsys_report import kernel_summary_report
    from stallscope.render.text import kern_sum_text

    with bar:
        report = kernel_summary_report(trace, progress=callback)
    text = kern_sum_text(report, top=args.top) if args.format == "text" else ""
    return SourceResult(sections=report, text=text, wall_clock=False)


def _from_metrics(args) -> SourceResult:
    from stallscope.cli.analyze_metrics import report
    from stallscope.render.json import request_views_json
    from stallscope.render.text import report_text

    rep = report(args)
    text = report_text(rep) if args.format == "text" else ""
    return SourceResult(sections={"quantiles": rep.quantiles, "sources": rep.sources,
                                  "request_views": request_views_json(rep.request_views)},
                        findings=rep.findings, text=text, report=rep)


# (argument dest, reader). Each reader takes the parsed args and returns a SourceResult.
SOURCES = [("nsys", _from_nsys), ("metrics", _from_metrics)]


def run(args) -> int:
    from stallscope.core.errors import InputError
    from stallscope.render.json import finding_json, report_json

    if getattr(args, "fleet", False):  # fleet triage replaces the raw pull of --prometheus
        from stallscope.cli import analyze_fleet

        return analyze_fleet.run(args)
    results = [reader(args) for dest, reader in SOURCES if getattr(args, dest, None)]
    if not results:
        raise InputError("nothing to analyze: give a RUN_DIR, --db FILE, --prometheus URL or --nsys FILE")
    if args.format == "json":
        sections = {k: v for r in results for k, v in r.sections.items()}
        sys.stdout.write(report_json(sections, [finding_json(f, wall_clock=r.wall_clock)
                                                for r in results for f in r.findings]))
    else:
        sys.stdout.write("\n".join(r.text for r in results))
    return finish(args, results)  # --html, and --fail-on: exit 1 when a finding is at or above it


def finish(args, results: list[SourceResult]) -> int:
    """Write --html and map --fail-on to the exit code (1 when any finding is at or above it)."""
    from stallscope.analyzers.diagnose import Report
    from stallscope.analyzers.finding import severity_rank
    from stallscope.core.errors import InputError

    findings = [f for r in results for f in r.findings]
    if args.html:
        from stallscope.render.html import render_html

        report = next((r.report for r in results if r.report is not None), None) or Report()
        try:
            Path(args.html).write_text(render_html(report, findings=findings), encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write --html {args.html}: {exc.strerror}") from None
        sys.stderr.write(f"stallscope: wrote {args.html}\n")
    floor = severity_rank(args.fail_on)
    return 1 if any(severity_rank(f.severity) >= floor for f in findings) else 0
