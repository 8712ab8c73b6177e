"""Scheduler stall: requests are RUNNING and nothing at all comes out for too long to be one engine step.

The episode and its cause come from stallscope.analyzers.episodes: a `stuck` episode has no generated token
and no computed prompt token for longer than `for.VLLMSchedulerStalled` (the alert rule's own hold), or for
two windows when chunked prefill is known to be on (no step of a bounded budget takes that long). A freeze
younger than that is one engine step in progress, which with chunked prefill off is most likely a whole
prompt's prefill (decode_starvation); a freeze during which prompt tokens keep being computed is starvation
too, never a stall. A sleeping engine (`engine_sleep_state` other than "awake") is not stalled.
"""

from __future__ import annotations

import pandas as pd

from stallscope.analyzers.finding import Finding
from stallscope.core.config import load_thresholds


def texts(ep, where: str) -> tuple[str, str]:
    """(explanation, recommendation) of a stuck episode."""
    ev = ep.evidence
    explanation = (
        f"The engine{where} made no progress: {ev['running_median']:.0f} requests stayed RUNNING and no token or "
        f"prompt token came out for {ev['nothing_out_s']:.0f} s. Typical causes are a livelock where running "
        "requests are preempted and readmitted without finishing (KV cache too small for their context), a stuck "
        f"engine core, or a hung collective in tensor parallelism. Decided by: {ep.decided_by}.")
    recommendation = ("Check the engine logs for repeated preemptions or a hung worker; if the KV cache cannot hold "
                      "the running requests' context, lower `--max-num-seqs` or `--max-model-len`, or use "
                      "`--kv-cache-dtype fp8`.")
    return explanation, recommendation


def detect(signals: pd.DataFrame, *, thresholds: dict | None = None, chunking=None) -> list[Finding]:
    """Findings of kind `scheduler_stall` (the stuck episodes of stream_stalls.detect).

    >>> # detect(signals.compute(samples))
    """
    from stallscope.analyzers import stream_stalls

    found = stream_stalls.detect(signals, thresholds=thresholds or load_thresholds(), chunking=chunking)
    return [f for f in found if f.kind == "scheduler_stall"]
