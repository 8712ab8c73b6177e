"""Chunked prefill inferred from one target's metrics, when neither a run directory, the flags nor the server's log
says it (analyzers/chunking.py, source 3).

The idea: vLLM exports no scheduler configuration, so it is read off the run's histograms. With
chunked prefill off, one step computes a whole prompt, so the longest ITL gap is at least as long as a long
prompt's prefill (`request_prefill_time_seconds`: first scheduled to first token): the streams wait for all of it.
With chunking on, the prefill is spread over several steps and the longest gap is one of them, shorter than the
whole prefill. The long prompts are the requests with more than 500 computed prompt tokens
(`request_prefill_kv_computed_tokens`, else `request_prompt_tokens`); P, their size, is the histogram's `_sum`
less the short prompts, each the mean size of those finished in scrape intervals that finished no long one (where
no such interval exists, its bucket's middle), over their count (the buckets alone read 950 tokens as 750); T
is the median of their prefill times (the histogram quantile at their rank), G the upper bound of the highest ITL
bucket in use. G >= T: off, unless that bucket holds K > 1.5 gaps per long prefill per running stream: one step
per prompt leaves each stream at most one such gap, slow chunk steps leave several, and a bucket as wide as vLLM's
1 s to 2.5 s can hold a chunk step and a whole prefill alike, or unless no scrape interval's ITL `_sum` per
running stream reached 0.9 x the long prompts' exact T (a whole prompt's step leaves each stream all of T in one
interval; analyzers/slow_step.py), or unless the scrapes size the slowest step exactly (below), from an
interval in which each running stream got about one token (so its mean is one step's gap, not a mix that
reads it low), and it held under `1.05 x 512` tokens and under 0.9 x P: a 700-token prompt at a 512 budget
runs as 511 + 189-token steps, and when both gaps end in one scrape interval each stream waits out the whole
prefill there as well, while the buckets put both slowest gaps in one (docs/metric-traps.md). Otherwise on,
with the budget estimated as the
smaller of P / K and P x G' / T (the share of the median long prompt, P tokens, that its slowest step held), where
G' is the gap every long prefill caused at least once for half the running streams (the upper bound of the ITL
bucket at rank 1 - 0.5 x long prompts x median running / ITL samples), so one outlier gap does not pass for a
chunk; a step is taken to hold a long prefill when the estimate is at least `1.5 x 512` (the bucket bounds make it
coarse; pass `--max-num-batched-tokens` or `--server-log` to be exact), and never when S, the gaps above the ITL
SLO per long prefill per running stream, is at least 2 and P / (S - 1) < 512: a prompt spread over S slow steps,
all but the last chunk full, had no chunk above that, in whichever ITL buckets its steps fell (the top bucket
alone misses them when they straddle a bound). S leaves out the gaps above the SLO that come without long
prefills: those of the scrape intervals no long prefill can have run in, and that rate over the rest (on a slow
host a short prompt's prefill step beside many decodes crosses the SLO too). The other side of the same count:
with S >= 1.5, those slow steps held P / S prompt tokens each on average, so some step held at least that many,
and a step is taken to hold a long prefill when P / S is at least `1.2 x 512` whatever the estimate says (S read
0.85-1.11 times the slow steps per long prompt on the 5 recordings it was written on where it applies,
`benchmarks/chunking_estimates.py`). With at least as many preemptions as gaps in that top bucket, "off" is not
inferred from it: a preempted request's next ITL sample spans its wait and recompute, not one step. An inferred
"off" is stated as off or a budget whose one step holds most of a long prompt: the buckets cannot tell them apart.
The bucket bounds leave a range: the slowest gap lasted at least its bucket's lower bound, so a chunked budget
down to P x that bound / T (`budget_floor`) reads the same; when that is under 512 the finding says so, and a
budget passed to `analyze` settles it. An "on" whose slowest step held 0.9 x P or more (and no count of slow
steps bounds it lower) is stated the same way: a whole-prompt step's gap and the prefill time T (which also holds
the step's output) can straddle a bucket bound, as 0.4 s and 0.42 s did on `tiny`'s 1,900-token prompts
(held-out 55). When the scrapes come faster than the slow steps, the ITL, token and
prefill-time `_sum`s and `_count`s size the slowest step instead (analyzers/slow_step.py), and that decides
alone, from `1.05 x 512` (it reads a few per cent high; docs/accuracy.md). Its share of a prompt also reads as
low as 0.85 x the chunk, so an estimate between `0.85 x 512` and that margin (between 512 and `1.5 x 512` from
the buckets) is stated as one the metrics cannot settle, with how to settle it. A gap still open is in no histogram
yet: when the live counters show the streams frozen with nothing moving for at least 3/4 of T, one step held
(nearly) a whole prompt, so chunking reads off after all. A freeze that ended counts only where the ITL
histogram holds a gap that long: a stream that waited through it left one, and without one every running
request was prefilling (chunk steps queued behind one another, no decode among them). Without long prompts in
the histograms, the stalls decide: about one ITL sample above the SLO per long prefill per stream means
whole-prompt steps, more means slow chunk steps. `iteration_tokens_total` cannot tell: vLLM counts a prompt's
computed tokens in the step where its prefill completes, chunked or not (docs/metric-traps.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers import quantiles as Q
from stallscope.analyzers.chunking import (LONG_PREFILL_TOKENS, STALLS_PER_PREFILL_CHUNKED, STEP_MARGIN, UNKNOWN,
                                           Chunking)
from stallscope.analyzers.queued_steps import NAMES as QUEUED_NAMES
from stallscope.analyzers.queued_steps import queued_steps
from stallscope.analyzers.slow_step import (LONG_PROMPT_BOUND, long_prompt_mean, long_prompts, longest_wait,
                                            prompt_intervals, short_bucket_mean, slowest_step)
from stallscope.analyzers.workload import PREFILL_TIME, counter_increase, interval_increase

WHOLE_WAIT_SHARE = 0.9       # "off" needs a scrape interval whose ITL sum per stream reached this x T (slow_step.py)
SLOW_STEPS_MIN = 1.5          # P / S counts (chunking.SLOW_SHARE_MARGIN) from this many gaps above the SLO per
                              # long prefill per running stream
ITL_FAMILIES = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
TOKEN_FAMILIES = ("vllm:request_prefill_kv_computed_tokens", "vllm:request_prompt_tokens")
PREEMPTIONS = "vllm:num_preemptions_total"


def infer(stalls_per_prefill: float, long_prefills: float) -> Chunking:
    """Chunking inferred from one target's stalls (module docstring); unknown without long prefills."""
    if not (long_prefills > 0) or stalls_per_prefill != stalls_per_prefill:
        return UNKNOWN
    on = stalls_per_prefill > STALLS_PER_PREFILL_CHUNKED
    what = (f"{stalls_per_prefill:.1f} ITL samples above the SLO per long prefill per running stream; about 1 "
            "means each prompt ran in one step, more means each of its chunk steps was slow")
    return Chunking(on, None, "inferred from metrics", what)


