"""Per-page render time of the dashboard over a 24 h store, against the 2 s limit.

A page render = its callback (analyzers + server-side downsampling, cold: no view memoised, only what
loading builds: the per-metric row index and the findings) plus
serialising the figures to the JSON the browser receives. The data is one vLLM target scraped
every 5 s for 24 h (~640k samples) and an 8-GPU DCGM target (~550k samples), in the schema frames
(tests/dashboard_frames.py); loading a store from disk is the collectors' benchmark.

    python benchmarks/bench_dashboard.py [--hours 24] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import dashboard_frames as F  # noqa: E402
from plotly.utils import PlotlyJSONEncoder  # noqa: E402
import json  # noqa: E402

LIMIT_S = 2.0
LOAD_KEYS = {("samples", "index"), ("gpu", "index"), ("findings",), ("whatif_inputs",)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    from stallscope.dashboards.app import create_app, page_module
    from stallscope.dashboards.data import DataSource

    duration = int(args.hours * 3600)
    t0 = time.perf_counter()
    frames = {"samples": F.samples(duration, 5), "gpu": F.gpu(duration, 5, num_gpus=8),
              "steps": F.steps(num_steps=200_000)}                 # no findings: the analyzers diagnose
    build_s = time.perf_counter() - t0
    rows = len(frames["samples"]) + len(frames["gpu"])
    print(f"data: {args.hours:g} h, {len(frames['samples']):,} vLLM samples + {len(frames['gpu']):,} GPU samples "
          f"+ {len(frames['steps']):,} steps (built in {build_s:.1f} s)")
    create_app(DataSource.from_frames(frames))
    from stallscope.dashboards import data
    t0 = time.perf_counter()
    data.use(DataSource.from_frames(frames)).frames()
    load_s = time.perf_counter() - t0
    print(f"load phase (validate, per-metric row index, analyzers' diagnosis; once per data version, in the "
          f"background in live mode): {load_s:.2f} s, {len(data.current().findings()):,} findings")
    args_for = {"trace": (None, None, 0), "requests": ("model", 0)}
    worst = 0.0
    print(f"{'page':<10} {'median s':>9} {'max s':>7} {'ratio to 2 s':>13} {'payload MB':>11}")
    for page in ("overview", "latency", "kv_cache", "gpu", "requests", "trace", "whatif"):
        times, size = [], 0
        for _ in range(args.runs):
            memo = data.current().snapshot().memo          # cold: drop every view, keep what loading built
            for key in [k for k in memo if k not in LOAD_KEYS]:
                del memo[key]
            start = time.perf_counter()
            out = page_module(page).update(*args_for.get(page, (0,)))
            payload = json.dumps(out, cls=PlotlyJSONEncoder)
            times.append(time.perf_counter() - start)
            size = len(payload)
        med = statistics.median(times)
        note = "  (runs the what-if simulation: issue 9's page)" if page == "whatif" else ""
        if not note:
            worst = max(worst, max(times))
        print(f"{page:<10} {med:>9.3f} {max(times):>7.3f} {med / LIMIT_S:>13.2f} {size / 1e6:>11.2f}{note}")
    print(f"worst page render (overview, latency, kv_cache, gpu, requests, trace): {worst:.3f} s = {worst / LIMIT_S:.2f} x the {LIMIT_S:g} s limit "
          f"({rows:,} samples, runs={args.runs}, noisy shared 2-core machine)")
    return 0 if worst <= LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
