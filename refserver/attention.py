"""Paged KV storage and attention over it: gather a request's blocks by its block table, no loop over tokens.

Layout per layer: `k[layer]`, `v[layer]` are (num_kv_heads, num_blocks, block_size, head_dim), KV head
first so that gathering a block table yields (num_kv_heads, tokens, head_dim) contiguous, ready for BLAS.
Token position p of a request lives in block `block_table[p // block_size]`, slot `p % block_size`.
Storage is the real dtype: `float32`; `auto`/`fp16` float16; `fp8` float8_e4m3fn bit patterns (uint8)
with one float32 scale per (layer, block) for K and for V (amax/448). `gather` dequantises only the
gathered blocks, with integer bit moves and one multiply (`_widen`), exact for every finite value:
numpy's own float16 -> float32 cast is 5x slower, and the fp8 scale folds into that same multiply.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

FP8_MAX = 448.0
STORAGE_DTYPES = {"float32": np.float32, "auto": np.float16, "fp16": np.float16, "fp8": np.uint8}
# (signed view, shift into float32 place, exponent bias, mask) of each stored format: see `_widen`.
_WIDEN = {"fp16": (np.int16, 13, 15, np.int32(-0x70000001)),     # keep bit 31 and bits 27..0
          "fp8": (np.int8, 20, 7, np.int32(-0x78100000))}         # keep bit 31 and bits 26..20
# Prefill query rows per attention tile. A tile scores its queries against every key up to its last one, the
# masked upper triangle of its diagonal band too (T x T / 2 wasted pairs), in a score array of T x heads x keys
# floats that outgrows the caches as T grows. At 128 rows (FlashAttention-2's query block, as vLLM's prefill
# runs) a prompt's attention costs about the same whole or in chunks, as on vLLM's kernels: whole / chunks
# 1.06-1.10 for a 1,950-token prompt, against 1.14-1.57 at 512 rows (benchmarks/attention_tiles.py,
# docs/performance.md).
QUERY_TILE = 128


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
    """KV tensors for all layers in one pool; `write` quantises and scatters by slot, `gather` reads whole blocks."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 kv_cache_dtype: str = "auto"):
        self.block_size, self.num_kv_heads, self.head_dim = block_size, num_kv_heads, head_dim
        self.kv_cache_dtype = kv_cache_dtype
        shape = (num_layers, num_kv_heads, num_blocks, block_size, head_dim)
        self.k = np.zeros(shape, dtype=STORAGE_DTYPES[kv_cache_dtype])
        self.v = np.zeros(shape, dtype=STORAGE_DTYPES[kv_cache_dtype])
        if kv_cache_dtype == "fp8":
            self.k_scale = np.ones((num_layers, num_blocks), dtype=np.float32)
            self.v_scale = np.ones((num_layers, num_blocks), dtype=np.float32)

    @property
    def nbytes(self) -> int:
        """Resident bytes of the pool (K, V and fp8 scales)."""
        scales = 2 * self.k_scale.nbytes if self.kv_cache_dtype == "fp8" else 0
        return self.k.nbytes + self.v.nbytes + scales

    def write(self, layer: int, k: np.ndarray, v: np.ndarray, slot_mapping: np.ndarray) -> None:
        """k, v: (T, num_kv_heads, head_dim) float32 for the tokens at `slot_mapping` (T,)."""
        if self.kv_cache_dtype == "fp8":
            self._write_fp8(self.k[layer], self.k_scale[layer], k, slot_mapping)
            self._write_fp8(self.v[layer], self.v_scale[layer], v, slot_mapping)
            return
        k, v = k.astype(self.k.dtype, copy=False), v.astype(self.v.dtype, copy=False)
        flat = (-1, self.head_dim)
        for h in range(self.num_kv_heads):              # 2-D scatters take numpy's fast path
            self.k[layer, h].reshape(flat)[slot_mapping] = k[:, h]
            self.v[layer, h].reshape(flat)[slot_mapping] = v[:, h]

    def _write_fp8(self, store: np.ndarray, scale: np.ndarray, x: np.ndarray, slots: np.ndarray) -> None:
        # Re-quantise each touched block with a scale that covers its old and new values.
        blocks, offsets = np.divmod(slots, self.block_size)
        touched, inverse = np.unique(blocks, return_inverse=True)
        cur = _widen(store[:, touched], "fp8", scale[touched][None, :, None, None])   # (kvh, nb, bs, hd)
        fresh = np.zeros(touched.size, dtype=bool)
        fresh[inverse[offsets == 0]] = True             # a block's first write starts at offset 0
        cur[:, fresh] = 0.0                             # drop a previous owner's stale values
        cur[:, inverse, offsets] = x.transpose(1, 0, 2)
        new_scale = np.maximum(np.abs(cur).max(axis=(0, 2, 3)) / FP8_MAX, 1e-12).astype(np.float32)
        q = np.clip(cur / new_scale[None, :, None, None], -FP8_MAX, FP8_MAX)
        store[:, touched] = q.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        scale[touched] = new_scale

    def gather(self, layer: int, block_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """block_ids: int array of shape S -> k, v float32 of shape (num_kv_heads,) + S + (block_size, head_dim)."""
        # np.take, not k[layer][:, ids]: fancy indexing after a slice returns a non-contiguous array
        k, v = np.take(self.k[layer], block_ids, axis=1), np.take(self.v[layer], block_ids, axis=1)
        if self.kv_cache_dtype == "float32":
            return k, v
        if self.kv_cache_dtype == "fp8":
            per_block = (1,) + block_ids.shape + (1, 1)
            return (_widen(k, "fp8", self.k_scale[layer][block_ids].reshape(per_block)),
                    _widen(v, "fp8", self.v_scale[layer][block_ids].reshape(per_block)))
        return _widen(k, "fp16"), _widen(v, "fp16")


def _widen(bits: np.ndarray, fmt: str, scale=1.0) -> np.ndarray:
    """float16 or float8_e4m3fn values (as stored) -> float32 x `scale`, bit-exact for finite values.

    Sign-extend to int32 and shift the exponent+mantissa into float32's position: the sign lands in bit
    31, the extension's copies of it are masked off, and the value is now 2^(bias - 127) too small, for
    normal and subnormal inputs alike; one multiply by 2^(127 - bias) (x the fp8 block scale) fixes it.
    """
    view, shift, bias, mask = _WIDEN[fmt]
    x = bits.view(view).astype(np.int32)
    x <<= shift
    x &= mask
    out = x.view(np.float32)
    if np.max(scale) < 2.0 ** 7:                        # 2^120 x scale stays finite in float32
        out *= np.float32(2.0 ** (127 - bias)) * scale
    else:
        out *= np.float32(2.0 ** (127 - bias))
        out *= scale
    return out


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
    for t0, t1, first, span in query_tiles(q_positions):
        pos = q_positions[t0:t1]
        qt = q[t0:t1].reshape(t1 - t0, kvh, group, hd).transpose(1, 0, 2, 3).reshape(kvh, -1, hd)
        kt = k[:, :span].transpose(0, 2, 1)             # (kvh, hd, span), a BLAS-ready transposed view
        scores = np.matmul(qt, kt).reshape(kvh, t1 - t0, group, span)
        hidden = np.arange(first, span)[None, :] > pos[:, None]           # (t, span - first): the diagonal band
        scores[..., first:] += np.where(hidden, -np.inf, 0.0).astype(np.float32)[None, :, None, :]
        ctx = _softmax_weighted_sum(scores.reshape(kvh, -1, span), v[:, :span])   # (kvh, t*group, hd)
        out[t0:t1] = ctx.reshape(kvh, t1 - t0, group, hd).transpose(1, 0, 2, 3).reshape(t1 - t0, -1)
    return out


def query_tiles(q_positions: np.ndarray, tile: int | None = None) -> list[tuple[int, int, int, int]]:
    """(first row, end row, first key of the diagonal band, keys scored) of each query tile: a tile's queries are
    scored against keys 0..its last position (later keys are all masked), so it scores rows x span pairs.

    >>> query_tiles(np.arange(100, 400), tile=128)
    [(0, 128, 100, 228), (128, 256, 228, 356), (256, 300, 356, 400)]
    """
    tile = tile or QUERY_TILE
    out = []
    for t0 in range(0, len(q_positions), tile):
        t1 = min(len(q_positions), t0 + tile)
        out.append((t0, t1, int(q_positions[t0:t1].min()), int(q_positions[t0:t1].max()) + 1))
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


def decode_attention_bias(context_lens: np.ndarray, num_blocks: int, block_size: int) -> np.ndarray:
    """Additive mask (R, 1, span): 0 for each request's cached tokens, -inf for the padding after them.

    The same for every layer of a step, so the model builds it once per step."""
    invisible = np.arange(num_blocks * block_size)[None, :] >= context_lens[:, None]
    return np.where(invisible, np.float32(-np.inf), np.float32(0.0))[:, None, :]


def paged_decode_attention(q: np.ndarray, cache: PagedKVCache, layer: int, block_tables: np.ndarray,
                           context_lens: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """Single-token queries of R requests at once: q (R, num_heads, head_dim) -> (R, num_heads * head_dim).

    `bias` is `decode_attention_bias(context_lens, ...)`, passed in to build it once per step."""
    r, num_heads, hd = q.shape
    kvh = cache.num_kv_heads
    group = num_heads // kvh
    k, v = cache.gather(layer, block_tables)            # (kvh, R, max_blocks, bs, hd)
    span = k.shape[2] * k.shape[3]
    k = k.reshape(kvh, r, span, hd)
    v = v.reshape(kvh, r, span, hd)
    if bias is None:
        bias = decode_attention_bias(context_lens, block_tables.shape[1], cache.block_size)
    qg = (q * np.float32(hd ** -0.5)).reshape(r, kvh, group, hd).transpose(1, 0, 2, 3)   # (kvh, R, group, hd)
    scores = np.matmul(qg, k.transpose(0, 1, 3, 2))                   # (kvh, R, group, span)
    scores += bias
    ctx = _softmax_weighted_sum(scores, v)                            # (kvh, R, group, hd)
    return ctx.transpose(1, 0, 2, 3).reshape(r, num_heads * hd)       # (R, num_heads * hd)
