"""Paged KV storage and attention over it: gather a request's blocks by its block table, no loop over tokens.

Layout per layer: `k[layer]`, `v[layer]` are (num_kv_heads, num_blocks, block_size, head_dim), KV head
first so that gathering a block table yields (num_kv_heads, tokens, head_dim) contiguous, ready for BLAS.
Token position p of a request lives in block `block_table[p // block_size]`, slot `p % block_size`.
Precision is applied when K/V are written: `auto`/`fp16` round to float16, `fp8` quantises each block
to float8_e4m3fn with one float32 scale per (layer, block) for K and for V (amax/448). The rounded
values are held in float32 arrays, because numpy has no fast float16/float8 -> float32 cast (it cost
~7 ns per element, more than the attention itself); the numerics equal 16/8-bit storage, the pool is
sized and reported with the nominal 2/1 bytes per element, and resident memory is 4 bytes per element.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

FP8_MAX = 448.0
# uint8 bit pattern -> float32 value of float8_e4m3fn (dequantisation by table lookup).
_FP8_LUT = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
_FP8_LUT[np.isnan(_FP8_LUT)] = 0.0
QUERY_TILE = 512                                   # prefill query rows per attention tile


@dataclass
class AttentionMetadata:
    """Where each scheduled token goes. Rows index the step's flattened token batch (T tokens)."""

    slot_mapping: np.ndarray                        # (T,) flat cache slot = block * block_size + offset
    decode_rows: np.ndarray                         # (R,) rows of single-token requests
    decode_block_tables: np.ndarray                 # (R, max_blocks) int, padded with 0
    decode_context_lens: np.ndarray                 # (R,) tokens in cache incl. this one
    # multi-token requests: (first row, end row, block table (nb,), positions (n,))
    prefills: list[tuple[int, int, np.ndarray, np.ndarray]] = field(default_factory=list)


class PagedKVCache:
    """KV tensors for all layers in one pool; `write` rounds and scatters by slot, `gather` reads whole blocks."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 kv_cache_dtype: str = "auto"):
        self.block_size, self.num_kv_heads, self.head_dim = block_size, num_kv_heads, head_dim
        self.kv_cache_dtype = kv_cache_dtype
        shape = (num_layers, num_kv_heads, num_blocks, block_size, head_dim)
        self.k = np.zeros(shape, dtype=np.float32)
        self.v = np.zeros(shape, dtype=np.float32)
        if kv_cache_dtype == "fp8":
            self.k_scale = np.ones((num_layers, num_blocks), dtype=np.float32)
            self.v_scale = np.ones((num_layers, num_blocks), dtype=np.float32)

    def write(self, layer: int, k: np.ndarray, v: np.ndarray, slot_mapping: np.ndarray) -> None:
        """k, v: (T, num_kv_heads, head_dim) float32 for the tokens at `slot_mapping` (T,)."""
        if self.kv_cache_dtype == "fp8":
            self._write_fp8(self.k[layer], self.k_scale[layer], k, slot_mapping)
            self._write_fp8(self.v[layer], self.v_scale[layer], v, slot_mapping)
            return
        if self.kv_cache_dtype in ("auto", "fp16"):
            k, v = k.astype(np.float16), v.astype(np.float16)
        flat = (-1, self.head_dim)
        for h in range(self.num_kv_heads):              # 2-D scatters take numpy's fast path
            self.k[layer, h].reshape(flat)[slot_mapping] = k[:, h]
            self.v[layer, h].reshape(flat)[slot_mapping] = v[:, h]

    def _write_fp8(self, store: np.ndarray, scale: np.ndarray, x: np.ndarray, slots: np.ndarray) -> None:
        # Re-quantise each touched block with a scale that covers its old and new values.
        blocks, offsets = np.divmod(slots, self.block_size)
        touched, inverse = np.unique(blocks, return_inverse=True)
        cur = store[:, touched]                         # (kvh, nb, bs, hd), already dequantised
        fresh = np.zeros(touched.size, dtype=bool)
        fresh[inverse[offsets == 0]] = True             # a block's first write starts at offset 0
        cur[:, fresh] = 0.0                             # drop a previous owner's stale values
        cur[:, inverse, offsets] = x.transpose(1, 0, 2)
        new_scale = np.maximum(np.abs(cur).max(axis=(0, 2, 3)) / FP8_MAX, 1e-12).astype(np.float32)
        q = np.clip(cur / new_scale[None, :, None, None], -FP8_MAX, FP8_MAX)
        q = _FP8_LUT[q.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)]
        store[:, touched] = q * new_scale[None, :, None, None]
        scale[touched] = new_scale

    def gather(self, layer: int, block_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """block_ids: int array of shape S -> k, v float32 of shape (num_kv_heads,) + S + (block_size, head_dim)."""
        # np.take, not k[layer][:, ids]: fancy indexing after a slice returns a non-contiguous array
        return np.take(self.k[layer], block_ids, axis=1), np.take(self.v[layer], block_ids, axis=1)


def _softmax_weighted_sum(scores: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax(scores) @ v over the last axis, normalising after the product (one pass fewer over scores)."""
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    denom = scores.sum(axis=-1, keepdims=True)
    out = np.matmul(scores, v)
    out /= denom
    return out


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_positions: np.ndarray) -> np.ndarray:
    """Grouped-query attention of queries at absolute `q_positions` over keys 0..L-1 (key j visible iff j <= pos).

    q: (n, num_heads, head_dim); k, v: (num_kv_heads, L, head_dim) -> (n, num_heads * head_dim).
    Queries are consecutive positions (a prefill chunk), so keys before the first query are always visible.
    """
    n, num_heads, hd = q.shape
    kvh = k.shape[0]
    group = num_heads // kvh
    out = np.empty((n, num_heads * hd), dtype=np.float32)
    q = q * np.float32(hd ** -0.5)
    for t0 in range(0, n, QUERY_TILE):                  # tiles of queries bound the score memory
        t1 = min(n, t0 + QUERY_TILE)
        pos = q_positions[t0:t1]
        first, span = int(pos.min()), int(pos.max()) + 1   # keys past the tile's last position are all masked
        qt = q[t0:t1].reshape(t1 - t0, kvh, group, hd).transpose(1, 0, 2, 3).reshape(kvh, -1, hd)
        kt = k[:, :span].transpose(0, 2, 1)             # (kvh, hd, span), a BLAS-ready transposed view
        scores = np.matmul(qt, kt).reshape(kvh, t1 - t0, group, span)
        hidden = np.arange(first, span)[None, :] > pos[:, None]           # (t, span - first): the diagonal band
        scores[..., first:] += np.where(hidden, -np.inf, 0.0).astype(np.float32)[None, :, None, :]
        ctx = _softmax_weighted_sum(scores.reshape(kvh, -1, span), v[:, :span])   # (kvh, t*group, hd)
        out[t0:t1] = ctx.reshape(kvh, t1 - t0, group, hd).transpose(1, 0, 2, 3).reshape(t1 - t0, -1)
    return out


