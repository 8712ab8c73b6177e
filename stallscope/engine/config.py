"""The scheduler's shape: the vLLM flags the engine loop holds fixed, shared by the reference server and the what-if."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerConfig:
    """vLLM's scheduler and KV-pool flags. The defaults are the what-if's: an effectively unbounded pool."""

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    enable_chunked_prefill: bool = True
    block_size: int = 16
    num_gpu_blocks: int = 1 << 20
    max_model_len: int = 2048
