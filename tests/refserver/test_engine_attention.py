"""Paged attention (block tables, scattered blocks) equals dense causal attention, in float32; the pool
holds K/V in the KV dtype itself, and dequantising it is bit-exact."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from stallscope.refserver.attention import (PagedKVCache, _widen, causal_attention, paged_decode_attention, query_tiles,
                                             paged_prefill_attention)
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.engine import LLMEngine

BS, KVH, HEADS, HD = 16, 2, 8, 32


def dense_causal(q, k, v, q_positions):
    """Reference: per-head float64 softmax(q k^T / sqrt(d)) v with key j visible iff j <= position."""
    group = q.shape[1] // k.shape[1]
    out = np.zeros((q.shape[0], q.shape[1], q.shape[2]))
    for h in range(q.shape[1]):
        kh, vh = k[:, h // group].astype(np.float64), v[:, h // group].astype(np.float64)
        scores = q[:, h].astype(np.float64) @ kh.T / np.sqrt(q.shape[2])
        scores[np.arange(k.shape[0])[None, :] > q_positions[:, None]] = -np.inf
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[:, h] = (p / p.sum(axis=1, keepdims=True)) @ vh
    return out.reshape(q.shape[0], -1)


def scatter(cache, table, k, v):
    pos = np.arange(k.shape[0])
    cache.write(0, k, v, table[pos // BS] * BS + pos % BS)


@pytest.mark.parametrize("length,chunk_start", [(1, 0), (37, 0), (300, 0), (300, 211), (1100, 520)])
def test_paged_prefill_equals_dense_causal(length, chunk_start):
    rng = np.random.default_rng(length)
    k, v = rng.standard_normal((2, length, KVH, HD), dtype=np.float32)
    q = rng.standard_normal((length, HEADS, HD), dtype=np.float32) * 2
    cache = PagedKVCache(1, 128, BS, KVH, HD, "float32")
    table = rng.permutation(128)[: -(-length // BS)]          # blocks scattered over the pool
    scatter(cache, table, k, v)
    pos = np.arange(chunk_start, length)
    got = paged_prefill_attention(q[chunk_start:], cache, 0, table, pos)
    want = dense_causal(q[chunk_start:], k, v, pos)
    assert np.abs(got - want).max() <= 1e-5


def test_batched_paged_decode_equals_dense_for_ragged_lengths():
    rng = np.random.default_rng(7)
    cache = PagedKVCache(1, 256, BS, KVH, HD, "float32")
    free = list(rng.permutation(256))
    lengths = [1, 15, 16, 17, 250, 64]
    tables, qs, wants = [], [], []
    for n in lengths:
        k, v = rng.standard_normal((2, n, KVH, HD), dtype=np.float32)
        table = np.array([free.pop() for _ in range(-(-n // BS))])
        scatter(cache, table, k, v)
        q = rng.standard_normal((1, HEADS, HD), dtype=np.float32)
        tables.append(table)
        qs.append(q[0])
        wants.append(dense_causal(q, k, v, np.array([n - 1]))[0])
    padded = np.zeros((len(lengths), max(len(t) for t in tables)), dtype=np.int64)
    for i, t in enumerate(tables):
        padded[i, : len(t)] = t
    got = paged_decode_attention(np.stack(qs), cache, 0, padded, np.array(lengths))
    assert np.abs(got - np.stack(wants)).max() <= 1e-5


def test_query_tiling_matches_untiled(monkeypatch):
    rng = np.random.default_rng(3)
    k, v = rng.standard_normal((2, 700, KVH, HD), dtype=np.float32)
    q = rng.standard_normal((700, HEADS, HD), dtype=np.float32)
    pos = np.arange(700)
    k, v = k.transpose(1, 0, 2), v.transpose(1, 0, 2)       # (kvh, L, hd)
    whole = causal_attention(q, k, v, pos)
    assert np.abs(whole - dense_causal(q, k.transpose(1, 0, 2), v.transpose(1, 0, 2), pos)).max() <= 1e-5
    monkeypatch.setattr("stallscope.refserver.attention.QUERY_TILE", 64)
    assert np.abs(causal_attention(q, k, v, pos) - whole).max() <= 1e-6


@pytest.mark.parametrize("dtype,rel_tol", [("auto", 1e-3), ("fp16", 1e-3), ("fp8", 0.07)])
def test_low_precision_storage_round_trips_within_dtype_error(dtype, rel_tol):
    rng = np.random.default_rng(11)
    cache = PagedKVCache(2, 8, BS, KVH, HD, dtype)
    k = rng.standard_normal((40, KVH, HD), dtype=np.float32)
    k[20:] *= 100.0                                   # block 1 holds much larger values than block 0
    table = np.array([5, 2, 7])
    for lo, hi in [(0, 9), (9, 20), (20, 40)]:        # incremental writes, as decoding does
        pos = np.arange(lo, hi)
        cache.write(1, k[lo:hi], -k[lo:hi], table[pos // BS] * BS + pos % BS)
    got_k, got_v = cache.gather(1, table)                   # (kvh, 3, bs, hd)
    got_k = got_k.reshape(KVH, -1, HD)[:, :40].transpose(1, 0, 2)
    got_v = got_v.reshape(KVH, -1, HD)[:, :40].transpose(1, 0, 2)
    for b in range(3):                                # error relative to each block's own magnitude
        sl = slice(b * BS, min(40, (b + 1) * BS))
        scale = np.abs(k[sl]).max()
        assert np.abs(got_k[sl] - k[sl]).max() <= rel_tol * scale
        assert np.abs(got_v[sl] + k[sl]).max() <= rel_tol * scale
    if dtype == "fp8":
        assert cache.k_scale[1, 7] > 10 * cache.k_scale[1, 5]   # per-block scales differ


@pytest.mark.parametrize("dtype,storage", [("float32", np.float32), ("auto", np.float16), ("fp16", np.float16),
                                           ("fp8", np.uint8)])
def test_pool_is_stored_in_its_dtype_and_sized_by_kv_cache_mb(dtype, storage):
    cfg = EngineConfig(model="tiny", kv_cache_dtype=dtype, kv_cache_mb=8)
    runner = LLMEngine(cfg).model_runner
    assert runner.cache.k.dtype == storage and runner.cache.v.dtype == storage
    kv_bytes = runner.cache.k.nbytes + runner.cache.v.nbytes
    assert 8 * 2**20 - cfg.bytes_per_block < kv_bytes <= 8 * 2**20       # resident = the nominal pool
    scales = 2 * 4 * cfg.model_config.num_layers * cfg.num_gpu_blocks if dtype == "fp8" else 0
    assert runner.cache.nbytes == kv_bytes + scales


@pytest.mark.parametrize("fmt,bits,dtype", [("fp16", np.uint16, np.float16),
                                            ("fp8", np.uint8, ml_dtypes.float8_e4m3fn)])
def test_widen_is_bit_exact_for_every_finite_value(fmt, bits, dtype):
    every = np.arange(np.iinfo(bits).max + 1, dtype=np.int64).astype(bits)
    want = every.view(dtype).astype(np.float32)
    finite = np.isfinite(want)
    got = _widen(every.copy(), fmt)
    assert finite.sum() == (63488 if fmt == "fp16" else 254)       # all but inf/nan patterns
    assert np.array_equal(got[finite].view(np.int32), want[finite].view(np.int32))   # -0.0 and subnormals too
    scaled = _widen(every.copy(), fmt, np.float32(0.25))
    assert np.array_equal(scaled[finite], want[finite] * np.float32(0.25))


def _scored_pairs(positions: np.ndarray, tile: int | None = None) -> int:
    """Query-key pairs the server's tiles score (`tile` None: the tile it runs)."""
    return sum((t1 - t0) * span for t0, t1, _, span in query_tiles(positions, tile))


def test_a_prompts_scored_pairs_barely_depend_on_how_it_is_chunked():
    """vLLM's prefill kernel does a prompt's L x (L + 1) / 2 causal pairs whether it is computed whole or in chunks;
    the tiles' wasted band must keep both within 10 % of that (at 512-row tiles a whole prompt scored 25 % more)."""
    length, causal = 1950, 1950 * 1951 / 2
    whole = _scored_pairs(np.arange(length))
    chunked = sum(_scored_pairs(np.arange(c, min(c + 370, length))) for c in range(0, length, 370))
    assert whole / causal < 1.07 and chunked / causal < 1.07
    assert abs(whole - chunked) / causal < 0.05
    assert _scored_pairs(np.arange(length), 512) / causal > 1.2
