"""vLLM-V1-style scheduling: one token budget per step, running before waiting, preemption by recompute.

There is no prefill phase and no decode phase: each request has `num_computed_tokens` and the
scheduler gives it tokens to catch up with `num_tokens` (prompt + outputs). A step starts with
`token_budget = max_num_batched_tokens`. RUNNING requests go first, in admission order: a decode
takes 1 token, a partial prefill `min(remaining, token_budget)` -- that `min` is chunked prefill.
When the KV pool cannot cover a running request, the newest running request is preempted (blocks
freed, `num_computed_tokens = 0`, pushed to the front of WAITING) until it fits. WAITING requests are
then admitted FCFS while budget, `max_num_seqs` and blocks remain, unless this step preempted; with
`scheduler_reserve_full_isl` (vLLM 0.33's default) a request is admitted only when the pool could hold
its whole sequence, not just its first chunk, so a long prompt waits for blocks before the pool is full. An
admitted request first takes its prefix-cache hit (`KVCacheManager.get_computed_blocks`), so
`num_computed_tokens` starts at the cached length and only the rest is prefilled (vLLM 0.33.0's
vllm/v1/core/sched/scheduler.py; queries and hits are counted for requests never preempted).
With `enable_chunked_prefill=False` (vLLM's legacy prefill-first policy) the budget is raised to at
least `max_model_len`; if any waiting prompt can be admitted the step prefills whole prompts only and
every running decode waits for it -- the mechanism of decode starvation. `schedule()` never calls the
model or reads a clock, so a discrete-event simulator can drive it with `update_from_output()`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from stallscope.engine.kv_cache_manager import KVCacheManager
from stallscope.engine.request import Request, RequestStatus


@dataclass
class SchedulerOutput:
    """One step's plan. `num_scheduled_tokens` is ordered like the batch (running first, then new)."""

    scheduled_requests: list[Request] = field(default_factory=list)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    preempted_request_ids: list[str] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    num_prefill_reqs: int = 0
    num_decode_reqs: int = 0
    prefix_cache_queries: int = 0                   # tokens looked up / found, new requests only (vLLM's
    prefix_cache_hits: int = 0                      # PrefixCacheStats.queries / .hits)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    def add(self, request: Request, num_tokens: int) -> None:
        self.scheduled_requests.append(request)
        self.num_scheduled_tokens[request.request_id] = num_tokens
        if _is_decode(request, num_tokens):
            self.num_decode_tokens += 1
            self.num_decode_reqs += 1
        else:
            self.num_prefill_tokens += num_tokens
            self.num_prefill_reqs += 1

    def chunks(self) -> list[tuple[int, int, bool]]:
        """(num_computed_tokens, scheduled tokens, is prefill) per request, as `add` classed it; before the update."""
        return [(r.num_computed_tokens, n, not _is_decode(r, n))
                for r in self.scheduled_requests for n in [self.num_scheduled_tokens[r.request_id]]]


def _is_decode(request: Request, num_tokens: int) -> bool:
    return num_tokens == 1 and request.num_computed_tokens >= request.num_prompt_tokens