def _whole_run(rows, family: str, t0: int, t1: int):
    """(bucket bounds, cumulative counts) of a histogram's increase over [t0, t1], pooled; None when absent."""
    if rows is None or not len(rows):
        return None
    found = Q.bucket_rates(rows, family, np.array([t1]), max(t1 - t0, 1), by=())
    if not found:
        return None
    _, les, rates = next(iter(found.values()))
    with np.errstate(over="ignore"):   # a fuzzed counter near float's limit reads inf, as it did with the warning
        return les, np.maximum.accumulate(np.nan_to_num(rates[0])) * max(t1 - t0, 1) / 1e9


def infer_from_histograms(samples, slo: float | None = None) -> Chunking:
    """Chunking inferred from one target's ITL, prefill-time and prompt-token histograms (module docstring,
    3); UNKNOWN when they hold no long prompt. `slo` (the ITL SLO, s) also bounds the budget by the count
    of gaps above it."""
    from stallscope.analyzers.signals import _per_bucket, split_metrics

    if samples is None or not len(samples):
        return UNKNOWN
    t0, t1 = int(samples["ts"].min()), int(samples["ts"].max())
    names = [f + "_bucket" for f in (*ITL_FAMILIES, *TOKEN_FAMILIES, PREFILL_TIME)] + ["vllm:num_requests_running",
                                                                                     PREEMPTIONS]
    sums = [f + end for f in (*TOKEN_FAMILIES, *ITL_FAMILIES, PREFILL_TIME) for end in ("_sum", "_count")]
    parts = split_metrics(samples, names + sums + list(QUEUED_NAMES))
    itl_family = next((f for f in ITL_FAMILIES if f + "_bucket" in parts), None)
    itl = _whole_run(parts.get(f"{itl_family}_bucket"), itl_family, t0, t1) if itl_family else None
    family = next((f for f in TOKEN_FAMILIES if f + "_bucket" in parts), None)
    tokens = _whole_run(parts.get(f"{family}_bucket"), family, t0, t1) if family else None
    ptime = _whole_run(parts.get(PREFILL_TIME + "_bucket"), PREFILL_TIME, t0, t1)
    if itl is None or tokens is None or ptime is None:
        return UNKNOWN
    tl, tc = tokens
    if not np.isfinite(tc).all():        # a counter that overflowed to inf says nothing about prompt sizes
        return UNKNOWN
    n_long = tc[-1] - tc[np.searchsorted(tl, LONG_PROMPT_BOUND)]
    used = np.flatnonzero(np.diff(np.concatenate([[0.0], itl[1]])) >= 0.5)
    if n_long < 0.5 or not len(used) or not tc[-1] > 0:
        return UNKNOWN
    rank = 1.0 - n_long / (2.0 * tc[-1])
    prompt = float(Q.bucket_quantile(rank, tl, tc[None, :])[0][0])
    intervals = prompt_intervals(parts, family)
    t_lower, t_count = _per_bucket(tl, tc[None, :])
    t_count = t_count[0]
    mean = long_prompt_mean(intervals, short_bucket_mean(tl, t_lower, t_count))
    if mean is not None:   # within the long prompts' buckets: the lowest one's lower bound to the top one's upper
        top_bound = tl[min(int(np.flatnonzero(t_count > 0)[-1]), len(tl) - 1)]
        lowest = np.flatnonzero((t_count >= 0.5) & (tl > LONG_PROMPT_BOUND))
        low_bound = float(t_lower[lowest[0]]) if len(lowest) else float(LONG_PROMPT_BOUND)
        prompt = float(np.clip(mean, low_bound, top_bound if np.isfinite(top_bound) else mean))
    t_long = float(Q.bucket_quantile(rank, ptime[0], ptime[1][None, :])[0][0])
    gap = float(itl[0][used[-1]]) if np.isfinite(itl[0][used[-1]]) else float(itl[0][used[-1] - 1]) * 2
    if not (t_long > 0 and np.isfinite(t_long)):
        return UNKNOWN
    # the slowest gap lasted at least its bucket's lower bound: a chunk of at least this share of the prompt
    floor = prompt * min(float(itl[0][used[-1] - 1]) if used[-1] > 0 else 0.0, t_long) / t_long
    what = (f"the longest ITL gap (<= {gap:.3g} s) vs the median prefill of the {n_long:.0f} prompts over "
            f"{LONG_PROMPT_BOUND} tokens ({t_long:.3g} s)")
    running = parts.get("vllm:num_requests_running")
    streams = max(float(np.median(running.groupby("ts")["value"].sum())) if running is not None and len(running)
                  else 1.0, 1.0)
    # K: gaps in the highest ITL bucket in use per long prefill per running stream (at most ~1 with chunking off)
    top = (itl[1][-1] - (itl[1][used[-1] - 1] if used[-1] > 0 else 0.0)) / (n_long * streams)
    long = long_prompts(parts, intervals)   # exact P and T, where some scrape interval finished long prompts only
    waited = longest_wait(parts, itl_family, long)
    spread = waited is not None and waited[0] < WHOLE_WAIT_SHARE * waited[1]   # no interval held a whole prefill
    exact = slowest_step(parts, itl_family, intervals, long, streams)
    part = exact is not None and exact.one_step and exact.chunk_tokens < min(STEP_MARGIN * LONG_PREFILL_TOKENS,
                                                                              WHOLE_WAIT_SHARE * exact.prompt_tokens)
    if gap >= t_long and top <= STALLS_PER_PREFILL_CHUNKED and not spread and not part:
        preempted = counter_increase(parts[PREEMPTIONS], by_le=False) if PREEMPTIONS in parts else 0.0
        if preempted >= max(top * n_long * streams, 0.5):
            return UNKNOWN  # the slowest gaps may be preempted requests' waits, not steps (module docstring)
        return Chunking(False, None, "inferred from metrics", what + ": the streams waited out whole prefills",
                        long_prefill_s=t_long, budget_floor=floor, long_prompt_tokens=prompt)
    if gap >= t_long and top > STALLS_PER_PREFILL_CHUNKED:
        what += (f", but that bucket holds {top:.1f} gaps per long prefill per running stream (a whole prompt per "
                 "step leaves at most about 1)")
    elif gap >= t_long and spread:
        what += (f", but no scrape interval's ITL sum per running stream reached {WHOLE_WAIT_SHARE:g} x the "
                 f"{waited[1]:.3g} s prefill (at most {waited[0]:.3g} s; a whole prompt's step leaves each stream its "
                 "whole prefill)")
    elif gap >= t_long:
        what += (", but the slowest step, sized exactly, held under the whole prompt: two chunks whose gaps end in "
                 "one scrape interval leave each stream the whole prefill too")
    support = max(0.0, 1.0 - 0.5 * n_long * streams / itl[1][-1])
    _, lo, hi = Q.bucket_quantile(support, itl[0], itl[1][None, :])
    slowest = float(hi[0]) if np.isfinite(hi[0]) else 2 * float(lo[0])
    # both read high: a bucket's upper bound, and a prompt's share per top-bucket gap
    est = float(min(prompt * min(slowest, gap) / t_long, prompt / max(top, 1.0)))
    if exact is not None:   # the scrapes resolve the slow steps: size the slowest one exactly (slow_step.py)
        est = exact.chunk_tokens
        what += f": prefills spread over steps; {exact.describe()}"
    else:
        what += f": prefills spread over steps; the slowest step of each held about {est:.0f} of a {prompt:.0f}-token "
        what += "prompt"
    bound = share = None
    if slo is not None and slo > 0:
        # S: gaps above the SLO per long prefill per running stream; S >= 2 slow steps per prompt hold at most
        # P / (S - 1) tokens each (all but the last chunk are full), wherever in the ITL buckets they fell
        lower, per_bucket = _per_bucket(itl[0], itl[1][None, :])
        apart = _slow_gaps_apart(parts[f"{itl_family}_bucket"], intervals, slo, t_long)
        slow = max(float(per_bucket[0, lower >= slo].sum()) - apart, 0.0) / (n_long * streams)
        if slow >= 2.0:
            bound = float(prompt / (slow - 1.0))
            what += (f"; {slow:.1f} gaps above the SLO per long prefill per running stream: no step held more than "
                     f"about {bound:.0f}")
        if slow >= SLOW_STEPS_MIN:
            share = float(prompt / slow)
            if slow < 2.0:
                what += f"; {slow:.1f} gaps above the SLO per long prefill per running stream"
            what += f" (about {share:.0f} prompt tokens per such step on average)"
    queued = queued_steps(parts, itl_family, prompt)
    if queued is not None and queued.floor >= LONG_PREFILL_TOKENS:
        what += f"; {queued.describe()}"
    if exact is not None:
        floor = est
    elif np.isfinite(lo[0]):
        floor = prompt * min(float(lo[0]), min(slowest, gap)) / t_long
    if est >= WHOLE_WAIT_SHARE * prompt and (bound is None or bound >= WHOLE_WAIT_SHARE * prompt):
        # a bucket bound just under T (a whole step's gap and the prefill time straddle it) reads "spread"
        return Chunking(False, None, "inferred from metrics", what + f"; that is {est / prompt:.0%} of the prompt: "
                        "one step held it, or most of it", long_prefill_s=t_long, budget_floor=min(floor, est),
                        long_prompt_tokens=prompt)
    return Chunking(True, None, "inferred from metrics", what, budget_estimate=est, long_prefill_s=t_long,
                    budget_bound=bound, budget_floor=min(floor, est), long_prompt_tokens=prompt, slow_share=share,
                    slowest_step_s=exact.step_s if exact is not None else None,
                    queued_floor=queued.floor if queued is not None else None, longest_gap_s=gap)


