"""Whether the metrics tell a request waiting for KV blocks from one waiting for the token budget (docs/accuracy.md).

The idea: until it told `kv_near_full` apart, `kv_pressure` flagged a pool at or above `kv_usage_high` with requests
waiting. The truth rule counts only a preemption or a pool at 0.95, so a pool that queues prompts near 0.9 is a
false alarm whichever it waited for.
For every run that was truly under pressure, flagged, or given `kv_near_full`, this prints what the scrapes saw:
the pool's peak, the preemption rate's peak, and at the scrapes that had it >= `kv_usage_high` with requests waiting, the fewest free
tokens ((1 - usage) x capacity from `vllm:cache_config_info`) beside the scenario's long prompt (vLLM 0.33 admits a
prompt only when it fits whole, `scheduler_reserve_full_isl`); beside them, from the run's step trace (what the
truth reads, never the detector), the pool's peak, the seconds its steps held it at the truth's 0.95 and the
preemptions it counts. Then it
scores, at run level, the detector as the `--json` files recorded it and a stricter rule that also asks a scrape at
`kv_usage_full` (any scrape, `kv_usage_peak`) or a preemption: what `kv_pressure` itself asks since it tells
`kv_near_full` apart (docs/accuracy.md, "kv_pressure asks that the pool ran out").

    python benchmarks/kv_waits.py runs/h6[1-9]*-first.json runs/h7?*-first.json runs/h8?*-first.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from scenario_sets import SCENARIOS
from scenarios import long_prompt_tokens

from stallscope.analyzers import signals
from stallscope.analyzers.kv_pressure import cache_info, capacity_tokens, fullest_scrape
from stallscope.collectors import loader
from stallscope.core.config import load_thresholds

BY_NAME = {sc.name: sc for sc in SCENARIOS}
KIND = "kv_pressure"
NEAR = "kv_near_full"   # its info-grade sibling: a queue near full, no sign the pool ran out


def reading(run: Path, slo: float) -> dict:
    """What the run's scrapes say about its pool, on the analyzer's own signals grid."""
    th = load_thresholds(itl_slo_s=slo)
    samples = next(f["samples"] for f in loader.load(run / "store.db").values() if len(f["samples"]))
    sig = signals.compute(samples, thresholds=th)
    cap = capacity_tokens(next(iter(cache_info(samples).values()), {}))
    waits = (sig["kv_usage"] >= float(th["kv_usage_high"])) & (sig["waiting"] >= float(th["waiting_high"]))
    free = ((1 - sig["kv_usage"][waits]) * cap).to_numpy() if cap else np.array([])
    every = float(np.nanmax(fullest_scrape(sig)))   # every scrape, not only the grid's
    return {"kv_max": float(sig["kv_usage"].max()), "kv_every": every,
            "preempt_max": float(sig["preempt_rate"].fillna(0).max()),
            "waiting_scrapes": int(waits.sum()), "free_min": float(free.min()) if len(free) else None,
            "capacity": cap, "full": bool(every >= float(th["kv_usage_full"]))}


def step_trace_peak(run: Path) -> dict:
    """The pool's peak in the step trace (the truth's own reading, `truth.kv_usage`), the seconds of steps that
    left it at or above the truth's 0.95, and the preemptions the trace counts."""
    from stallscope.analyzers import truth
    from stallscope.analyzers.step_cost import read_step_trace

    st = read_step_trace(run / "steps.jsonl")
    usage = truth.kv_usage(st)
    dur = (st["end_ns"] - st["start_ns"]).to_numpy(dtype=float) / 1e9
    return {"trace_peak": float(np.nanmax(usage)), "trace_s_full": float(dur[usage >= truth.KV_USAGE_HIGH].sum()),
            "trace_preemptions": int(st["num_preempted"].sum())}


def rows(results: list[Path]) -> list[dict]:
    out = []
    for path in results:
        data = json.loads(path.read_text())
        for r in data["scenarios"]:
            true, flagged = KIND in r["truth"], KIND in r["flagged"]
            near = NEAR in r.get("all_findings", [])
            if not (true or flagged or near):
                continue
            sc = BY_NAME.get(Path(r["run"]).name)
            out.append({"run": f"{path.stem.removesuffix('-first')}/{Path(r['run']).name}", "true": true,
                        "flagged": flagged, "near": near, "long_prompt": long_prompt_tokens(sc) if sc else None,
                        **reading(Path(r["run"]), float(data["itl_slo_s"])), **step_trace_peak(Path(r["run"]))})
    return out


def score(rs: list[dict], flagged) -> str:
    tp = sum(r["true"] and flagged(r) for r in rs)
    fp = sum(not r["true"] and flagged(r) for r in rs)
    fn = sum(r["true"] and not flagged(r) for r in rs)
    return (f"precision {tp / max(tp + fp, 1):.3f} ({tp} of {tp + fp}), "
            f"recall {tp / max(tp + fn, 1):.3f} ({tp} of {tp + fn})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="benchmarks/scenarios.py --json files")
    rs = rows(ap.parse_args().results)
    print("| run | truth | flagged | `kv_near_full` | peak usage scraped (grid) | every scrape | peak preemptions / s "
          "| scrapes >= high with waiting | fewest free tokens then | long prompt | capacity | peak in the step trace "
          "| seconds at 0.95 there | preemptions there |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rs:
        free = "-" if r["free_min"] is None else f"{r['free_min']:.0f}"
        cap = "-" if r["capacity"] is None else f"{r['capacity']:.0f}"
        print(f"| {r['run']} | {r['true']} | {r['flagged']} | {r['near']} | {r['kv_max']:.3f} | {r['kv_every']:.3f} | "
              f"{r['preempt_max']:.2f} | "
              f"{r['waiting_scrapes']} | {free} | {r['long_prompt']} | {cap} | {r['trace_peak']:.3f} | "
              f"{r['trace_s_full']:.2f} | {r['trace_preemptions']} |")
    print(f"{len(rs)} runs truly under pressure, flagged or with `kv_near_full` (scored as not flagged)")
    print("as detected:                            " + score(rs, lambda r: r["flagged"]))
    stricter = score(rs, lambda r: r["flagged"] and (r["full"] or r["preempt_max"] > 0))
    print("flagged and a full scrape or preemption: " + stricter + " (any scrape at kv_usage_full, not only the grid's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
