"""Leads for the burst at a cold start, measured over recorded sets without changing the detector: where would a
rule fire that calls a scrape interval's stall a step holding every stream, when at least half of the ITL samples the
interval gained were above the SLO and a step far above the 512-token cut ran in it?

The idea: the detector weighs the ITL samples above the SLO at the long prefills against the running streams, and a
burst in a cold server's first interval has few stalled streams against many running by the next scrapes. Each
interval's own samples are the other denominator. Two readings of "a step far above the cut": an
`iteration_tokens_total` observation above `--above-tokens` (`--rule steps`), or the prompt tokens computed in the
interval by prompts that had waited at its start, over its steps (`--rule queued`: a waiting prompt had computed
nothing, chunked or not). This prints, per run, the truth and what `analyze` flagged (the score files
record_held_out.sh or scenarios.py --json wrote) beside where the rule fires, so a rule is judged on true negatives
(would-be false alarms) and misses (would-be finds) before anyone writes it.

    python benchmarks/burst_lead.py 144 145 146 147                 # runs/h144-first.json ... and their stores
    python benchmarks/burst_lead.py 144 145 146 147 --rule queued
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from long_steps import RUNNING, _samples, interval_gains
from stallscope.analyzers import signals
from stallscope.analyzers.chunking import LONG_PREFILL_TOKENS


def _counter(samples, metric: str, ts: np.ndarray) -> np.ndarray:
    per_ts = samples[samples["metric"] == metric].groupby("ts")["value"].sum()
    return per_ts.reindex(ts).ffill().fillna(0.0).to_numpy()


def queued_bound(samples, ts: np.ndarray) -> np.ndarray:
    """Per scrape interval, a least mean of computed prompt tokens per engine step: the computed prompt tokens it
    gained, less what the requests running at its start could have computed before it (each at most the longest
    prompt the run's `request_prompt_tokens` buckets allow), over the steps with output it gained. A prompt that
    waited at the interval's start had computed nothing, chunked or not."""
    computed = (_counter(samples, "vllm:prompt_tokens_total", ts)
                - _counter(samples, "vllm:prompt_tokens_cached_total", ts))
    steps = _counter(samples, signals.ITERATION + "_count", ts)
    running = _counter(samples, RUNNING, ts)
    b = samples[samples["metric"] == "vllm:request_prompt_tokens_bucket"]
    last = b[b["ts"] == b["ts"].max()].groupby("le")["value"].sum().sort_index()
    longest = float(last.index[np.argmax(last.to_numpy() >= last.to_numpy()[-1])])
    gained, n = np.diff(computed) - running[:-1] * longest, np.diff(steps)
    return np.where(n > 0, gained / np.maximum(n, 1), 0.0)


def fires(run: Path, slo: float, share: float, above_tokens: float, rule: str) -> list[tuple[float, int, int]]:
    """(interval start from the first scrape in s, samples above `slo`, all samples) of each interval the rule fires
    on: at least `share` of its ITL samples above `slo`, and a step above `above_tokens` tokens (rule `steps`: an
    `iteration_tokens_total` observation) or a least mean of `LONG_PREFILL_TOKENS` computed prompt tokens per step (rule
    `queued`)."""
    samples = _samples(run)
    g = interval_gains(samples, slo, above_tokens)
    big = g["big_steps"] > 0 if rule == "steps" else queued_bound(samples, g["ts"]) >= LONG_PREFILL_TOKENS
    hit = big & (g["above"] > 0) & (g["above"] >= share * g["every"])
    return [((g["ts"][i] - g["ts"][0]) / 1e9, int(g["above"][i]), int(g["every"][i])) for i in np.flatnonzero(hit)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", type=int, nargs="+", help="held-out set numbers recorded under --runs")
    ap.add_argument("--runs", type=Path, default=Path("runs"), help="where hN[-full]-first.json lie (runs)")
    ap.add_argument("--share", type=float, default=0.5, help="the least share of an interval's samples above the SLO")
    ap.add_argument("--above-tokens", type=float, default=1024.0,
                    help="an iteration_tokens_total bucket bound a step must exceed (1024)")
    ap.add_argument("--rule", choices=("steps", "queued"), default="steps",
                    help="what says a step far above the cut ran: an iteration_tokens_total observation above "
                         "--above-tokens (steps), or the queued prompts' least tokens per step (queued)")
    args = ap.parse_args()
    print("| run | truth | flagged | the rule fires at (s: above / all) | would |\n|---|---|---|---|---|")
    tally = {"find": 0, "false alarm": 0, "no change": 0}
    for n in args.sets:
        for p in ("", "-full"):
            data = json.loads((args.runs / f"h{n}{p}-first.json").read_text())
            for r in data["scenarios"]:
                true, flagged = "decode_starvation" in r["truth"], "decode_starvation" in r["flagged"]
                hits = fires(Path(r["run"]), data["itl_slo_s"], args.share, args.above_tokens, args.rule)
                would = ("find" if hits and true and not flagged else "false alarm" if hits and not true
                         and not flagged else "no change")
                tally[would] += 1
                if hits or (true and not flagged):
                    at = ", ".join(f"{t:.1f}: {a} / {e}" for t, a, e in hits) or "-"
                    print(f"| {r['run']} | {'yes' if true else 'no'} | {'yes' if flagged else 'no'} | {at} | {would} |")
    print("\n" + ", ".join(f"{k}: {v}" for k, v in tally.items()) + " runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
