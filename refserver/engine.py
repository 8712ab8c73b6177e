"""`LLMEngine`: add requests, then call `step()` -- one schedule, one batched forward, one `StepStats`.

Not thread-safe: a server drives it from one engine thread. The engine never imports a metrics library;
`StepStats` and `RequestOutput` carry everything a metrics layer needs. A request whose sampling raises
finishes alone with `finish_reason` "error" (blocks freed); the rest of the batch goes on untouched.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np

from stallscope.core.errors import InputError

from .config import EngineConfig, ModelConfig
from stallscope.engine.core import EngineCore
from .model_runner import ModelRunner
from stallscope.engine.request import Request, RequestStatus, SamplingParams
from .sampling import request_rng
from stallscope.engine.stats import StepStats
from stallscope.engine.step_trace import StepTraceWriter
from .tokenizer import ByteTokenizer
from .weights import init_weights, load_npz

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequestOutput:
    """One per request that produced a token or finished in a step."""

    request_id: str
    new_token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    arrival_ns: int
    first_scheduled_ns: int | None
    first_token_ns: int | None
    num_preemptions: int


def _output(req: Request, new_token_ids: tuple[int, ...]) -> RequestOutput:
    return RequestOutput(req.request_id, new_token_ids, req.is_finished, req.finish_reason,
                         req.num_prompt_tokens, req.num_output_tokens, req.arrival_ns,
                         req.first_scheduled_ns, req.first_token_ns, req.num_preemptions)


def check_pool_holds_one_request(config: EngineConfig) -> None:
    """vLLM 0.33 refuses to start when the pool, less its null block, cannot hold one request of
    `max_model_len` tokens (`check_enough_kv_cache_memory`, vllm/v1/core/kv_cache_planning.py), and names
    the longest context that fits; so does this engine, so no request is refused later for the pool."""
    fits, length = pool_context_tokens(config), config.resolved_max_model_len
    if length > fits:
        needed = -(-length // config.block_size)
        raise InputError(
            f"--kv-cache-mb {config.kv_cache_mb} leaves {config.num_gpu_blocks - 1} usable blocks ({fits} tokens) "
            f"but one request of --max-model-len {length} needs {needed}; raise --kv-cache-mb to "
            f"{_mb_for_blocks(config, needed + 1)} or set --max-model-len {fits} or less")


def pool_context_tokens(config: EngineConfig) -> int:
    """The longest context the pool holds besides its null block: the most `--max-model-len` vLLM starts with."""
    return (config.num_gpu_blocks - 1) * config.block_size


def _mb_for_blocks(config: EngineConfig, blocks: int) -> float:
    """The smallest --kv-cache-mb, at 0.01 MiB, that gives `blocks` blocks."""
    return math.ceil(blocks * config.bytes_per_block / 2**20 * 100) / 100


class LLMEngine:
    """Example:
        engine = LLMEngine(EngineConfig(model="tiny"))
        engine.add_request("r1", engine.tokenizer.encode("hello"), SamplingParams(max_tokens=8))
        while engine.has_unfinished_requests():
            outputs, stats = engine.step()
    """

    def __init__(self, config: EngineConfig, *, keep_logits: bool = False):
        self.config = config
        self.model_config: ModelConfig = config.model_config
        self.tokenizer = ByteTokenizer()
        self.max_model_len = config.resolved_max_model_len
        if config.num_gpu_blocks < 2:                  # block 0 is the KV manager's null block
            raise InputError(f"--kv-cache-mb {config.kv_cache_mb} holds fewer than 2 blocks of "
                             f"{config.bytes_per_block} bytes")
        check_pool_holds_one_request(config)
        self.core = EngineCore(config.scheduler_config, self._execute, time.time_ns, config.bytes_per_block)
        self.kv_cache_manager, self.scheduler = self.core.kv_cache_manager, self.core.scheduler
        weights = (load_npz(config.weights, self.model_config) if config.weights
                   else init_weights(self.model_config, config.seed))
        self.model_runner = ModelRunner(config, self.kv_cache_manager, weights)
        self.requests: dict[str, Request] = {}
        self._rngs: dict[str, np.random.Generator] = {}
        self._pending_finishes: list[RequestOutput] = []
        self.keep_logits = keep_logits
        self.logits: dict[str, list[np.ndarray]] = {}      # request_id -> logits rows (keep_logits only)
        self._trace = StepTraceWriter(config.step_trace) if config.step_trace else None

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    arrival_ns: int | None = None) -> None:
        """Queue a request; InputError for an empty or too-long prompt or a duplicate id. Any request that
        fits `max_model_len` fits the pool: the engine refused to start otherwise."""
        if request_id in self.requests:
            raise InputError(f"duplicate request_id {request_id!r}")
        n = len(prompt_token_ids)
        if n == 0:
            raise InputError(f"request {request_id!r} has an empty prompt")
        if n >= self.max_model_len:
            raise InputError(f"prompt of request {request_id!r} has {n} tokens; --max-model-len "
                             f"{self.max_model_len} leaves no room for output")
        bad = [t for t in prompt_token_ids if not 0 <= int(t) < self.model_config.vocab_size]
        if bad:
            raise InputError(f"request {request_id!r} has token id {bad[0]} outside the vocabulary "
                             f"(0..{self.model_config.vocab_size - 1})")
        req = Request(request_id, prompt_token_ids, params,
                      time.time_ns() if arrival_ns is None else arrival_ns, self.tokenizer.eos_token_id)
        self.requests[request_id] = req
        if params.temperature > 0:
            self._rngs[request_id] = request_rng(params, self.config.seed, request_id)
        self.scheduler.add_request(req)

    def abort_request(self, request_id: str, status: RequestStatus = RequestStatus.FINISHED_ABORTED) -> None:
        """Free the request's blocks; its `status` output comes with the next step. No-op if unknown or done."""
        req = self.requests.pop(request_id, None)
        if req is None or req.is_finished:
            return
        self.scheduler.finish_request(req, status)
        self._rngs.pop(request_id, None)
        self._pending_finishes.append(_output(req, ()))

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    def num_running(self) -> int:
        return len(self.scheduler.running)

    def _execute(self, out) -> dict[str, int]:
        sampled, self._logits, failed = self.model_runner.execute(out, self._rngs)
        for request_id, exc in failed.items():      # finished before update_from_output, which then skips them
            log.error("request %r failed in sampling: %s: %s", request_id, type(exc).__name__, exc, exc_info=exc)
            self.abort_request(request_id, RequestStatus.FINISHED_ERROR)
        return sampled

    def step(self) -> tuple[list[RequestOutput], StepStats]:
        """Schedule, run one batched forward over every scheduled token, sample, and report the step."""
        changed, stats = self.core.step()
        outputs, self._pending_finishes = self._pending_finishes, []
        for req in changed:
            if self.keep_logits:
                self.logits.setdefault(req.request_id, []).append(self._logits[req.request_id])
            outputs.append(_output(req, (req.output_token_ids[-1],)))
            if req.is_finished:
                del self.requests[req.request_id]
                self._rngs.pop(req.request_id, None)
        if self._trace is not None:
            self._trace.write(stats)
        return outputs, stats

    def close(self) -> None:
        """Close the step trace file, if any."""
        if self._trace is not None:
            self._trace.close()
            self._trace = None
