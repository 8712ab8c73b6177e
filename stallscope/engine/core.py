"""`EngineCore`: the one engine loop (schedule, execute, update, `StepStats`) for a model or a cost model.

The reference server passes the model runner and the wall clock; the what-if a step-cost model that
advances a simulated clock. `execute(out)` returns the sampled tokens; `clock()` (ns) dates the step.
"""

from __future__ import annotations

from stallscope.engine.config import SchedulerConfig
from stallscope.engine.kv_cache_manager import KVCacheManager
from stallscope.engine.request import Request
from stallscope.engine.scheduler import Scheduler
from stallscope.engine.stats import StepStats


class EngineCore:
    """Example: `core = EngineCore(SchedulerConfig(), lambda out: {}, time.time_ns); changed, stats = core.step()`."""

    def __init__(self, config: SchedulerConfig, execute, clock, bytes_per_block: int = 0):
        self.config = config
        self.kv_cache_manager = KVCacheManager(config.num_gpu_blocks, config.block_size, bytes_per_block,
                                               config.enable_prefix_caching)
        self.scheduler = Scheduler(self.kv_cache_manager, max_num_batched_tokens=config.max_num_batched_tokens,
                                   max_num_seqs=config.max_num_seqs,
                                   enable_chunked_prefill=config.enable_chunked_prefill,
                                   max_model_len=config.max_model_len,
                                   scheduler_reserve_full_isl=config.scheduler_reserve_full_isl)
        self.execute = execute
        self.clock = clock
        self.step_count = 0

    def step(self) -> tuple[list[Request], StepStats]:
        """One step; returns the requests that got a token (finished ones have `is_finished`) and its stats."""
        start_ns = self.clock()
        out = self.scheduler.schedule()
        num_running, num_waiting = len(self.scheduler.running), len(self.scheduler.waiting)
        arrivals, cached = {}, {}
        for req in out.scheduled_requests:
            if req.first_scheduled_ns is None:
                req.first_scheduled_ns = start_ns
                arrivals[req.request_id], cached[req.request_id] = req.arrival_ns, req.num_cached_tokens
        changed = self.scheduler.update_from_output(out, self.execute(out))
        end_ns = self.clock()
        for req in (r for r in changed if r.first_token_ns is None):
            req.first_token_ns = end_ns
        kv = self.kv_cache_manager
        stats = StepStats(
            step=self.step_count, start_ns=start_ns, end_ns=end_ns,
            num_prefill_tokens=out.num_prefill_tokens, num_decode_tokens=out.num_decode_tokens,
            num_prefill_reqs=out.num_prefill_reqs, num_decode_reqs=out.num_decode_reqs,
            num_running=num_running, num_waiting=num_waiting, num_preempted=len(out.preempted_request_ids),
            kv_blocks_used=kv.num_used_blocks, num_gpu_blocks=kv.num_gpu_blocks,
            num_scheduled_tokens=dict(out.num_scheduled_tokens), arrival_ns=arrivals,
            num_cached_tokens=cached,
            prefix_cache_queries=out.prefix_cache_queries, prefix_cache_hits=out.prefix_cache_hits)
        self.step_count += 1
        return changed, stats
