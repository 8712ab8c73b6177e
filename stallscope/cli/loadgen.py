"""`stallscope loadgen`: steady streaming sessions plus periodic long prompts against a loopback server."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL (loopback only)")
    parser.add_argument("--sessions", type=int, default=16, metavar="N", help="steady streaming sessions")
    parser.add_argument("--duration", type=float, default=60.0, metavar="S", help="seconds of load (max 3600)")
    parser.add_argument("--long-prompt-tokens", type=int, default=1536, metavar="L", help="long prompt length")
    parser.add_argument("--long-every", type=float, default=5.0, metavar="T", help="one long prompt every T s")
    parser.add_argument("--long-every-tokens", type=int, default=None, metavar="X",
                        help="instead of --long-every: a long prompt each time every session has streamed X tokens "
                             "since the previous long prompt's first token")
    parser.add_argument("--long-max-tokens", type=int, default=16, metavar="N", help="output tokens of long requests")
    parser.add_argument("--short-prompt-tokens", type=int, default=32, metavar="N", help="session prompt length")
    parser.add_argument("--shared-prefix-tokens", type=int, default=0, metavar="N",
                        help="every session prompt starts with the same N tokens (a system prompt), then its "
                             "own --short-prompt-tokens; a prefix-caching server reuses their KV (default 0)")
    parser.add_argument("--max-tokens", type=int, default=128, metavar="N",
                        help="mean session output length (each request draws from [N/2, 3N/2])")
    parser.add_argument("--max-requests", type=int, default=100_000, metavar="N", help="bound on requests sent")
    parser.add_argument("--seed", type=int, default=0, help="prompt and length seed")
    parser.add_argument("--out", default=None, metavar="FILE.json", help="write the full result here")
    parser.add_argument("--no-progress", action="store_true", help="do not draw the progress bar")


def print_summary(result: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    req = result["requests"]
    table = Table(title=f"loadgen: {req['completed']} completed, {req['failed']} failed, "
                        f"{req['incomplete']} cut at the deadline; {result['output_tok_s']:.1f} output tok/s")
    table.add_column("metric (s)")
    for kind in ("short", "long"):
        for p in ("p50", "p90", "p99"):
            table.add_column(f"{kind} {p.upper()}", justify="right")
    for metric in ("ttft_s", "itl_s", "tpot_s", "e2e_s"):
        row = [metric[:-2].upper()]
        for kind in ("short", "long"):
            q = result[kind][metric]
            row += ["–" if q[p] is None else f"{q[p]:.3f}" for p in ("p50", "p90", "p99")]
        table.add_row(*row)
    console.print(table)


def run(args) -> int:
    import asyncio
    import json
    from pathlib import Path

    from stallscope.refserver.loadgen import LoadSpec, run_load

    spec = LoadSpec(url=args.url, sessions=args.sessions, duration_s=args.duration,
                    long_prompt_tokens=args.long_prompt_tokens, long_every_s=args.long_every,
                    long_every_tokens=args.long_every_tokens, seed=args.seed,
                    max_tokens=args.max_tokens, short_prompt_tokens=args.short_prompt_tokens,
                    shared_prefix_tokens=args.shared_prefix_tokens,
                    long_max_tokens=args.long_max_tokens, max_requests=args.max_requests)
    spec.validate()
    out = Path(args.out) if args.out else None
    if out is not None and not out.parent.is_dir():
        from stallscope.core.errors import InputError
        raise InputError(f"--out directory {out.parent} does not exist")
    result = asyncio.run(run_load(spec, progress=not args.no_progress))
    if out is not None:
        out.write_text(json.dumps(result))
    print_summary(result)
    return 0
