"""Engine and model configuration: frozen records, validated once, with the two model presets.

`EngineConfig` carries vLLM's flag names (`max_num_batched_tokens`, `enable_chunked_prefill`,
`block_size`, `kv_cache_dtype`, ...); every invalid value raises `InputError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from stallscope.core.errors import InputError
from stallscope.engine.config import ModelConfig, SchedulerConfig

KV_CACHE_DTYPES = ("auto", "float32", "fp16", "fp8")
BOOL_FLAGS = ("enable_chunked_prefill", "enable_prefix_caching", "scheduler_reserve_full_isl")


PRESETS: dict[str, ModelConfig] = {
    # ~2.9M parameters: fast enough for property tests on 2 cores.
    "tiny": ModelConfig("tiny", hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=2,
                        intermediate_size=688, max_model_len=2048, weight_dtype="float32"),
    # ~105M parameters: a 2,048-token prefill is seconds on 2 cores, a 16-request decode step tens of ms.
    # Few wide layers and 8:1 GQA (as Llama-3-70B): the linear layers, not numpy's per-layer attention
    # overhead, dominate a decode step, as they do on a GPU (docs/performance.md).
    "small": ModelConfig("small", hidden_size=1024, num_layers=7, num_heads=16, num_kv_heads=2,
                         intermediate_size=4096, max_model_len=4096, weight_dtype="float32"),
}


@dataclass(frozen=True)
class EngineConfig:
    """Engine flags, named as vLLM names them. `num_blocks = floor(kv_cache_mb * 2**20 / bytes_per_block)`."""

    model: str = "tiny"
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    scheduler_reserve_full_isl: bool = True
    block_size: int = 16
    kv_cache_mb: float = 64.0
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None
    seed: int = 0
    weights: str | None = None
    step_trace: str | None = None
    blas_threads: int | None = None     # None: every core this process may run on


    def __post_init__(self):
        if self.model not in PRESETS:
            raise InputError(f"unknown model {self.model!r}; choose one of {', '.join(PRESETS)}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise InputError(f"unknown --kv-cache-dtype {self.kv_cache_dtype!r}; "
                             f"choose one of {', '.join(KV_CACHE_DTYPES)}")
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.max_num_batched_tokens < self.block_size:
            raise InputError(f"--max-num-batched-tokens {self.max_num_batched_tokens} is smaller than "
                             f"--block-size {self.block_size}")
        if not self.kv_cache_mb > 0:
            raise InputError(f"--kv-cache-mb must be positive, got {self.kv_cache_mb!r}")
        if self.blas_threads is not None and (not isinstance(self.blas_threads, (int, np.integer))
                                               or self.blas_threads < 1):
            raise InputError(f"--blas-threads must be a positive integer, got {self.blas_threads!r}")
        if self.max_model_len is not None and (not isinstance(self.max_model_len, (int, np.integer))
                                               or self.max_model_len < 2):
            raise InputError(f"--max-model-len must be an integer >= 2, got {self.max_model_len!r}")

    @classmethod
    def from_flags(cls, flags) -> EngineConfig:
        """The config a `stallscope refserver` command line's engine flags give (`--name value`, `--name=value`,
        `--[no-]enable-chunked-prefill`, `--[no-]enable-prefix-caching`, `--[no-]scheduler-reserve-full-isl`; other
        flags skipped), so `repro` can record it in server.json as data.
        ValueError for a value of the wrong type."""
        kinds, kw, flags = {f.name: f.type for f in fields(cls)}, {}, [str(f) for f in flags]
        for i, flag in enumerate(flags):
            name, eq, value = flag[2:].partition("=") if flag.startswith("--") else ("", "", "")
            name = name.replace("-", "_")
            if name.removeprefix("no_") in BOOL_FLAGS:
                kw[name.removeprefix("no_")] = not name.startswith("no_")
            elif name in kinds:
                value = value if eq else flags[i + 1] if i + 1 < len(flags) else ""
                kw[name] = int(value) if kinds[name].startswith("int") else float(value) if kinds[name] == "float" else value
        return cls(**kw)

    @property
    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(self.max_num_batched_tokens, self.max_num_seqs, self.enable_chunked_prefill,
                               self.block_size, self.num_gpu_blocks, self.resolved_max_model_len,
                               self.enable_prefix_caching, self.scheduler_reserve_full_isl)

    @property
    def model_config(self) -> ModelConfig:
        return PRESETS[self.model]

    @property
    def resolved_max_model_len(self) -> int:
        return self.max_model_len if self.max_model_len is not None else self.model_config.max_model_len

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token: layers x kv_heads x head_dim x 2 (K and V) x dtype bytes (fp8 scales not counted)."""
        return self.model_config.kv_bytes_per_token(self.kv_cache_dtype)

    @property
    def bytes_per_block(self) -> int:
        return self.block_size * self.bytes_per_token

    @property
    def num_gpu_blocks(self) -> int:
        return int(self.kv_cache_mb * 2**20 // self.bytes_per_block)
