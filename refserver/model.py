"""A Llama-style decoder in numpy: RMSNorm, RoPE, grouped-query attention, SwiGLU; float32.

All T tokens scheduled in a step, prefill chunks and decodes together, go through each linear layer as
ONE (T, in) @ (in, out) matmul; only attention is split, by request (see attention.py).
"""

from __future__ import annotations

import numpy as np

from .attention import (AttentionMetadata, PagedKVCache, decode_attention_bias, paged_decode_attention,
                        paged_prefill_attention)
from .config import ModelConfig


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x * (weight / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


class Transformer:
    """Example: `logits = Transformer(mc, init_weights(mc)).forward(ids, pos, meta, cache, [len(ids) - 1])`."""

    def __init__(self, mc: ModelConfig, weights: dict[str, np.ndarray], max_len: int | None = None):
        self.mc = mc
        self.w = weights
        self.layers = [
            tuple(weights[f"layers.{i}.{n}"] for n in
                  ("input_norm", "qkv_proj", "o_proj", "post_attention_norm", "gate_up_proj", "down_proj"))
            for i in range(mc.num_layers)
        ]
        half = mc.head_dim // 2
        inv_freq = 1.0 / (mc.rope_theta ** (np.arange(half, dtype=np.float64) / half))
        angles = np.outer(np.arange(max_len or mc.max_model_len), inv_freq)     # (max_len, head_dim/2)
        self.cos = np.cos(angles).astype(np.float32)
        self.sin = np.sin(angles).astype(np.float32)

    def _rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """Rotate-half RoPE; x: (T, heads, head_dim), cos/sin: (T, 1, head_dim/2)."""
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate((x1 * cos - x2 * sin, x2 * cos + x1 * sin), axis=-1)

    def forward(self, input_ids: np.ndarray, positions: np.ndarray, meta: AttentionMetadata,
                cache: PagedKVCache, logits_indices) -> np.ndarray:
        """input_ids, positions: (T,) -> logits (len(logits_indices), vocab) float32; writes K/V into `cache`."""
        mc = self.mc
        t, nh, kvh, hd = len(input_ids), mc.num_heads, mc.num_kv_heads, mc.head_dim
        cos, sin = self.cos[positions][:, None, :], self.sin[positions][:, None, :]
        x = self.w["embed_tokens"][input_ids]                             # (T, D)
        attn = np.empty((t, nh * hd), dtype=np.float32)
        if meta.decode_rows.size:
            bias = decode_attention_bias(meta.decode_context_lens, meta.decode_block_tables.shape[1],
                                         cache.block_size)
        for layer, (in_norm, qkv_w, o_w, post_norm, gate_up_w, down_w) in enumerate(self.layers):
            qkv = rms_norm(x, in_norm, mc.rms_norm_eps) @ qkv_w           # (T, (nh + 2 kvh) hd)
            q = self._rope(qkv[:, : nh * hd].reshape(t, nh, hd), cos, sin)
            k = self._rope(qkv[:, nh * hd: (nh + kvh) * hd].reshape(t, kvh, hd), cos, sin)
            v = qkv[:, (nh + kvh) * hd:].reshape(t, kvh, hd)
            cache.write(layer, k, v, meta.slot_mapping)
            if meta.decode_rows.size:
                attn[meta.decode_rows] = paged_decode_attention(
                    q[meta.decode_rows], cache, layer, meta.decode_block_tables, meta.decode_context_lens, bias)
            for r0, r1, table, pos in meta.prefills:
                attn[r0:r1] = paged_prefill_attention(q[r0:r1], cache, layer, table, pos)
            x += attn @ o_w                                               # (T, D)
            gate_up = rms_norm(x, post_norm, mc.rms_norm_eps) @ gate_up_w  # (T, 2 I)
            gate, up = gate_up[:, : mc.intermediate_size], gate_up[:, mc.intermediate_size:]
            act = np.exp(-gate)                                           # SwiGLU: silu(gate) * up, in place
            act += 1.0
            np.divide(gate, act, out=act)
            act *= up
            x += act @ down_w
        x = rms_norm(x[logits_indices], self.w["norm"], mc.rms_norm_eps)
        return x @ self.w["lm_head"]                                      # (n, vocab)