def _slow_gaps_apart(itl_rows, intervals: pd.DataFrame | None, slo: float, t_long: float) -> float:
    """The ITL gaps above the SLO that long prefills did not cause (module docstring): every one in a scrape
    interval no long prefill can have run in (none finished in it or within `t_long` s after it), plus that
    rate over the intervals one can have; `intervals` as `prompt_intervals` gives them. A short prompt's
    prefill beside many decodes can cross the SLO on a slow host; counted as a chunk step, it would bound the
    budget far below the chunks the server ran. 0.0 when every interval can hold a long prefill, or the token
    histogram has no `_sum`/`_count` to place the long prompts in time."""
    if intervals is None:
        return 0.0
    les = np.sort(itl_rows["le"].unique())
    at = les[np.searchsorted(les, slo)] if slo <= les[-1] else les[-1]
    above = interval_increase(itl_rows[itl_rows["le"] == np.inf]) - interval_increase(itl_rows[itl_rows["le"] == at])
    f = pd.concat({"above": above, "long": intervals["long"]}, axis=1).fillna(0.0).sort_index()
    if len(f) < 2:
        return 0.0
    end = f.index.to_numpy(dtype=float) / 1e9
    start = np.concatenate([[end[0] - np.median(np.diff(end))], end[:-1]])
    done = f["long"].to_numpy() >= 0.5
    busy = ((start[:, None] < end[None, done]) & (end[:, None] > start[None, done] - t_long)).any(axis=1)
    quiet_s = float((end - start)[~busy].sum())
    if quiet_s <= 0:
        return 0.0
    quiet = float(f["above"].to_numpy()[~busy].sum())
    return quiet + quiet / quiet_s * float((end - start)[busy].sum())


