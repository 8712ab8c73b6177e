"""A request's lifecycle state, in vLLM V1's words (`num_computed_tokens`, `RequestStatus`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from stallscope.core.errors import InputError


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. `temperature=0` is greedy; `ignore_eos=True` gives exact output lengths.

    Example: `SamplingParams(max_tokens=32, temperature=0.8, top_p=0.95, seed=1)`.
    """

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InputError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if not self.temperature >= 0:
            raise InputError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p!r}")


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH_CAPPED = "length"
    FINISHED_ABORTED = "abort"
    FINISHED_ERROR = "error"                # the engine failed this request alone (its sampling raised)

    @property
    def is_finished(self) -> bool:
        return self.name.startswith("FINISHED_")


class Request:
    """Tokens = prompt + outputs; the first `num_computed_tokens` of them have KV in the cache."""

    def __init__(self, request_id: str, prompt_token_ids: list[int], sampling_params: SamplingParams,
                 arrival_ns: int, eos_token_id: int | None = None):
        self.request_id = request_id
        self.prompt_token_ids = tuple(int(t) for t in prompt_token_ids)
        self.sampling_params = sampling_params
        self.arrival_ns = arrival_ns
        self.eos_token_id = eos_token_id
        self.status = RequestStatus.WAITING
        self.all_token_ids: list[int] = list(self.prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.num_preemptions = 0
        self.first_scheduled_ns: int | None = None
        self.first_token_ns: int | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    @property
    def finish_reason(self) -> str | None:
        return self.status.value if self.status.is_finished else None

    def append_output_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)

    def __repr__(self) -> str:
        return (f"Request({self.request_id!r}, {self.status.name}, prompt={self.num_prompt_tokens}, "
                f"out={self.num_output_tokens}, computed={self.num_computed_tokens})")
