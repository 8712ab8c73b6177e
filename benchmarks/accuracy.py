"""Accuracy of decode-starvation windows against the step trace, over several seeds (docs/accuracy.md).

For each seed and arm (`off`: unchunked prefill; `on`: chunked with a small token budget) this drives
the real reference server with the real load generator and the real collector, or reads arms that
`stallscope repro` wrote (`--runs DIR`, arms `off`/`on` with scrapes.jsonl and steps.jsonl), then:

1. diagnoses the arm's metrics exactly as `stallscope analyze` does (signals grid, decode_starvation);
2. takes ground truth from the arm's step trace: decode gaps above the ITL SLO whose gap contained
   prompt tokens (`analyzers/step_stalls.py`), counted in a window when the scrapes just before and
   after the stall's end both lie inside it (what any metric can see);
3. reports window precision/recall for the `off` arm and whether each arm has a finding.

    python benchmarks/accuracy.py --seeds 1,2,3 --duration 40 --out runs/accuracy
    python benchmarks/accuracy.py --runs runs/repro-starvation-seed1,runs/repro-starvation-seed2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from scenarios import record_run  # benchmarks/scenarios.py: server + collector + load generator


def record_arm(arm: Path, *, seed: int, chunked: bool, args) -> None:
    """One arm's run (benchmarks/scenarios.record_run); leaves store.db and steps.jsonl in `arm`."""
    flags = ["--enable-chunked-prefill", "--max-num-batched-tokens", str(args.budget)] if chunked else [
        "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096"]
    record_run(arm, server=["--model", args.model, "--seed", str(seed), *flags],
               load=["--sessions", str(args.sessions), "--long-prompt-tokens", str(args.long_tokens),
                     "--long-every", str(args.long_every), "--seed", str(seed)],
               interval=args.interval, load_s=args.duration, collect_s=args.duration + 8)


def evaluate_arm(arm: Path, th: dict) -> dict:
    from stallscope.analyzers import decode_starvation, signals, step_stalls
    from stallscope.analyzers.diagnose import diagnose
    from stallscope.analyzers.step_cost import read_step_trace
    from stallscope.collectors import loader

    source = arm / "store.db" if (arm / "store.db").exists() else arm
    frames = loader.load(source)
    samples = next(f["samples"] for f in frames.values() if len(f["samples"]))
    steps = read_step_trace(arm / "steps.jsonl")
    eval_ts, window = signals.choose_grid(samples, th)
    sig = signals.compute(samples, thresholds=th, eval_ts=eval_ts, window_ns=window)
    stalled, prefill = decode_starvation.flags(sig, th)
    flagged = stalled & prefill
    # truth: decode gaps above the SLO (k=0: the SLO alone, as the detector claims) in which a long prefill ran
    # (>= 512 prompt tokens, the detector's own "long prefill" cut)
    stalls = step_stalls.find_stalls(steps, min_gap_s=float(th["itl_slo_s"]), k=0.0, cause="prefill",
                                     min_prefill_tokens=512)
    truth = step_stalls.window_truth(stalls, eval_ts, window, scrape_ts=samples["ts"].to_numpy())
    p, r = step_stalls.precision_recall(flagged, truth)
    found = diagnose([("", {"samples": samples, "steps": steps})], thresholds=th).findings_frame()
    return {"arm": str(arm), "windows": int(len(eval_ts)), "window_s": window / 1e9, "flagged": int(flagged.sum()),
            "truth": int(truth.sum()), "stalls": int(len(stalls)), "precision": p, "recall": r,
            "findings": sorted(set(found["kind"])), "max_gap_s": float(stalls["gap_s"].max()) if len(stalls) else 0.0,
            "median_step_s": float(np.median((steps["end_ns"] - steps["start_ns"]) / 1e9))}


def calibrated_slo(run: Path) -> float:
    """sqrt(slowest `on` step (P99.9) x fastest `off` step that prefilled a long prompt whole)."""
    from stallscope.analyzers.step_cost import read_step_trace

    off, on = read_step_trace(run / "off" / "steps.jsonl"), read_step_trace(run / "on" / "steps.jsonl")
    dur = lambda s: (s["end_ns"] - s["start_ns"]).to_numpy() / 1e9  # noqa: E731
    longest = off["num_prefill_tokens"].max()
    whole = dur(off)[off["num_prefill_tokens"].to_numpy() >= 0.9 * longest].min()
    return float(np.sqrt(whole * np.quantile(dur(on), 0.999)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--runs", help="comma-separated run directories with off/ and on/ arms (skip recording)")
    ap.add_argument("--out", default="runs/accuracy")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--duration", type=float, default=40.0)
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--long-tokens", type=int, default=1200)
    ap.add_argument("--long-every", type=float, default=8.0)
    ap.add_argument("--budget", type=int, default=32, help="token budget of the chunked arm")
    ap.add_argument("--interval", default="0.5s")
    ap.add_argument("--itl-slo", default=None,
                    help="ITL SLO for detector and truth: seconds (default 0.2) or `calibrated` (per run, between "
                         "the on arm's slowest step and the off arm's fastest whole-long-prompt step)")
    ap.add_argument("--evaluate-only", action="store_true", help="do not record missing arms")
    args = ap.parse_args()
    from stallscope.core.config import load_thresholds

    fixed = None if args.itl_slo in (None, "calibrated") else float(args.itl_slo)
    th = load_thresholds(itl_slo_s=fixed)
    if args.runs:
        runs = [Path(r) for r in args.runs.split(",")]
    else:
        runs = []
        for seed in (int(s) for s in args.seeds.split(",")):
            run = Path(args.out) / f"seed{seed}"
            for arm, chunked in (("off", False), ("on", True)):
                if not (run / arm / "steps.jsonl").exists() and not args.evaluate_only:
                    record_arm(run / arm, seed=seed, chunked=chunked, args=args)
            runs.append(run)
    rows = []
    for run in runs:
        if args.itl_slo == "calibrated":
            th = load_thresholds(itl_slo_s=round(calibrated_slo(run), 4))
        off, on = evaluate_arm(run / "off", th), evaluate_arm(run / "on", th)
        rows.append({"run": str(run), "itl_slo_s": th["itl_slo_s"], "off": off, "on": on})
        print(f"{run} (SLO {th['itl_slo_s']} s): off precision {off['precision']:.3f} recall {off['recall']:.3f} "
              f"({off['flagged']} flagged / {off['truth']} true windows of {off['windows']}, {off['stalls']} stalls, "
              f"max gap {off['max_gap_s']:.2f} s, findings {off['findings']}); on: {on['flagged']} flagged, "
              f"{on['stalls']} stalls, precision {on['precision']:.3f} recall {on['recall']:.3f}, findings {on['findings']}")
    ps = [r["off"]["precision"] for r in rows]
    rs = [r["off"]["recall"] for r in rows]
    print(f"ITL SLO {args.itl_slo or th['itl_slo_s']}; over {len(rows)} seeds: precision min {min(ps):.3f} mean {np.mean(ps):.3f}; recall min {min(rs):.3f} "
          f"mean {np.mean(rs):.3f} (target >= 0.9 each)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "accuracy.json").write_text(json.dumps(rows, indent=2, default=float))
    ok = min(ps) >= 0.9 and min(rs) >= 0.9 and all(not r["on"]["findings"] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
