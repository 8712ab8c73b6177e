"""How fast `analyze --server-log` reads a vLLM server log, against a limit and a bare line count of the same file.

The idea: a vLLM server that has run for days with `--enable-logging-iteration-details` writes a line per engine
step, so the log `--server-log` is given can be gigabytes; the reader streams it and skips every line without
its two keys, so it should cost little more than reading the file. This writes a log of vLLM 0.33's lines
(startup, then per-step `Iteration(...)` lines and the periodic stats line, a restart half-way), reads it with
`collectors/vllm_log.read_server_config` and with a bare `for line in file` count, and prints both, MB/s, and
the ratios to the limit (100 MB/s: a 1 GB log in 10 s) and to the bare count. Then it reads the same log's steps
with `read_iterations` (every per-step line parsed and placed), against its own limit: a day of a server at 30
steps/s (2.6 M lines) in a minute, 43,200 lines/s.

    python benchmarks/bench_vllm_log.py --mb 500
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from stallscope.collectors.vllm_log import read_iterations, read_server_config

LIMIT_MB_S = 100.0
LIMIT_STEPS_S = 30 * 86400 / 60   # a day of steps at 30 steps/s, read in a minute
HEAD = "(APIServer pid=41) INFO 12-04 09:{m:02d}:{s:02d} [{where}] "
STEP = ("Engine 000: Iteration({i}): {c} context requests, {ct} context tokens, 16 generation requests, "
        "16 generation tokens, iteration elapsed time: 31.27 ms, GPU KV cache usage: 7.1%")
STATS = ("Engine 000: Avg prompt throughput: 1204.3 tokens/s, Avg generation throughput: 412.0 tokens/s, "
         "Running: 16 reqs, Waiting: 0 reqs, GPU KV cache usage: 7.1%, Prefix cache hit rate: 0.0%")
ENGINE = ("(EngineCore_DP0 pid=97) INFO 12-04 09:12:16 [core.py:140] Initializing a V1 LLM engine (v0.33.0) with "
          "config: model='Qwen/Qwen3-8B', max_seq_len=8192, kv_cache_dtype=auto, enable_prefix_caching=True, "
          "enable_chunked_prefill=True, pooler_config=None")


def startup(budget: int) -> str:
    return (HEAD.format(m=12, s=9, where="scheduler.py:311")
            + f"Chunked prefill is enabled with max_num_batched_tokens={budget}.\n" + ENGINE + "\n")


def write_log(path: Path, mb: float) -> int:
    """A log of about `mb` MB: a startup at 640, steps, a restart at 512 half-way, more steps; its size."""
    target, i = int(mb * 1e6), 0
    with path.open("w") as fh:
        fh.write(startup(640))
        size, restarted = 0, False
        while size < target:
            block = "".join(HEAD.format(m=(i // 60) % 60, s=i % 60, where="loggers.py:200")
                            + STEP.format(i=i + k, c=k % 2, ct=(k % 2) * 624) + "\n" for k in range(1000))
            block += HEAD.format(m=0, s=0, where="loggers.py:257") + STATS + "\n"
            fh.write(block)
            size, i = size + len(block), i + 1000
            if not restarted and size >= target // 2:
                fh.write(startup(512))
                restarted = True
    return path.stat().st_size


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bare_count(path: Path) -> int:
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        return sum(1 for _ in fh)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=500.0, help="log size to write (default 500 MB)")
    ap.add_argument("--runs", type=int, default=3, help="reads of each kind; the median is printed")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vllm.log"
        size = write_log(path, args.mb)
        reads = sorted(timed(lambda: read_server_config(path)) for _ in range(args.runs))
        bares = sorted(timed(lambda: bare_count(path)) for _ in range(args.runs))
        (t, got), (b, lines) = reads[len(reads) // 2], bares[len(bares) // 2]
        steps = sorted((timed(lambda: read_iterations(path, year=2026)) for _ in range(args.runs)), key=lambda x: x[0])
        (ts, frame) = steps[len(steps) // 2]
    assert (got.enable_chunked_prefill, got.max_num_batched_tokens) == (True, 512), got
    rate = size / 1e6 / t
    print(f"log: {size / 1e6:.0f} MB, {lines:,} lines, a restart half-way (the last startup states 512: read {got.max_num_batched_tokens})")
    print(f"read_server_config: {t:.2f} s = {rate:.0f} MB/s (limit {LIMIT_MB_S:.0f} MB/s: {LIMIT_MB_S / rate:.2f}x the "
          f"time allowed), median of {args.runs}")
    print(f"bare line count of the same file: {b:.2f} s; the reader takes {t / b:.2f}x that")
    rate_steps = len(frame) / ts
    print(f"read_iterations: {len(frame):,} steps in {ts:.2f} s = {rate_steps:,.0f} steps/s (limit {LIMIT_STEPS_S:,.0f} "
          f"steps/s: {LIMIT_STEPS_S / rate_steps:.2f}x the time allowed), {ts / b:.1f}x the bare count, median of "
          f"{args.runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
