"""The metrics path's cost per prompt token beside the step trace's, under the rank rule and the spread rule it replaced.

The idea: `analyzers/prefill_cost.py` fits prefill seconds = a x requests + c x computed tokens over scrape
intervals and, when it declines, `decode_starvation.estimate_cost` divides the sums less one decode step per
request. Which runs it declines on decides which figure a recommendation rests on. The rule until 2026-12-04
declined unless tokens per request differed by 2x in at least 3 intervals each way (the spread rule); the rule
now declines only when the two columns are collinear (the rank rule). For each run this prints the step trace's
cost per prompt token (follow_advice.trace_s_per_token: the reference), the fit's c and the divided sums, each
as a ratio to the reference, which of the two each rule takes, the totals within the 25 % limit, and the long
prompts' mean length read from the prompt-length histogram (analyzers/chunk_cost.py).

    python benchmarks/metrics_cost.py runs/h2[4-8]-full/* runs/h2[4-7]/* runs/tune24/*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from follow_advice import trace_s_per_token

LIMIT = 0.25


def spread_rule_fits(inc) -> bool:
    """The rule before the rank rule: tokens per request at least 2x the least in 3+ intervals, and at most
    half the most in 3+."""
    per = inc["p"] / inc["n"]
    return min(int((per >= 2 * per.min()).sum()), int((per * 2 <= per.max()).sum())) >= 3


def row(run: Path) -> dict | None:
    from stallscope.analyzers import decode_starvation as DS
    from stallscope.analyzers import prefill_cost, signals
    from stallscope.analyzers.chunk_cost import long_prompt_tokens
    from stallscope.collectors.loader import load

    reference = trace_s_per_token(run)
    if not np.isfinite(reference):
        return None
    samples = next(iter(load(run / "store.db").values()))["samples"]
    inc = prefill_cost.increments(samples)
    if len(inc) < prefill_cost.MIN_INTERVALS:
        return None
    fitted = prefill_cost.fit_increments(inc)
    sig = signals.compute(samples)
    rank = DS.estimate_cost(sig, samples=samples)["prefill_s_per_token"]    # what analyze takes now
    current = prefill_cost.fit
    prefill_cost.fit = lambda s: prefill_cost.fit_increments(inc) if spread_rule_fits(inc) else None
    try:
        spread = DS.estimate_cost(sig, samples=samples)["prefill_s_per_token"]   # the same, under the spread rule
    finally:
        prefill_cost.fit = current
    return {"run": f"{run.parent.name}/{run.name}", "long_prompt_tokens": long_prompt_tokens(samples),
            "reference_us": reference * 1e6, "rank_rule": rank / reference,
            "spread_rule": spread / reference, "fit_taken_by": ("both" if spread_rule_fits(inc) and fitted else
                                                               "the rank rule" if fitted else "neither")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="recorded scenario run directories (store.db and steps.jsonl)")
    args = ap.parse_args()
    rows = [r for r in (row(Path(p)) for p in args.runs
                        if Path(p, "store.db").exists() and not any(k in Path(p).name for k in ("kv-", "neg-"))) if r]
    print("| run | long prompt (histogram) | trace us/token | rank rule / trace | spread rule / trace | the fit taken by |"
          "\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['long_prompt_tokens'] or '-'} | {r['reference_us']:.0f} | {r['rank_rule']:.2f} | "
              f"{r['spread_rule']:.2f} | {r['fit_taken_by']} |")
    ok = lambda x: abs(x - 1) <= LIMIT   # noqa: E731
    for name, sel in (("all runs", rows), ("runs the spread rule declined", [r for r in rows if r["fit_taken_by"] != "both"])):
        print(f"{name} ({len(sel)}): within {LIMIT:.0%} of the trace: rank rule {sum(ok(r['rank_rule']) for r in sel)}, "
              f"spread rule {sum(ok(r['spread_rule']) for r in sel)}; median ratio "
              f"{np.median([r['rank_rule'] for r in sel]) if sel else float('nan'):.2f} / "
              f"{np.median([r['spread_rule'] for r in sel]) if sel else float('nan'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
