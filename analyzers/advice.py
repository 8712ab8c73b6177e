"""Recommendation texts: the vLLM flags to change and what each should give, from measured costs.

Numbers come from measurements, in this order of preference: the what-if simulation of the run's
workload (`whatif_budget_advice`), the step trace (a fitted step time per prefill token), the metrics
(prefill time per prompt token, ITL P50), the roofline. Detectors call these; nothing rewrites a
recommendation afterwards.
"""

from __future__ import annotations

import math
from functools import cache

SMALLEST_BUDGET = 64   # the smallest --max-num-batched-tokens the advice recommends or prices


def chunk_budget(slo_s: float, decode_step_s: float, prefill_s_per_token: float, *, block: int = 64,
                 lo: int = 64, hi: int = 16384) -> int:
    """The largest `--max-num-batched-tokens` whose step (decode + one chunk) stays under the ITL SLO.

    step ≈ decode_step_s + N x prefill_s_per_token <= slo_s, N rounded down to a multiple of `block`.

    >>> chunk_budget(0.2, 0.03, 0.0005)
    320
    """
    if not (prefill_s_per_token > 0 and math.isfinite(prefill_s_per_token)):
        return 512
    n = (slo_s - max(decode_step_s, 0.0)) / prefill_s_per_token
    n = int(n // block * block)
    return int(min(max(n, lo), hi))


def chunked_prefill_recommendation(*, slo_s: float, decode_step_s: float, prefill_s_per_token: float,
                                   source: str, long_prompt_tokens: float | None = None,
                                   budget_in_use: int | None = None, running: float | None = None,
                                   budget_estimated: bool = False, decode_from: str | None = None,
                                   chunk_cost=None, measured_in_use: bool = False,
                                   in_use_floor: int | None = None) -> tuple[str, dict]:
    """`--enable-chunked-prefill --max-num-batched-tokens N` with the step time and ITL it should give; never the
    budget already in use (`budget_in_use`): when no smaller budget of at least 64 tokens fits the SLO, it says
    chunking cannot meet the SLO on this hardware and names the levers that remain (`slo_levers`).
    `in_use_floor`: an estimated budget in use read off an ITL bucket that wide could be as low as this, so only
    a budget under it is surely smaller than the one in use.
    With `chunk_cost` (stallscope.analyzers.chunk_cost.ChunkCost: the cost per token split by the model's
    attention share) each budget is priced by the long prompt's slowest chunk step; else at the flat average."""
    if not (prefill_s_per_token > 0 and math.isfinite(prefill_s_per_token)):
        text = ("`--enable-chunked-prefill --max-num-batched-tokens 512` (no measured prefill cost, so 512 is a "
                "conservative default): long prompts are then split into chunks that share each step with the "
                "running decodes instead of holding the step for the whole prompt.")
        if budget_in_use is not None and budget_in_use <= 512:
            return slo_levers(slo_s, decode_step_s, running, None, budget_in_use, estimated=budget_estimated,
                              decode_from=decode_from, in_use_floor=in_use_floor)
        return text, {"max_num_batched_tokens": 512, "budget_source": "default"}
    if chunk_cost is not None:
        return _by_chunks(slo_s=slo_s, decode_step_s=decode_step_s, prefill_s_per_token=prefill_s_per_token,
                          source=source, budget_in_use=budget_in_use, running=running,
                          budget_estimated=budget_estimated, decode_from=decode_from, cost=chunk_cost,
                          measured_in_use=measured_in_use, in_use_floor=in_use_floor)
    def fits(limit: float) -> int | None:
        n = chunk_budget(limit, decode_step_s, prefill_s_per_token)
        return n if decode_step_s + n * prefill_s_per_token <= limit else None

    n, kept = _headroom_first(slo_s, fits)
    n = n if n is not None else chunk_budget(slo_s, decode_step_s, prefill_s_per_token)
    step_s = decode_step_s + n * prefill_s_per_token
    low = _lowest_in_use(budget_in_use, in_use_floor)
    if step_s > slo_s or (low is not None and n >= low):
        return slo_levers(slo_s, decode_step_s, running, prefill_s_per_token, budget_in_use, source,
                          estimated=budget_estimated, decode_from=decode_from, in_use_fits=step_s <= slo_s,
                          in_use_floor=in_use_floor, fits_at=n if step_s <= slo_s else None, decodes=0)
    text = (f"`--enable-chunked-prefill --max-num-batched-tokens {n}`: a step then carries at most {n} tokens, "
            f"so it takes about {decode_step_s * 1e3:.0f} ms + {n} x {prefill_s_per_token * 1e3:.3f} ms "
            f"= {step_s * 1e3:.0f} ms (a long prompt's average cost per token: its first chunk costs less, its "
            f"last more), which bounds the longest gap a stream sees, so ITL P99 should stay under the "
            f"{slo_s * 1e3:.0f} ms SLO{kept}")
    if long_prompt_tokens and long_prompt_tokens > n:
        chunks = math.ceil(long_prompt_tokens / n)
        text += (f"; a {long_prompt_tokens:.0f}-token prompt then needs {chunks} steps, which adds roughly "
                 f"{(chunks - 1) * decode_step_s * 1e3:.0f} ms to its TTFT")
    text += f". Cost figures from {source}."
    return text, {"max_num_batched_tokens": n, "expected_step_s": step_s, "budget_source": source,
                  "decode_step_s": decode_step_s,
                  "expected_step": f"a step of {n} prompt tokens beside the decodes, at the average cost per prompt token",
                  "prefill_s_per_token": prefill_s_per_token}


def _headroom_first(slo_s: float, largest) -> tuple[int | None, str]:
    """The budget `largest(limit)` finds within the SLO less the headroom the what-if keeps for a prediction's error
    (whatif.DEFAULT_HEADROOM), else within the SLO itself (None when neither fits), and the words the advice adds
    when the headroom was kept ("" when it was not): the one rule of both the flat and the split forms."""
    from stallscope.analyzers.whatif import DEFAULT_HEADROOM

    if (n := largest(slo_s * (1 - DEFAULT_HEADROOM))) is not None:
        return n, f" with the {DEFAULT_HEADROOM:.0%} of it kept free for this prediction's own error"
    return largest(slo_s), ""


def _lowest_in_use(budget_in_use: int | None, in_use_floor: int | None) -> int | None:
    """The lowest the budget in use may be: the floor of a wide-bucket estimate where one is given."""
    if budget_in_use is None or in_use_floor is None:
        return budget_in_use
    return min(budget_in_use, in_use_floor)


def _by_chunks(*, slo_s, decode_step_s, prefill_s_per_token, source, budget_in_use, running, budget_estimated,
               decode_from, cost, measured_in_use=False, in_use_floor=None) -> tuple[str, dict]:
    """The recommendation priced chunk by chunk: the largest budget whose slowest chunk step fits the SLO less
    the headroom the what-if keeps for a prediction's error (whatif.DEFAULT_HEADROOM), else the SLO itself. Never
    the budget in use; a larger one only when `measured_in_use` (the split was scaled to the steps the server ran
    at that budget, chunk_cost.calibrated), so the steps, not the figures alone, show it within the SLO."""
    from stallscope.analyzers.chunk_cost import largest_budget

    decodes = int(round(running or 0))
    n, kept = _headroom_first(slo_s, lambda limit: largest_budget(cost, limit, decode_step_s, decodes))
    raise_ok = measured_in_use and budget_in_use is not None and not budget_estimated
    low = _lowest_in_use(budget_in_use, in_use_floor)
    if n is None or (low is not None and n >= low and not (raise_ok and n > budget_in_use)):
        return slo_levers(slo_s, decode_step_s, running, prefill_s_per_token, budget_in_use, source,
                          estimated=budget_estimated, decode_from=decode_from, chunk_cost=cost,
                          in_use_fits=n is not None, in_use_floor=in_use_floor, fits_at=n)
    chunk_s, tokens, context = cost.slowest(n, decodes)
    step_s = decode_step_s + chunk_s
    length = cost.prompt_tokens
    share = 1.0 - cost.linear_s / cost.average_s()
    beside = f"beside {decodes} running decodes " if decodes else ""
    text = "" if budget_in_use is None or n < budget_in_use else (
        f"The budget in use, {budget_in_use}, already keeps a long prompt's slowest chunk step within the SLO as its "
        f"steps show (about {(decode_step_s + cost.slowest(budget_in_use, decodes)[0]) * 1e3:.0f} ms), so the gaps above "
        "the SLO came from other steps, and no smaller budget is needed; it can rise to the largest that still fits. ")
    text += (f"`--enable-chunked-prefill --max-num-batched-tokens {n}`: {beside}a {length}-token prompt is then computed "
            f"in chunks of up to {max(n - decodes, 1)} tokens, and its slowest chunk step ({tokens} tokens reaching "
            f"context {context}) takes about {decode_step_s * 1e3:.0f} ms + {chunk_s * 1e3:.0f} ms = "
            f"{step_s * 1e3:.0f} ms, which bounds the longest gap a stream sees, so ITL P99 should stay under the "
            f"{slo_s * 1e3:.0f} ms SLO{kept}")
    if length > tokens:
        text += (f"; the prompt then needs {math.ceil(length / max(n - decodes, 1))} steps, which adds roughly "
                 f"{(math.ceil(length / max(n - decodes, 1)) - 1) * decode_step_s * 1e3:.0f} ms to its TTFT")
    text += (f". Cost figures from {source}; the average cost per prompt token ({prefill_s_per_token * 1e3:.3f} ms) "
             f"is split by {cost.model}'s attention share (FLOPs: {share:.0%} of a whole {length}-token prompt's cost), "
             "so a chunk is priced at the context it reaches.")
    return text, {"max_num_batched_tokens": n, "expected_step_s": step_s, "budget_source": source,
                  "decode_step_s": decode_step_s,
                  "expected_step": f"the slowest step of a {length}-token prompt's prefill at budget {n}: the decode "
                                   "step and its costliest chunk",
                  "prefill_s_per_token": prefill_s_per_token, "chunk_cost": cost.as_evidence()}


def slo_levers(slo_s: float, decode_step_s: float, running: float | None, prefill_s_per_token: float | None,
               budget_in_use: int | None, source: str = "the metrics", estimated: bool = False,
               decode_from: str | None = None, chunk_cost=None, in_use_fits: bool = False,
               in_use_floor: int | None = None, fits_at: int | None = None,
               decodes: int | None = None) -> tuple[str, dict]:
    """Chunking cannot meet the SLO here: the smallest useful chunk step (or the decode step alone) is too slow,
    or (`in_use_fits`) the budget in use is already the one the cost figures fit, so no smaller one is the fix.
    The levers that remain, with figures. `in_use_floor`: an estimated budget in use may be as low as this (a
    wide ITL bucket); `fits_at`: the budget the cost figures fit, which with a floor may lie inside the range,
    so the text names it for a server that runs more, and `chunking_meets_slo` is None (unknown). `decodes`: the
    running decodes that take their tokens ahead of a chunk at the smallest budget (default: `running`, as the
    chunk-priced decision counts them; the flat decision prices a budget as prompt tokens alone and passes 0).

    `decode_from` "itl_p50": the decode step is the metrics' median gap between tokens, which bounds it from
    above; when most steps carry prefill work (a queue of long prompts) it is far above a decode step, so
    the text says what the figure is and gives no --max-num-seqs figure that would rest on it."""
    if decodes is None:
        decodes = int(round(running)) if running and math.isfinite(running) else 0
    size = max(SMALLEST_BUDGET - decodes, 1)   # vLLM schedules the running decodes first; a chunk gets the rest
    chunk64 = (chunk_cost.slowest(SMALLEST_BUDGET, decodes)[0] if chunk_cost is not None
               else size * (prefill_s_per_token or float("nan")))
    smallest = decode_step_s + chunk64 if prefill_s_per_token else float("nan")
    bound_only = decode_from == "itl_p50" and decode_step_s > slo_s
    facts = "; ".join(_step_facts(decode_step_s, running, decode_from, bound_only, chunk64, smallest, decodes,
                                  deepest=chunk_cost is not None)
                      + ([_in_use_fact(budget_in_use, estimated, in_use_floor)] if budget_in_use is not None else []))
    slo = f"{slo_s * 1e3:.0f} ms ITL SLO"
    inside = in_use_fits and budget_in_use is not None and fits_at is not None and fits_at < budget_in_use
    if inside:
        text = (f"No budget is surely the fix: the largest these cost figures fit within the {slo} is {fits_at} "
                f"tokens, and the budget in use may already be at or under it ({facts}; cost figures from {source}). "
                f"If the server runs more than {fits_at}, `--enable-chunked-prefill --max-num-batched-tokens "
                f"{fits_at}` is the fix; pass the budget to analyze (`--max-num-batched-tokens N` or `--server-log`) "
                "to settle it. Otherwise the levers that remain: ")
    elif in_use_fits and budget_in_use is not None:
        text = (f"No smaller budget is the fix: by these cost figures the budget in use, {budget_in_use} tokens, "
                f"already keeps a step within the {slo}, yet streams stalled above it, so the figures under-price this "
                f"server's steps or other work held the streams ({facts}; cost figures from {source}). Levers that "
                "remain: ")
    else:
        lead = ("The metrics cannot show chunked prefill alone meeting" if bound_only
                else "Chunked prefill alone cannot meet")
        text = f"{lead} the {slo} on this hardware ({facts}; cost figures from {source}). Levers that remain: "
    extra = {"max_num_batched_tokens": None, "chunking_meets_slo": None if inside else False,
             "expected_step_s": None if bound_only else smallest if math.isfinite(smallest) else decode_step_s,
             "smallest_budget_chunk_s": chunk64 if math.isfinite(chunk64) else None,
             "budget_source": source, "prefill_s_per_token": prefill_s_per_token}
    if inside:
        extra["max_num_batched_tokens_if_more_in_use"] = fits_at
    alone = (chunk_cost.slowest(SMALLEST_BUDGET, 1)[0] if chunk_cost is not None and decodes
             else chunk64 if prefill_s_per_token else float("nan"))   # fewer seqs, fewer decodes: a larger chunk
    seqs, note, more = _seqs_lever(slo_s, decode_step_s, running, bound_only, alone,
                                   chunk_cost is not None and decodes > 0)
    extra.update({"max_num_seqs": None, **more})
    return text + "; ".join(([seqs] if seqs else []) + OTHER_LEVERS) + "." + (f" {note}" if note else ""), extra


def _step_facts(decode_step_s: float, running: float | None, decode_from: str | None, bound_only: bool,
                chunk64: float, smallest: float, decodes: int, deepest: bool = False) -> list[str]:
    """The decode step and the step at the smallest budget the advice prices, 64 tokens: its chunk is what the
    budget leaves beside the running decodes (vLLM V1 schedules each a token first). `deepest`: the chunk was
    priced at the long prompt's deepest context (chunk_cost.ChunkCost.slowest), the costliest of its steps."""
    at = f" at {running:.0f} running requests" if running else ""
    if decode_from == "itl_p50":
        facts = [f"the median gap between tokens (ITL P50) is about {decode_step_s * 1e3:.0f} ms{at}, and a "
                 "decode step alone is at most that"
                 + ("; with prefill work in most steps it may be far less, which a step trace (`--steps`) would "
                    "measure" if bound_only else "")]
    else:
        facts = [f"a decode step alone takes about {decode_step_s * 1e3:.0f} ms{at}"]
    size = max(SMALLEST_BUDGET - decodes, 1)
    chunk = (f"a {size}-token chunk (what a {SMALLEST_BUDGET}-token budget leaves beside {decodes} decodes)" if decodes
             else f"a {SMALLEST_BUDGET}-token chunk")
    chunk += " at the long prompt's deepest context" if deepest else ""
    if math.isfinite(smallest) and bound_only:
        facts.append(f"{chunk} adds about {chunk64 * 1e3:.0f} ms to a step")
    elif math.isfinite(smallest):
        facts.append(f"a step with {chunk} about {smallest * 1e3:.0f} ms")
    return facts


OTHER_LEVERS = ["prefill/decode disaggregation (prefill on separate instances, KV transferred to decode ones)",
                "more replicas to spread the long prompts",
                "faster hardware (the decode step is bandwidth-bound, the chunks compute-bound)"]


def _seqs_lever(slo_s: float, decode_step_s: float, running: float | None, bound_only: bool, alone: float,
                beside_one: bool) -> tuple[str | None, str | None, dict]:
    """(the `--max-num-seqs` lever, a note where it cannot meet the SLO, its evidence). A smaller batch shortens
    only a step's decode part: the 64-token budget's chunk (`alone`, priced beside one decode when `beside_one`,
    the largest chunk that budget gives) stays, so the SLO needs the decode step under the SLO less that chunk.
    The figure is the most sequences a decode step shrinking in proportion to the batch would allow; weights read
    once per step keep it from shrinking that far, so it is a ceiling, not a promise (followed at the running
    count less one, the old figure, it missed the SLO in 5 of 5 runs: docs/accuracy.md). At 1 the condition
    does not apply: no decode runs beside a chunk, so a stream's gaps are its own decode steps (held-out 72's
    follow met the SLO at 1 with a 20 ms decode step over the 15 ms a second sequence would have needed)."""
    if not (running and math.isfinite(running) and running >= 2):   # a gauge read NaN or overflowed: no batch to shrink
        return None, None, {}
    generic = "a smaller `--max-num-seqs` (a memory-bound decode step shrinks with the batch)"
    if not (alone > 0 and math.isfinite(alone)):
        return generic, None, {}
    room = slo_s - alone
    chunk = (f"the {SMALLEST_BUDGET - 1}-token chunk a {SMALLEST_BUDGET}-token budget gives beside one decode"
             if beside_one else f"a {SMALLEST_BUDGET}-token chunk")
    if room <= 0:
        return None, (f"A smaller `--max-num-seqs` cannot meet it either: it shortens only a step's decode part, and "
                      f"{chunk} takes about {alone * 1e3:.0f} ms by itself."), {"decode_step_needed_s": 0.0}
    need = {"decode_step_needed_s": room}
    if bound_only:
        return (f"a smaller `--max-num-seqs`, if it brings the decode step (at most the ITL P50) under "
                f"{room * 1e3:.0f} ms ({chunk} takes about {alone * 1e3:.0f} ms by itself)"), None, need
    if decode_step_s <= room:
        return generic, None, {}
    seqs = max(1, min(int(running * room / decode_step_s), math.ceil(running) - 1))
    if seqs == 1:   # one request at a time: no stream waits beside another's chunk, whatever its decode step
        return (f"`--max-num-seqs 1`, one request at a time, so that no stream waits beside another's chunk (every "
                f"other request queues): at 2 or more the decode step would have to fall from about "
                f"{decode_step_s * 1e3:.0f} ms to under {room * 1e3:.0f} ms beside {chunk} ({alone * 1e3:.0f} ms), "
                "further than one shrinking in proportion to the batch would"), None, {**need, "max_num_seqs": 1}
    return (f"a smaller `--max-num-seqs`: at most {seqs} instead of the {running:.0f} running now, and only if the "
            f"decode step falls with the batch from about {decode_step_s * 1e3:.0f} ms to under {room * 1e3:.0f} ms "
            f"({chunk} takes about {alone * 1e3:.0f} ms by itself; {seqs} is as far as a decode step shrinking in "
            "proportion to the batch would allow, and the weights it reads once per step keep it from shrinking "
            "that far), at the cost of queueing the requests it turns away"), None, {**need, "max_num_seqs": seqs}


def _in_use_fact(budget_in_use: int, estimated: bool, in_use_floor: int | None) -> str:
    """The budget in use as the levers text states it: known, estimated, or an estimate whose ITL bucket reaches
    down to `in_use_floor`.

    >>> _in_use_fact(841, True, 360)[:62]
    'the budget in use is about 360-841 tokens (inferred from the m'
    """
    if not estimated:
        return f"the budget in use is already {budget_in_use} tokens"
    if in_use_floor is not None and in_use_floor < budget_in_use:
        return (f"the budget in use is about {in_use_floor}-{budget_in_use} tokens (inferred from the metrics: the ITL "
                "bucket of the slowest gaps is that wide)")
    return f"the budget in use is about {budget_in_use} tokens (inferred from the metrics)"


FP8_CACHE_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")   # vLLM's --kv-cache-dtype values that store 8-bit KV


def kv_near_full_recommendation(cache_dtype: str | None = None) -> str:
    """`kv_near_full`'s advice: no flag on this evidence; the capacity levers only where TTFT suffers and the
    waiting prompts outgrow the free tokens (no fp8 for a pool that already is)."""
    more = ("a larger `--gpu-memory-utilization`" if cache_dtype in FP8_CACHE_DTYPES
            else "`--kv-cache-dtype fp8` holds twice the tokens, or a larger `--gpu-memory-utilization`")
    return ("none on this evidence: scrape more often to see whether the pool runs full between scrapes; if TTFT "
            f"misses its SLO and the waiting prompts are longer than the free tokens, more KV capacity ({more})")


def kv_recommendation(*, capacity_tokens: float | None, peak_running: float, peak_usage: float,
                      kv_usage_high: float, cache_dtype: str | None = None,
                      preempted: bool = True) -> tuple[str, dict]:
    """`--kv-cache-dtype fp8` (capacity N -> 2N tokens) and, where requests were preempted, a lower
    `--max-num-seqs`: without preemptions the harm is the queue, which fewer running requests only lengthen."""
    parts, extra = [], {}
    if cache_dtype not in FP8_CACHE_DTYPES:
        if capacity_tokens and math.isfinite(capacity_tokens):
            n = int(capacity_tokens)
            parts.append(f"`--kv-cache-dtype fp8` halves the bytes per cached token, so the same memory holds "
                         f"{2 * n:,} tokens instead of {n:,} (check accuracy for your model)")
            extra["kv_capacity_tokens_fp8"] = 2 * n
        else:
            parts.append("`--kv-cache-dtype fp8` halves the bytes per cached token, doubling the KV capacity "
                         "from N to 2N tokens (check accuracy for your model)")
    if preempted and peak_running and peak_running >= 2 and peak_usage > 0:
        seqs = max(1, int(math.floor(peak_running * kv_usage_high / peak_usage)))
        if seqs < peak_running:
            parts.append(f"lowering `--max-num-seqs` from the observed peak of {peak_running:.0f} running requests "
                         f"to {seqs} keeps peak KV usage near {kv_usage_high:.0%} (fewer preemptions, more queueing)")
            extra["max_num_seqs"] = seqs
        else:   # the scrapes read the pool under the threshold: preemptions alone say it ran out between them
            parts.append(f"lowering `--max-num-seqs` below the observed peak of {peak_running:.0f} running requests "
                         "(fewer preemptions, more queueing; the scrapes missed the full pool, so they give no "
                         "figure)")
    parts.append(("or raise" if parts else "raise") + " `--gpu-memory-utilization` / add GPUs "
                 "(`--tensor-parallel-size`) for more KV blocks")
    if not preempted:
        parts.append("a lower `--max-num-seqs` would not help: nothing was preempted, and fewer running requests "
                     "only lengthen the queue")
    return "; ".join(parts) + ".", extra


def whatif_budget_advice(inputs, slo_s: float) -> tuple[str, dict]:
    """The `--max-num-batched-tokens` text and evidence of `budget.recommend_budget` for `inputs`
    (stallscope.analyzers.budget.WhatifInputs): the same call `stallscope whatif` and the dashboard make
    (docs/whatif.md). Raises ToolkitError when the inputs cannot be simulated."""
    from stallscope.analyzers.budget import recommend_budget

    res = recommend_budget(inputs, slo_s)
    rec, budgets, cost = res["recommendation"], res["budgets"], inputs.cost
    n = rec["max_num_batched_tokens"]
    verdict = "meets" if rec["meets_slo"] else "is the lowest simulated but misses"
    slowest = rec.get("predicted_slowest_step_s")
    step = (f", and its slowest step of a long prompt's prefill {slowest * 1e3:.0f} ms (the longest freeze a stream "
            f"sees; bound {rec['step_bound_s'] * 1e3:.0f} ms)" if slowest is not None else "")
    text = (f"`--enable-chunked-prefill --max-num-batched-tokens {n}`: simulating the workload of {inputs.source} "
            f"through the engine's scheduler at budgets {', '.join(map(str, budgets))} predicts ITL P99 "
            f"{rec['predicted_itl_p99_s'] * 1e3:.0f} ms at {n}{step}, which {verdict} the {slo_s * 1e3:.0f} ms SLO"
            + (f", with long-prompt TTFT P99 {rec['predicted_ttft_long_p99_s']:.2f} s"
               if math.isfinite(rec["predicted_ttft_long_p99_s"]) else "")
            + f" (step-cost fit on {cost.n_steps} steps, MAPE {cost.mape:.0%}); "
            "`stallscope whatif` shows every budget.")
    evidence = {"max_num_batched_tokens": n, "budget_source": f"what-if simulation of {inputs.source}",
                "whatif_predicted_itl_p99_s": rec["predicted_itl_p99_s"], "whatif_meets_slo": rec["meets_slo"],
                "whatif_budgets": budgets}
    if slowest is not None:
        evidence.update(expected_step_s=slowest, expected_step="the slowest step of a long prompt's prefill "
                        "(the step-cost fit of the trace, each chunk at its context beside the running decodes)")
    return text, evidence


def budget_advisor(steps, samples, slo_s: float, inputs=None):
    """A memoised `() -> (text, evidence) | None` for decode_starvation: the what-if budget when the step
    trace names each request's tokens (None otherwise, or when the simulation cannot run). It simulates
    only when first called, so a run without starvation pays nothing."""
    if steps is None or "num_scheduled_tokens" not in steps:
        return None

    @cache
    def advise():
        from stallscope.analyzers.budget import inputs_from_frames
        from stallscope.core.errors import ToolkitError

        try:
            return whatif_budget_advice(inputs if inputs is not None else inputs_from_frames(steps, samples), slo_s)
        except ToolkitError:
            return None

    return advise
