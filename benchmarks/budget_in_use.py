"""The budget in use that a metrics-only recommendation quotes, beside the inference's own estimate and the budget the
server ran (docs/accuracy.md, "Found, not mended: a second budget in use in the advice").

The idea: every finding that states `max_num_batched_tokens_in_use_estimated` on a recorded chunked run is read
again with `stallscope analyze` from its store alone, and the quoted budget is set against the server's
`--max-num-batched-tokens` and the finding's own `budget_estimate`, with the budget the finding recommends (or
`levers` where it says chunking cannot meet the SLO); the summary counts the quotes under 0.75 x and over 1.25 x the
server's budget and within 0.15 of it, how many of the low ones the inference's estimate came closer to, and the
median |quoted / budget - 1|. The `bucket floor` column is the lower bound of the slowest gaps' ITL bucket
(`budget_floor`); `floor quoted` is the low end of the range a finding quotes where that bucket is wide
(`max_num_batched_tokens_in_use_floor`), and the summary's last figures count a quoted range by its nearer end.

    python benchmarks/budget_in_use.py runs/h6[1-9]*-first.json runs/h7?*-first.json runs/h80*-first.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from scenario_sets import SCENARIOS
from scenarios import analyze

from stallscope.refserver.config import EngineConfig

BY_NAME = {sc.name: sc for sc in SCENARIOS}
LOW = 0.75
HIGH = 1.25
NEAR = 0.15


def quotes(results: list[Path]) -> list[tuple[str, str, int, float, float | None, str, float | None, float | None]]:
    """(run, kind, budget run, budget quoted, inference's estimate, advice, the slowest gaps' bucket floor, the
    quoted range's floor) per finding quoting a budget in use."""
    rows = []
    for path in results:
        data = json.loads(path.read_text())
        for r in data["scenarios"]:
            sc = BY_NAME.get(Path(r["run"]).name)
            cfg = EngineConfig.from_flags(sc.server) if sc else None
            if cfg is None or not cfg.enable_chunked_prefill:
                continue
            for f in analyze(Path(r["run"]), float(data["itl_slo_s"])):
                ev = f.get("evidence", {})
                if ev.get("max_num_batched_tokens_in_use_estimated") is not None:
                    rows.append((sc.name, f["kind"], cfg.max_num_batched_tokens,
                                 float(ev["max_num_batched_tokens_in_use_estimated"]), ev.get("budget_estimate"),
                                 _advice(ev), ev.get("budget_floor"), ev.get("max_num_batched_tokens_in_use_floor")))
    return rows


def _advice(ev: dict) -> str:
    if ev.get("max_num_batched_tokens"):
        return str(ev["max_num_batched_tokens"])
    if ev.get("max_num_batched_tokens_if_more_in_use"):
        return f"{ev['max_num_batched_tokens_if_more_in_use']} if more in use, else levers"
    return "levers" if ev.get("chunking_meets_slo") is False else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="benchmarks/scenarios.py --json files")
    rows = quotes(ap.parse_args().results)
    print("| run | finding | budget run | budget quoted | quoted / run | the inference's estimate | advice "
          "| bucket floor | floor quoted |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, kind, budget, quoted, est, adv, floor, qfloor in rows:
        print(f"| {name} | {kind} | {budget} | {quoted:.0f} | {quoted / budget:.2f} | "
              f"{'-' if est is None else f'{est:.0f}'} | {adv} | {'-' if floor is None else f'{floor:.0f}'} | "
              f"{'-' if qfloor is None else f'{qfloor:.0f}'} |")
    print(summary([(b, q, e) for _, _, b, q, e, _, _, _ in rows], len({r[0] for r in rows})))
    print(range_summary([(b, q, f) for _, _, b, q, _, _, _, f in rows]))
    return 0


def summary(rows: list[tuple[int, float, float | None]], runs: int) -> str:
    """The spread of (budget run, budget quoted, inference's estimate) rows, one line."""
    err = [abs(q / b - 1) for b, q, _ in rows]
    low = [(b, q, e) for b, q, e in rows if q < LOW * b]
    high = sum(q > HIGH * b for b, q, _ in rows)
    closer = sum(e is not None and abs(e - b) < abs(q - b) for b, q, e in low)
    return (f"{len(rows)} findings in {runs} runs quote a budget in use; {sum(x <= NEAR for x in err)} within "
            f"{NEAR} of the server's budget; {len(low)} under {LOW} x it (lowest "
            f"{min((q / b for b, q, _ in low), default=float('nan')):.2f} x), the inference's estimate closer in "
            f"{closer} of those; {high} over {HIGH} x; median |quoted / run - 1| "
            f"{np.median(err) if err else float('nan'):.3f}")


def range_summary(rows: list[tuple[int, float, float | None]]) -> str:
    """(budget run, budget quoted, quoted floor) rows with a quoted range counted by its end nearer the budget (0 when
    the range holds it), one line."""
    err = [0.0 if f is not None and f <= b <= q else min(abs(q / b - 1), abs(f / b - 1) if f is not None else np.inf)
           for b, q, f in rows]
    ranges = sum(f is not None for _, _, f in rows)
    held = sum(f is not None and f <= b <= q for b, q, f in rows)
    return (f"{ranges} quote a range, which holds the server's budget in {held}; counted by the nearer end, "
            f"{sum(x <= NEAR for x in err)} within {NEAR}, {sum(x > HIGH - 1 for x in err)} off by more than "
            f"{HIGH - 1:.2f}, median {np.median(err) if err else float('nan'):.3f}")


if __name__ == "__main__":
    sys.exit(main())
