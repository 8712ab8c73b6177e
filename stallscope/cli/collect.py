"""`stallscope collect`: scrape vLLM/DCGM endpoints (and NVML) into the embedded store, or import a run.

    stallscope collect --target vllm=http://127.0.0.1:8000/metrics --interval 5s --db run.db [--duration 60]
    stallscope collect --import runs/demo --db run.db
"""

from __future__ import annotations

import argparse
import signal
import sys
from urllib.parse import urlparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", action="append", default=[], metavar="NAME=URL",
                        help="a /metrics endpoint to scrape (vLLM or dcgm-exporter; repeatable)")
    parser.add_argument("--nvml", action="store_true", help="also poll local GPUs through NVML (target `nvml`)")
    parser.add_argument("--interval", default="5s", help="scrape interval, e.g. 1s, 5s, 1m (default 5s)")
    parser.add_argument("--timeout", default=None,
                        help="per-scrape timeout (default: the interval, at most 10s)")
    parser.add_argument("--retries", type=int, default=2, metavar="N",
                        help="retries with backoff after a connection error, timeout or HTTP 5xx (default 2)")
    parser.add_argument("--db", required=True, metavar="FILE", help="store file (SQLite, created if absent)")
    parser.add_argument("--duration", default=None, metavar="S",
                        help="stop after this long (seconds or 30s/5m); default: until SIGINT/SIGTERM")
    parser.add_argument("--import", dest="import_path", default=None, metavar="RUN_DIR|scrapes.jsonl",
                        help="store what `stallscope repro` wrote instead of scraping")
    parser.add_argument("--quiet", action="store_true", help="no status line")


def _duration(text, flag: str) -> float:
    from stallscope.core.config import parse_duration
    from stallscope.core.errors import ConfigError, InputError

    try:
        value = parse_duration(text)
    except ConfigError as exc:
        raise InputError(f"{flag}: {exc}") from None
    if value <= 0:
        raise InputError(f"{flag} must be positive, got {text!r}")
    return value


def _targets(specs: list[str], timeout: float, retries: int):
    from stallscope.collectors.scrape_loop import Target
    from stallscope.core.errors import InputError

    out, seen = [], set()
    for spec in specs:
        name, sep, url = spec.partition("=")
        if not sep or not name or not url:
            raise InputError(f"--target {spec!r}: expected NAME=URL, e.g. vllm=http://127.0.0.1:8000/metrics")
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InputError(f"--target {spec!r}: URL must start with http:// or https:// and name a host")
        if name in seen or name == "nvml":
            raise InputError(f"--target name {name!r} is used twice (or is the reserved name `nvml`)")
        seen.add(name)
        out.append(Target(name, url, timeout_s=timeout, retries=retries))
    return out


def run(args) -> int:
    from stallscope.core.errors import InputError

    if args.retries < 0:
        raise InputError(f"--retries must be 0 or more, got {args.retries}")
    if args.import_path:
        if args.target or args.nvml:
            raise InputError("--import reads a finished run; it cannot be combined with --target or --nvml")
        return _import(args)
    interval = _duration(args.interval, "--interval")
    timeout = _duration(args.timeout, "--timeout") if args.timeout else min(interval, 10.0)
    duration = _duration(args.duration, "--duration") if args.duration else None
    targets = _targets(args.target, timeout, args.retries)
    if not targets and not args.nvml:
        raise InputError("nothing to collect: give --target NAME=URL, --nvml or --import")
    return _collect(args, targets, interval, duration)


def _collect(args, targets, interval: float, duration: float | None) -> int:
    import threading

    from stallscope.collectors import scrape_loop
    from stallscope.collectors.store import Store

    poller = None
    if args.nvml:
        from stallscope.collectors.nvml import NvmlPoller

        poller = NvmlPoller()  # CollectorError "NVML not available: …" → exit 2
        targets.append(scrape_loop.Target("nvml", poll=poller, timeout_s=interval, retries=0))
    store = Store(args.db)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    show, live = _status_display(args.quiet)
    print(f"stallscope collect: {len(targets)} target(s) every {interval:g}s into {args.db}"
          + (f" for {duration:g}s" if duration else " (Ctrl-C to stop)"), file=sys.stderr, flush=True)
    try:
        summary = scrape_loop.run(targets, store, interval, duration, stop=stop, on_status=show)
    finally:
        if live is not None:
            live.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        store.close()
        if poller is not None:
            poller.close()
    errors = sum(s.errors for s in summary.status.values())
    if not summary.scrapes:  # every write failed (or none was tried): not a success
        from stallscope.core.errors import CollectorError

        last = next((s.last_error for s in summary.status.values() if s.last_error), "no scrape was made")
        raise CollectorError(f"stored no scrapes in {args.db} ({errors} failed; last: {last})")
    print(f"stallscope collect: stored {summary.scrapes} scrapes ({errors} failed) in {args.db}",
          file=sys.stderr, flush=True)
    return 0


def _status_display(quiet: bool):
    """(callback, rich Live or None): a live status line on a terminal, nothing otherwise."""
    if quiet or not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from stallscope.collectors.scrape_loop import status_line

    live = Live(Text(""), console=Console(stderr=True), refresh_per_second=4, transient=False)
    live.start()
    return (lambda summary: live.update(Text(status_line(summary)))), live


def _import(args) -> int:
    from pathlib import Path

    from stallscope.collectors.importer import import_run

    n_scrapes, n_failed, n_skipped = import_run(Path(args.import_path), args.db)
    print(f"stallscope collect: imported {n_scrapes} scrapes ({n_failed} unparseable, {n_skipped} "
          f"bad lines skipped) from {args.import_path} into {args.db}", file=sys.stderr)
    return 0
