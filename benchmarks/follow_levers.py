"""Follow the levers (issue 16): where the advice says chunked prefill alone cannot meet the SLO, does it?

The idea: a finding whose advice names the levers that remain (`chunking_meets_slo` false) says that even the
step at a 64-token budget is over the ITL SLO on this hardware, and gives that step's time (`expected_step_s`: the
decode step beside the running batch plus a chunk) or, where the metrics only bound the decode step, the chunk's
own time (`smallest_budget_chunk_s`). For each recorded run with such a finding (read from its store alone, as a
user runs `stallscope analyze --db`), the same seeded load is run again against the same server with
`--enable-chunked-prefill --max-num-batched-tokens 64`; from that run's own step trace come the steps that carried
prompt tokens beside decodes (each a chunk of what the budget leaves after the decodes), the decode-only steps and
each long prompt's slowest step, and from its client the ITL P99. The claim holds when the ITL P99 stays over the
SLO; the step time is compared with the median chunk step (a chunk's time alone with the median chunk step less
the median decode-only step), with the 25 % limit beside. With `--with-seqs`, the followed server also runs at
the `--max-num-seqs` figure the levers give (`max_num_seqs` in the evidence). That lever's text says the SLO
needs the decode step under a figure (`decode_step_needed_s`: the SLO less the 64-token budget's chunk) and that
the figure is a ceiling, not a promise. Its claim holds when the outcome agrees with that condition: the ITL P99
met the SLO where the followed run's median decode-only step was under the needed figure, and missed it where
the step was over (written before the first run that followed the figure).

    python benchmarks/follow_levers.py --runs runs/h84-full/h84-small-nochunk-900-s3 --out runs/follow-levers
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from follow_advice import LIMIT, decode_drift, record_at_budget, slowest_prefill_steps
from scenarios import FULL_S, QUICK_S, SCENARIOS, analyze

SMALLEST = 64   # the smallest budget the advice prices (advice.slo_levers)


def levers_claim(run: Path, slo: float) -> dict | None:
    """The first finding naming the levers: its kind, the 64-token chunk step it predicts, and its decode step."""
    for f in analyze(run, slo):
        ev = f["evidence"]
        if ev.get("chunking_meets_slo") is False and (ev.get("expected_step_s") or ev.get("smallest_budget_chunk_s")):
            return {"kind": f["kind"], "predicted_step_s": ev.get("expected_step_s"),
                    "predicted_chunk_s": ev.get("smallest_budget_chunk_s"), "max_num_seqs": ev.get("max_num_seqs"),
                    "decode_step_needed_s": ev.get("decode_step_needed_s")}
    return None


def chunk_steps(run: Path) -> dict:
    from stallscope.analyzers.step_cost import read_step_trace

    st = read_step_trace(run / "steps.jsonl")
    both = st[(st["num_prefill_tokens"] > 0) & (st["num_decode_tokens"] > 0)]
    dur = (both["end_ns"] - both["start_ns"]).to_numpy(dtype=float) / 1e9
    dec = st[(st["num_prefill_tokens"] == 0) & (st["num_decode_tokens"] > 0)]
    dec_s = (dec["end_ns"] - dec["start_ns"]).to_numpy(dtype=float) / 1e9
    worst = slowest_prefill_steps(st)
    load = json.loads((run / "loadgen.json").read_text())["all"]["itl_s"]
    return {"chunk_steps": int(len(dur)), "chunk_step_median_s": float(np.median(dur)) if len(dur) else float("nan"),
            "prefill_tokens_median": float(np.median(both["num_prefill_tokens"])) if len(both) else float("nan"),
            "decodes_median": float(np.median(both["num_decode_tokens"])) if len(both) else float("nan"),
            "decode_step_median_s": float(np.median(dec_s)) if len(dec_s) else float("nan"),
            "slowest_step_median_s": float(np.median(worst)) if len(worst) else float("nan"),
            "itl_p99_s": load.get("p99"), "itl_p50_s": load.get("p50")}


def follow(run: Path, out: Path, duration: float, slo: float, with_seqs: bool = False) -> dict:
    """`run`'s levers claim followed at budget 64; `with_seqs`: with the `--max-num-seqs` figure the levers give
    as well (a run whose levers give none is not recorded)."""
    sc = next(s for s in SCENARIOS if s.name == run.name)
    claim = levers_claim(run, slo)
    if claim is None or (with_seqs and not claim.get("max_num_seqs")):
        return {"run": str(run), "claim": None}
    extra = ("--max-num-seqs", str(claim["max_num_seqs"])) if with_seqs else ()
    target = record_at_budget(sc, out, run.name, SMALLEST, duration, extra)
    got = chunk_steps(target)
    if claim["predicted_step_s"]:
        ratio = claim["predicted_step_s"] / got["chunk_step_median_s"]
    else:   # the decode step only bounded: the chunk's own time against a chunk step less a decode-only step
        ratio = claim["predicted_chunk_s"] / (got["chunk_step_median_s"] - got["decode_step_median_s"])
    return {"run": str(run), "claim": claim, "followed": str(target), "with_seqs": with_seqs, "measured": got,
            "ratio": ratio,
            "within_25pct": bool(abs(ratio - 1) <= LIMIT),
            "slo_missed": bool(got["itl_p99_s"] is not None and got["itl_p99_s"] > slo),
            "machine_drift": decode_drift(run, target)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", help="comma-separated recorded scenario run directories")
    ap.add_argument("--from-json", help="print the table of an earlier run's --json rows; record nothing")
    ap.add_argument("--out", default="runs/follow-levers")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_S:.0f} s of load (else {FULL_S:.0f} s)")
    ap.add_argument("--itl-slo", type=float, default=0.2)
    ap.add_argument("--with-seqs", action="store_true",
                    help="also run the followed server at the levers' --max-num-seqs figure "
                         "(does that lever meet the SLO?)")
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    if args.from_json:
        rows = json.loads(Path(args.from_json).read_text())
    elif args.runs:
        rows = [follow(Path(r), Path(args.out), QUICK_S if args.quick else FULL_S, args.itl_slo, args.with_seqs)
                for r in args.runs.split(",")]
    else:
        ap.error("give --runs or --from-json")
    print("| run | finding | predicted step at budget 64 (or its chunk alone) | measured chunk steps: median (n), "
          "prompt tokens / decodes per step | decode-only step | predicted / measured | limit | slowest step per long "
          "prompt | ITL P99 after (SLO) | claim | machine drift |\n|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["claim"] is None:
            print(f"| {Path(r['run']).name} | no finding names the levers | | | | | | | | | |")
            continue
        c, m = r["claim"], r["measured"]
        said = (f"{c['predicted_step_s'] * 1e3:.0f} ms" if c.get("predicted_step_s")
                else f"chunk alone {c['predicted_chunk_s'] * 1e3:.0f} ms")
        print(f"| {Path(r['run']).name} | {c['kind']} | {said} | "
              f"{m['chunk_step_median_s'] * 1e3:.0f} ms ({m['chunk_steps']}), {m['prefill_tokens_median']:.0f} / "
              f"{m['decodes_median']:.0f} | {m.get('decode_step_median_s', float('nan')) * 1e3:.0f} ms | "
              f"{_verdict(r['ratio'], r['within_25pct'])} | "
              f"{1 - LIMIT:.2f}-{1 + LIMIT:.2f} | {m['slowest_step_median_s'] * 1e3:.0f} ms{_beside(c, m)} | "
              f"{m['itl_p99_s'] * 1e3:.0f} ms ({args.itl_slo * 1e3:.0f} ms) | {_claim(r)} | {r['machine_drift']:.2f} |")
    if args.json_out and not args.from_json:
        Path(args.json_out).write_text(json.dumps(rows, indent=1, default=float))
    return 0


def _beside(claim: dict, m: dict) -> str:
    """The predicted step over each long prompt's slowest step (the step a chunk priced at the prompt's deepest
    context names), printed beside the criterion."""
    if not claim.get("predicted_step_s") or not m["slowest_step_median_s"] > 0:
        return ""
    return f" (predicted / it {claim['predicted_step_s'] / m['slowest_step_median_s']:.2f})"


def _claim(r: dict) -> str:
    """Chunking alone: the claim holds when the SLO is still missed; with the `--max-num-seqs` figure too, whether
    that lever met the SLO."""
    if r.get("with_seqs"):
        seqs, need = r["claim"]["max_num_seqs"], r["claim"].get("decode_step_needed_s")
        said = f"--max-num-seqs {seqs}: {'SLO still missed' if r['slo_missed'] else 'SLO met'}"
        if need is None:
            return said
        under = r["measured"]["decode_step_median_s"] < need
        agrees = under != r["slo_missed"]
        return (f"{said}; decode step {'under' if under else 'over'} the {need * 1e3:.0f} ms needed: "
                f"{'agrees' if agrees else 'disagrees'}")
    return "held: SLO missed" if r["slo_missed"] else "wrong: SLO met"


def _verdict(ratio: float, met: bool) -> str:
    if not np.isfinite(ratio):
        return "- (no decode-only step to subtract)"
    return f"{ratio:.2f} ({'met' if met else 'missed'})"


if __name__ == "__main__":
    sys.exit(main())