FROZEN_SHARE = 0.75   # a freeze this share of a whole long prefill is one step holding (nearly) all of it


def frozen_through_prefill(inferred: Chunking, freezes) -> Chunking:
    """An inferred "on" overruled by a live freeze of at least 3/4 of a long prefill with nothing moving: the
    ITL histogram had not yet recorded that gap (the streams were still frozen), but one step held them about
    as long as a whole prefill takes (a chunk step holds one chunk's share of it). `freezes`: (seconds nothing
    moved, still frozen at the last scrape), as `stream_stalls._freezes` reads them. A freeze that ended counts
    only when the ITL histogram holds a gap that long (`longest_gap_s`): a decoding stream that waited through it
    left one when its next token came, so a longer freeze had none waiting, only requests in prefill (held-out
    68: 1,250-token prompts queued 15-18 deep in 448-token chunks ran 5.7 s of steps with no decode in them
    while the sessions' next requests waited; both counters stood still for 3.0 s between scrapes, and no ITL
    gap passed 2.5 s)."""
    longest = max((s for s, still in freezes
                   if still or inferred.longest_gap_s is None or s <= inferred.longest_gap_s), default=0.0)
    if inferred.enabled and inferred.long_prefill_s and longest >= FROZEN_SHARE * inferred.long_prefill_s:
        return Chunking(False, None, "inferred from metrics",
                        f"the streams froze for {longest:.1f} s with nothing moving, as long as a whole "
                        f"prefill ({inferred.long_prefill_s:.3g} s): one step held the whole prompt, or most of it",
                        long_prefill_s=inferred.long_prefill_s, long_prompt_tokens=inferred.long_prompt_tokens)
    return inferred
