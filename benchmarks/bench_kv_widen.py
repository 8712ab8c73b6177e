"""Widening stored KV to float32: the engine's bit moves (`attention._widen`) against numpy's cast and a table.

    python benchmarks/bench_kv_widen.py [--elements N]

Each row is the best of 30 over N values (default 2.2 M: one layer's K and V of a batch-16, 272-token
decode step of `small`), as ns per element and as a ratio to the engine's `_widen` in the same run.
"""

from __future__ import annotations

import argparse

import ml_dtypes
import numpy as np

from bench_engine import best_of
from stallscope.refserver.attention import _widen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=2 * 16 * 272 * 2 * 64 * 2)
    n = ap.parse_args().elements
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    f16, f8 = x.astype(np.float16), x.astype(ml_dtypes.float8_e4m3fn)
    lut16 = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    lut8 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    u16, u8 = f16.view(np.uint16), f8.view(np.uint8)
    rows = [
        ("fp16: _widen (engine)", lambda: _widen(u16, "fp16")),
        ("fp16: numpy astype(float32)", lambda: f16.astype(np.float32)),
        ("fp16: 65,536-entry table (np.take)", lambda: np.take(lut16, u16)),
        ("fp8: _widen x block scale (engine)", lambda: _widen(u8, "fp8", np.float32(0.5))),
        ("fp8: ml_dtypes astype(float32) x scale", lambda: f8.astype(np.float32) * np.float32(0.5)),
        ("fp8: 256-entry table x scale", lambda: np.take(lut8, u8) * np.float32(0.5)),
    ]
    print(f"{n:,} values\n\n| method | ns / element | ratio to the engine's |\n|---|---|---|")
    base = {}
    for name, fn in rows:
        ns = best_of(fn, 30) / n * 1e9
        fmt = name.split(":")[0]
        base.setdefault(fmt, ns)
        print(f"| {name} | {ns:.2f} | {ns / base[fmt]:.2f}x |")


if __name__ == "__main__":
    main()
