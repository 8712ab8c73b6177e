"""A cost per prompt token from the engine's busy time (issue 16, "honest cost model"): tried, and not used.

The idea tried: `request_prefill_time_seconds` counts a step once per request it prefilled, which makes the
metrics path's cost per prompt token read high (benchmarks/prefill_time_inflation.py). While requests are
RUNNING the engine steps back to back, so a scrape interval's wall time is the sum of its steps, each counted
once: dt = a x steps + g x generated tokens + c x computed prompt tokens, with steps the increase of
`iteration_tokens_total_count`, generated tokens `generation_tokens_total` and computed prompt tokens the
step-token sum less the generated ones. This script fits that by non-negative least squares on the busy scrape
intervals of each run (RUNNING > 0 at both ends, at least one step), and on windows merged from consecutive
busy intervals until they span W seconds, and prints c over the step trace's least-squares cost per prompt
token (the analyzer's own `estimate_cost` with the trace), beside the 25 % limit.

Why it is not used: vLLM counts a prompt's tokens in the step where its prefill completes, so a long step
that straddles scrapes leaves intervals with its time and no tokens; prompt work is a few per cent of busy
time, so c is a small difference of large terms; and merged windows leave too few rows to separate the
terms in a 60 s run. docs/accuracy.md ("held-out 15") has the figures.

    python benchmarks/busy_time_split.py runs/h10-full/*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from prefill_time_inflation import run_samples, trace_reference
from stallscope.analyzers.prefill_cost import totals
from stallscope.analyzers.step_cost import _nnls_with_intercept, read_step_trace

LIMIT = 0.25
WINDOWS_S = (0, 2, 5, 10)


def busy_increments(samples: pd.DataFrame) -> pd.DataFrame:
    """Per busy scrape interval: wall time `dt` (s), `steps`, generated tokens `gen`, computed prompt tokens `p`."""
    df = pd.concat({"steps": totals(samples, "vllm:iteration_tokens_total_count"),
                    "tokens": totals(samples, "vllm:iteration_tokens_total_sum"),
                    "gen": totals(samples, "vllm:generation_tokens_total"),
                    "running": totals(samples, "vllm:num_requests_running")}, axis=1).dropna()
    inc = df[["steps", "tokens", "gen"]].diff().iloc[1:]
    inc["dt"] = np.diff(df.index.to_numpy(dtype=float)) / 1e9
    inc["p"] = inc["tokens"] - inc["gen"]
    running = df["running"].to_numpy()
    keep = (running[1:] > 0) & (running[:-1] > 0) & (inc[["steps", "tokens", "gen"]] >= 0).all(axis=1).to_numpy()
    return inc.loc[keep & (inc["steps"] > 0).to_numpy(), ["dt", "steps", "gen", "p"]].clip(lower=0)


def merged(inc: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Consecutive rows summed until each spans `window_s` seconds (0: the intervals themselves)."""
    if window_s <= 0:
        return inc
    out, acc = [], None
    for _, row in inc.iterrows():
        acc = row.copy() if acc is None else acc + row
        if acc["dt"] >= window_s:
            out.append(acc)
            acc = None
    return pd.DataFrame(out)


def per_token(rows: pd.DataFrame) -> float:
    """c of dt = a x steps + g x gen + c x p (all >= 0); NaN with fewer than 4 rows."""
    if len(rows) < 4:
        return float("nan")
    _, (_, c) = _nnls_with_intercept(rows[["gen", "p"]].to_numpy(dtype=float), rows["steps"].to_numpy(dtype=float),
                                     rows["dt"].to_numpy(dtype=float))
    return float(c)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="scenario run directories (store.db and steps.jsonl)")
    args = ap.parse_args()
    print("| run | trace us/token | " + " | ".join(f"busy time {'intervals' if w == 0 else f'{w} s windows'}: "
                                                 f"/ trace (rows)" for w in WINDOWS_S) + " |")
    print("|---|---|" + "---|" * len(WINDOWS_S))
    ratios: dict[float, list] = {w: [] for w in WINDOWS_S}
    for run in args.runs:
        samples = run_samples(run)
        ref, inc = trace_reference(samples, read_step_trace(run / "steps.jsonl"))[0], busy_increments(samples)
        cells = []
        for w in WINDOWS_S:
            rows = merged(inc, w)
            r = per_token(rows) / ref
            ratios[w].append(r)
            cells.append(f"{r:.2f} ({len(rows)})" if np.isfinite(r) else f"- ({len(rows)})")
        print(f"| {run.name} | {ref * 1e6:.0f} | " + " | ".join(cells) + " |")
    for w, rs in ratios.items():
        x = np.array(rs, dtype=float)
        x = x[np.isfinite(x)]
        if len(x):
            print(f"busy time, {'intervals' if w == 0 else f'{w} s windows'}: median ratio {np.median(x):.2f}, within "
                  f"{LIMIT:.0%} on {(np.abs(x - 1) <= LIMIT).sum()} of {len(x)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
