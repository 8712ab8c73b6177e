"""Two scorings of the same recordings side by side: which runs a detector change turned, and the pooled counts.

The idea: a detector change is judged on runs it was not written on, but it is also rescored on every kept
recording (`scenarios.py --evaluate-only`), and docs/accuracy.md states which runs turned and how. This prints
those lists from the two directories of `--json` files, matched by file name, so the "before -> after" lines in
the docs are rerunnable, then sums the turned runs by class (`by_class`), counts the verdicts of the runs that ask
for the budget (`asking`) and sets the stated configurations contradicting the server (`stated`) and the files'
summed severity and contradiction counts (`summed`) side by side. A run's verdict per kind is found (flagged,
true), missed (true, not flagged), false alarm (flagged, not true) or clear (neither), with analyze's findings at
any severity as `scenarios.py` counts them.

    python benchmarks/rescore_diff.py /tmp/before /tmp/after                 # decode_starvation
    python benchmarks/rescore_diff.py /tmp/before /tmp/after --kind kv_pressure
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stallscope.analyzers.truth import run_scores

VERDICTS = ("found", "missed", "false alarm", "clear")
SUMMED = {"starvation_warnings_on_runs_meeting_slo": "warnings on runs meeting the SLO",
          "contradictions_within_episodes": "contradictions within episodes",
          "starvation_runs_missing_slo_without_warning": "true starvation runs missing the SLO without a warning"}


def verdict(row: dict, kind: str) -> str:
    """One run's verdict for `kind` from a `scenarios.py --json` row."""
    true, flagged = kind in row["truth"], kind in row["flagged"]
    return VERDICTS[0 if true and flagged else 1 if true else 2 if flagged else 3]


def run_class(row: dict, itl_slo_s: float) -> str:
    """`end in stall` (the data ends inside a prefill), `ITL P99 under the SLO`, or `other`: why a run turns."""
    if "end-in-stall" in row.get("scenario", row["run"]):
        return "end in stall"
    p99 = row.get("itl_p99_s")
    return "ITL P99 under the SLO" if p99 is not None and p99 < itl_slo_s else "other"


def rows(folder: Path) -> dict[str, dict]:
    """`file stem/run name` -> the run's row, with its file's SLO as `itl_slo_s`, over every `*.json` in `folder`."""
    out = {}
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or "scenarios" not in doc:
            print(f"{path}: not a scenarios.py --json file; left out", file=sys.stderr)
            continue
        for row in doc["scenarios"]:
            out[f"{path.stem}/{Path(row['run']).name}"] = dict(row, itl_slo_s=doc.get("itl_slo_s", 0.2))
    return out


def verdicts(folder: Path, kind: str) -> dict[str, str]:
    """`file stem/run name` -> verdict over every `*.json` in `folder`."""
    return {k: verdict(row, kind) for k, row in rows(folder).items()}


def scores(scored: dict[str, dict], kind: str) -> str:
    """`3 runs: precision 0.500 (1/2), recall 0.500 (1/2)`, by `truth.run_scores` over the runs' rows."""
    s = run_scores([(set(r["truth"]), set(r["flagged"])) for r in scored.values()])[kind]
    tp, flagged, true = s["tp"], s["tp"] + s["fp"], s["tp"] + s["fn"]
    p = f"{s['precision']:.3f} ({tp}/{flagged})" if flagged else "- (0/0)"
    r = f"{s['recall']:.3f} ({tp}/{true})" if true else "- (0/0)"
    return f"{len(scored)} runs: precision {p}, recall {r}"


