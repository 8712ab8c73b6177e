"""Chunked prefill as the server ran it: on or off, and its token budget, with where that knowledge came from.

The idea: an explanation or a recommended `--max-num-batched-tokens` is only right for the configuration it
assumes, so every starvation finding states which one it used and how it was known, in this order:

1. `run directory`: the engine configuration `stallscope repro` records in each arm's server.json;
2. `flags`: what the user passed to `analyze` (`--[no-]enable-chunked-prefill`, `--max-num-batched-tokens`);
   else `server log`: what the vLLM server wrote at startup, read from the log passed as `--server-log`
   (collectors/vllm_log.py);
3. `inferred from metrics`: vLLM exports no scheduler configuration, so it is read off the run's histograms
   (analyzers/chunking_inference.py says how);
4. `unknown`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LONG_PREFILL_TOKENS = 512     # the long-prefill cut: the truth rule's and signals' minimum
STALLS_PER_PREFILL_CHUNKED = 1.5  # above this many ITL samples > SLO per long prefill per stream: chunk steps
FEW_STREAMS = 0.5             # stalls on fewer than this share of the running streams are no long prompt's step
ESTIMATE_MARGIN = 1.5         # an estimated budget holds long prefills from 1.5 x the cut (chunking_inference.py)
STEP_MARGIN = 1.05            # ... from 1.05 x the cut when sized from the slowest step's exact mean (slow_step.py)
SHARE_LOW = 0.85              # ... whose share of a prompt reads down to this x its chunk: unsettled from here
SLOW_SHARE_MARGIN = 1.2       # P / S, a long prompt's tokens per step above the SLO, holds them from 1.2 x the cut
SETTLE_IT = ("Pass `--enable-chunked-prefill --max-num-batched-tokens N`, the server's log (`--server-log`) or a run "
             "directory to analyze to decide it.")   # the sentence every finding the metrics cannot settle ends with


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
    budget_estimate: float | None = None  # inferred from metrics: P x G / T (chunking_inference.py)
    long_prefill_s: float | None = None   # inferred from metrics: T, the long prompts' median prefill time
    budget_bound: float | None = None     # inferred from metrics: at most P / (S - 1) (chunking_inference.py)
    budget_floor: float | None = None     # inferred from metrics: the smallest chunk the slowest gap allows
    long_prompt_tokens: float | None = None  # inferred from metrics: P, the long prompts' median size
    slow_share: float | None = None       # inferred from metrics: P / S, tokens per step above the SLO
    slowest_step_s: float | None = None   # inferred from metrics: the slowest step's exact gap (slow_step.py)
    queued_floor: float | None = None     # inferred from metrics: at most the largest chunk (queued_steps.py)
    counted: bool = False                 # inferred from metrics: the estimate is P / K, a count of slow gaps

    def holds_long_prefills(self, cut: int = LONG_PREFILL_TOKENS, decodes: int = 0) -> bool | None:
        """Whether one step can compute >= `cut` prompt tokens beside `decodes` running decodes: True with
        chunking off or a budget >= cut + decodes. vLLM V1 schedules RUNNING requests in admission order, one
        token per decode, and a partial prefill takes what is left of the budget; every decode beside a chunk
        is older than its prompt, because a chunk that takes the rest of the budget lets no request in behind it
        until its last step. So a stream that waits on the step decodes in it, ahead of the chunk."""
        if self.enabled is False:
            return True
        if self.enabled and self.budget:
            return bool(self.budget - decodes >= cut)
        if self.enabled and self.queued_floor is not None and self.queued_floor >= cut:
            return True   # a floor under the largest chunk, where the others are estimates
        if self.enabled and self.slowest_step_s is not None and self.budget_estimate is not None:
            return bool(self.budget_estimate >= STEP_MARGIN * cut)
        if self.enabled and self.budget_bound is not None and self.budget_bound < cut:
            return False
        if self.enabled and self.slow_share is not None and self.slow_share >= SLOW_SHARE_MARGIN * cut:
            return True
        if self.enabled and self.budget_estimate is not None:
            return bool(self.budget_estimate >= ESTIMATE_MARGIN * cut and not self.wide_bucket(cut))
        return None

    def wide_bucket(self, cut: int = LONG_PREFILL_TOKENS) -> bool:
        """Whether a budget estimate read off bucket bounds reaches its margin while the same bucket's lower
        bound reads under `cut` (`budget_floor`): the slowest gaps' ITL bucket holds a chunk either side of it,
        as (1 s, 2.5 s] held 384-token chunk steps read as 900 (held-out 64 and 66). Unsettled, like the band.

        >>> Chunking(True, None, "inferred from metrics", budget_estimate=900.0, budget_floor=360.0).wide_bucket()
        True
        """
        return bool(self.source == "inferred from metrics" and self.enabled and not self.budget
                    and self.slowest_step_s is None and self.budget_estimate is not None
                    and self.budget_estimate >= ESTIMATE_MARGIN * cut
                    and self.budget_floor is not None and self.budget_floor < cut)

    def estimate_unsettled(self, cut: int = LONG_PREFILL_TOKENS) -> bool:
        """Whether the metrics' budget estimate falls in `unsettled_band`, so it cannot place the step on either
        side of `cut`: the step is not taken to hold a long prefill, but the findings say the metrics cannot settle
        it (docs/accuracy.md, held-out 22 and 23, 61 and 62). A bound under `cut` settles it.

        >>> Chunking(True, None, "inferred from metrics", budget_estimate=542.0).estimate_unsettled()
        True
        >>> Chunking(True, None, "inferred from metrics", budget_estimate=542.0, budget_bound=450.0
        ...          ).estimate_unsettled()
        False
        >>> Chunking(True, None, "inferred from metrics", budget_estimate=470.0, slowest_step_s=1.2).estimate_unsettled()
        True
        """
        low, high = self.unsettled_band(cut)
        return bool(self.source == "inferred from metrics" and self.enabled and not self.budget
                    and not self.holds_long_prefills(cut)
                    and (self.budget_bound is None or self.budget_bound >= cut)
                    and self.budget_estimate is not None
                    and (low <= self.budget_estimate < high or self.wide_bucket(cut)))

    def unsettled_reading(self, cut: int = LONG_PREFILL_TOKENS) -> str:
        """What an unsettled estimate read, for the findings that say so.

        >>> Chunking(True, None, "inferred from metrics", budget_estimate=600.0).unsettled_reading()
        'the estimate, about 600 prompt tokens per slow step, falls between 512 and 768'
        >>> Chunking(True, None, "inferred from metrics", budget_estimate=900.0, budget_floor=360.0).unsettled_reading()
        'the estimate, about 900 prompt tokens per slow step, could be as low as 360 (the ITL bucket of the slowest gaps is that wide)'
        """
        head = f"the estimate, about {self.budget_estimate:.0f} prompt tokens per slow step, "
        if self.wide_bucket(cut):
            return head + f"could be as low as {self.budget_floor:.0f} (the ITL bucket of the slowest gaps is that wide)"
        low, high = self.unsettled_band(cut)
        return head + f"falls between {low:.0f} and {high:.0f}"

    def unsettled_band(self, cut: int = LONG_PREFILL_TOKENS) -> tuple[float, float]:
        """The budget estimates that cannot say whether a step held `cut` prompt tokens: up to `margin()` x cut
        (estimates read high), and from `SHARE_LOW` x cut when the slowest step was sized exactly (its share of a
        prompt also reads low: a prompt's short last chunk carries the step's decodes and its attention over the
        prefix, so the first chunk's share of the prefill time understates its share of the tokens) or when it
        is P / K (`counted`: the short last chunk's step lands in the slowest gaps' bucket too, and counts as a
        step: 1,600 tokens at 624 per chunk read 511 from 3.13 such gaps per prompt, held-out 106), else from the
        cut (P x G / T, read off a bucket's upper bound, reads high only).

        >>> Chunking(True, None, "inferred from metrics", slowest_step_s=1.0).unsettled_band()
        (435.2, 537.6)
        >>> Chunking(True, None, "inferred from metrics", counted=True).unsettled_band()
        (435.2, 768.0)
        """
        low = SHARE_LOW * cut if self.slowest_step_s is not None or self.counted else float(cut)
        return low, self.margin() * cut

    def margin(self) -> float:
        """The multiple of the cut from which the budget estimate holds a long prefill: `STEP_MARGIN` when it was
        sized from the slowest step's exact mean, else `ESTIMATE_MARGIN` (read off bucket bounds)."""
        return STEP_MARGIN if self.slowest_step_s is not None else ESTIMATE_MARGIN

    def chunk_estimate(self, cut: int = LONG_PREFILL_TOKENS) -> float | None:
        """The inferred chunk a slow step held, as the figure that decided `holds_long_prefills`: the slow-step
        share when it decided (the budget estimate under its margin), else the budget estimate.

        >>> Chunking(True, None, "inferred from metrics", budget_estimate=532.0, slow_share=651.0).chunk_estimate()
        651.0
        >>> Chunking(True, None, "inferred from metrics", budget_estimate=470.0, queued_floor=541.0).chunk_estimate()
        541.0
        """
        if self.queued_floor is not None and self.queued_floor >= cut:
            return max(self.queued_floor, self._estimated_chunk(cut) or 0.0)
        return self._estimated_chunk(cut)

    def _estimated_chunk(self, cut: int) -> float | None:
        if (self.slow_share is not None and self.slow_share >= SLOW_SHARE_MARGIN * cut and self.slowest_step_s is None
                and (self.budget_estimate is None or self.budget_estimate < ESTIMATE_MARGIN * cut)):
            return self.slow_share
        return self.budget_estimate

    def undecided(self, cut: int = LONG_PREFILL_TOKENS) -> bool:
        """Whether the histograms that inferred long-prefill steps also allow chunks under `cut`: the slowest
        ITL gap's bucket starts low enough for a chunk of `budget_floor` tokens (chunking_inference.py), and the
        slow steps did not hold `cut` or more on average (then one of them held at least that).

        >>> Chunking(True, None, "inferred from metrics", budget_floor=300.0, slow_share=650.0).undecided()
        False
        """
        return bool(self.source == "inferred from metrics" and self.holds_long_prefills(cut)
                    and self.budget_floor is not None and self.budget_floor < cut
                    and not (self.slow_share is not None and self.slow_share >= cut)
                    and not (self.queued_floor is not None and self.queued_floor >= cut))

    def describe(self) -> str:
        """`chunked prefill on, --max-num-batched-tokens 64 (flags)`. Whole-prompt steps inferred from the metrics
        read as off or a budget whose one step holds most of a long prompt: such a chunked server leaves the
        same histograms as one with chunking off.

        >>> print(Chunking(False, None, "inferred from metrics", "x", long_prompt_tokens=1250).describe()[:93])
        chunked prefill off, or on with a budget that holds most of a long prompt (about 1250 tokens)
        """
        if self.enabled is None:
            why = f"{self.detail}; " if self.detail else ""
            return (f"chunked prefill: unknown ({why}pass --[no-]enable-chunked-prefill and --max-num-batched-tokens, "
                    "or --server-log)")
        state = "on" if self.enabled else "off"
        if self.whole_prompts_inferred():
            size = f" (about {self.long_prompt_tokens:.0f} tokens)" if self.long_prompt_tokens else ""
            state = f"off, or on with a budget that holds most of a long prompt{size} in one step"
        budget = f", --max-num-batched-tokens {self.budget}" if self.budget and self.enabled else ""
        detail = f": {self.detail}" if self.detail else ""
        return f"chunked prefill {state}{budget} ({self.source}{detail})"

    def sentence(self) -> str:
        """`describe()` starting a sentence."""
        text = self.describe()
        return text[:1].upper() + text[1:]

    def whole_prompts_inferred(self) -> bool:
        """Whole-prompt steps read off the histograms: their bucket bounds cannot tell chunking off from a budget
        whose one chunk step holds most of a long prompt, so the texts say both."""
        return self.enabled is False and self.source == "inferred from metrics"

    def step_held(self) -> str:
        """What one slow step held, as the configuration allows: a chunk with chunking on, else a whole prompt.

        >>> Chunking(True, 768, "flags").step_held(), Chunking(False, None, "flags").step_held()
        ('a chunk of up to 768 prompt tokens', 'the whole prompt')
        """
        if self.whole_prompts_inferred():
            return "the whole prompt, or most of it"
        if not self.enabled:
            return "the whole prompt"
        if self.budget:
            return f"a chunk of up to {self.budget} prompt tokens"
        if self.chunk_estimate():
            return f"a chunk of about {self.chunk_estimate():.0f} prompt tokens"
        return "a chunk of the prompt"

    def as_evidence(self) -> dict:
        return {"chunked_prefill": self.enabled, "max_num_batched_tokens_in_use": self.budget,
                "config_source": self.source, "budget_estimate": self.budget_estimate,
                "budget_bound": self.budget_bound, "budget_floor": self.budget_floor,
                "long_prompt_tokens": self.long_prompt_tokens, "slow_step_share": self.slow_share,
                "slowest_step_s": self.slowest_step_s, "queued_step_floor": self.queued_floor}


UNKNOWN = Chunking()


def decodes_beside(running: float) -> int:
    """The decodes beside a chunk step: the running requests less the one prefilling (at least one, a stream to
    starve; one when the running gauge is unknown).

    >>> decodes_beside(4.0), decodes_beside(1.0), decodes_beside(float("nan"))
    (3, 1, 1)
    """
    return max(int(running) - 1, 1) if math.isfinite(running) else 1


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


def from_server_log(config) -> Chunking:
    """The Chunking a vLLM server log states (collectors.vllm_log.ServerLogConfig): source `server log`, the
    deciding lines as its detail.

    >>> from stallscope.collectors.vllm_log import ServerLogConfig
    >>> from_server_log(ServerLogConfig(True, 640, "0.33.0", "vllm.log:12")).describe()
    'chunked prefill on, --max-num-batched-tokens 640 (server log: vllm.log:12)'
    """
    on = config.enable_chunked_prefill
    return Chunking(on, config.max_num_batched_tokens if on else None, "server log", config.where)
