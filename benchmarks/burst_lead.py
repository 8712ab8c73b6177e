"""A lead for the burst at a cold start, measured over recorded sets without changing the detector: where would a
rule fire that calls a scrape interval's stall a step holding every stream when at least half of the ITL samples it
gained were above the SLO and it ran a step far above the 512-token cut (above 1024 tokens)?

The idea: the detector weighs the ITL samples above the SLO at the long prefills against the running streams, and a
burst in a cold server's first interval has few stalled streams against many running by the next scrapes. Each
interval's own samples are the other denominator; this prints, per run, the truth and what `analyze` flagged (from
the score files record_held_out.sh wrote) beside whether that rule would fire, so a rule can be judged on true
negatives (would-be false alarms) and on misses (would-be finds) before anyone writes it.

    python benchmarks/burst_lead.py 144 145 146 147                 # runs/h144-first.json ... and their stores
    python benchmarks/burst_lead.py 144 --share 0.5 --above-tokens 1024
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from long_steps import _samples, interval_gains


def fires(run: Path, slo: float, share: float, above_tokens: float) -> list[tuple[float, int, int]]:
    """(interval start from the first scrape in s, samples above `slo`, all samples) of each interval the rule fires
    on."""
    g = interval_gains(_samples(run), slo, above_tokens)
    hit = (g["big_steps"] > 0) & (g["above"] > 0) & (g["above"] >= share * g["every"])
    return [((g["ts"][i] - g["ts"][0]) / 1e9, int(g["above"][i]), int(g["every"][i])) for i in np.flatnonzero(hit)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", type=int, nargs="+", help="held-out set numbers recorded under --runs")
    ap.add_argument("--runs", type=Path, default=Path("runs"), help="where hN[-full]-first.json lie (runs)")
    ap.add_argument("--share", type=float, default=0.5, help="the least share of an interval's samples above the SLO")
    ap.add_argument("--above-tokens", type=float, default=1024.0,
                    help="an iteration_tokens_total bucket bound a step must exceed (1024)")
    args = ap.parse_args()
    print("| run | truth | flagged | the rule fires at (s: above / all) | would |\n|---|---|---|---|---|")
    tally = {"find": 0, "false alarm": 0, "no change": 0}
    for n in args.sets:
        for p in ("", "-full"):
            data = json.loads((args.runs / f"h{n}{p}-first.json").read_text())
            for r in data["scenarios"]:
                true, flagged = "decode_starvation" in r["truth"], "decode_starvation" in r["flagged"]
                hits = fires(Path(r["run"]), data["itl_slo_s"], args.share, args.above_tokens)
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
