"""Chunked prefill as the server ran it: on or off, and its token budget, with where that knowledge came from.

The idea: an explanation or a recommended `--max-num-batched-tokens` is only right for the configuration it
assumes, so every starvation finding states which one it used and how it was known, in this order:

1. `run directory`: the engine configuration `stallscope repro` records in each arm's server.json;
2. `flags`: what the user passed to `analyze` (`--[no-]enable-chunked-prefill`, `--max-num-batched-tokens`);
3. `inferred from metrics`: vLLM exports no scheduler configuration, so it is read off the stalls: with
   chunked prefill off, one step computes a whole prompt and each running stream stalls once per long
   prefill (about one ITL sample above the SLO per long prefill per stream); with chunking on, every chunk
   step of the prompt is slow, so each stream stalls once per chunk (many samples per prefill).
   `iteration_tokens_total` cannot tell: vLLM counts a prompt's computed tokens in the step where its
   prefill completes, chunked or not (docs/metric-traps.md);
4. `unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass

LONG_PREFILL_TOKENS = 512     # the long-prefill cut: the truth rule's and signals' minimum
STALLS_PER_PREFILL_CHUNKED = 1.5  # above this many ITL samples > SLO per long prefill per stream: chunk steps


@dataclass(frozen=True)
class Chunking:
    """`enabled` None when unknown; `budget` the `--max-num-batched-tokens` when known.

    >>> Chunking(True, 64, "flags").holds_long_prefills(), Chunking(False, None, "run directory").holds_long_prefills()
    (False, True)
    """

    enabled: bool | None = None
    budget: int | None = None
    source: str = "unknown"
    detail: str = ""

    def holds_long_prefills(self, cut: int = LONG_PREFILL_TOKENS) -> bool | None:
        """Whether one step can compute >= `cut` prompt tokens: True with chunking off or a budget >= cut."""
        if self.enabled is False:
            return True
        if self.enabled and self.budget:
            return self.budget >= cut
        return None

    def describe(self) -> str:
        """`chunked prefill on, --max-num-batched-tokens 64 (flags)`."""
        if self.enabled is None:
            return "chunked prefill: unknown (pass --[no-]enable-chunked-prefill and --max-num-batched-tokens)"
        state = "on" if self.enabled else "off"
        budget = f", --max-num-batched-tokens {self.budget}" if self.budget and self.enabled else ""
        detail = f": {self.detail}" if self.detail else ""
        return f"chunked prefill {state}{budget} ({self.source}{detail})"

    def as_evidence(self) -> dict:
        return {"chunked_prefill": self.enabled, "max_num_batched_tokens_in_use": self.budget,
                "config_source": self.source}


UNKNOWN = Chunking()


def from_engine_config(config) -> Chunking | None:
    """The Chunking of an EngineConfig (refserver.config) or any object with `enable_chunked_prefill` and
    `max_num_batched_tokens`; None for None."""
    if config is None:
        return None
    on = bool(getattr(config, "enable_chunked_prefill", True))
    return Chunking(on, int(config.max_num_batched_tokens) if on else None, "run directory")


def from_flags(enabled: bool | None, budget: int | None) -> Chunking | None:
    """The Chunking the user gave `analyze`; a budget alone means chunking on (vLLM V1's default); None when
    neither was given."""
    if enabled is None and budget is None:
        return None
    on = True if enabled is None else bool(enabled)
    return Chunking(on, budget if on else None, "flags")


def infer(stalls_per_prefill: float, long_prefills: float) -> Chunking:
    """Chunking inferred from one target's stalls (module docstring, 3); unknown without long prefills."""
    if not (long_prefills > 0) or stalls_per_prefill != stalls_per_prefill:
        return UNKNOWN
    on = stalls_per_prefill > STALLS_PER_PREFILL_CHUNKED
    what = (f"{stalls_per_prefill:.1f} ITL samples above the SLO per long prefill per running stream; about 1 "
            "means each prompt ran in one step, more means each of its chunk steps was slow")
    return Chunking(on, None, "inferred from metrics", what)
