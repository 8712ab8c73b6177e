"""Reference-engine roofline: `small` prefill vs this machine's matmul peak, decode vs its memory bandwidth.

    python benchmarks/bench_engine.py [--quick] [--model small|tiny]

1. Matmul peak: best GFLOP/s of a float32 (n x n) @ (n x n) numpy GEMM, with 1 and with all BLAS threads
   (on a busy machine one thread is often faster).
2. Memory bandwidth: best GB/s reading a 512 MiB float32 array (np.sum, and a BLAS matrix-vector product
   with 1 and with all BLAS threads).
3. Prefill: one step computing a whole P-token prompt; achieved GFLOP/s (linear layers + causal attention)
   as a fraction of the matmul peak. Target >= 50%.
4. Decode: median step time with B running requests of C context tokens; the floor is
   (float32 weights + KV bytes read, in the KV dtype's own bytes) / bandwidth. Target at B=16: <= 2x the
   floor. Because a batch-16 step on a 2-core CPU is compute-bound, the table also gives the roofline
   time max(bytes / bandwidth, FLOPs / matmul peak) and the ratio to it. Batch 16 is measured for every
   KV dtype.
5. Peer: the same step's linear layers alone, i.e. one (B x in) @ (in x out) matmul per weight matrix of
   the model, weights cold as in a real step. engine / peer is what the engine adds beyond the BLAS.
Figures are noisy on a shared 2-core machine; each is the best (peak, bandwidth) or median (steps) of N.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import ThreadpoolController

from stallscope.refserver.config import EngineConfig
from stallscope.refserver.engine import LLMEngine
from stallscope.engine.request import RequestStatus, SamplingParams


BLAS = ThreadpoolController()


def best_of(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def matmul_peak_gflops(n: int, reps: int) -> float:
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = a.T.copy()
    best = 0.0
    for threads in sorted({1, BLAS.info()[0]["num_threads"] if BLAS.info() else 1}):
        with BLAS.limit(limits=threads, user_api="blas"):
            best = max(best, 2 * n**3 / best_of(lambda: a @ b, reps) / 1e9)
    return best


def read_bandwidth_gbs(mib: int, reps: int) -> float:
    x = np.ones((mib * 2**20 // 4096, 1024), dtype=np.float32)
    ones = np.ones(1024, dtype=np.float32)
    best = x.nbytes / best_of(lambda: x.sum(), reps)
    for threads in sorted({1, BLAS.info()[0]["num_threads"] if BLAS.info() else 1}):
        with BLAS.limit(limits=threads, user_api="blas"):
            best = max(best, x.nbytes / best_of(lambda: x @ ones, reps))
    return best / 1e9


def linear_layers_alone(engine: LLMEngine, batch: int, reps: int) -> float:
    """Best time of one (batch x in) @ (in x out) matmul per weight matrix, in the engine's layer order."""
    mats = [w for layer in engine.model_runner.model.layers for w in layer if w.ndim == 2]
    mats.append(engine.model_runner.model.w["lm_head"])
    xs = {w.shape[0]: np.random.default_rng(2).standard_normal((batch, w.shape[0]), dtype=np.float32)
          for w in mats}
    return best_of(lambda: [xs[w.shape[0]] @ w for w in mats], reps)


def prefill_flops(mc, tokens: int) -> float:
    linear = 2 * tokens * (mc.num_params - mc.vocab_size * mc.hidden_size)   # embedding lookup is free
    attention = 2 * 2 * mc.num_layers * mc.num_heads * mc.head_dim * tokens * (tokens + 1) / 2
    return linear + attention


def fresh_engine(kv_mb: float, budget: int, model: str = "small", kv_cache_dtype: str = "auto") -> LLMEngine:
    return LLMEngine(EngineConfig(model=model, kv_cache_mb=kv_mb, max_num_batched_tokens=budget,
                                  max_num_seqs=256, kv_cache_dtype=kv_cache_dtype))


def bench_prefill(engine: LLMEngine, tokens: int, reps: int) -> float:
    rng = np.random.default_rng(1)
    times = []
    for i in range(reps):
        engine.add_request(f"p{i}", [int(t) for t in rng.integers(0, 256, tokens)],
                           SamplingParams(max_tokens=1, ignore_eos=True))
        _, stats = engine.step()
        assert stats.num_prefill_tokens == tokens
        times.append(stats.duration_ns / 1e9)
    return min(times)


