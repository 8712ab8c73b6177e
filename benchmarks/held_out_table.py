"""The rows docs/accuracy.md gives each held-out set, read off the `--json` files `record_held_out.sh` wrote.

The idea: a set's row (precision and recall of both kinds three ways, the SLO, contradiction and configuration
checks, time to detect) was summed by hand from four tables per set; this prints it from the same files, and a
pool of sets summed over every pass, so the figures in the docs are rerunnable.

    python benchmarks/held_out_table.py 112 113 114 115               # runs/h112-first.json, -flags, -log, ...
    python benchmarks/held_out_table.py 112 113 --runs runs/rescore2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stallscope.analyzers.truth import KINDS, run_scores

WAYS = ("first", "flags", "log")   # the metrics alone, the server's flags, the server's log


def counts(rows: list[dict], kind: str) -> tuple[int, int, int]:
    """(found, false alarms, missed) of one kind over `scenarios.py --json` rows, any severity counting."""
    got = run_scores([(set(r["truth"]), set(r["flagged"])) for r in rows])[kind]
    return got["tp"], got["fp"], got["fn"]


def pr(c: tuple[int, int, int]) -> str:
    """"P / R (found)", or "-" with nothing true and nothing flagged."""
    tp, fp, fn = c
    if tp + fp + fn == 0:
        return "-"
    p = f"{tp / (tp + fp):.3f}" if tp + fp else "-"
    r = f"{tp / (tp + fn):.3f}" if tp + fn else "-"
    return f"{p} / {r} ({tp})"


def _figure(summary: dict, name: str) -> float:
    return summary[name]["value"]


def row(label: str, files: dict[str, Path]) -> tuple[str, dict]:
    """One pass's markdown row and its counts per (kind, way)."""
    data = {way: json.loads(p.read_text()) for way, p in files.items() if p.exists()}
    if "first" not in data:
        raise SystemExit(f"error: {files['first']} does not exist (record the set with record_held_out.sh)")
    first = data["first"]
    got = {(kind, way): counts(d["scenarios"], kind) for kind in KINDS for way, d in data.items()}
    s = first["summary"]
    ttd = _figure(s, "median_time_to_detect_starvation")
    ways = [pr(got[("decode_starvation", w)]) if ("decode_starvation", w) in got else "not scored" for w in WAYS]
    warned = max(_figure(d["summary"], "starvation_warnings_on_runs_meeting_slo") for d in data.values())
    contra = max(_figure(d["summary"], "contradictions_within_episodes") for d in data.values())
    stated = max(_figure(d["summary"], "stated_configuration_contradicting_the_server") for d in data.values())
    cells = [label, str(len(first["scenarios"])), *ways, pr(got[("kv_pressure", "first")]), f"{warned:.0f}",
             f"{contra:.0f}", f"{stated:.0f}", "-" if ttd != ttd else f"{ttd:.2f}"]
    return "| " + " | ".join(cells) + " |", got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="+", type=int, help="held-out set numbers")
    ap.add_argument("--runs", type=Path, default=Path("runs"), help="where the --json files are (default runs/)")
    args = ap.parse_args()
    print("| pass | runs | `decode_starvation` inferred P / R | flags | log | `kv_pressure` | warnings on runs meeting "
          "the SLO (most of the three ways) | contradictions | stated configurations contradicting the server | "
          "time to detect, median x target |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    pool: dict = {}
    for n in args.sets:
        for name, stem in (("quick", f"h{n}"), ("full", f"h{n}-full")):
            line, got = row(f"{n} {name}", {w: args.runs / f"{stem}-{w}.json" for w in WAYS})
            print(line)
            for key, c in got.items():
                pool[key] = tuple(a + b for a, b in zip(pool.get(key, (0, 0, 0)), c))
    print()
    for kind in KINDS:
        print(f"{kind}, both passes of {', '.join(map(str, args.sets))}: "
              + "; ".join(f"{w} {pr(pool[(kind, w)])}" for w in WAYS if (kind, w) in pool)
              + " (found; false alarms / misses: "
              + "; ".join(f"{w} {pool[(kind, w)][1]} / {pool[(kind, w)][2]}" for w in WAYS if (kind, w) in pool) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
