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

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns
