"""Why the metrics' cost per prompt token reads high (issue 16): the same fit on prefill times rebuilt from the step trace.

The idea: vLLM's `request_prefill_time_seconds` is each request's own time from first scheduled to first
token, so a step that prefills k requests is counted k times in its sum (a burst of short prompts that queued
behind a long prefill step is batched into one step, and each of them records all of it). This benchmark
rebuilds every request's prefill time from a run's own step trace (the start of the first step that
scheduled it to the end of its last prefill step, as the reference server measures it), sums them per scrape
interval of the run's own store by the step that finished each request, as the counters do, and runs the
metrics path's fit (`analyzers/prefill_cost.py`) on them. When the rebuilt sums read as high as the real
counters, the excess is in what the metric counts, not in the collection or the fit; the same fit with every
step counted once (its time divided among the requests it prefilled) shows what the double counting costs.

Printed per run: the step trace's least-squares cost per prompt token (the reference); the fit on the real
counters, on the rebuilt ones and on the rebuilt ones counted once, each with its ratio to the reference
beside the 25 % limit of the cost-model target; the share of prefill seconds recorded by requests that
were batched with another prefill; and, per run in the JSON and pooled on screen, the metrics path's decode step (ITL P50)
beside the trace's decode-only steps.

    python benchmarks/prefill_time_inflation.py runs/h9-full/h9-tiny-nochunk-1300-s11-scrape1s runs/h7-full/h7-tiny-chunk1280
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from stallscope.analyzers import decode_starvation, prefill_cost, signals
from stallscope.analyzers.step_cost import read_step_trace
from stallscope.collectors import loader
from stallscope.core.config import load_thresholds

LIMIT = 0.25


def request_prefills(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per request whose prefill ended inside the trace: `end_ns` (its last prefill step's end),
    `finish_ns` (the end of the last step that scheduled it: when the server counts it), `p`
    (prompt tokens computed), `t` (seconds from its first step's start to that end), `split` (the same steps,
    each divided among the requests it prefilled: what a metric counting every step once would hold),
    `co_batched` (whether one of its prefill steps prefilled another request too)."""
    open_: dict[str, list] = {}
    done, last = [], {}
    for rec in steps[["start_ns", "end_ns", "num_prefill_reqs", "num_scheduled_tokens", "arrival_ns"]].itertuples(index=False):
        sched = rec.num_scheduled_tokens if isinstance(rec.num_scheduled_tokens, dict) else {}
        new = rec.arrival_ns if isinstance(rec.arrival_ns, dict) else {}
        last.update(dict.fromkeys(sched, rec.end_ns))
        for req in [r for r in open_ if not (sched.get(r, 0) > 1)]:
            start, end, p, split, co_batched = open_.pop(req)
            done.append((req, end, p, (end - start) / 1e9, split, co_batched))
        share = (rec.end_ns - rec.start_ns) / 1e9 / max(int(rec.num_prefill_reqs), 1)
        for req, n in sched.items():
            if req in new:
                open_[req] = [rec.start_ns, rec.end_ns, n, share, rec.num_prefill_reqs > 1]
            elif req in open_:
                _, _, p, split, co_batched = open_[req]
                open_[req][1:] = [rec.end_ns, p + n, split + share, co_batched or rec.num_prefill_reqs > 1]
    out = pd.DataFrame(done, columns=["req", "end_ns", "p", "t", "split", "co_batched"])
    return out.assign(finish_ns=out["req"].map(last)).drop(columns="req")


def rebuilt_increments(reqs: pd.DataFrame, scrape_ts: np.ndarray, time: str = "t") -> pd.DataFrame:
    """`prefill_cost.increments`' frame from rebuilt requests (`time`: "t" as the metric counts, "split" with
    every step counted once): each in the scrape interval it finished in, as the server counts it."""
    k = np.searchsorted(scrape_ts, reqs["finish_ns"].to_numpy(), side="left")
    inside = (k > 0) & (k < len(scrape_ts))
    g = reqs[inside].assign(k=k[inside]).groupby("k").agg(t=(time, "sum"), n=(time, "size"), p=("p", "sum"))
    return g[(g["n"] > 0) & (g["p"] > 0)].astype(float)


def run_samples(run: Path) -> pd.DataFrame:
    """The samples of the run's one scraped target."""
    return next(f["samples"] for f in loader.load(run / "store.db").values() if len(f["samples"]))


