"""The HTTP/SSE front's cost: tokens/s through the reference server vs the engine driven directly.

Both runs use the same engine config (`tiny`), the same 32 requests (32-token prompts, 64 output
tokens each, all submitted at once) and the same number of BLAS threads. The peer is `LLMEngine.step()`
in a plain loop; the server run streams every token over SSE to an httpx client in the same process.
Also times one `/metrics` exposition after the run. Prints each figure with its ratio.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_server.py --requests 32 --max-tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

import httpx

from stallscope.refserver.config import EngineConfig
from stallscope.refserver.engine import LLMEngine
from stallscope.engine.request import SamplingParams
from stallscope.refserver.server_thread import ServerThread


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(32, 127) for _ in range(32)] for _ in range(n)]


def engine_direct(config: EngineConfig, batch, max_tokens: int) -> float:
    engine = LLMEngine(config)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    t0 = time.perf_counter()
    for i, ids in enumerate(batch):
        engine.add_request(f"r{i}", ids, params)
    tokens = 0
    while engine.has_unfinished_requests():
        outputs, _ = engine.step()
        tokens += sum(len(o.new_token_ids) for o in outputs)
    return tokens / (time.perf_counter() - t0)


async def _stream_all(url: str, batch, max_tokens: int) -> int:
    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=len(batch) + 4)) as client:
        async def one(ids):
            n = 0
            body = {"prompt": ids, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
            async with client.stream("POST", url + "/v1/completions", json=body) as resp:
                async for line in resp.aiter_lines():
                    n += line.startswith("data: {")
            return n
        return sum(await asyncio.gather(*(one(ids) for ids in batch)))


def through_server(config: EngineConfig, batch, max_tokens: int) -> tuple[float, float]:
    with ServerThread(config) as srv:
        t0 = time.perf_counter()
        tokens = asyncio.run(_stream_all(srv.url, batch, max_tokens))
        rate = tokens / (time.perf_counter() - t0)
        times, cpu = [], []
        for _ in range(20):
            t, c = time.perf_counter(), time.thread_time()
            srv.runner.metrics.exposition()
            times.append(time.perf_counter() - t)
            cpu.append(time.thread_time() - c)
    return rate, statistics.median(times), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    config = EngineConfig(model="tiny", max_num_seqs=256)
    batch = prompts(args.requests)
    direct, served, expo, expo_cpu = [], [], [], []
    for _ in range(args.runs):
        direct.append(engine_direct(config, batch, args.max_tokens))
        rate, t, c = through_server(config, batch, args.max_tokens)
        served.append(rate)
        expo.append(t)
        expo_cpu.append(c)
    d, s, e = statistics.median(direct), statistics.median(served), statistics.median(expo)
    c = statistics.median(expo_cpu)
    print(f"engine direct:  {d:8.1f} tok/s (median of {args.runs})")
    print(f"through server: {s:8.1f} tok/s  ratio to direct {s / d:.2f}x (limit >= 0.70x)")
    print(f"/metrics exposition: wall {e * 1e3:.2f} ms, CPU {c * 1e3:.2f} ms  "
          f"ratio to a 10 ms limit {e / 0.010:.2f}x wall, {c / 0.010:.2f}x CPU")


if __name__ == "__main__":
    main()
