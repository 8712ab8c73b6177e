"""The prompt tokens an engine step computed on average while requests queued: a floor under the largest chunk
that needs no scrape faster than the steps.

The idea: while a request waits, vLLM V1 fills every step's token budget, one token per running decode and the
rest prefill, so over the scrape intervals that open and close with `vllm:num_requests_waiting` > 0 the computed
prompt tokens (`prompt_tokens_by_source_total{source="local_compute"}`, else `prompt_tokens_total`) over the
steps that ran are about the chunk each step held, and a mean never exceeds the largest chunk it averages. The
steps are counted twice and the larger count kept, so each count's error reads the mean low: the interval's
length over its mean ITL (a preempted request's gap spans its wait and reads it high, so this count low) and the
`iteration_tokens_total` observations (one per step that emitted a token; a step of prefill alone emits none).
vLLM counts a prompt's tokens when its prefill completes, so a queued stretch's count is exact to the prompt in
progress at its start: `floor` takes one long prompt off each stretch. With 5 s scrapes a 576 budget's 574-token
chunks read 532, its floor 499 (held-out 63); nothing else sizes a step then (docs/accuracy.md, "The prompt tokens
per step while requests queued").

The mean does not decide alone: a stretch's two edges, the prompt counted at its start that it did not all compute
and the one in progress at its end that it computed but did not count, move it by up to a prompt each way. They
cancel only on average. A 512 budget's 502-token chunks read 520 over 14 queued intervals of 2,600-token prompts
(tests/analyzers/test_queued_steps.py), and held-out 114's 563-token chunks read 553 from 16 steps in 3 stretches of
1,600-token prompts, about 100 tokens per step per edge (docs/accuracy.md, "The queued steps' mean, weighed").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stallscope.analyzers import quantiles as Q
from stallscope.analyzers.signals import BY_SOURCE, ITERATION
from stallscope.analyzers.workload import interval_increase

WAITING = "vllm:num_requests_waiting"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
ITERATIONS = ITERATION + "_count"
NAMES = (WAITING, BY_SOURCE, PROMPT_TOKENS, ITERATIONS)


@dataclass(frozen=True)
class QueuedSteps:
    """Over the scrape intervals that opened and closed with requests waiting: their `intervals` in `stretches`
    runs, the computed prompt `tokens`, the `steps` counted, and the long prompt size `prompt` one stretch may
    count that it did not compute."""

    tokens: float
    steps: float
    intervals: int
    stretches: int
    prompt: float

    @property
    def mean(self) -> float:
        """Prompt tokens per step.

        >>> QueuedSteps(60000.0, 100.0, 12, 1, 1450.0).mean
        600.0
        """
        return self.tokens / self.steps

    @property
    def floor(self) -> float:
        """The mean less one long prompt per stretch: at most the largest chunk.

        >>> QueuedSteps(60000.0, 100.0, 12, 1, 1450.0).floor
        585.5
        """
        return max(self.tokens - self.stretches * self.prompt, 0.0) / self.steps

    def describe(self) -> str:
        return (f"while requests waited ({self.intervals} scrape intervals), the steps computed {self.mean:.0f} "
                f"prompt tokens each on average, at least {self.floor:.0f} less the prompt in progress at each "
                f"of {self.stretches} start{'s' if self.stretches != 1 else ''}")


def queued_steps(parts: dict, itl_family: str, prompt: float) -> QueuedSteps | None:
    """QueuedSteps from `split_metrics` parts holding `NAMES` and `itl_family`'s `_sum` and `_count`; `prompt`
    the long prompts' size. None without a queued interval in which a stream got a token, or without the series."""
    computed = parts.get(BY_SOURCE)
    if computed is not None and len(computed):
        computed = Q.select(computed, BY_SOURCE, [("source", "=", "local_compute")])
    tokens = computed if computed is not None and len(computed) else parts.get(PROMPT_TOKENS)
    rows = [tokens, parts.get(f"{itl_family}_sum"), parts.get(f"{itl_family}_count"), parts.get(WAITING)]
    if any(r is None or not len(r) for r in rows):
        return None
    waiting = rows[3].groupby("ts")["value"].sum().sort_index()
    with np.errstate(invalid="ignore"):   # a counter overflowed to inf: inf - inf, refused below
        f = pd.concat({"tokens": interval_increase(rows[0]), "itl_s": interval_increase(rows[1]),
                       "itl_n": interval_increase(rows[2]), "waiting": waiting}, axis=1).sort_index()
        iterations = parts.get(ITERATIONS)
        f["steps"] = interval_increase(iterations) if iterations is not None and len(iterations) else 0.0
    at = f.index.to_numpy(dtype=np.int64)
    opened = np.concatenate([[False], f["waiting"].to_numpy()[:-1] > 0])
    queued = opened & (f["waiting"].to_numpy() > 0) & f["tokens"].notna().to_numpy()
    q = f[queued].fillna(0.0)
    itl_s, itl_n, tokens = (float(q[c].sum()) for c in ("itl_s", "itl_n", "tokens"))
    if not (itl_s > 0 and itl_n > 0) or not all(np.isfinite([itl_s, itl_n, tokens, q["steps"].sum()])):
        return None   # no stream got a token while requests waited, or a counter overflowed
    span_s = float(np.diff(at)[queued[1:]].sum()) / 1e9
    steps = max(span_s * itl_n / itl_s, float(q["steps"].sum()))
    starts = int((queued & ~np.concatenate([[False], queued[:-1]])).sum())
    return QueuedSteps(tokens, steps, int(queued.sum()), starts, float(prompt))
