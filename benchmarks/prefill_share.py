"""How many of an episode's above-SLO ITL samples came at long prefills, per starvation finding, with each run's truth.

The idea: `analyzers/episodes.py` calls long prefills an episode's cause (with the budget unknown) only when at
least `PREFILL_SHARE_MIN` of its ITL samples above the SLO came at them. This prints, for the runs of
`benchmarks/scenarios.py --json` results, every `decode_starvation` finding the detector makes with the rule off
(the limit set to 0): its samples above the SLO, those at long prefills and their share beside the limit; then
the runs whose findings the rule changes, so the figures in docs/accuracy.md can be rerun.

    python benchmarks/prefill_share.py runs/h17-full-first.json runs/h18-full-first.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys

from stallscope.analyzers import episodes
from stallscope.cli import main as cli


def findings(run: str, share_min: float) -> list[dict]:
    """`stallscope analyze --db RUN/store.db --format json` in this process, with the share limit set."""
    saved, episodes.PREFILL_SHARE_MIN = episodes.PREFILL_SHARE_MIN, share_min
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            cli(["analyze", "--db", f"{run}/store.db", "--format", "json"])
    finally:
        episodes.PREFILL_SHARE_MIN = saved
    return json.loads(out.getvalue())["findings"]


def kinds(found: list[dict]) -> list[tuple[str, str]]:
    return sorted({(f["kind"], f["severity"]) for f in found})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="benchmarks/scenarios.py --json files")
    args = ap.parse_args()
    limit = episodes.PREFILL_SHARE_MIN
    print(f"| run | truth | finding | above the SLO | at long prefills | share | limit {limit:.2f} |")
    print("|---|---|---|---|---|---|---|")
    changed = []
    for path in args.results:
        for row in json.load(open(path))["scenarios"]:
            run, truth = row["run"], ", ".join(row["truth"]) or "-"
            off = findings(run, 0.0)
            for f in off:
                ep = f["evidence"].get("episode") or {}
                above, at = ep.get("itl_samples_above_slo") or 0.0, ep.get("itl_samples_above_slo_at_prefills") or 0.0
                if f["kind"] == "decode_starvation" and above > 0:
                    print(f"| {run} | {truth} | {f['severity']} | {above:.0f} | {at:.1f} | {at / above:.3f} | "
                          f"{'at or above' if at >= limit * above else 'under'} |")
            if kinds(findings(run, limit)) != kinds(off):
                changed.append(run)
    print(f"runs whose findings change with the limit set to 0: {len(changed)}", *changed, sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
