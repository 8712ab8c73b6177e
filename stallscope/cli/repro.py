"""`stallscope repro`: the same load against two arms of the reference server, with the article's A/B table."""

from __future__ import annotations

import argparse

ROWS = [("ITL P99 (s)", "itl_p99_s", True), ("ITL P50 (s)", "itl_p50_s", True),
        ("output tok/s", "output_tok_s", False), ("TTFT P99 long (s)", "ttft_long_p99_s", True),
        ("TTFT P99 short (s)", "ttft_short_p99_s", True)]
KV_ROWS = [("preemptions", "preemptions", True), ("waiting peak", "waiting_peak", True)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", default="starvation", help="starvation (default) | kv-pressure")
    parser.add_argument("--quick", action="store_true", help="90 s of load instead of 180 s")
    parser.add_argument("--model", default="tiny", help="model preset for both arms (default tiny)")
    parser.add_argument("--budget", type=int, default=None, metavar="N",
                        help="--max-num-batched-tokens of the chunked arms (default 64)")
    parser.add_argument("--duration", type=float, default=None, metavar="S", help="override the load duration")
    parser.add_argument("--sessions", type=int, default=None, metavar="N", help="override the steady sessions")
    parser.add_argument("--long-every", type=float, default=None, metavar="T",
                        help="one long prompt every T s (default: paced by session progress, see --long-every-tokens)")
    parser.add_argument("--long-every-tokens", type=int, default=None, metavar="X",
                        help="one long prompt each time every session has streamed X tokens (default 50)")
    parser.add_argument("--long-prompt-tokens", type=int, default=None, metavar="L", help="override the long prompt")
    parser.add_argument("--long-max-tokens", type=int, default=None, metavar="N",
                        help="override the long requests' output length")
    parser.add_argument("--kv-cache-mb", type=float, default=None, metavar="MB",
                        help="kv-pressure: override the pool size of both arms")
    parser.add_argument("--seed", type=int, default=0, help="load seed (same for both arms)")
    parser.add_argument("--out", required=True, metavar="DIR", help="run directory (docs/run-directory.md)")
    parser.add_argument("--no-progress", action="store_true", help="do not draw progress bars")


def _fmt(value) -> str:
    if value is None:
        return "–"
    return f"{value:.0f}" if isinstance(value, int) or abs(value) >= 100 else f"{value:.3f}"


def ab_table(summary: dict):
    """The A/B table: one row per figure, one column per arm, and the change from the first arm in %."""
    from rich.table import Table

    first, second = summary["arm_order"]
    a, b = summary["arms"][first], summary["arms"][second]
    table = Table(title=f"stallscope repro: {summary['scenario']} ({first} → {second})")
    table.add_column("metric")
    table.add_column(first, justify="right")
    table.add_column(second, justify="right")
    table.add_column("change", justify="right")
    rows = ROWS + (KV_ROWS if summary["scenario"] == "kv-pressure" else [])
    for label, key, lower_is_better in rows:
        va, vb = a[key], b[key]
        if va is None or vb is None or va == 0:
            change = "–"
        else:
            pct = 100.0 * (vb - va) / va
            good = (pct < 0) == lower_is_better
            change = f"[{'green' if good else 'red'}]{pct:+.1f}%[/]"
        table.add_row(label, _fmt(va), _fmt(vb), change)
    return table


def run(args) -> int:
    from dataclasses import replace
    from pathlib import Path

    from rich.console import Console

    from stallscope.core.errors import InputError
    from stallscope.collectors.scrape_loop import record_jsonl
    from stallscope.refserver.repro import DEFAULT_BUDGET, default_load, run_repro

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a directory")
    load = default_load(args.scenario, args.quick, args.seed)
    if args.duration is not None:
        if not 0 < args.duration <= 3600:
            raise InputError(f"--duration must be in (0, 3600] seconds, got {args.duration}")
        load = replace(load, duration_s=args.duration)
    if args.long_every is not None:
        load = replace(load, long_every_tokens=None)
    overrides = {"sessions": args.sessions, "long_every_s": args.long_every,
                 "long_every_tokens": args.long_every_tokens,
                 "long_prompt_tokens": args.long_prompt_tokens, "long_max_tokens": args.long_max_tokens}
    load = replace(load, **{k: v for k, v in overrides.items() if v is not None})
    console = Console()
    summary = run_repro(args.scenario, out, quick=args.quick, model=args.model,
                        budget=args.budget or DEFAULT_BUDGET, load=load, kv_cache_mb=args.kv_cache_mb,
                        progress=not args.no_progress, recorder=record_jsonl,
                        on_arm=lambda arm: console.print(f"[bold]arm {arm.name}[/]: refserver "
                                                         + " ".join(arm.server_args)))
    console.print(ab_table(summary))
    console.print(f"run directory: {out} (summary.json, <arm>/scrapes.jsonl, steps.jsonl, loadgen.json)")
    return 0