def seed_running(engine: LLMEngine, request_id: str, context: int, max_tokens: int) -> None:
    """Put a request in RUNNING with `context - 1` tokens already in the KV cache, without computing them.

    Decode cost does not depend on the cached values, and computing 64 x 256 prompt tokens would take
    minutes on a busy 2-core machine. The cache holds zeros for those tokens.
    """
    engine.add_request(request_id, [65] * context, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    sched = engine.scheduler
    req = sched.waiting.pop()
    req.num_computed_tokens = context - 1
    assert engine.kv_cache_manager.allocate_slots(req, 1)
    req.status = RequestStatus.RUNNING
    sched.running.append(req)


def bench_decode(engine: LLMEngine, batch: int, context: int, steps: int) -> float:
    for i in range(batch):
        seed_running(engine, f"d{batch}-{i}", context, steps + 1)
    engine.step()                                       # each computes its last prompt token (untimed)
    times = []
    for _ in range(steps):
        _, stats = engine.step()
        assert stats.num_decode_tokens == batch and stats.num_prefill_tokens == 0
        times.append(stats.duration_ns / 1e9)
    while engine.has_unfinished_requests():
        engine.step()
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, 1024-token prefill, batches 1 and 16")
    ap.add_argument("--model", default="small", choices=("small", "tiny"), help="preset to measure (default small)")
    args = ap.parse_args()
    reps = 2 if args.quick else 5
    prompt = 1024 if args.quick else 2048
    batches = (1, 16) if args.quick else (1, 4, 16, 32, 64)
    context, steps = 256, (5 if args.quick else 10)

    peak = matmul_peak_gflops(2048, reps)
    bw = read_bandwidth_gbs(512, reps)
    print(f"machine: matmul peak {peak:.1f} GFLOP/s (float32 2048^3 GEMM), read bandwidth {bw:.1f} GB/s (512 MiB read)")

    engine = fresh_engine(kv_mb=1024, budget=max(prompt, 2048), model=args.model)
    mc = engine.model_config
    prompt = min(prompt, engine.max_model_len - 1)
    weight_bytes = 4 * (mc.num_params - mc.vocab_size * mc.hidden_size)   # all but the embedding table
    print(f"model {mc.name}: {mc.num_params / 1e6:.1f}M params ({weight_bytes / 2**20:.0f} MiB float32 read per "
          f"step), BLAS threads {engine.model_runner.blas_threads}")

    t = bench_prefill(engine, prompt, max(1, reps // 2))
    gflops = prefill_flops(mc, prompt) / t / 1e9
    print(f"\n| measurement | figure | limit | fraction of limit |\n|---|---|---|---|")
    print(f"| prefill {prompt} tokens | {t:.2f} s = {prompt / t:.0f} tok/s = {gflops:.1f} GFLOP/s "
          f"| {peak:.1f} GFLOP/s matmul peak | {gflops / peak:.0%} |")
    rows = [(b, "auto") for b in batches] + [(16, d) for d in ("float32", "fp16", "fp8") if not args.quick]
    for b, dtype in rows:
        if dtype != engine.config.kv_cache_dtype:
            engine = fresh_engine(kv_mb=1024, budget=2048, model=args.model, kv_cache_dtype=dtype)
        step = bench_decode(engine, b, context, steps)
        ctx = context + steps / 2
        kv_bytes = b * ctx * engine.config.bytes_per_token
        floor = (weight_bytes + kv_bytes) / (bw * 1e9)                                      # s
        flops = b * (2 * weight_bytes / 4 + 4 * mc.num_layers * mc.num_heads * mc.head_dim * ctx)
        roof = max(floor, flops / (peak * 1e9))
        peer = linear_layers_alone(engine, b, reps)
        print(f"| decode batch {b}, KV {dtype} (context {context}) | {step * 1e3:.1f} ms/step | bandwidth floor "
              f"{floor * 1e3:.1f} ms; roofline {roof * 1e3:.1f} ms; linear layers alone {peer * 1e3:.1f} ms "
              f"| {step / floor:.2f}x floor; {step / roof:.2f}x roofline; {step / peer:.2f}x linear alone |")


if __name__ == "__main__":
    main()
