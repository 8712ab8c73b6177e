"""The engine's two shapes: the scheduler's flags (`SchedulerConfig`) and the model's (`ModelConfig`).

One type each for the reference server, the what-if and the roofline; vLLM's names throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stallscope.core.errors import InputError

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "auto": 2, "float16": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1, "float32": 4, "fp32": 4}


@dataclass(frozen=True)
class SchedulerConfig:
    """vLLM's scheduler and KV-pool flags. The defaults are the what-if's: an effectively unbounded pool."""

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    enable_chunked_prefill: bool = True
    block_size: int = 16
    num_gpu_blocks: int = 1 << 20
    max_model_len: int = 2048
    enable_prefix_caching: bool = False     # the what-if's default; the reference server's is on, as vLLM's
    scheduler_reserve_full_isl: bool = True     # admit a prompt only when all of it fits (vLLM 0.33)


@dataclass(frozen=True)
class ModelConfig:
    """A Llama-style decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU. `head_dim` defaults to
    hidden_size / num_heads; the reference engine runs float32 weights, the roofline's tables bf16."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_model_len: int = 2048
    enable_prefix_caching: bool = False     # the what-if's default; the reference server's is on, as vLLM's
    vocab_size: int = 264          # 256 bytes + BOS/EOS/PAD, padded to a multiple of 8
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    head_dim: int | None = None
    qkv_bias: bool = False
    tie_word_embeddings: bool = False
    weight_dtype: str = "bf16"
    names: tuple = field(default=(), compare=False)

    def __post_init__(self):
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)

    @property
    def layer_params(self) -> int:
        d, hd, heads = self.hidden_size, self.head_dim, self.num_heads + 2 * self.num_kv_heads
        qkv = d * heads * hd + (heads * hd if self.qkv_bias else 0)
        return qkv + self.num_heads * hd * d + 3 * d * self.intermediate_size + 2 * d

    @property
    def num_params(self) -> int:
        """All parameters (embeddings counted once when tied)."""
        emb = self.vocab_size * self.hidden_size
        return self.num_layers * self.layer_params + emb * (1 if self.tie_word_embeddings else 2) + self.hidden_size

    @property
    def matmul_params(self) -> int:
        """Parameters multiplied per token: every layer plus the LM head (the embedding is a lookup)."""
        return self.num_layers * self.layer_params + self.vocab_size * self.hidden_size

    def weight_bytes(self, dtype: str | None = None) -> float:
        return self.matmul_params * DTYPE_BYTES[dtype or self.weight_dtype]

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> int:
        """K and V of one token in every layer."""
        if kv_dtype not in DTYPE_BYTES:
            raise InputError(f"unknown KV cache dtype {kv_dtype!r}; choose auto or fp8")
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * DTYPE_BYTES[kv_dtype]
