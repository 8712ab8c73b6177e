"""ITL high, not decode starvation: streams missed the SLO, but no step computed a long prompt.

The episode's cause (stallscope.analyzers.episodes) picks one of three explanations, each with its lever:

- `prefill_chunks`: chunked prefill is on and its chunk steps are slower than the SLO on this hardware
  (each chunk step holds every running stream; the streams stall once per chunk), or, where the ITL P99 met
  the SLO, the steps with prompt work left a few samples above it (said as a count). A smaller budget helps
  only when one below the budget in use still fits the SLO; otherwise chunking cannot meet it and the
  levers that remain are named with figures (advice.slo_levers);
- `preemption`: preempted requests lose their KV blocks and are recomputed; the recompute gap lands in the
  request's next ITL sample (kv_pressure usually reports the pool beside it);
- `slow_decode`: no prefill and no preemption: the decode step itself is slow (memory-bound decode at a
  large batch, or a slow host).
"""

from __future__ import annotations

import math

from stallscope.analyzers.advice import slo_levers
from stallscope.analyzers.chunking import LONG_PREFILL_TOKENS, SETTLE_IT, Chunking, decodes_beside

LIKELY_CAUSE = {"prefill_chunks": "chunked_prefill", "preemption": "preemption", "slow_decode": "memory_bound_decode"}


def texts(cause: str, ep, ev: dict, where: str, slo: float, cost: dict, chunking: Chunking, recommend) -> tuple[str, str]:
    """(explanation, recommendation) of an itl_high episode; adds `likely_cause` to `ev`.
    `recommend(budget_in_use)` gives decode_starvation.recommend's (text, extra) for a chunk budget."""
    ev["likely_cause"] = LIKELY_CAUSE[cause]
    tail = (f"ITL P99{where} reached {ev['itl_p99']} against a {slo * 1e3:.0f} ms SLO (up to "
            f"{ev['itl_stall_share_max']:.1%} of stream time in gaps above it)")
    if cause == "prefill_chunks":
        return _chunks(tail, ep, ev, slo, cost, chunking, recommend)
    if cause == "preemption":
        return (f"{tail}, with no step computing a long prompt, so this is not decode starvation. Preemptions "
                f"({ep.evidence['preemptions']:.0f} in the episode) account for the gaps: a preempted request loses "
                "its KV blocks and is recomputed, and the recompute gap lands in its next ITL sample. Decided by: "
                f"{ep.decided_by}."), ("Relieve KV pressure: `--kv-cache-dtype fp8` (doubles KV capacity) or a lower "
                                      "`--max-num-seqs`, so fewer running requests are preempted.")
    return (f"{tail}, with no prefill work and no preemptions, so this is not decode starvation. The decode step "
            f"itself is slow: memory-bound decode at a large batch (median {ep.evidence['running_median']:.0f} running "
            "requests) reads every weight and each request's KV cache once per step, so the step time grows with "
            f"the batch and its context. Decided by: {ep.decided_by}."), (
        "Lower `--max-num-seqs` to shorten each decode step (fewer KV bytes per step), or add bandwidth: "
        "`--tensor-parallel-size` splits the weight and KV reads across GPUs; `stallscope roofline` shows the "
        "weight-read floor per step.")


def _chunks(tail, ep, ev, slo, cost, chunking, recommend) -> tuple[str, str]:
    step = ev["itl_p99_s"]
    d = cost["decode_step_s"]
    budget = chunking.budget if chunking.enabled else None
    floor = None
    if budget is None and chunking.enabled is not False:   # chunking off, or read as off: no budget to quote
        budget = _budget_in_use(step, d, cost, chunking)
        if budget is not None:
            ev["max_num_batched_tokens_in_use_estimated"] = budget
            floor = _budget_floor(budget, chunking)
            if floor is not None:
                ev["max_num_batched_tokens_in_use_floor"] = floor
    free = ep.evidence["windows_prefill_free"]
    decode_is = "the median gap between tokens is" if cost.get("decode_step_from") == "itl_p50" else "decode steps take"
    unsettled = chunking.estimate_unsettled()   # an estimate either side of 512 could be: say so
    explanation = (f"{tail}. {chunking.sentence()}: {_verdict(chunking, ep, unsettled)}; "
                   f"{_steps(ep, ev, slo, decode_is, d)}"
                   f"Decided by: {_decided_by(ep, unsettled)}.")
    if unsettled:
        explanation += f" {SETTLE_IT}"
    if free:
        explanation += f" {free} of the episode's {ep.evidence['windows']} windows had no prompt work at all."
    text, extra = recommend(budget, floor)
    ev.update(extra)
    if d > slo:
        text, extra = slo_levers(slo, d, ep.evidence["running_median"], cost["prefill_s_per_token"], budget,
                                 cost["source"], estimated=not chunking.budget,
                                 decode_from=cost.get("decode_step_from"), chunk_cost=cost.get("chunk_cost"),
                                 in_use_floor=floor)
        ev.update(extra)
    return explanation, text


