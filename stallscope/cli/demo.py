"""`stallscope demo`: reproduce decode starvation, collect, analyze, report and show it, in one command.

The same library code as `stallscope repro` (both arms of the starvation scenario against the
reference server), `stallscope collect --import` (the embedded store), `stallscope analyze --html`
(findings and the report) and `stallscope dashboard` (served on 127.0.0.1 only).
"""

from __future__ import annotations

import sys
import time

STEPS = 5


def add_arguments(p) -> None:
    p.add_argument("--out", default="stallscope-demo", metavar="DIR",
                   help="where the run directory, store and report go (default ./stallscope-demo)")
    p.add_argument("--no-dashboard", action="store_true", help="stop after the report (headless use)")
    p.add_argument("--port", type=int, default=8050, help="dashboard port on 127.0.0.1 (default 8050; 0 = any free)")
    p.add_argument("--model", default="tiny", help="reference model preset (default tiny)")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="seconds of load per arm (default: repro --quick)")
    p.add_argument("--long-every", type=float, default=None, metavar="T",
                   help="long-prompt period in s (default: repro's pacing)")
    p.add_argument("--no-progress", action="store_true", help="do not draw progress bars")


def _say(console, n: int, text: str, t0: float) -> None:
    console.print(f"[bold cyan][{n}/{STEPS}][/] {text}  [dim]({time.monotonic() - t0:.0f} s)[/]", soft_wrap=True)


def _analyze(run_dir, report) -> bool:
    """`stallscope analyze RUN_DIR --html REPORT`: the text on stdout; whether a finding is critical."""
    from stallscope.analyzers.sources import diagnose_sources
    from stallscope.render.html import render_html
    from stallscope.render.text import report_text

    rep = diagnose_sources([("run", str(run_dir))])
    sys.stdout.write(report_text(rep))
    sys.stdout.flush()
    report.write_text(render_html(rep), encoding="utf-8")
    sys.stderr.write(f"stallscope: wrote {report}\n")
    return any(f.severity == "critical" for f in rep.findings)


def run(args) -> int:
    from dataclasses import replace
    from pathlib import Path

    from rich.console import Console

    from stallscope.core.errors import InputError

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a directory")
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port must be 0-65535, got {args.port}")
    if args.duration is not None and not 0 < args.duration <= 600:
        raise InputError(f"--duration must be in (0, 600] seconds, got {args.duration}")
    console = Console(stderr=True)
    t0 = time.monotonic()

    from stallscope.cli.repro import ab_table
    from stallscope.collectors.scrape_loop import record_jsonl
    from stallscope.refserver.repro import DEFAULT_BUDGET, default_load, run_repro

    run_dir, db, report = out / "run", out / "stallscope.db", out / "report.html"
    load = default_load("starvation", quick=True)
    if args.duration is not None:
        load = replace(load, duration_s=args.duration, drain_s=min(load.drain_s, 10 + args.duration))
    if args.long_every is not None:
        if args.long_every <= 0:
            raise InputError(f"--long-every must be positive, got {args.long_every}")
        load = replace(load, long_every_s=args.long_every, long_every_tokens=None)  # seconds, not tokens
    _say(console, 1, f"reference server + starvation scenario: arm `off` (chunked prefill off) and arm `on` "
                     f"(--max-num-batched-tokens {DEFAULT_BUDGET}) under the same load", t0)
    summary = run_repro("starvation", run_dir, quick=True, model=args.model, load=load,
                        progress=not args.no_progress, recorder=record_jsonl,
                        on_arm=lambda arm: _say(console, 2, f"arm {arm.name}: refserver {' '.join(arm.server_args)}", t0))
    console.print(ab_table(summary))

    from stallscope.collectors.importer import import_run

    db.unlink(missing_ok=True)
    n_scrapes, n_failed, _ = import_run(run_dir, db)
    _say(console, 3, f"collected {n_scrapes} scrapes into the store {db} ({n_failed} unparseable)", t0)

    critical = _analyze(run_dir, report)
    _say(console, 4, f"analyzed: {'critical findings' if critical else 'no critical finding'}; "
                     f"HTML report {report}", t0)
    if args.no_dashboard:
        _say(console, 5, f"done; dashboard skipped (--no-dashboard). Later: stallscope dashboard --db {db}", t0)
        return 0

    from stallscope.cli.dashboard import serve
    from stallscope.dashboards.app import create_app
    from stallscope.dashboards.data import DataSource

    source = DataSource.from_db(db, live=False).with_run(run_dir)
    source.frames()
    _say(console, 5, "serving the dashboard on 127.0.0.1 (Ctrl-C to stop)", t0)
    return serve(create_app(source), "127.0.0.1", args.port, any_port_if_busy=True)
