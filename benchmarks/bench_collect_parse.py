"""Parse + store one ~300-series vLLM scrape: median wall time against the 5 ms limit.

The scrape is tests/fixtures/vllm_metrics/v0_33_0_custom_itl_buckets.txt (297 series, vLLM 0.33's
names and buckets, prometheus_client's own exposition). Each iteration changes some values (as a live
scrape does), then runs `vllm.parse(text, ts, cache=...)` and `Store.append(...)` into a WAL store. It
reports three medians: the collector's steady state (a per-target ParseCache, as the scrape loop
uses), the first scrape of a target (no cache: the library parser alone), and the library parser
`text_string_to_metric_families` by itself as the peer in the same run.

    python benchmarks/bench_collect_parse.py [--iterations 300]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from stallscope.collectors import vllm
from stallscope.collectors.exposition import ParseCache
from stallscope.collectors.store import Store

LIMIT_MS = 5.0
FIXTURE = Path(__file__).resolve().parent.parent / "tests/fixtures/vllm_metrics/v0_33_0_custom_itl_buckets.txt"


def variants(text: str, n: int) -> list[str]:
    """`n` scrapes of the same target whose counter/gauge values move like a live server's."""
    rng = random.Random(42)
    lines = text.splitlines()
    out = []
    for _ in range(n):
        new = []
        for ln in lines:
            if ln and ln[0] != "#" and rng.random() < 0.3:
                head, _, val = ln.rpartition(" ")
                ln = f"{head} {float(val) + rng.randint(1, 5)}"
            new.append(ln)
        out.append("\n".join(new) + "\n")
    return out


def median_ms(fn, texts) -> tuple[float, float]:
    """(median wall ms, median CPU ms of this process) per call."""
    wall, cpu = [], []
    for i, t in enumerate(texts):
        t0, c0 = time.perf_counter(), time.process_time()
        fn(i, t)
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=300)
    args = ap.parse_args()
    texts = variants(FIXTURE.read_text(), args.iterations)
    n_series = len(vllm.parse(texts[0], 0))
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "bench.db")
        cache = ParseCache()
        vllm.parse(texts[0], 0, cache=cache)
        warm = median_ms(lambda i, t: store.append("vllm", i, 0.01, samples=vllm.parse(t, i, cache=cache)), texts)
        cold = median_ms(lambda i, t: store.append("cold", i, 0.01, samples=vllm.parse(t, i)), texts)
        store.close()
    lib = median_ms(lambda i, t: list(text_string_to_metric_families(t)), texts)
    load = os.getloadavg()[0]
    print(f"series per scrape: {n_series}, iterations: {args.iterations}, load average {load:.1f} on {os.cpu_count()} CPUs")
    for what, (w, c) in (("parse+store, steady state (per-target cache)", warm),
                         ("parse+store, first scrape (library parser)  ", cold)):
        print(f"{what}: median wall {w:.2f} ms = {w / LIMIT_MS:.2f} x the 5 ms limit; "
              f"median CPU {c:.2f} ms = {c / LIMIT_MS:.2f} x")
    print(f"peer: prometheus_client text_string_to_metric_families alone: median wall {lib[0]:.2f} ms, "
          f"CPU {lib[1]:.2f} ms (steady state = {warm[1] / lib[1]:.2f} x the library parser's CPU)")


if __name__ == "__main__":
    main()