def _verdict(chunking: Chunking, ep, unsettled: bool) -> str:
    """Why the episode is not decode starvation, as far as the configuration and the stalls say it. Where the
    configuration (given or read) has steps of 512+ prompt tokens, the stalls decided (episodes.py, `unfelt`):
    such steps ran, but fewer than half the streams stalled at them, and a step that held them past the SLO
    stalls every one; saying that no such step ran would contradict the configuration just stated."""
    if unsettled:
        return (f"{chunking.unsettled_reading()}, where the metrics cannot tell a step of {LONG_PREFILL_TOKENS}+ "
                "prompt tokens from a smaller one, so they cannot tell decode starvation from chunk steps here; "
                "taken as chunk steps")
    if chunking.holds_long_prefills(decodes=decodes_beside(ep.evidence.get("running_median", float("nan")))):
        return (f"steps of {LONG_PREFILL_TOKENS}+ prompt tokens ran, but fewer than half the running streams stalled "
                "past the SLO at them (a step past the SLO stalls every one), so they are not taken as decode "
                "starvation")
    return "no step computed a long prompt, so this is not decode starvation"


def _steps(ep, ev: dict, slo: float, decode_is: str, d: float) -> str:
    """What the steps with prompt work cost: slower than the SLO where the ITL P99's bucket lies above it (as
    decode_starvation.explain reads it); otherwise the P99 may be a decode step's gap, not a chunk step's, and
    only the samples above the SLO are the chunk steps' (held-out 112 read "chunk steps up to about 23 ms")."""
    step = ev["itl_p99_s"]
    if ev["itl_p99_bucket_s"][0] < slo:
        above = float(ep.evidence.get("itl_samples_above_slo", float("nan")))
        some = f"{above:.0f} ITL sample{'' if round(above) == 1 else 's'}" if math.isfinite(above) else "ITL samples"
        return (f"the steps with prompt work in them left {some} above the SLO ({decode_is} about {d * 1e3:.0f} ms, "
                f"the ITL P99 about {step * 1e3:.0f} ms). ")
    return (f"the chunk steps themselves are slower than the SLO here ({decode_is} about {d * 1e3:.0f} ms, chunk "
            f"steps up to about {step * 1e3:.0f} ms), and every running stream waits for each of them. ")


def _budget_in_use(step: float, d: float, cost: dict, chunking: Chunking) -> int | None:
    """The budget the server runs, as the metrics read it: the chunk the inference sized (Chunking.chunk_estimate,
    its slow steps set against the long prompts' prefill time), else the slowest gap less a decode step over the
    cost per prompt token; either no more than the inference's bound. Not the subtraction first: its decode step
    is the episode's ITL P50 when the metrics give no other, which chunk steps inflate in an overloaded run, and
    it read the budget at 0.14-0.75 x the server's where the inference came closer (docs/accuracy.md)."""
    est = chunking.chunk_estimate()
    if est is None and cost["prefill_s_per_token"] > 0 and math.isfinite(step):
        est = (step - d) / cost["prefill_s_per_token"]
    if est is None:
        return None
    est = min(est, chunking.budget_bound) if chunking.budget_bound is not None else est
    return int(round(est)) if math.isfinite(est) and est >= 1 else None


def _budget_floor(quoted: int, chunking: Chunking) -> int | None:
    """The lowest the quoted budget in use may be when the slowest gaps' ITL bucket reaches under the long-prefill
    cut (`Chunking.wide_bucket`): its lower bound, `budget_floor`. The quote alone read 1.37-2.19 x a 384 budget on
    held-out 66, 68 and 72, where the floor read 0.87-1.08 x (docs/accuracy.md); None otherwise."""
    if not chunking.wide_bucket() or chunking.budget_floor is None:
        return None
    floor = int(round(chunking.budget_floor))
    return floor if 1 <= floor < quoted else None


def _decided_by(ep, unsettled: bool) -> str:
    """The episode's deciding evidence without the configuration the explanation has just stated (where the
    configuration decided, the episode carries the reading after it), and an unsettled reading is in the
    verdict already.

    >>> from stallscope.analyzers.episodes import Episode
    >>> _decided_by(Episode("", 0, 0, 0, 0, "prefill_chunks", "warning", "chunked prefill on, "
    ...                     "--max-num-batched-tokens 64 (flags): no step computes 512+ prompt tokens",
    ...                     reading="no step computes 512+ prompt tokens"), False)
    'the configuration above: no step computes 512+ prompt tokens'
    """
    if ep.reading is None:
        return ep.decided_by
    return "the configuration and the reading above" if unsettled else f"the configuration above: {ep.reading}"