class Scheduler:
    """Example: `s = Scheduler(kv, max_num_batched_tokens=512); s.add_request(r); out = s.schedule()`."""

    def __init__(self, kv_cache_manager: KVCacheManager, *, max_num_batched_tokens: int,
                 max_num_seqs: int = 128, enable_chunked_prefill: bool = True, max_model_len: int = 2048,
                 scheduler_reserve_full_isl: bool = True):
        self.kv = kv_cache_manager
        self.scheduler_reserve_full_isl = scheduler_reserve_full_isl
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.enable_chunked_prefill = enable_chunked_prefill
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add_request(self, request: Request) -> None:
        self.waiting.append(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        if not self.enable_chunked_prefill:
            return self._schedule_prefill_first()
        out = SchedulerOutput()
        token_budget = self.max_num_batched_tokens
        # running: decodes and partial prefills, in admission order
        i = 0
        while i < len(self.running) and token_budget > 0:
            req = self.running[i]
            num_new = min(req.num_tokens - req.num_computed_tokens, token_budget)
            if not self._allocate_or_preempt(req, num_new, out):
                break                                   # req itself was the newest and got preempted
            out.add(req, num_new)
            token_budget -= num_new
            i += 1
        # waiting: admit FCFS while budget, seats and blocks remain, and only if nobody was preempted
        while (self.waiting and token_budget > 0 and not out.preempted_request_ids
               and len(self.running) < self.max_num_seqs):
            req = self.waiting[0]
            hits, num_hit = self.kv.get_computed_blocks(req)
            num_new = min(req.num_tokens - num_hit, token_budget)
            if not self.kv.allocate_slots(req, num_new, hits, self.scheduler_reserve_full_isl):
                break
            self._admit(req, num_hit, out)
            out.add(req, num_new)
            token_budget -= num_new
        return out

    def _schedule_prefill_first(self) -> SchedulerOutput:
        out = SchedulerOutput()
        token_budget = max(self.max_num_batched_tokens, self.max_model_len)
        while self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            hits, num_hit = self.kv.get_computed_blocks(req)
            num_new = req.num_tokens - num_hit          # the whole uncached prompt, never chunked
            if num_new > token_budget or not self.kv.allocate_slots(req, num_new, hits):
                break
            self._admit(req, num_hit, out)
            out.add(req, num_new)
            token_budget -= num_new
        if out.scheduled_requests:
            return out                                  # a prefill step: running decodes wait
        i = 0
        while i < len(self.running):
            req = self.running[i]
            num_new = req.num_tokens - req.num_computed_tokens
            if not self._allocate_or_preempt(req, num_new, out):
                break
            out.add(req, num_new)
            i += 1
        return out

    def _allocate_or_preempt(self, req: Request, num_new: int, out: SchedulerOutput) -> bool:
        while not self.kv.allocate_slots(req, num_new):
            victim = self.running.pop()                 # newest running request
            self._preempt(victim)
            out.preempted_request_ids.append(victim.request_id)
            if victim is req:
                return False
        return True

    def _admit(self, req: Request, num_hit: int, out: SchedulerOutput) -> None:
        self.waiting.popleft()
        req.num_computed_tokens = num_hit
        if req.num_cached_tokens < 0:
            req.num_cached_tokens = num_hit
        if self.kv.enable_caching and req.num_preemptions == 0:
            out.prefix_cache_queries += req.num_tokens
            out.prefix_cache_hits += num_hit
        req.status = RequestStatus.RUNNING
        self.running.append(req)

    def _preempt(self, req: Request) -> None:
        self.kv.free(req)
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.waiting.appendleft(req)

    def update_from_output(self, out: SchedulerOutput, sampled_token_ids: dict[str, int]) -> list[Request]:
        """Advance `num_computed_tokens`, append sampled tokens, finish stopped requests.

        Returns the requests that got a token this step (finished ones have `is_finished`).
        """
        changed = []
        for req in out.scheduled_requests:
            if req.is_finished:
                continue
            req.num_computed_tokens += out.num_scheduled_tokens[req.request_id]
            token = sampled_token_ids.get(req.request_id)
            if token is None:
                continue
            req.append_output_token(token)
            status = self._stop_status(req, token)
            if status is not None:
                self.finish_request(req, status)
            changed.append(req)
        return changed

    def _stop_status(self, req: Request, token: int) -> RequestStatus | None:
        p = req.sampling_params
        if not p.ignore_eos and token == req.eos_token_id:
            return RequestStatus.FINISHED_STOPPED
        if token in p.stop_token_ids:
            return RequestStatus.FINISHED_STOPPED
        if req.num_output_tokens >= p.max_tokens or req.num_tokens >= self.max_model_len:
            return RequestStatus.FINISHED_LENGTH_CAPPED
        return None

    def finish_request(self, req: Request, status: RequestStatus) -> None:
        """Move the request out of the queues and free its blocks (used for stop, length and abort)."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        req.status = status
        self.kv.free(req)
