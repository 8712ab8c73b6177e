"""Follow the advice (issue 16, "honest cost model"): does the step the recommendation predicts match the step it gets?

For each recorded scenario run with a `decode_starvation` finding, take the recommended
`--max-num-batched-tokens N` and the step time it predicts (`expected_step_s`: decode step + N x cost per
prompt token, from `stallscope analyze --db store.db`, as a user runs it), then run the same seeded load
against the same server with `--enable-chunked-prefill --max-num-batched-tokens N` and measure, from that
run's own step trace, the steps that computed a full chunk (between 0.9 N and N prompt tokens) beside running
decodes, and each long prompt's slowest prefill step (the longest gap it causes). The advice comes from the
store alone (`--advice-from metrics`: its prediction is a step of N prompt tokens) or with the run's step trace
(`steps`: the what-if path, whose prediction is each long prompt's slowest step); each is compared with the
median of what it names (the criterion, written before the runs), the mean beside it (the metrics cost is
fitted on sums of prefill seconds, so it predicts a mean). A metrics path that knows the model splits its cost
per token by the attention share (stallscope.analyzers.chunk_cost) and predicts each long prompt's slowest
step, so it is compared with that, as the step-trace path is; the full-chunk median is printed beside. Also
printed: the machine's drift between the two runs (their decode-only steps of equal batch size, after /
before), the advice's cost per prompt token beside
the advising run's own from its step trace, and the new run's client-side ITL P99, with the 25 % limit beside
each ratio.

    python benchmarks/follow_advice.py --runs runs/q1/tiny-nochunk-steady,runs/h3/h3-tiny-nochunk-1300-s3 --quick
    python benchmarks/follow_advice.py --fresh --quick --runs ... --out runs/follow-fresh   # both runs back to back
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from scenarios import FULL_S, QUICK_S, SCENARIOS, analyze, record

LIMIT = 0.25


def advice(run: Path, slo: float, path: str = "metrics") -> dict | None:
    """The first decode_starvation finding's budget and predicted step, or None. `path` "metrics" is
    `analyze --db store.db` (the cost fitted on the metrics: a step of N prompt tokens); "steps" adds the run's
    step trace (`--steps`: the what-if simulation, whose prediction is each long prompt's slowest step); "log" gives
    the run's server.log (`--server-log`: the configuration from its startup lines, and the steps from its
    iteration-details lines when the server ran with `--enable-logging-iteration-details`, as vLLM's operator has them)."""
    config = ("--server-log", str(run / "server.log")) if path == "log" else ()
    for f in analyze(run, slo, steps=path == "steps", config=config):
        ev = f["evidence"]
        if f["kind"] == "decode_starvation" and ev.get("max_num_batched_tokens") and ev.get("expected_step_s"):
            return {"budget": int(ev["max_num_batched_tokens"]), "predicted_step_s": float(ev["expected_step_s"]),
                    "decode_step_s": ev.get("decode_step_s"),
                    "prefill_s_per_token": ev.get("prefill_s_per_token"), "source": ev.get("budget_source"),
                    "predicts": ev.get("expected_step", "a step of N prompt tokens")}
    return None


def measured(run: Path, budget: int) -> dict:
    from stallscope.analyzers.step_cost import read_step_trace

    st = read_step_trace(run / "steps.jsonl")
    full = st[(st["num_prefill_tokens"] >= 0.9 * budget) & (st["num_prefill_tokens"] <= budget)
              & (st["num_decode_tokens"] > 0)]
    dur = (full["end_ns"] - full["start_ns"]).to_numpy(dtype=float) / 1e9
    itl = json.loads((run / "loadgen.json").read_text())["all"]["itl_s"].get("p99")
    worst = slowest_prefill_steps(st)
    return {"full_chunk_steps": int(len(dur)), "median_s": float(np.median(dur)) if len(dur) else float("nan"),
            "mean_s": float(np.mean(dur)) if len(dur) else float("nan"),
            "p90_s": float(np.percentile(dur, 90)) if len(dur) else float("nan"), "itl_p99_s": itl,
            "long_prompts": int(len(worst)), "slowest_step_median_s": float(np.median(worst)) if len(worst) else float("nan"),
            "slowest_step_mean_s": float(np.mean(worst)) if len(worst) else float("nan")}


def slowest_prefill_steps(st) -> np.ndarray:
    """Per long prompt (>= 512 computed tokens), the duration of the slowest step that computed part of it: the
    step that sets the longest gap its prefill causes (with whole-prompt steps, the one step)."""
    seen: dict[str, int] = {}
    worst: dict[str, float] = {}
    for rec in st[["start_ns", "end_ns", "num_scheduled_tokens"]].itertuples(index=False):
        d = (rec.end_ns - rec.start_ns) / 1e9
        for req, n in (rec.num_scheduled_tokens or {}).items():
            if n > 1 or req not in seen:
                worst[req] = max(worst.get(req, 0.0), d)
            seen[req] = seen.get(req, 0) + n
    return np.array([worst[r] for r in worst if seen[r] >= 512])


def trace_s_per_token(run: Path) -> float:
    """The advising run's own prefill cost per prompt token from its step trace: the median, over steps that
    computed 256+ prompt tokens, of (duration - the median decode-only step) / prompt tokens."""
    from stallscope.analyzers.step_cost import read_step_trace

    st = read_step_trace(run / "steps.jsonl")
    dur = (st["end_ns"] - st["start_ns"]).to_numpy(dtype=float) / 1e9
    pre = st["num_prefill_tokens"].to_numpy(dtype=float)
    if not (pre == 0).any() or not (pre >= 256).any():
        return float("nan")
    big = pre >= 256
    return float(np.median((dur[big] - np.median(dur[pre == 0])) / pre[big]))


def decode_drift(before: Path, after: Path) -> float:
    """How much slower the machine ran the followed run: the median, over batch sizes both runs share, of the
    ratio of their median decode-only step (after / before); 1.0 = the same speed."""
    from stallscope.analyzers.step_cost import read_step_trace

    def med(run):
        st = read_step_trace(run / "steps.jsonl")
        dec = st[(st["num_prefill_tokens"] == 0) & (st["num_decode_tokens"] > 0)]
        return ((dec["end_ns"] - dec["start_ns"]) / 1e9).groupby(dec["num_decode_tokens"]).agg(["median", "size"])
    a, b = med(before), med(after)
    both = a.add_suffix("_a").join(b.add_suffix("_b"), how="inner")
    both = both[(both["size_a"] >= 20) & (both["size_b"] >= 20)]
    return float(np.median(both["median_b"] / both["median_a"])) if len(both) else float("nan")


def follow(run: Path, out: Path, duration: float, slo: float, fresh: bool = False, path: str = "metrics") -> dict:
    """`run`'s advice (from `path`) followed; with `fresh`, the scenario is first recorded again under
    `out/original`, so the run that gives the advice and the run that follows it share the machine's load (back
    to back). A budget already followed for this scenario is not recorded twice."""
    sc = next(s for s in SCENARIOS if s.name == run.name)
    if fresh:
        run = out / "original" / run.name
        if not (run / "store.db").exists():
            record(sc, run, duration, [] if sc.prefix_caching else ["--no-enable-prefix-caching"])
    adv = advice(run, slo, path)
    if adv is None:
        return {"run": str(run), "path": path, "advice": None}
    target = record_at_budget(sc, out, run.name, adv["budget"], duration)
    got = measured(target, adv["budget"])
    # the criterion: the prediction against the median of what it names (each long prompt's slowest step for the
    # step-trace path and for a metrics path that prices chunks by the model's attention share; a full chunk's
    # step for one at the flat average cost per token); the means are printed beside
    slowest = path == "steps" or str(adv["predicts"]).startswith("the slowest step")
    named = "slowest_step" if slowest else "full_chunk"
    med = got["slowest_step_median_s"] if slowest else got["median_s"]
    mean = got["slowest_step_mean_s"] if slowest else got["mean_s"]
    ratio = adv["predicted_step_s"] / med if med > 0 else float("nan")
    return {"run": str(run), "path": path, "advice": adv, "followed": str(target), "measured": got, "compared_with": named,
            "ratio": ratio, "within_25pct": bool(abs(ratio - 1) <= LIMIT),
            "ratio_to_mean": adv["predicted_step_s"] / mean if mean > 0 else float("nan"),
            "ratio_to_full_chunk": adv["predicted_step_s"] / got["median_s"] if got["median_s"] > 0 else float("nan"),
            "machine_drift": decode_drift(run, target), "trace_s_per_token": trace_s_per_token(run)}


def record_at_budget(sc, out: Path, name: str, budget: int, duration: float, extra: tuple[str, ...] = ()) -> Path:
    """The scenario `sc` run again with `--enable-chunked-prefill --max-num-batched-tokens budget` in place of its
    own chunked-prefill flags (and the server flags `extra` after its own), recorded once per budget and `extra`
    (`_followed_dir`; a run with `extra` in a directory named by them, so a plain follow is never taken for it);
    its directory."""
    server = [f for f in sc.server if f not in ("--no-enable-chunked-prefill", "--enable-chunked-prefill")]
    if "--max-num-batched-tokens" in server:
        k = server.index("--max-num-batched-tokens")
        server = server[:k] + server[k + 2:]
    followed = type(sc)(**{**sc.__dict__, "server": (*server, "--enable-chunked-prefill", "--max-num-batched-tokens",
                                                     str(budget), *extra)})
    target = (out / f"{name}-b{budget}-{'-'.join(f.lstrip('-') for f in extra)}" if extra
              else _followed_dir(out, name, budget))
    if not (target / "store.db").exists():
        record(followed, target, duration, [] if sc.prefix_caching else ["--no-enable-prefix-caching"])
    return target


def attributed(r: dict) -> float:
    """The ratio with the advice's cost per prompt token replaced by the advising run's own (the trace's) and the
    machine's drift taken out: what is left is the error of the prediction's form (the flat average, or the chunk
    pricing) alone. A prediction's prefill part (all but its decode step) is proportional to the cost per token."""
    a, measured = r["advice"], r["advice"]["predicted_step_s"] / r["ratio"]
    c, trace, decode = a.get("prefill_s_per_token"), r.get("trace_s_per_token"), a.get("decode_step_s")
    if not (c and decode is not None and np.isfinite(trace) and np.isfinite(r["machine_drift"])):
        return float("nan")
    prefill = a["predicted_step_s"] - decode
    return (decode + prefill * trace / c) / measured * r["machine_drift"]


def _with_decode_step(r: dict, slo: float) -> dict:
    """A row saved before the advice kept its decode step: the advising run analyzed again, its decode step
    taken when it gives the same budget and prediction (else the row is left as it was)."""
    a = r.get("advice")
    if r["path"] != "metrics" or not a or a.get("decode_step_s") is not None:
        return r
    again = advice(Path(r["run"]), slo, "metrics")
    same = again and again["budget"] == a["budget"] and abs(again["predicted_step_s"] - a["predicted_step_s"]) < 1e-9
    return {**r, "advice": {**a, "decode_step_s": again["decode_step_s"]}} if same else r


def _followed_dir(out: Path, name: str, budget: int) -> Path:
    """Where the run following `budget` lives: `out/name` (the first budget followed, kept from earlier runs of
    this benchmark) when it ran that budget, else `out/name-b<budget>`."""
    first = out / name
    log = first / "server.log"
    if not (first / "store.db").exists() or (log.exists() and f"max_num_batched_tokens {budget})" in log.read_text()):
        return first
    return out / f"{name}-b{budget}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", help="comma-separated recorded scenario run directories")
    ap.add_argument("--from-json", help="print the table of an earlier run's --json rows; record nothing")
    ap.add_argument("--out", default="runs/follow-advice")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_S:.0f} s of load (else {FULL_S:.0f} s)")
    ap.add_argument("--itl-slo", type=float, default=0.2)
    ap.add_argument("--fresh", action="store_true",
                    help="record each scenario again right before following its advice (same load on both runs)")
    ap.add_argument("--advice-from", choices=["metrics", "steps", "log", "both", "all"], default="both",
                    help="analyze the store alone (metrics), with the run's step trace (steps), with its server.log "
                         "(log), metrics and steps (both), or all three")
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    paths = {"both": ["metrics", "steps"], "all": ["metrics", "steps", "log"]}.get(args.advice_from, [args.advice_from])
    if args.from_json:
        rows = [_with_decode_step(r, args.itl_slo) for r in json.loads(Path(args.from_json).read_text())]
    elif args.runs:
        rows = [follow(Path(r), Path(args.out), QUICK_S if args.quick else FULL_S, args.itl_slo, args.fresh, p)
                for r in args.runs.split(",") for p in paths]
    else:
        ap.error("give --runs or --from-json")
    print("| run | advice from | budget | predicted | what it predicts: measured median (n) / mean | "
          "predicted / median | limit | predicted / mean | full-chunk steps (n) median / P90 | machine drift "
          "(decode step after / before) | cost per prompt token: advice's / the advising run's trace | ITL P99 after | "
          "predicted / median with the trace's cost per token, drift taken out (metrics and log paths) |"
          "\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["advice"] is None:
            print(f"| {Path(r['run']).name} | {r['path']} | no budget recommended (no decode_starvation finding, "
                  "or one that names no budget fitting the SLO) | | | | | | | | | | |")
            continue
        m, a = r["measured"], r["advice"]
        slow = r["compared_with"] == "slowest_step"
        med, n, mean = ((m["slowest_step_median_s"], m["long_prompts"], m["slowest_step_mean_s"]) if slow
                        else (m["median_s"], m["full_chunk_steps"], m["mean_s"]))
        print(f"| {Path(r['run']).name} | {r['path']} | {a['budget']} | {a['predicted_step_s'] * 1e3:.0f} ms | "
              f"{'slowest step per long prompt' if slow else 'full-chunk step'}: {med * 1e3:.0f} ms ({n}) / "
              f"{mean * 1e3:.0f} ms | {r['ratio']:.2f} ({'met' if r['within_25pct'] else 'missed'}) | "
              f"{1 - LIMIT:.2f}-{1 + LIMIT:.2f} | {r['ratio_to_mean']:.2f} | ({m['full_chunk_steps']}) "
              f"{m['median_s'] * 1e3:.0f} / {m['p90_s'] * 1e3:.0f} ms (predicted / median "
              f"{r.get('ratio_to_full_chunk', float('nan')):.2f}) | {r['machine_drift']:.2f} | "
              f"{(a['prefill_s_per_token'] or float('nan')) * 1e6:.0f} / {r['trace_s_per_token'] * 1e6:.0f} us | "
              f"{m['itl_p99_s'] if m['itl_p99_s'] is None else round(m['itl_p99_s'], 3)} s | "
              f"{attributed(r) if r['path'] != 'steps' else float('nan'):.2f} |")
    if args.json_out and not args.from_json:
        Path(args.json_out).write_text(json.dumps(rows, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
