"""Turns a SchedulerOutput into one batched forward pass: flat token arrays, slot mapping, sampling."""

from __future__ import annotations

import ctypes
import os
import sys

import numpy as np
from threadpoolctl import ThreadpoolController

from .attention import AttentionMetadata, PagedKVCache
from .config import EngineConfig
from stallscope.engine.kv_cache_manager import KVCacheManager
from .model import Transformer
from .sampling import Sampler
from stallscope.engine.scheduler import SchedulerOutput


def available_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                              # not Linux
        return os.cpu_count() or 1


def _blas_threads_now(controllers) -> int:
    return max((lc.num_threads for lc in controllers.lib_controllers), default=1)


def server_blas_threads() -> int:
    """The server's default: all cores but one (the HTTP front end and local clients need it), never more
    than the BLAS already allows (OPENBLAS_NUM_THREADS and friends)."""
    return max(1, min(available_cores() - 1, _blas_threads_now(ThreadpoolController().select(user_api="blas"))))


def fix_blas_threads(threads: int | None) -> int:
    """Set one BLAS thread count for every step and return it: `threads`, else what the BLAS was started
    with (all cores unless OPENBLAS_NUM_THREADS says otherwise). All cores are a quiet machine's fastest
    choice for every step size, decode included. Fixed, not switched per step, so a step's cost stays one
    smooth function of its tokens (the what-if cost model fits it) and never jumps at a threshold."""
    controllers = ThreadpoolController().select(user_api="blas")
    threads = threads or _blas_threads_now(controllers)
    controllers.limit(limits=threads)               # the returned context is dropped: the setting stays
    return threads


def _keep_freed_memory_in_the_heap() -> None:
    """Let glibc reuse freed memory for numpy temporaries (< 32 MiB) instead of unmapping it.

    By default each multi-MiB temporary (gathered KV, activations) is a fresh mmap, and writing it costs a
    page fault per 4 KiB: a 4 MiB KV gather took 6 ms instead of 0.2 ms. Linux/glibc only; a no-op elsewhere.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 * 2**20)                    # M_MMAP_THRESHOLD
        libc.mallopt(-1, 512 * 2**20)                   # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


class ModelRunner:
    """Owns the model and the KV tensors; `execute(out)` -> {request_id: sampled token}, their logits and
    {request_id: exception} for requests whose sampling failed (left out of the tokens)."""

    def __init__(self, config: EngineConfig, kv_cache_manager: KVCacheManager, weights: dict[str, np.ndarray]):
        mc = config.model_config
        self.kv = kv_cache_manager
        self.block_size = config.block_size
        self.model = Transformer(mc, weights, max_len=config.resolved_max_model_len)
        self.cache = PagedKVCache(mc.num_layers, kv_cache_manager.num_gpu_blocks, config.block_size,
                                  mc.num_kv_heads, mc.head_dim, config.kv_cache_dtype)
        self.sampler = Sampler(mc.vocab_size)
        self.blas_threads = fix_blas_threads(config.blas_threads)
        _keep_freed_memory_in_the_heap()

    def prepare(self, out: SchedulerOutput) -> tuple[np.ndarray, np.ndarray, AttentionMetadata, list[int], list]:
        """Flatten the step: (input_ids (T,), positions (T,), metadata, logits rows, requests to sample)."""
        bs = self.block_size
        ids, positions, slots = [], [], []
        decode_rows, decode_tables, decode_lens, prefills = [], [], [], []
        logits_rows, to_sample = [], []
        row = 0
        for req in out.scheduled_requests:
            n = out.num_scheduled_tokens[req.request_id]
            start = req.num_computed_tokens
            table = np.asarray(self.kv.get_block_table(req.request_id), dtype=np.int64)
            pos = np.arange(start, start + n)
            ids.extend(req.all_token_ids[start:start + n])
            positions.append(pos)
            slots.append(table[pos // bs] * bs + pos % bs)
            if n == 1:
                decode_rows.append(row)
                decode_tables.append(table)
                decode_lens.append(start + 1)
            else:
                prefills.append((row, row + n, table, pos))
            row += n
            if start + n == req.num_tokens:             # caught up: the last row's logits pick a new token
                logits_rows.append(row - 1)
                to_sample.append(req)
        tables = np.zeros((len(decode_tables), max((len(t) for t in decode_tables), default=0)), dtype=np.int64)
        for i, t in enumerate(decode_tables):
            tables[i, : len(t)] = t
        meta = AttentionMetadata(
            slot_mapping=np.concatenate(slots) if slots else np.zeros(0, dtype=np.int64),
            decode_rows=np.asarray(decode_rows, dtype=np.int64),
            decode_block_tables=tables,
            decode_context_lens=np.asarray(decode_lens, dtype=np.int64),
            prefills=prefills)
        input_ids = np.asarray(ids, dtype=np.int64)
        pos_all = np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64)
        return input_ids, pos_all, meta, logits_rows, to_sample

    def execute(self, out: SchedulerOutput, rngs: dict) -> tuple[dict[str, int], dict[str, np.ndarray],
                                                                 dict[str, Exception]]:
        """One forward over every scheduled token; sample for requests whose tokens are all computed."""
        if not out.scheduled_requests:
            return {}, {}, {}
        input_ids, positions, meta, logits_rows, to_sample = self.prepare(out)
        logits = self.model.forward(input_ids, positions, meta, self.cache, logits_rows)
        if not to_sample:
            return {}, {}, {}
        tokens, errors = self.sampler.sample(logits, [r.sampling_params for r in to_sample],
                                             [rngs.get(r.request_id) for r in to_sample])
        sampled = {r.request_id: t for i, (r, t) in enumerate(zip(to_sample, tokens)) if i not in errors}
        return (sampled, {r.request_id: logits[i] for i, r in enumerate(to_sample)},
                {to_sample[i].request_id: exc for i, exc in errors.items()})