def paged_prefill_attention(q: np.ndarray, cache: PagedKVCache, layer: int, block_table: np.ndarray,
                            q_positions: np.ndarray) -> np.ndarray:
    """One request's chunk: q (n, num_heads, head_dim) at `q_positions`; keys come from its blocks."""
    context_len = int(q_positions[-1]) + 1
    nb = -(-context_len // cache.block_size)
    k, v = cache.gather(layer, block_table[:nb])        # (kvh, nb, bs, hd)
    k = k.reshape(cache.num_kv_heads, -1, cache.head_dim)[:, :context_len]
    v = v.reshape(cache.num_kv_heads, -1, cache.head_dim)[:, :context_len]
    return causal_attention(q, k, v, q_positions)


def paged_decode_attention(q: np.ndarray, cache: PagedKVCache, layer: int, block_tables: np.ndarray,
                           context_lens: np.ndarray) -> np.ndarray:
    """Single-token queries of R requests at once: q (R, num_heads, head_dim) -> (R, num_heads * head_dim)."""
    r, num_heads, hd = q.shape
    kvh = cache.num_kv_heads
    group = num_heads // kvh
    k, v = cache.gather(layer, block_tables)            # (kvh, R, max_blocks, bs, hd)
    span = k.shape[2] * k.shape[3]
    k = k.reshape(kvh, r, span, hd)
    v = v.reshape(kvh, r, span, hd)
    qg = (q * np.float32(hd ** -0.5)).reshape(r, kvh, group, hd).transpose(1, 0, 2, 3)   # (kvh, R, group, hd)
    scores = np.matmul(qg, k.transpose(0, 1, 3, 2))                   # (kvh, R, group, span)
    invisible = np.arange(span)[None, :] >= context_lens[:, None]     # (R, span)
    scores += np.where(invisible, -np.inf, 0.0).astype(np.float32)[None, :, None, :]
    ctx = _softmax_weighted_sum(scores, v)                            # (kvh, R, group, hd)
    return ctx.transpose(1, 0, 2, 3).reshape(r, num_heads * hd)       # (R, num_heads * hd)
