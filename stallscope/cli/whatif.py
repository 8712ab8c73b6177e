"""`stallscope whatif`: simulate chunk budgets on a measured workload and recommend one for an ITL SLO.

Inputs resolve in this order: the step-cost model from `--steps`/`--nsys`, else the run directory's
step traces, else the roofline of `--gpu` and `--roofline-model`; the workload from the run's loadgen
result, else its metrics (`--from`, `--db`, `--prometheus`), with explicit flags overriding either.
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def _budgets(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--budgets must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--budgets must be positive integers, got {text!r}")
    return values


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return value
    return parse


def _float_in(low: float, high: float = math.inf, *, what: str):
    """An argparse type: a finite float in [low, high), `what` naming the expected value."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (low <= value < high and math.isfinite(value)):
            bound = f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g})"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text!r}")
        return value
    return parse


_headroom = _float_in(0.0, 1.0, what="a fraction")
_nonnegative = _float_in(0.0, what="seconds")


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--from", dest="run_dir", metavar="RUN_DIR", help="a `stallscope repro` run directory or one arm of it")
    src.add_argument("--db", metavar="FILE", help="a `stallscope collect` store")
    src.add_argument("--prometheus", metavar="URL", help="a Prometheus server scraping vLLM")
    p.add_argument("--since", default=None,
                   help="with --db/--prometheus: a duration back (30m) or a time (int ns, ISO-8601); default: "
                        "the whole store, or the last hour of Prometheus")
    p.add_argument("--until", default=None, help="with --db/--prometheus: end time (int ns, ISO-8601; default now)")
    p.add_argument("--selector", default=None, help="with --db/--prometheus: label matchers, e.g. model_name=\"x\"")
    p.add_argument("--target", default=None, help="with --db/--prometheus: the scrape target to model (when several)")
    cost = p.add_mutually_exclusive_group()
    cost.add_argument("--steps", metavar="FILE", help="engine step trace (JSONL) to fit the step-cost model")
    cost.add_argument("--nsys", metavar="FILE", help="Nsight Systems SQLite export to rebuild steps from")
    p.add_argument("--gpu", help="no steps: derive step cost from this GPU's roofline (e.g. H100-SXM)")
    p.add_argument("--roofline-model", help="no steps: the model for the roofline (e.g. llama-3-8b)")
    p.add_argument("--tp", type=_positive(int), default=1, help="tensor parallelism for the roofline (default 1)")
    p.add_argument("--budgets", type=_budgets, default=None,
                   help="comma-separated max_num_batched_tokens values (default 256,512,1024,2048,4096 plus the "
                        "run's own chunked budget, none below --block-size)")
    p.add_argument("--include-unchunked", action="store_true", help="also simulate --no-enable-chunked-prefill")
    p.add_argument("--itl-slo", type=_positive(float), default=None, help="ITL P99 SLO in seconds (default: thresholds.yaml)")
    p.add_argument("--headroom", type=_headroom, default=None, metavar="F",
                   help="fraction of the SLO kept free for prediction error: recommend the largest budget "
                        "predicted at <= SLO x (1 - F) (default 0.2; 0 = the bare SLO)")
    w = p.add_argument_group("workload (override or replace the measured one)")
    w.add_argument("--rate", type=float, default=None, help="open-loop request rate, requests/s")
    w.add_argument("--sessions", type=int, default=None, help="closed-loop streaming sessions")
    w.add_argument("--prompt-tokens", type=_positive(int), default=None, help="prompt length of ordinary requests")
    w.add_argument("--output-tokens", type=_positive(int), default=None, help="output length of ordinary requests")
    w.add_argument("--long-prompt-tokens", type=_positive(int), default=None, help="length of the periodic long prompt")
    w.add_argument("--long-output-tokens", type=_positive(int), default=None, help="output length of a long prompt")
    w.add_argument("--long-every", type=_positive(float), default=None, help="seconds between long prompts")
    w.add_argument("--duration", type=_positive(float), default=None, help="simulated seconds")
    s = p.add_argument_group("server shape (default: from the run, else vLLM's defaults)")
    s.add_argument("--max-num-seqs", type=_positive(int), default=None)
    s.add_argument("--block-size", type=_positive(int), default=None)
    s.add_argument("--num-kv-blocks", dest="num_gpu_blocks", type=_positive(int), default=None)
    s.add_argument("--max-model-len", type=_positive(int), default=None)
    p.add_argument("--request-overhead", type=_nonnegative, default=None, metavar="S",
                   help="seconds from send to the scheduler (HTTP, tokenization); default: the delays measured "
                        "in the run (loadgen send times vs the step trace) with --from, else 0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-noise", action="store_true", help="do not replay the fit's residuals as step-time noise")
    p.add_argument("--format", choices=["text", "json"], default="text")


