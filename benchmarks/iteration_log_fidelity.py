"""How close a server's iteration-details log comes to its step trace: the steps `analyze --server-log` reads.

For each run recorded with `--enable-logging-iteration-details` (held-out 33 on: `scenarios.py --iteration-log`),
this reads the server.log's steps (collectors/vllm_log.read_iterations) and the run's steps.jsonl, and prints,
side by side: the steps each holds, whether every step's prompt and decode tokens agree, the largest duration
error (the line prints 0.01 ms), the step ends' error (median and largest, against the second the text format
resolves), and the stalls each gives (gaps between decode steps above the 200 ms SLO, by cause).

    python benchmarks/iteration_log_fidelity.py runs/h33-full/*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from stallscope.analyzers.step_cost import read_step_trace
from stallscope.analyzers.step_stalls import find_stalls
from stallscope.collectors.vllm_log import read_iterations


def compare(run: Path, slo: float) -> dict:
    log = read_iterations(run / "server.log")
    trace = read_step_trace(run / "steps.jsonl")
    trace = trace[trace["num_prefill_tokens"] + trace["num_decode_tokens"] > 0].reset_index(drop=True)
    same = len(log) == len(trace)
    tokens = same and all((log[c].to_numpy() == trace[c].to_numpy()).all()
                          for c in ("num_prefill_tokens", "num_decode_tokens"))
    dur = lambda f: (f["end_ns"] - f["start_ns"]).to_numpy(dtype=float) / 1e6   # noqa: E731
    end_err = np.abs(log["end_ns"].to_numpy() - trace["end_ns"].to_numpy()) / 1e9 if same else np.array([np.nan])
    stalls = [find_stalls(f, min_gap_s=slo)["cause"].value_counts().to_dict() for f in (log, trace)]
    return {"run": run.name, "log_steps": len(log), "trace_steps": len(trace), "tokens_agree": bool(tokens),
            "duration_error_ms": float(np.abs(dur(log) - dur(trace)).max()) if same else float("nan"),
            "end_error_median_s": float(np.median(end_err)), "end_error_max_s": float(end_err.max()),
            "stalls_log": stalls[0], "stalls_trace": stalls[1]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--itl-slo", type=float, default=0.2)
    args = ap.parse_args()
    print("| run | steps: log / trace | tokens agree | largest duration error | step end error: median / largest "
          "(limit: the 1 s tick) | stalls above the SLO: log / trace |\n|---|---|---|---|---|---|")
    for run in args.runs:
        r = compare(Path(run), args.itl_slo)
        print(f"| {r['run']} | {r['log_steps']} / {r['trace_steps']} | {r['tokens_agree']} | "
              f"{r['duration_error_ms']:.3f} ms | {r['end_error_median_s'] * 1e3:.1f} ms / "
              f"{r['end_error_max_s'] * 1e3:.0f} ms ({r['end_error_max_s']:.2f}x) | {r['stalls_log']} / "
              f"{r['stalls_trace']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