def trace_reference(samples: pd.DataFrame, steps: pd.DataFrame) -> tuple[float, float, pd.DataFrame]:
    """(cost per prompt token, decode step) from the analyzer's own least-squares fit of the traced steps (NaN
    when the trace cannot give one), and the signals they were computed beside."""
    th = load_thresholds()
    eval_ts, window = signals.choose_grid(samples, th)
    sig = signals.compute(samples, thresholds=th, eval_ts=eval_ts, window_ns=window)
    traced = decode_starvation.estimate_cost(sig, steps)
    if traced.get("decode_step_from") != "trace":
        return float("nan"), float("nan"), sig
    return traced["prefill_s_per_token"], traced["decode_step_s"], sig


def measure(run: Path) -> dict:
    steps = read_step_trace(run / "steps.jsonl")
    samples = run_samples(run)
    ref, decode_trace, sig = trace_reference(samples, steps)
    decode_metrics = decode_starvation.estimate_cost(sig, None, None, None, samples)["decode_step_s"]
    reqs = request_prefills(steps)
    real = prefill_cost.fit(samples)
    ts = np.sort(samples["ts"].unique())
    rebuilt = prefill_cost.fit_increments(rebuilt_increments(reqs, ts))
    split = prefill_cost.fit_increments(rebuilt_increments(reqs, ts, "split"))
    per_token = {name: (f["per_token_s"] if f else float("nan"))
                 for name, f in (("real", real), ("rebuilt", rebuilt), ("split", split))}
    co_batched = float(reqs.loc[reqs["co_batched"], "t"].sum() / reqs["t"].sum()) if len(reqs) else float("nan")
    return {"run": str(run), "trace_s_per_token": ref, "metrics_s_per_token": per_token["real"],
            "rebuilt_s_per_token": per_token["rebuilt"], "metrics_ratio": per_token["real"] / ref,
            "rebuilt_ratio": per_token["rebuilt"] / ref, "split_s_per_token": per_token["split"],
            "split_ratio": per_token["split"] / ref, "co_batched_prefill_share": co_batched,
            "long_prompts": int((reqs["p"] >= 512).sum()), "requests": int(len(reqs)),
            "decode_step_trace_s": float(decode_trace), "decode_step_metrics_s": float(decode_metrics)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="scenario run directories (steps.jsonl and store.db)")
    ap.add_argument("--json", dest="json_out", help="write the rows here")
    args = ap.parse_args()
    rows = [measure(run) for run in args.runs]
    print(f"| run | long prompts | trace us/token | metrics us/token | / trace (limit {1 - LIMIT:.2f}-{1 + LIMIT:.2f}) "
          "| rebuilt from the trace us/token | / trace | rebuilt, each step counted once | / trace "
          "| prefill seconds in co-batched steps |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {Path(r['run']).name} | {r['long_prompts']} | {r['trace_s_per_token'] * 1e6:.0f} | "
              f"{r['metrics_s_per_token'] * 1e6:.0f} | {r['metrics_ratio']:.2f} | {r['rebuilt_s_per_token'] * 1e6:.0f} | "
              f"{r['rebuilt_ratio']:.2f} | {r['split_s_per_token'] * 1e6:.0f} | {r['split_ratio']:.2f} | "
              f"{r['co_batched_prefill_share']:.0%} |")
    decode = np.array([r["decode_step_metrics_s"] / r["decode_step_trace_s"] for r in rows], dtype=float)
    decode = decode[np.isfinite(decode)]
    if len(decode):
        print(f"decode step, the metrics' (ITL P50) / the trace's decode-only median: median {np.median(decode):.2f}, "
              f"within 25 % on {(np.abs(decode - 1) <= LIMIT).sum()} of {len(decode)}, within 2x on "
              f"{((decode >= 0.5) & (decode <= 2)).sum()}, max {decode.max():.1f}")
    ratios = np.array([[r["metrics_ratio"], r["rebuilt_ratio"], r["split_ratio"]] for r in rows], dtype=float)
    for name, col in (("metrics", 0), ("rebuilt", 1), ("rebuilt, each step once", 2)):
        x = ratios[:, col][np.isfinite(ratios[:, col])]
        if len(x):
            print(f"{name}: median ratio {np.median(x):.2f}, within {LIMIT:.0%} on {(np.abs(x - 1) <= LIMIT).sum()} of {len(x)}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