def run(args) -> int:
    from stallscope.analyzers.budget import recommend_budget
    from stallscope.cli import whatif_inputs
    from stallscope.core.config import load_thresholds

    slo = args.itl_slo if args.itl_slo is not None else float(load_thresholds()["itl_slo_s"])
    inputs = whatif_inputs.resolve_inputs(args)
    res = recommend_budget(inputs, slo, budgets=args.budgets, include_unchunked=args.include_unchunked,
                           seed=args.seed, noise=not args.no_noise,
                           **({} if args.headroom is None else {"headroom": args.headroom}))
    result = {
        "predictions": [_jsonable(row) for row in res["predictions"].to_dict("records")],
        "recommendation": res["recommendation"],
        "step_cost": inputs.cost.summary(),
        "workload": inputs.workload.summary(),
        "server_shape": {k: getattr(inputs.shape, k) for k in whatif_inputs.SHAPE_FLAGS},
        "request_overhead_s": _overhead_summary(inputs.request_overhead_s),
    }
    if args.format == "json":
        json.dump(_jsonable(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_text(result)
    return 0


def _overhead_summary(overhead):
    """A constant overhead as seconds; measured delays as their count and quantiles."""
    import numpy as np

    if np.ndim(overhead) == 0:
        return float(overhead)
    q = np.percentile(overhead, [50, 90, 99])
    return {"measured_requests": int(np.size(overhead)), "p50_s": float(q[0]), "p90_s": float(q[1]), "p99_s": float(q[2])}


def _jsonable(v):
    """numpy scalars as Python numbers and non-finite floats as null, through nested dicts."""
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _overhead_text(o) -> str:
    if isinstance(o, dict):
        return (f"measured on {o['measured_requests']} requests: P50 {o['p50_s'] * 1e3:.0f} ms, "
                f"P99 {o['p99_s'] * 1e3:.0f} ms")
    return f"{o * 1e3:.0f} ms"


def _ms(v) -> str:
    return "–" if v is None else f"{v * 1e3:,.0f}"


def _print_text(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    c, w = result["step_cost"], result["workload"]
    if c["kind"] == "linear":
        fit = f"MAPE {c['mape']:.1%}, R² {c['r2']:.3f}" if c["mape"] is not None and c["r2"] is not None else "fit error unknown"
        console.print(f"step cost: fitted on {c['n_steps']} steps from {c['source']} ({fit}); gap {c['gap_s'] * 1e3:.1f} ms; "
                      f"request overhead {_overhead_text(result['request_overhead_s'])}")
    else:
        console.print(f"step cost: {c['source']} (no measured steps; fit error unknown)")
    console.print(f"workload: {w['source']}: {w['sessions']} sessions, {w['rate_hz']:.2f} req/s open-loop, "
                  f"prompt ≈{w['prompt_tokens_mean']:.0f} / output ≈{w['output_tokens_mean']:.0f} tokens, "
                  f"long prompts {w['long_prompt_tokens']} every {w['long_every_s']:g} s; {w['duration_s']:g} s simulated")
    table = Table(title="predicted per --max-num-batched-tokens (times in ms; off = chunked prefill off)")
    for col in ("budget", "TTFT P99", "TTFT long P50", "TTFT long P99", "TTFT short P50", "TTFT short P99",
                "ITL P50", "ITL P99", "slowest long-prompt step", "output tok/s"):
        table.add_column(col, justify="right")
    for r in result["predictions"]:
        budget = str(r["max_num_batched_tokens"]) if r["enable_chunked_prefill"] else "off"
        table.add_row(budget, _ms(r["ttft_p99_s"]), _ms(r["ttft_long_p50_s"]), _ms(r["ttft_long_p99_s"]), _ms(r["ttft_short_p50_s"]),
                      _ms(r["ttft_short_p99_s"]), _ms(r["itl_p50_s"]), _ms(r["itl_p99_s"]),
                      _ms(r.get("slowest_step_s")), f"{r['output_tok_s']:.1f}")   # rows are _jsonable: NaN is None
    console.print(table)
    rec = result["recommendation"]
    mark = "recommend" if rec["meets_slo"] else "no budget meets the SLO; closest"
    slowest = rec.get("predicted_slowest_step_s")
    bound = (f"; its slowest long-prompt step {slowest * 1e3:.0f} ms, bound {rec['step_bound_s'] * 1e3:.0f} ms"
             if slowest is not None else "")
    console.print(f"{mark}: {rec['flags']}  ({rec['reason']}{bound})")

