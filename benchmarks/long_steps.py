"""One recorded run's long-prompt steps beside what the scrapes saw: the step trace's steps of 512+ prompt tokens,
the truth's starvation intervals, the ITL samples above the SLO (and all of them) per scrape interval, and the running
gauge and first windows of the signals grid.

The idea: a miss is explained from the two sides the truth and the detector read, and docs/accuracy.md cites both
from here: the steps the truth rule counts (from the step trace, which the detector never reads) and the scrape
intervals whose ITL histogram gained samples above the SLO (what the metrics had to go on).

    python benchmarks/long_steps.py runs/h119/h119-end-in-stall-tiny-1600-scrape1s
    python benchmarks/long_steps.py runs/h116/h116-neg-short-127sess --slo 0.2
    python benchmarks/long_steps.py runs/h126-full/h126-neg-short-84sess --windows 4   # a burst at a cold start
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from stallscope.analyzers import signals, truth
from stallscope.analyzers.chunking import LONG_PREFILL_TOKENS
from stallscope.analyzers.step_cost import read_step_trace
from stallscope.collectors import loader
from stallscope.core.config import load_thresholds

ITL = signals.ITL[0] + "_bucket"
ITERATION_TOKENS = signals.ITERATION + "_bucket"
RUNNING = "vllm:num_requests_running"


def long_steps(run: Path, last_scrape_ns: int, slowest: int = 0) -> list[str]:
    """Rows of the steps computing `LONG_PREFILL_TOKENS` or more prompt tokens (with `slowest`, the `slowest` longest
    steps whatever they computed, then the median step), times from the trace's first step and to the store's last
    scrape (both clocks are the host's wall clock)."""
    st = read_step_trace(run / "steps.jsonl")
    t0 = int(st["start_ns"].min())
    dur = st["end_ns"] - st["start_ns"]
    big = (st.loc[dur.sort_values(kind="stable").index[-slowest:]] if slowest
           else st[st["num_prefill_tokens"] >= LONG_PREFILL_TOKENS])
    rows = [f"| {int(r.step)} | {(r.start_ns - t0) / 1e9:.3f} s | {(r.end_ns - r.start_ns) / 1e9:.3f} s "
            f"| {r.num_prefill_tokens:.0f} | {r.num_prefill_reqs:.0f} | {r.num_decode_tokens:.0f} "
            f"| {(last_scrape_ns - r.start_ns) / 1e9:.3f} s |" for r in big.sort_values("start_ns").itertuples()]
    return rows + ([f"\nmedian step: {dur.median() / 1e9:.3f} s over {len(st)} steps"] if slowest else [])


def true_gaps(run: Path, last_scrape_ns: int, slo: float) -> list[str]:
    """Rows of the run's true `decode_starvation` intervals as the scenarios score them (`truth.starvation_episodes`,
    the run ending at the store's last scrape), times from the trace's first step."""
    st = read_step_trace(run / "steps.jsonl")
    t0 = int(st["start_ns"].min())
    return [f"| {(a - t0) / 1e9:.3f} s | {(b - a) / 1e9:.4f} s |"
            for a, b in truth.starvation_episodes(st, slo, run_end_ns=last_scrape_ns)]


def _samples(run: Path):
    return next(f["samples"] for f in loader.load(run / "store.db").values() if len(f["samples"]))


def _per_scrape(samples, metric: str):
    return samples[samples["metric"] == metric].groupby(["ts", "le"])["value"].sum().unstack("le").sort_index()


def interval_gains(samples, slo: float, above_tokens: float | None = None) -> dict[str, np.ndarray]:
    """Per scrape interval (between consecutive scrapes): `ts` (the scrapes, one more than the intervals), the ITL
    samples gained above `slo` (`above`, `slo` must be one of vLLM's bucket bounds) and in all (`every`), and with
    `above_tokens` (an `iteration_tokens_total` bucket bound) the engine steps gained above that many tokens
    (`big_steps`)."""
    per_ts = _per_scrape(samples, ITL)
    if slo not in per_ts.columns:
        raise SystemExit(f"error: --slo {slo} is not an ITL bucket bound of this store")
    out = {"ts": per_ts.index.to_numpy(dtype=np.int64), "above": np.diff((per_ts[np.inf] - per_ts[slo]).to_numpy()),
           "every": np.diff(per_ts[np.inf].to_numpy())}
    if above_tokens is not None:
        steps = _per_scrape(samples, ITERATION_TOKENS).reindex(per_ts.index).ffill().fillna(0.0)
        out["big_steps"] = np.diff((steps[np.inf] - steps[above_tokens]).to_numpy())
    return out


def above_slo(samples, slo: float) -> list[str]:
    """Rows of the scrape intervals whose ITL histogram gained samples above `slo` (the bucket bound `slo` must be
    one of vLLM's), beside all the samples it gained there, times from the first scrape."""
    g = interval_gains(samples, slo)
    ts = g["ts"]
    return [f"| {(ts[i] - ts[0]) / 1e9:.1f}-{(ts[i + 1] - ts[0]) / 1e9:.1f} s | {g['above'][i]:.0f} | "
            f"{g['every'][i]:.0f} |" for i in np.flatnonzero(g["above"] > 0)]


def first_windows(samples, slo: float, n: int, at_s: float = 0.0) -> list[str]:
    """Rows of the first `n` scrapes' running gauge and of the signals grid's first `n` windows from `at_s` seconds
    after the first scrape, as `analyze` reads them (the episodes' inputs: running, stream-time share in gaps above
    `slo`, samples above it per second, long prefills per second, waiting, seconds one step has held everything;
    `running_min` too where a signals frame has it), times from the first scrape."""
    t0 = int(samples["ts"].min())
    start = t0 + int(at_s * 1e9)
    run = samples[samples["metric"] == RUNNING].groupby("ts")["value"].sum().sort_index()
    rows = [f"| scrape | {(ts - t0) / 1e9:.2f} s | running {v:.0f} |"
            for ts, v in run[run.index >= start].head(n).items()]
    sig = signals.compute(samples, thresholds={**load_thresholds(), "itl_slo_s": slo})
    sig = sig[sig["ts"] >= start].head(n)
    cols = [c for c in ("running", "running_min", "itl_stall_share", "itl_above_slo_rate", "long_prefill_rate",
                        "waiting", "nothing_for_s") if c in sig.columns]
    for r in sig.itertuples():
        rows.append(f"| window | {(r.ts - t0) / 1e9:.2f} s | " + ", ".join(f"{c} {getattr(r, c):.4g}" for c in cols)
                    + " |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a recorded run directory (steps.jsonl and store.db)")
    ap.add_argument("--slo", type=float, default=0.2, help="the ITL SLO in seconds, a vLLM bucket bound (0.2)")
    ap.add_argument("--windows", type=int, default=0, metavar="N",
                    help="also the first N scrapes' running gauge and the signals grid's first N windows")
    ap.add_argument("--at", type=float, default=0.0, metavar="S",
                    help="with --windows: from S seconds after the first scrape (0)")
    ap.add_argument("--slowest", type=int, default=0, metavar="N",
                    help="the N slowest steps, whatever they computed, and the median step, in place of the long ones")
    args = ap.parse_args()
    samples = _samples(args.run)
    print("| step | start | duration | prompt tokens | prompt requests | decodes | to the last scrape |\n"
          "|---|---|---|---|---|---|---|")
    print("\n".join(long_steps(args.run, int(samples["ts"].max()), args.slowest)))
    print(f"\n| true starvation from | its length (SLO {args.slo} s) |\n|---|---|")
    print("\n".join(true_gaps(args.run, int(samples["ts"].max()), args.slo)))
    print(f"\n| scrape interval | ITL samples above {args.slo} s | all ITL samples |\n|---|---|---|")
    print("\n".join(above_slo(samples, args.slo)))
    if args.windows > 0:
        print("\n| what | at | figures |\n|---|---|---|")
        print("\n".join(first_windows(samples, args.slo, args.windows, args.at)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
