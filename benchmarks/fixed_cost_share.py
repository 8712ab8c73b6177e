"""A lead for the band measured, not built: P x G / T with the decodes' fixed cost taken out (docs/accuracy.md).

The idea: `slow_step.SlowStep.prompt_share` (P x G / T) reads a chunk low, because a prompt's prefill time T also holds
its short last chunk and every step's fixed cost (the running decodes). With a the decode-only step's time and k the
steps the prefill spanned (ceil(T / G)), (G - a) x P / (T - k x a) takes that cost out. Here a is read off the step
trace itself (the median decode-only step), the best any metric could give, so the column shows the most the lead can
do. Per recorded chunked run at a budget of 384 or more whose slowest step the metrics size exactly: the largest
chunk a step computed (the trace), P x G / T and the corrected reading.

    python benchmarks/fixed_cost_share.py runs/h1[45][0-9] runs/h1[45][0-9]-full
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

from stallscope.analyzers import chunking_inference as CI
from stallscope.analyzers import slow_step as S
from stallscope.collectors import loader


def reading(run: Path) -> str | None:
    """One table row for a run directory (its `steps.jsonl` and `store.db`); None when it does not apply."""
    budget = re.search(r"chunk(\d+)", run.name)
    if budget is None or int(budget.group(1)) < 384:
        return None
    steps = [json.loads(line) for line in (run / "steps.jsonl").open()]
    lp = CI._long_prompts(loader.load(run / "store.db")["vllm"]["samples"])
    if lp is None:
        return None
    exact = S.slowest_step(lp.parts, lp.itl_family, lp.intervals, S.long_prompts(lp.parts, lp.intervals), lp.streams)
    decode_only = [(s["end_ns"] - s["start_ns"]) / 1e9 for s in steps if s["num_prefill_tokens"] == 0]
    if exact is None or not decode_only:
        return None
    a = float(np.median(decode_only))
    k = max(math.ceil(exact.prefill_s / exact.step_s - 1e-9), 1)
    fixed = (exact.step_s - a) * exact.prompt_tokens / (exact.prefill_s - k * a)
    largest = max(s["num_prefill_tokens"] for s in steps[3:])   # past a cold start's burst of first prompts
    return (f"| {run.parent.name}/{run.name} | {largest} | {exact.prompt_share:.0f} | {fixed:.0f} | {k} | {a:.3f} "
            f"| {exact.step_s:.2f} | {exact.prefill_s:.2f} | {exact.prompt_tokens:.0f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="+", type=Path, help="held-out set directories (runs/hN, runs/hN-full)")
    args = ap.parse_args()
    print("| run | largest chunk (trace) | P x G / T | fixed cost out | k | a (s) | G (s) | T (s) | P |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in sorted(r for s in args.sets for r in s.iterdir() if r.is_dir()):
        line = reading(run)
        if line is not None:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
