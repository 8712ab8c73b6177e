"""The metric-source flags of `stallscope analyze` (RUN_DIR, --db, --prometheus, ...), turned into one Report.

Flags are validated and turned into typed inputs here; loading is `stallscope.analyzers.sources`, the
diagnosis `stallscope.analyzers.diagnose` (each target its own signals grid and detectors).
"""

from __future__ import annotations

import argparse
import logging
import time

from stallscope.core.errors import InputError

log = logging.getLogger(__name__)


class _Source(argparse.Action):
    """Stores the value(s) and marks that a metric source was given (the analyze `SOURCES` seam)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string:  # an option: append
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)
        if values:
            namespace.metrics = True


def add_arguments(parser) -> None:
    parser.set_defaults(metrics=False)
    parser.add_argument("runs", nargs="*", action=_Source, metavar="RUN_DIR",
                        help="a repro run directory or one arm of it (also a store .db or a scrapes.jsonl)")
    parser.add_argument("--db", action=_Source, metavar="FILE", help="a store written by `stallscope collect` (repeatable)")
    parser.add_argument("--prometheus", action=_Source, metavar="URL",
                        help="a Prometheus-compatible API base URL, read with query_range (repeatable)")
    parser.add_argument("--since", help="start: ISO-8601 time, int ns, or a duration ago (`30m`)")
    parser.add_argument("--until", help="end: ISO-8601 time, int ns, or a duration ago (`0m` = now)")
    parser.add_argument("--selector", help='label matchers for --prometheus, e.g. model_name="m",pod="p"')
    parser.add_argument("--resolution", help="query_range step for --prometheus (default 5s)")
    parser.add_argument("--steps", metavar="FILE", help="a step trace (steps.jsonl) to attach exact offending steps")
    parser.add_argument("--thresholds", metavar="YAML", help="threshold overrides (keys of rules/thresholds.yaml)")
    parser.add_argument("--itl-slo", type=float, metavar="SECONDS", help="ITL SLO (default itl_slo_s, 0.2 s)")
    parser.add_argument("--window", help="sliding window (default: windows.short, shrunk for short runs)")
    parser.add_argument("--gpu", help="GPU for roofline figures and costs (default: from GPU data)")
    parser.add_argument("--model", help="model for roofline costs and for splitting the metrics' prefill cost by its "
                                        "attention share (default: from model_name when known)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size for roofline costs (default 1)")
    parser.add_argument("--html", metavar="FILE", help="also write a standalone HTML report")
    add_config_arguments(parser)
    parser.add_argument("--fail-on", choices=["info", "warning", "critical"], default="critical",
                        help="exit 1 when any finding is at or above this severity (default critical)")


def add_config_arguments(parser) -> None:
    """The servers' chunked-prefill configuration as the user states it (analyze and the dashboard)."""
    chunk = parser.add_mutually_exclusive_group()
    chunk.add_argument("--enable-chunked-prefill", dest="chunked_prefill", action="store_true", default=None,
                       help="the servers ran with chunked prefill on (default: a run directory's server.json, "
                            "else the --server-log, else inferred from the metrics)")
    chunk.add_argument("--no-enable-chunked-prefill", dest="chunked_prefill", action="store_false",
                       help="the servers ran with chunked prefill off")
    parser.add_argument("--max-num-batched-tokens", type=int, metavar="N",
                        help="the token budget the servers ran with (implies chunked prefill on unless "
                             "--no-enable-chunked-prefill)")
    parser.add_argument("--server-log", metavar="FILE",
                        help="a vLLM server log: its startup lines state chunked prefill and "
                             "--max-num-batched-tokens (the two flags above win over it); with "
                             "--enable-logging-iteration-details its per-step lines are the servers' steps")


def _time(value, what: str):
    if value is None:
        return None
    text = str(value).strip()
    if text and text[-1] in "smhdwy" and text[0].isdigit():
        from stallscope.core.config import parse_duration

        return time.time_ns() - int(parse_duration(text) * 1e9)
    if text.isdigit():
        return int(text)
    from stallscope.collectors.loader import to_ns

    return to_ns(text, what)


def report(args):
    """Flags -> typed inputs -> the one diagnosis: the Report of every metric source given."""
    from stallscope.analyzers.quantiles import parse_selector
    from stallscope.core.config import load_thresholds, parse_duration

    th = load_thresholds(args.thresholds, itl_slo_s=args.itl_slo)
    if args.itl_slo is not None and args.itl_slo <= 0:
        raise InputError(f"--itl-slo must be positive, got {args.itl_slo}")
    window_s = parse_duration(args.window) if args.window else None
    if window_s is not None and window_s <= 0:
        raise InputError(f"--window must be positive, got {args.window!r}")
    if args.tp < 1:
        raise InputError(f"--tp must be >= 1, got {args.tp}")
    lo, hi = _time(args.since, "--since"), _time(args.until, "--until")
    if lo is not None and hi is not None and hi < lo:
        raise InputError(f"--until {args.until!r} is before --since {args.since!r}")
    given = [("run", r) for r in (args.runs or [])] + [("db", d) for d in (args.db or [])] + [
        ("prometheus", u) for u in (args.prometheus or [])]
    selector = None
    if args.selector:
        matchers = parse_selector(args.selector)
        if any(op != "=" for _, op, _ in matchers):
            raise InputError(f"--selector {args.selector!r}: only equality matchers (label=\"value\") are supported")
        selector = {k: v for k, _, v in matchers}
    chunking = stated_chunking(args)
    from stallscope.analyzers.sources import diagnose_sources
    from stallscope.cli.analyze_fleet import parse_headers

    return diagnose_sources(given, lo, hi, thresholds=th, window_s=window_s, selector=selector,
                            resolution=args.resolution, steps_path=args.steps, gpu=args.gpu, model=args.model,
                            tp=args.tp, chunking=chunking,
                            headers=parse_headers(getattr(args, "header", None)), log_steps=log_steps(args))


def log_steps(args):
    """`(lo_ns, hi_ns) -> steps` of the --server-log's iteration-details lines (collectors.vllm_log; None without a
    log, or with --steps), read once."""
    from functools import cache

    path = getattr(args, "server_log", None)
    if not path or getattr(args, "steps", None):
        return None
    from stallscope.collectors.vllm_log import read_iterations_for

    return cache(lambda lo, hi: read_iterations_for(path, lo, hi))


def stated_chunking(args):
    """The configuration the user stated: the flags, else the server log's startup lines, else None (inferred)."""
    from stallscope.analyzers.chunking import from_flags, from_server_log

    budget, path = getattr(args, "max_num_batched_tokens", None), getattr(args, "server_log", None)
    if budget is not None and budget < 1:
        raise InputError(f"--max-num-batched-tokens must be >= 1, got {budget}")
    stated = from_flags(getattr(args, "chunked_prefill", None), budget)
    if stated is None and path:
        from stallscope.collectors.vllm_log import read_server_config

        try:
            stated = from_server_log(read_server_config(path))
        except InputError as exc:   # a rotated log can hold steps without the startup lines
            from stallscope.collectors.vllm_log import has_iterations

            if "no vLLM startup line" not in str(exc) or not has_iterations(path):
                raise
            log.warning("%s; chunked prefill is inferred from the metrics, the log's steps are used", exc)
    return stated
