"""The advice `analyze --server-log` gives from a vLLM iteration-details log, checked against runs already followed.

The idea: runs recorded before the reference server wrote iteration lines have its step trace, which holds every
field the line prints. This writes, for each run a `follow_advice.py` JSON names, the log that server would have
written with `--enable-logging-iteration-details` (its startup lines from server.log, then one line per step,
stamped with the step's end second: the line vLLM's frontend logs after the step), runs `stallscope analyze --db
store.db --server-log that.log`, and prints its budget and predicted step beside the follow runs that measured the
same budget (their median slowest step per long prompt, and the ratio with the machine's drift taken out). A run
recorded with the flag (held-out 33 on) needs none of this: follow_advice.py --advice-from log reads its own log.

    python benchmarks/log_path_advice.py runs/follow-h29.json runs/follow-h30.json --logs runs/derived-logs
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from stallscope.engine.iteration_log import message, text_line
from stallscope.engine.step_trace import read_records

SS = [sys.executable, "-m", "stallscope.cli"]


def write_log(run: Path, out: Path) -> Path:
    """`run`'s server.log with one iteration line per step of its trace appended."""
    out.mkdir(parents=True, exist_ok=True)
    lines = (run / "server.log").read_text(errors="replace").splitlines()
    for r in read_records(run / "steps.jsonl"):
        if r["num_prefill_tokens"] + r["num_decode_tokens"] == 0:
            continue
        lines.append(text_line(message(
            r["step"], r.get("num_prefill_reqs", 0), r["num_prefill_tokens"], r.get("num_decode_reqs", 0),
            r["num_decode_tokens"], (r["end_ns"] - r["start_ns"]) / 1e6,
            r.get("kv_blocks_used", 0) / max(r.get("num_gpu_blocks", 1), 1)), r["end_ns"] // 10**9))
    path = out / "server.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def log_advice(run: Path, log: Path, slo: float) -> dict | None:
    res = subprocess.run(SS + ["analyze", "--db", str(run / "store.db"), "--server-log", str(log), "--format", "json",
                               "--itl-slo", str(slo)], capture_output=True, text=True)
    if res.returncode not in (0, 1):
        raise RuntimeError(f"analyze {run} exited {res.returncode}: {res.stderr[-400:]}")
    for f in json.loads(res.stdout)["findings"]:
        ev = f["evidence"]
        if f["kind"] == "decode_starvation" and ev.get("max_num_batched_tokens") and ev.get("expected_step_s"):
            return {"budget": int(ev["max_num_batched_tokens"]), "predicted_step_s": float(ev["expected_step_s"]),
                    "calibration": (ev.get("chunk_cost_calibration") or {}).get("scale")}
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("follows", nargs="+", help="follow_advice.py --json files")
    ap.add_argument("--logs", default="runs/derived-logs", help="where the written logs go")
    ap.add_argument("--itl-slo", type=float, default=0.2)
    args = ap.parse_args()
    followed: dict[str, list] = {}
    for f in args.follows:
        for r in json.loads(Path(f).read_text()):
            if r.get("advice"):
                followed.setdefault(Path(r["run"]).name, []).append(r)
    print("| run | log path: budget, predicted (split scaled by) | followed at that budget: path, measured slowest "
          "step median | predicted / measured | with the drift taken out | limit |\n|---|---|---|---|---|---|")
    for name, rows in sorted(followed.items()):
        run = Path(rows[0]["run"])
        adv = log_advice(run, write_log(run, Path(args.logs) / name), args.itl_slo)
        if adv is None:
            print(f"| {name} | no budget | | | | |")
            continue
        scaled = f" (x{adv['calibration']:.2f})" if adv["calibration"] else ""
        head = f"| {name} | {adv['budget']}, {adv['predicted_step_s'] * 1e3:.0f} ms{scaled} |"
        same = [r for r in rows if r["advice"]["budget"] == adv["budget"]]
        if not same:
            print(head + f" not followed (followed: {', '.join(str(r['advice']['budget']) for r in rows)}) | | | |")
        for r in same[:1]:
            med = r["measured"]["slowest_step_median_s"]
            ratio = adv["predicted_step_s"] / med
            print(head + f" {r['path']}, {med * 1e3:.0f} ms | {ratio:.2f} | {ratio * r['machine_drift']:.2f} | "
                         "0.75-1.25 |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