def by_class(turned: list[str], before: dict[str, dict], after: dict[str, dict], kind: str) -> list[str]:
    """One line per (class, change) among the turned runs, with how many of them end a finding (`decode_starvation`
    or `itl_high`) with the sentence that asks for the budget (`chunking.SETTLE_IT`; `scenarios.py`'s
    `asks_for_config`), after the change:
    `end in stall: found -> missed: 3`, `other: missed -> found: 13 (9 ask for the budget)`."""
    counts: dict[tuple[str, str], list[int]] = {}
    for k in turned:
        key = (run_class(after[k], after[k]["itl_slo_s"]),
               f"{verdict(before[k], kind)} -> {verdict(after[k], kind)}")
        n = counts.setdefault(key, [0, 0])
        n[0] += 1
        n[1] += bool(after[k].get("asks_for_config"))
    return [f"{c}: {change}: {n}" + (f" ({asks} ask for the budget)" if asks else "")
            for (c, change), (n, asks) in sorted(counts.items())]


def asking(scored: dict[str, dict], kind: str) -> str:
    """The verdicts of the runs whose findings ask for the budget (`asks_for_config`), counted: what flagging them
    all would trade. `asking for the budget: 2 runs: 1 found, 1 missed, 0 false alarm, 0 clear`."""
    asks = [verdict(r, kind) for r in scored.values() if r.get("asks_for_config")]
    return f"asking for the budget: {len(asks)} runs: " + ", ".join(f"{asks.count(v)} {v}" for v in VERDICTS)


def stated(before: dict[str, dict], after: dict[str, dict], both: list[str]) -> list[str]:
    """The stated configurations contradicting the server (`scenarios.py`'s `config_contradictions`): the runs
    whose count changed, then the totals. `h1-full-first/r2: 1 -> 0`, `stated configurations contradicting the
    server: 2 -> 1`."""
    def n(row):
        return len(row.get("config_contradictions") or [])

    lines = [f"{k}: {n(before[k])} -> {n(after[k])}" for k in both if n(before[k]) != n(after[k])]
    return lines + ["stated configurations contradicting the server: "
                    f"{sum(n(before[k]) for k in both)} -> {sum(n(after[k]) for k in both)}"]


def totals(folder: Path, stems: set[str]) -> dict[str, float]:
    """The `SUMMED` counts of the `summary` of each `*.json` in `folder` whose stem is in `stems`, summed (a
    missing or NaN count adds nothing)."""
    out = dict.fromkeys(SUMMED, 0.0)
    for path in sorted(folder.glob("*.json")):
        summary = json.loads(path.read_text()).get("summary", {}) if path.stem in stems else {}
        for key in SUMMED:
            entry = summary.get(key)
            value = entry.get("value") if isinstance(entry, dict) else entry
            out[key] += value if isinstance(value, (int, float)) and value == value else 0.0
    return out


def summed(before: Path, after: Path, both: list[str]) -> list[str]:
    """`warnings on runs meeting the SLO: 0 -> 0`, one line per `SUMMED` count, over the files both folders
    scored."""
    stems = {k.split("/", 1)[0] for k in both}
    a, b = totals(before, stems), totals(after, stems)
    return [f"{label}: {a[key]:.0f} -> {b[key]:.0f}" for key, label in SUMMED.items()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path, help="a folder of scenarios.py --json files")
    ap.add_argument("after", type=Path, help="a folder of the same files, scored again")
    ap.add_argument("--kind", default="decode_starvation")
    args = ap.parse_args()
    before, after = rows(args.before), rows(args.after)
    both = sorted(set(before) & set(after))
    if not both:
        raise SystemExit(f"no run scored in both {args.before} and {args.after}")
    turned = [k for k in both if verdict(before[k], args.kind) != verdict(after[k], args.kind)]
    for k in turned:
        print(f"{k}: {verdict(before[k], args.kind)} -> {verdict(after[k], args.kind)}")
    print(f"{len(turned)} of {len(both)} runs turned ({args.kind})")
    for line in by_class(turned, before, after, args.kind):
        print(f"  {line}")
    print(f"before: {scores({k: before[k] for k in both}, args.kind)}")
    print(f"after:  {scores({k: after[k] for k in both}, args.kind)}")
    print(f"after, {asking({k: after[k] for k in both}, args.kind)}")
    for line in summed(args.before, args.after, both):
        print(line)
    for line in stated(before, after, both):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
