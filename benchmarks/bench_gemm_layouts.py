"""Why a batch-16 decode step of `small` cannot reach 2x its bandwidth floor with numpy: its linear layers
alone, in three layouts, with the weights cold (streamed from DRAM) as in a real step.

    python benchmarks/bench_gemm_layouts.py [--batch 16]

1. x @ W, OpenBLAS with all threads (what the engine does);
2. W^T @ x^T, all threads (the transposed layout);
3. x @ W split by output columns over two Python threads, one BLAS thread each.
Each is the best of 7 passes over the 7 layers' four weight matrices; the last column is the ratio to
the bandwidth floor (the matrices' bytes / this run's best read bandwidth, bench_engine's measure).
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import ThreadpoolController

from bench_engine import best_of, read_bandwidth_gbs
from stallscope.refserver.config import PRESETS

BLAS = ThreadpoolController().select(user_api="blas")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    m = ap.parse_args().batch
    mc = PRESETS["small"]
    d, hd = mc.hidden_size, mc.head_dim
    shapes = [(d, (mc.num_heads + 2 * mc.num_kv_heads) * hd), (mc.num_heads * hd, d),
              (d, 2 * mc.intermediate_size), (mc.intermediate_size, d)]
    rng = np.random.default_rng(0)
    weights = [[rng.standard_normal(s, dtype=np.float32) for s in shapes] for _ in range(mc.num_layers)]
    transposed = [[np.ascontiguousarray(w.T) for w in layer] for layer in weights]
    halves = [[(np.ascontiguousarray(w[:, : w.shape[1] // 2]), np.ascontiguousarray(w[:, w.shape[1] // 2:]))
               for w in layer] for layer in weights]
    xs = {k: rng.standard_normal((m, k), dtype=np.float32) for k, _ in shapes}
    pool = ThreadPoolExecutor(2)
    all_threads = max(lc.num_threads for lc in BLAS.lib_controllers)
    nbytes = sum(w.nbytes for layer in weights for w in layer)

    bw = read_bandwidth_gbs(512, 5) * 1e9
    floor = nbytes / bw

    def plain():
        for layer in weights:
            for w in layer:
                xs[w.shape[0]] @ w

    def transposed_layout():
        for layer in transposed:
            for w in layer:
                w @ xs[w.shape[1]].T

    def column_split():
        for layer in halves:
            for a, b in layer:
                x = xs[a.shape[0]]
                other = pool.submit(np.matmul, x, b)
                np.concatenate((x @ a, other.result()), axis=1)

    print(f"small, batch {m}: {nbytes / 2**20:.0f} MiB of linear weights; read bandwidth {bw / 1e9:.1f} GB/s, "
          f"floor {floor * 1e3:.1f} ms\n\n| layout | linear layers | ratio to floor |\n|---|---|---|")
    with BLAS.limit(limits=all_threads):
        rows = [(f"x @ W, {all_threads} BLAS threads (engine)", best_of(plain, 7)),
                (f"W^T @ x^T, {all_threads} BLAS threads", best_of(transposed_layout, 7))]
    with BLAS.limit(limits=1):
        rows.append(("x @ W split by columns over 2 Python threads, 1 BLAS thread each", best_of(column_split, 7)))
    for name, t in rows:
        print(f"| {name} | {t * 1e3:.1f} ms | {t / floor:.2f}x |")


if __name__ == "__main__":
    main()
