"""A prompt's attention time, computed whole and in chunks, on the reference server's prefill attention.

    python benchmarks/attention_tiles.py [--prompt 1950] [--chunks 370,562,697] [--reps 5]

vLLM's prefill kernels (FlashAttention-2: 128-row query blocks, masked key blocks skipped) do a prompt's causal
query-key pairs once however the prompt is chunked, and stallscope's chunk cost model assumes it
(stallscope.analyzers.chunk_cost: "L x L / 2 query-key pairs over a prompt however it is chunked"). This times
`causal_attention` for one prompt of `--prompt` tokens, whole and as the chunks of each size (each chunk over the
keys before it), for every layer of `tiny` and `small`, at the tile in use (refserver.attention.QUERY_TILE) and
at the 512-row tile the server used before (the peer). Printed: whole, the chunks' sum, and whole / chunks (1.0:
the cost does not depend on the chunking). Best of `--reps` per call, on whatever BLAS threads the machine gives.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from stallscope.refserver import attention
from stallscope.refserver.config import PRESETS

PEER_TILE = 512


def attention_s(n: int, ctx: int, heads: int, kv_heads: int, head_dim: int, layers: int, reps: int) -> float:
    """Best time of `layers` calls of causal_attention for n queries after ctx keys."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((n, heads, head_dim), dtype=np.float32)
    k = rng.standard_normal((kv_heads, ctx + n, head_dim), dtype=np.float32)
    pos = np.arange(ctx, ctx + n)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        attention.causal_attention(q, k, k, pos)
        best = min(best, time.perf_counter() - t0)
    return best * layers


def chunked_s(prompt: int, size: int, shape: tuple, reps: int) -> float:
    return sum(attention_s(min(size, prompt - c), c, *shape, reps) for c in range(0, prompt, size))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", type=int, default=1950)
    ap.add_argument("--chunks", default="370,562,697", help="chunk sizes, comma-separated")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(x) for x in args.chunks.split(",")]
    in_use = attention.QUERY_TILE
    print(f"{'model':<6} {'tile':>5} {'whole s':>8} " + " ".join(f"{'chunks ' + str(s) + ' s':>13} {'whole/chunks':>12}" for s in sizes))
    for name in ("tiny", "small"):
        mc = PRESETS[name]
        shape = (mc.num_heads, mc.num_kv_heads, mc.head_dim, mc.num_layers)
        for tile in (in_use, PEER_TILE):
            attention.QUERY_TILE = tile
            whole = attention_s(args.prompt, 0, *shape, args.reps)
            cells = []
            for s in sizes:
                part = chunked_s(args.prompt, s, shape, args.reps)
                cells.append(f"{part:>13.4f} {whole / part:>12.2f}")
            label = f"{tile}" + (" (in use)" if tile == in_use else " (peer)")
            print(f"{name:<6} {label:>5} {whole:>8.4f} " + " ".join(cells))
        attention.QUERY_TILE = in_use


if __name__ == "__main__":
    main()
