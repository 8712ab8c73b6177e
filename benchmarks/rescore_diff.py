"""Two scorings of the same recordings side by side: which runs a detector change turned, and the pooled counts.

The idea: a detector change is judged on runs it was not written on, but it is also rescored on every kept
recording (`scenarios.py --evaluate-only`), and docs/accuracy.md states which runs turned and how. This prints
those lists from the two directories of `--json` files, matched by file name, so the "before -> after" lines in
the docs are rerunnable. A run's verdict per kind is found (flagged, true), missed (true, not flagged), false
alarm (flagged, not true) or clear (neither), with analyze's findings at any severity as `scenarios.py` counts them.

    python benchmarks/rescore_diff.py /tmp/before /tmp/after                 # decode_starvation
    python benchmarks/rescore_diff.py /tmp/before /tmp/after --kind kv_pressure
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

VERDICTS = ("found", "missed", "false alarm", "clear")


def verdict(row: dict, kind: str) -> str:
    """One run's verdict for `kind` from a `scenarios.py --json` row."""
    true, flagged = kind in row["truth"], kind in row["flagged"]
    return VERDICTS[0 if true and flagged else 1 if true else 2 if flagged else 3]


def verdicts(folder: Path, kind: str) -> dict[str, str]:
    """`file stem/run name` -> verdict over every `*.json` in `folder`."""
    out = {}
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or "scenarios" not in doc:
            print(f"{path}: not a scenarios.py --json file; left out", file=sys.stderr)
            continue
        for row in doc["scenarios"]:
            out[f"{path.stem}/{Path(row['run']).name}"] = verdict(row, kind)
    return out


def scores(found: dict[str, str]) -> str:
    """`precision 0.969 (123/127), recall 0.976 (123/126)` over the verdicts."""
    n = {v: sum(1 for x in found.values() if x == v) for v in VERDICTS}
    tp, flagged, true = n["found"], n["found"] + n["false alarm"], n["found"] + n["missed"]
    p = f"{tp / flagged:.3f} ({tp}/{flagged})" if flagged else "- (0/0)"
    r = f"{tp / true:.3f} ({tp}/{true})" if true else "- (0/0)"
    return f"{len(found)} runs: precision {p}, recall {r}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path, help="a folder of scenarios.py --json files")
    ap.add_argument("after", type=Path, help="a folder of the same files, scored again")
    ap.add_argument("--kind", default="decode_starvation")
    args = ap.parse_args()
    before, after = verdicts(args.before, args.kind), verdicts(args.after, args.kind)
    both = sorted(set(before) & set(after))
    if not both:
        raise SystemExit(f"no run scored in both {args.before} and {args.after}")
    turned = [k for k in both if before[k] != after[k]]
    for k in turned:
        print(f"{k}: {before[k]} -> {after[k]}")
    print(f"{len(turned)} of {len(both)} runs turned ({args.kind})")
    print(f"before: {scores({k: before[k] for k in both})}")
    print(f"after:  {scores({k: after[k] for k in both})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
