#!/usr/bin/env python3
"""Benchmark: `stallscope analyze --nsys` on generated vLLM-like serving exports, side by side with its peers.

Generates (once, cached in --workdir) synthetic exports with the sample-trace generator: a 32-layer
vLLM-like decoder, 100 decode steps then one 16K-token prefill, repeated, until >= --kernels kernels
(plus as many runtime launch rows, one NVTX step range and one memcpy per step); and a --big one for
the memory check. Each measurement runs in a fresh Python process, so its peak RSS (ru_maxrss) is its
own; the fastest of --repeat runs is kept. Prints each figure beside its ratio to the issue's goal:

  - analyze:  `stallscope analyze --nsys FILE --format json` (everything: read, launch join, classify,
              steps, stall scan, summary, gaps)
  - kern_sum: `stallscope analyze --nsys FILE --report kern_sum` (the kernel summary alone)
  - bare:     a bare columnar read (ADBC -> Arrow) of the columns the pipeline reads, no processing
  - nsys:     `nsys stats -r cuda_gpu_kern_sum` on the same file, when nsys is found (STALLSCOPE_NSYS/PATH)
  - big:      analyze on the --big export, --repeat times: peak RSS run by run against the --kernels one's

    python benchmarks/bench_nsight.py [--kernels 3200000] [--big 20000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ISSUE_NSYS_S = (15.7, 16.6)  # issue 17: nsys 2024.2.3 stats -r cuda_gpu_kern_sum, 3.18 M kernels, this machine
NO_NSYS = ("nsys not found (set STALLSCOPE_NSYS), and no package on this machine's registries provides it: "
           "`apt-cache search nsight` / `apt-cache policy nsight-systems nsight-systems-cli` find none (Debian has "
           "no NVIDIA repository), PyPI's `nvidia-nsys-cli` is a placeholder whose build fails on purpose "
           "(hosted on NVIDIA's own index, unreachable), `nsight-python` drives Nsight Compute and holds no nsys; "
           "so the two ratios to nsys are not measured")

MEASURE = """
import io, json, resource, sys, time
from contextlib import redirect_stdout
cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
import stallscope.cli, stallscope.analyzers.nsys_report  # imports are not the work
t, c = time.perf_counter(), cpu()
{work}
dt, dc = time.perf_counter() - t, cpu() - c
print(json.dumps({{"seconds": dt, "cpu": dc, "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  **extra}}))
"""
WORK = {
    "analyze": """
out = io.StringIO()
with redirect_stdout(out):
    rc = stallscope.cli.main(["analyze", "--nsys", sys.argv[1], "--format", "json"])
rep = json.loads(out.getvalue())
extra = {"rc": rc, "kernels": rep["source"]["kernels"], "steps": rep["steps"]["count"], "findings": len(rep["findings"])}
""",
    "kern_sum": """
out = io.StringIO()
with redirect_stdout(out):
    rc = stallscope.cli.main(["analyze", "--nsys", sys.argv[1], "--report", "kern_sum", "--format", "json"])
extra = {"rc": rc, "names": len(json.loads(out.getvalue())["kernel_summary"])}
""",
    "bare": """
from stallscope.collectors.nsight_sqlite import COLUMN_SETS, PID_MASK, SQL_LAUNCHES, signed64, arrow_batches, connections
rows = 0
with connections(sys.argv[1]) as (conn, adb):
    for batch in arrow_batches(adb, COLUMN_SETS["report"][0]):
        rows += batch.num_rows
    for batch in arrow_batches(adb, SQL_LAUNCHES, (signed64(PID_MASK),)):
        rows += batch.num_rows
extra = {"rows": rows}
""",
}


def _generate(path: Path, kernels: int) -> None:
    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts" / "make_sample_traces.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    per_step = 32 * 11 + 3  # kernels of a 32-layer decode step
    steps = kernels // per_step + 20  # prefill steps have fewer kernels (no split-KV combine)
    plan = [16384 if i % 101 == 100 else 0 for i in range(steps)]
    t = time.perf_counter()
    gen.build_export(path, plan, layers=32)
    print(f"generated {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.0f} s", flush=True)


def _export(work: Path, kernels: int) -> Path:
    db = work / f"serving_{kernels}.sqlite"
    if not db.exists():
        _generate(db, kernels)
    return db


def _child(what: str, db: Path) -> dict:
    code = MEASURE.format(work=WORK[what].strip("\n"))
    out = subprocess.run([sys.executable, "-c", code, str(db)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _best(what: str, db: Path, repeat: int) -> dict:
    """The fastest of `repeat` runs, with every run's peak RSS in `rss_all` (memory is compared run by run)."""
    runs = [_child(what, db) for _ in range(repeat)]
    return min(runs, key=lambda r: r["seconds"]) | {"rss_all": [r["maxrss"] for r in runs]}


def _nsys(db: Path, work: Path) -> float | None:
    nsys = os.environ.get("STALLSCOPE_NSYS") or shutil.which("nsys")
    if not nsys:
        return None
    t = time.perf_counter()
    subprocess.run([nsys, "stats", "-r", "cuda_gpu_kern_sum", "-f", "csv", "-o", str(work / "kern_sum"),
                    "--force-overwrite", "true", str(db)], check=True, capture_output=True)
    return time.perf_counter() - t


def _load() -> str:
    return f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load average {os.getloadavg()[0]:.2f}"


def _gb(values: list) -> str:
    return " / ".join(f"{v / 1e9:.3f}" for v in values)


def _fig(name: str, r: dict) -> str:
    return f"{name}: {r['seconds']:.2f} s wall, {r['cpu']:.2f} s CPU, peak RSS {r['maxrss'] / 1e9:.3f} GB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=3_200_000)
    ap.add_argument("--big", type=int, default=20_000_000, help="kernels of the memory-check export (0: skip)")
    ap.add_argument("--workdir", default="/tmp/stallscope-bench")
    ap.add_argument("--repeat", type=int, default=2, help="take the fastest of this many runs (default 2)")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    db = _export(work, args.kernels)
    big = _export(work, args.big) if args.big else None
    print(f"start {_load()}; {db} ({db.stat().st_size / 1e6:.0f} MB)")
    res = {w: _best(w, db, args.repeat) for w in ("analyze", "kern_sum", "bare")}
    nsys_s = _nsys(db, work)
    a, k, b = res["analyze"], res["kern_sum"], res["bare"]
    print(f"kernels: {a['kernels']:,}  steps: {a['steps']:,}  findings: {a['findings']}  (fastest of {args.repeat})")
    print(_fig("analyze --nsys (everything)", a))
    print(_fig("analyze --nsys --report kern_sum", k))
    print(_fig("bare columnar read of the needed columns (kernels + runtime launch rows)", b))
    ok = [a["seconds"] / b["seconds"] <= 2.0, max(a["rss_all"]) <= 0.8e9]
    print(f"  ratio analyze / bare read = {a['seconds'] / b['seconds']:.2f}x wall, {a['cpu'] / b['cpu']:.2f}x CPU (goal <= 2x)")
    print(f"  peak RSS {max(a['rss_all']) / 1e9:.3f} GB (largest of {args.repeat} runs) = "
          f"{max(a['rss_all']) / 0.8e9:.2f}x of the 0.8 GB goal")
    if nsys_s is None:
        print(NO_NSYS)
        lo, hi = ISSUE_NSYS_S
        print(f"  for reference only, against the issue's nsys figure ({lo}-{hi} s on its 3.18 M-kernel export, "
              f"taken from the issue, not re-measured): analyze {lo / a['seconds']:.2f}-{hi / a['seconds']:.2f}x "
              f"(goal >= 3x), kern_sum {lo / k['seconds']:.2f}-{hi / k['seconds']:.2f}x (goal >= 5x)")
    else:
        print(f"nsys stats -r cuda_gpu_kern_sum: {nsys_s:.2f} s wall; ratio nsys / analyze = {nsys_s / a['seconds']:.2f}x "
              f"(goal >= 3x), nsys / kern_sum = {nsys_s / k['seconds']:.2f}x (goal >= 5x)")
        ok += [nsys_s / a["seconds"] >= 3, nsys_s / k["seconds"] >= 5]
    if big is not None:
        g = _best("analyze", big, args.repeat)
        print(_fig(f"analyze --nsys on {g['kernels']:,} kernels ({big.stat().st_size / 1e6:.0f} MB)", g))
        small_rss, big_rss = a["rss_all"], g["rss_all"]
        print(f"  peak RSS per run: {_gb(small_rss)} GB on {a['kernels']:,} kernels, {_gb(big_rss)} GB on "
              f"{g['kernels']:,}; worst pairing (largest big / smallest small) {max(big_rss) / min(small_rss):.3f}x, "
              f"run by run {', '.join(f'{b / s:.3f}x' for s, b in zip(small_rss, big_rss))} (goal <= 1.10x); "
              f"wall {g['seconds'] / a['seconds']:.2f}x for {g['kernels'] / a['kernels']:.2f}x the kernels")
        ok.append(max(big_rss) <= 1.10 * min(small_rss))
    print(f"end {_load()}")
    print("all measured goals met" if all(ok) else "NOT ALL MEASURED GOALS MET (wall time counts other processes' load: compare CPU)")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    raise SystemExit(main())
