"""`stallscope analyze --prometheus URL --fleet`: rank every replica server-side, then diagnose the top K.

Flags are validated and turned into typed inputs here; the triage is `stallscope.rules.fleet_triage`, the
layout `stallscope.render.fleet`. A progress bar (replica groups done, points received, ETA) goes to stderr.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from stallscope.core.errors import InputError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|mb|gb|kib|mib|gib)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def add_arguments(parser) -> None:
    g = parser.add_argument_group("fleet triage (with --prometheus URL --fleet)")
    g.add_argument("--fleet", action="store_true",
                   help="rank every replica by time in episodes with PromQL push-down, then diagnose the top "
                        "--top replicas from their raw series (docs/fleet.md)")
    g.add_argument("--group-by", default="namespace,pod,instance,model_name,engine", metavar="LABELS",
                   help="labels that identify a replica (default namespace,pod,instance,model_name,engine)")
    g.add_argument("--concurrency", type=int, default=4, help="queries in flight at once (default 4)")
    g.add_argument("--max-memory", default="1GB", metavar="SIZE",
                   help="memory budget for answers in flight, e.g. 512MB (default 1GB)")
    g.add_argument("--header", action="append", default=[], metavar="K:V",
                   help="HTTP header for every Prometheus API request, e.g. X-Scope-OrgID:tenant (repeatable; "
                        "never printed)")
    g.add_argument("--query-param", action="append", default=[], metavar="K=V",
                   help="extra API parameter for every fleet query, e.g. max_source_resolution=0s or "
                        "partial_response=false (Thanos; repeatable)")
    g.add_argument("--fleet-path", choices=["auto", "raw", "recorded"], default="auto",
                   help="read the fleet recording rules' series (recorded: rules/fleet.rules.yaml), the raw series "
                        "(raw), or probe the server (default; docs/fleet.md)")
    g.add_argument("--max-samples", type=int, default=50_000_000, metavar="N",
                   help="the server's --query.max-samples: replica groups load at most half of it per query "
                        "(default 50000000, Prometheus' default)")
    g.add_argument("--timeout", type=float, default=300.0,
                   help="seconds per Prometheus request (default 300; the server's --query.timeout, 2 min by "
                        "default, usually ends a query first)")


def parse_size(text: str) -> int:
    m = _SIZE.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise InputError(f"--max-memory {text!r} is not a size such as 512MB or 1GB")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()])


def parse_headers(items) -> dict[str, str]:
    """{name: value} of K:V strings; an error names the header, never its value."""
    out = {}
    for item in items or []:
        name, sep, value = str(item).partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name.strip()):
            raise InputError(f"--header {name.strip()[:40]!r}...: expected NAME:VALUE with a token NAME")
        out[name.strip()] = value.strip()
    return out


def parse_params(items) -> dict[str, str]:
    out = {}
    for item in items or []:
        name, sep, value = str(item).partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\[\]]*", name):
            raise InputError(f"--query-param {item!r}: expected NAME=VALUE")
        if name in ("query", "start", "end", "step", "time"):
            raise InputError(f"--query-param {name} is set by stallscope itself")
        out[name] = value
    return out


def _progress():
    """A (callback, context manager) pair: replica groups done, points received and the ETA, on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("fleet triage: replica groups"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[samples]} points"), TimeRemainingColumn(),
                   console=Console(file=sys.stderr), transient=True)
    task = bar.add_task("groups", total=None, samples=0)

    def update(done: int, total: int, samples: int) -> None:
        bar.update(task, completed=done, total=total, samples=samples)

    return update, bar


def run(args) -> int:
    from stallscope.analyzers.finding import severity_rank
    from stallscope.analyzers.quantiles import parse_selector
    from stallscope.cli.analyze_metrics import _time
    from stallscope.core.config import load_thresholds, parse_duration
    from stallscope.render import fleet as render
    from stallscope.rules.fleet import label_list
    from stallscope.rules.fleet_triage import triage

    urls = args.prometheus or []
    if len(urls) != 1 or args.runs or args.db or args.nsys:
        raise InputError("--fleet needs exactly one --prometheus URL and no other source")
    url = urls[0]
    if not url.startswith(("http://", "https://")):
        raise InputError(f"--prometheus {url!r} is not an http:// or https:// URL")
    if args.concurrency < 1 or args.top < 0 or args.max_samples < 1:
        raise InputError(f"--concurrency and --max-samples must be >= 1 and --top >= 0 (got {args.concurrency}, "
                         f"{args.max_samples}, {args.top})")
    th = load_thresholds(args.thresholds, itl_slo_s=args.itl_slo)
    import time

    hi = _time(args.until, "--until") if args.until else time.time_ns()
    lo = _time(args.since, "--since") if args.since else hi - 3600 * 10**9
    if hi <= lo:
        raise InputError(f"--until {args.until!r} is not after --since {args.since!r}")
    step = parse_duration(args.resolution) if args.resolution else None
    if step is not None and step <= 0:
        raise InputError(f"--resolution must be positive, got {args.resolution!r}")
    callback, bar = _progress()
    with bar:
        report = triage(url, th, lo / 1e9, hi / 1e9, step_s=step, window=args.window,
                        by=label_list(args.group_by), matchers=parse_selector(args.selector), top=args.top,
                        concurrency=args.concurrency, max_memory=parse_size(args.max_memory),
                        headers=parse_headers(args.header), path=args.fleet_path, timeout=args.timeout,
                        progress=callback, max_samples=args.max_samples, params=parse_params(args.query_param))
    for group, fail in report.failures.items():
        what = "triaged from a partial response" if group.endswith("(partial response)") else "not triaged"
        sys.stderr.write(f"stallscope: warning: {group}: {len(fail['replicas'])} replica(s) {what}: "
                         f"{fail['error']}\n")
    sys.stdout.write(render.fleet_json(report) if args.format == "json" else render.fleet_text(report, args.top))
    if args.html:
        try:
            Path(args.html).write_text(render.fleet_html(report, args.top), encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write --html {args.html}: {exc.strerror}") from None
        sys.stderr.write(f"stallscope: wrote {args.html}\n")
    floor = severity_rank(args.fail_on)
    found = [f for r in report.replicas for f in (r.findings or [])]
    return 1 if any(severity_rank(f.severity) >= floor for f in found) else 0
