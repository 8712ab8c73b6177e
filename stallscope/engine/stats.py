"""`StepStats`: the typed record one engine step returns -- the observability seam (docs/step-trace.md)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepStats:
    """One step. Times are `time.time_ns()` (ns since the epoch), so they align with scrape timestamps."""

    step: int
    start_ns: int
    end_ns: int
    num_prefill_tokens: int
    num_decode_tokens: int
    num_prefill_reqs: int
    num_decode_reqs: int
    num_running: int
    num_waiting: int
    num_preempted: int
    kv_blocks_used: int
    num_gpu_blocks: int
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    # {request_id: arrival time (ns, the server's add)} of the requests scheduled for the first time here
    arrival_ns: dict[str, int] = field(default_factory=dict)
    # {request_id: prompt tokens taken from the prefix cache} for the same requests (vLLM's num_cached_tokens)
    num_cached_tokens: dict[str, int] = field(default_factory=dict)
    # prompt tokens looked up in / found in the prefix cache by requests admitted here, never-preempted
    # ones only (vLLM's PrefixCacheStats.queries / .hits); 0 with prefix caching off
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns
