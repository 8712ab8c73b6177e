"""Chunked prefill inferred from one target's metrics, when neither a run directory, the flags nor the server's log
says it (analyzers/chunking.py, source 3).

The idea: vLLM exports no scheduler configuration, so it is read off the run's histograms. With chunked prefill
off, one step computes a whole prompt, so the longest ITL gap is at least as long as a long prompt's prefill
(`request_prefill_time_seconds`: first scheduled to first token): the streams wait for all of it. With chunking
on, the prefill is spread over several steps and the longest gap is one of them, shorter than the whole prefill.

What is read (`_long_prompts`):
- The long prompts are the requests with more than 500 computed prompt tokens (`request_prefill_kv_computed_tokens`,
  else `request_prompt_tokens`).
- P, their size, is the histogram's `_sum` less the short prompts, each the mean size of those finished in scrape
  intervals that finished no long one (where no such interval exists, its bucket's middle), over their count (the
  buckets alone read 950 tokens as 750).
- T is the median of their prefill times (the histogram quantile at their rank); G the upper bound of the highest
  ITL bucket in use; K the gaps in that bucket per long prefill per running stream.

Off (`_whole_prompt_steps`): G >= T, unless
- K > 1.5: one step per prompt leaves each stream at most one such gap, slow chunk steps leave several, and a bucket
  as wide as vLLM's 1 s to 2.5 s can hold a chunk step and a whole prefill alike. K counts per median running
  stream, and must also pass 1.5 per stream the running gauge showed around each long prefill (its most from T
  before the scrape interval that finished it to that interval's close): a median reads K high when the long
  prompts came while more streams ran than usual;
- or no scrape interval's ITL `_sum` per running stream reached 0.9 x the long prompts' exact T (a whole prompt's
  step leaves each stream all of T in one interval; analyzers/slow_step.py);
- or the scrapes size the slowest step exactly (below), from an interval in which each running stream got about
  one token (so its mean is one step's gap, not a mix that reads it low), and it held under `1.05 x 512` tokens
  and under 0.9 x P: a 700-token prompt at a 512 budget runs as 511 + 189-token steps, and when both gaps end in
  one scrape interval each stream waits out the whole prefill there as well, while the buckets put both slowest
  gaps in one (docs/metric-traps.md).
With at least as many preemptions as gaps in that top bucket, "off" is not inferred from it: a preempted request's
next ITL sample spans its wait and recompute, not one step. An inferred "off" is stated as off or a budget whose one
step holds most of a long prompt: the buckets cannot tell them apart. The bucket bounds leave a range: the slowest
gap lasted at least its bucket's lower bound, so a chunked budget down to P x that bound / T (`budget_floor`)
reads the same; when that is under 512 the finding says so, and a budget passed to `analyze` settles it.

Otherwise on, with a budget estimate (`_estimate`):
- From the buckets, the smaller of P / K and P x G' / T (the share of the median long prompt that its slowest step
  held), where G' is the gap every long prefill caused at least once for half the running streams (the upper bound
  of the ITL bucket at rank 1 - 0.5 x long prompts x median running / ITL samples), so one outlier gap does not
  pass for a chunk. A step is taken to hold a long prefill when the estimate is at least `1.5 x 512` (the bucket
  bounds make it coarse; pass `--max-num-batched-tokens` or `--server-log` to be exact).
- When the scrapes come faster than the slow steps, the ITL, token and prefill-time `_sum`s and `_count`s size the
  slowest step instead (analyzers/slow_step.py), and that decides alone, from `1.05 x 512` (it reads a few per
  cent high; docs/accuracy.md). Its share of a prompt also reads as low as 0.85 x the chunk, so an estimate
  between `0.85 x 512` and that margin (between 512 and `1.5 x 512` from the buckets) is stated as one the metrics
  cannot settle, with how to settle it. P / K reads low the same way when a prompt's short last chunk also lands
  in the top bucket (it counts as a gap), so where P / K is the smaller reading the band starts at `0.85 x 512`.
- While requests queued, the computed prompt tokens per step are a floor under the largest chunk that needs no
  scrape faster than the steps (analyzers/queued_steps.py); at 512 or more a step held a long prefill.
- An "on" whose slowest step held 0.9 x P or more (and no count of slow steps bounds it lower) is stated as an
  inferred "off" is: a whole-prompt step's gap and the prefill time T (which also holds the step's output) can straddle a bucket
  bound, as 0.4 s and 0.42 s did on `tiny`'s 1,900-token prompts (held-out 55). So is one whose buckets leave a whole
  step possible (the slowest gap's bucket reaches past the lower bound of T's) and rule out a step of half the prompt
  or less (its lower bound, which the gap exceeds, is at least half T's upper bound): T is interpolated inside its
  bucket (held-out 143).

The count of slow steps (`_slow_steps`): S, the gaps above the ITL SLO per long prefill per running stream.
- S leaves out the gaps above the SLO that come without long prefills: those of the scrape intervals no long
  prefill can have run in, and that rate over the rest (on a slow host a short prompt's prefill step beside many
  decodes crosses the SLO too).
- No step holds a long prefill when S >= 2 and P / (S - 1) < 512: a prompt spread over S slow steps, all but the
  last chunk full, had no chunk above that, in whichever ITL buckets its steps fell (the top bucket alone misses
  them when they straddle a bound).
- The other side of the same count: with S >= 1.5, those slow steps held P / S prompt tokens each on average, so
  some step held at least that many, and a step is taken to hold a long prefill when P / S is at least
  `1.2 x 512` whatever the estimate says (S read 0.85-1.11 times the slow steps per long prompt on the 5
  recordings it was written on where it applies, `benchmarks/chunking_estimates.py`).

A gap still open is in no histogram yet (`frozen_through_prefill`): when the scrapes show the streams frozen with
nothing moving (no counter, no scheduler gauge: no step ended) for at least 3/4 of T, one step held (nearly) a whole
prompt, so chunking reads off after all, whether that freeze is still open or ended: the next step may be another
whole prompt, and the streams' gap stays open through it.

Without long prompts in the histograms, the stalls decide (`infer`): about one ITL sample above the SLO per long
prefill per stream (those at the long prefills, over the rate elsewhere) means whole-prompt steps, more means slow
chunk steps, and under half of one (`FEW_STREAMS`) says nothing: a whole prompt's step past the SLO stalls every
running stream, so none was, on or off (held-out 103's 0.1 read as "off" on a chunked server).
`iteration_tokens_total` cannot tell: vLLM counts a prompt's computed tokens in the step where its prefill
completes, chunked or not (docs/metric-traps.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stallscope.analyzers import quantiles as Q
from stallscope.analyzers.chunking import (FEW_STREAMS, LONG_PREFILL_TOKENS, STALLS_PER_PREFILL_CHUNKED, STEP_MARGIN,
                                           UNKNOWN, Chunking)
from stallscope.analyzers.queued_steps import NAMES as QUEUED_NAMES
from stallscope.analyzers.queued_steps import queued_steps
from stallscope.analyzers.signals import _per_bucket, split_metrics
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
    if stalls_per_prefill < FEW_STREAMS:   # a long prompt's step past the SLO stalls every stream: none did
        return Chunking(None, None, "unknown", f"{stalls_per_prefill:.1f} ITL samples above the SLO per long prefill "
                        "per running stream: no long prompt's step held the streams past the SLO, so the stalls cannot "
                        "tell chunking on from off")
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


@dataclass(frozen=True)
class _LongPrompts:
    """What one target's whole-run histograms say about its long prompts: `parts` as `split_metrics` gave them,
    the ITL histogram's (bounds, cumulative counts) and its highest bucket in use (`top_at`), the long prompts'
    count, size P and median prefill T, the longest gap G (that bucket's upper bound), the chunk that bucket's
    lower bound allows (`floor`), the scrape intervals `prompt_intervals` reads, the median running streams and
    the most gaps whole-prompt steps could leave (`_whole_step_gaps`)."""

    parts: dict
    itl_family: str
    itl: tuple[np.ndarray, np.ndarray]
    top_at: int
    n_long: float
    prompt: float
    t_long: float
    t_bucket: tuple[float, float]
    gap: float
    floor: float
    intervals: pd.DataFrame | None
    streams: float
    whole_step_gaps: float | None

    def top_gaps(self) -> float:
        """The gaps in the highest ITL bucket in use."""
        counts = self.itl[1]
        return float(counts[-1] - (counts[self.top_at - 1] if self.top_at > 0 else 0.0))

    def top_share(self) -> float:
        """K: the gaps in the highest ITL bucket in use per long prefill per running stream (at most about 1 with
        chunking off)."""
        return self.top_gaps() / (self.n_long * self.streams)

    def more_than_whole_steps(self) -> bool:
        """K above its limit, counted per stream both ways: per median running stream, and per stream the running
        gauge showed around each long prefill (its most there: `whole_step_gaps`). The median alone reads K high
        when the long prompts came while more streams ran than usual (held-out 86: 3 gaps from 2 long prompts read
        1.5 per stream with a median of 1 running; 3 and 2 ran beside them)."""
        return (self.top_share() > STALLS_PER_PREFILL_CHUNKED
                and (self.whole_step_gaps is None
                     or self.top_gaps() > STALLS_PER_PREFILL_CHUNKED * self.whole_step_gaps))

    def describe(self) -> str:
        return (f"the longest ITL gap (<= {self.gap:.3g} s) vs the median prefill of the {self.n_long:.0f} prompts "
                f"over {LONG_PROMPT_BOUND} tokens ({self.t_long:.3g} s)")


def infer_from_histograms(samples, slo: float | None = None) -> Chunking:
    """Chunking inferred from one target's ITL, prefill-time and prompt-token histograms (module docstring,
    3); UNKNOWN when they hold no long prompt. `slo` (the ITL SLO, s) also bounds the budget by the count
    of gaps above it."""
    lp = _long_prompts(samples)
    if lp is None:
        return UNKNOWN
    what, top = lp.describe(), lp.top_share()
    long = long_prompts(lp.parts, lp.intervals)   # exact P and T, where some scrape interval finished long prompts only
    waited = longest_wait(lp.parts, lp.itl_family, long)
    spread = waited is not None and waited[0] < WHOLE_WAIT_SHARE * waited[1]   # no interval held a whole prefill
    exact = slowest_step(lp.parts, lp.itl_family, lp.intervals, long, lp.streams)
    part = exact is not None and exact.one_step and exact.chunk_tokens < min(STEP_MARGIN * LONG_PREFILL_TOKENS,
                                                                              WHOLE_WAIT_SHARE * exact.prompt_tokens)
    if lp.gap >= lp.t_long and not lp.more_than_whole_steps() and not spread and not part:
        return _whole_prompt_steps(lp, top, what)
    what += _why_not_whole(lp, top, waited if spread else None)
    est, floor, counted, how = _estimate(lp, top, exact)
    bound, share, slow = _slow_steps(lp, slo)
    what += how + slow
    queued = queued_steps(lp.parts, lp.itl_family, lp.prompt)
    if queued is not None and queued.floor >= LONG_PREFILL_TOKENS:
        what += f"; {queued.describe()}"
    most = est >= WHOLE_WAIT_SHARE * lp.prompt or (exact is None and not counted and _straddled(lp, est, floor))
    if most and (bound is None or bound >= WHOLE_WAIT_SHARE * lp.prompt):
        # a bucket bound just under T (a whole step's gap and the prefill time straddle it) reads "spread"
        return Chunking(False, None, "inferred from metrics", what + f"; that is {est / lp.prompt:.0%} of the "
                        f"prompt{_bounds(lp, est, floor)}: one step held it, or most of it", long_prefill_s=lp.t_long,
                        budget_floor=min(floor, est), long_prompt_tokens=lp.prompt)
    return Chunking(True, None, "inferred from metrics", what, budget_estimate=est, long_prefill_s=lp.t_long,
                    budget_bound=bound, budget_floor=min(floor, est), long_prompt_tokens=lp.prompt,
                    slow_share=share, slowest_step_s=exact.step_s if exact is not None else None,
                    queued_floor=queued.floor if queued is not None else None, counted=counted)


def _long_prompts(samples) -> _LongPrompts | None:
    """The long prompts read off one target's whole-run histograms; None without them (no long prompt, no ITL
    gap, a counter that overflowed, or no prefill time)."""
    if samples is None or not len(samples):
        return None
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
        return None
    tl, tc = tokens
    if not np.isfinite(tc).all():        # a counter that overflowed to inf says nothing about prompt sizes
        return None
    n_long = tc[-1] - tc[np.searchsorted(tl, LONG_PROMPT_BOUND)]
    used = np.flatnonzero(np.diff(np.concatenate([[0.0], itl[1]])) >= 0.5)
    if n_long < 0.5 or not len(used) or not tc[-1] > 0:
        return None
    rank = 1.0 - n_long / (2.0 * tc[-1])
    intervals = prompt_intervals(parts, family)
    prompt = _prompt_size(tl, tc, rank, intervals)
    t_long, t_lo, t_hi = (float(v[0]) for v in Q.bucket_quantile(rank, ptime[0], ptime[1][None, :]))
    top_at = int(used[-1])
    gap = float(itl[0][top_at]) if np.isfinite(itl[0][top_at]) else float(itl[0][top_at - 1]) * 2
    if not (t_long > 0 and np.isfinite(t_long)):
        return None
    # the slowest gap lasted at least its bucket's lower bound: a chunk of at least this share of the prompt
    floor = prompt * min(float(itl[0][top_at - 1]) if top_at > 0 else 0.0, t_long) / t_long
    running = parts.get("vllm:num_requests_running")
    by_ts = running.groupby("ts")["value"].sum() if running is not None and len(running) else None
    streams = max(float(np.median(by_ts)) if by_ts is not None else 1.0, 1.0)
    return _LongPrompts(parts, itl_family, itl, top_at, float(n_long), prompt, t_long, (t_lo, t_hi), gap, floor,
                        intervals, streams,
                        _whole_step_gaps(intervals, by_ts, t_long))


def _whole_step_gaps(intervals: pd.DataFrame | None, running: pd.Series | None, t_long: float) -> float | None:
    """The most gaps whole-prompt steps could leave: over the scrape intervals that finished long prompts, each
    long prompt times the most running requests the gauge showed from `t_long` s before the interval opened to its
    close (the prompt's own request counts too: a generous ceiling). None when the token histogram cannot place
    the long prompts or no running gauge was scraped."""
    if intervals is None or running is None or len(running) < 2:
        return None
    ts = running.index.to_numpy(dtype=np.int64)
    step = int(np.median(np.diff(ts)))
    total = 0.0
    for end, n in intervals.loc[intervals["long"] >= 0.5, "long"].items():
        near = running[(ts >= int(end) - step - int(t_long * 1e9)) & (ts <= int(end))]
        total += float(n) * float(near.max() if len(near) else running.max())
    return total if np.isfinite(total) else None   # a gauge read NaN or overflowed bounds nothing


def _prompt_size(tl: np.ndarray, tc: np.ndarray, rank: float, intervals: pd.DataFrame | None) -> float:
    """P: the token histogram's quantile at the long prompts' median rank, or, where the scrape intervals place
    the short prompts, the long prompts' exact mean kept within their buckets (the lowest one's lower bound to
    the top one's upper)."""
    prompt = float(Q.bucket_quantile(rank, tl, tc[None, :])[0][0])
    t_lower, t_count = _per_bucket(tl, tc[None, :])
    t_count = t_count[0]
    mean = long_prompt_mean(intervals, short_bucket_mean(tl, t_lower, t_count))
    if mean is None:
        return prompt
    top_bound = tl[min(int(np.flatnonzero(t_count > 0)[-1]), len(tl) - 1)]
    lowest = np.flatnonzero((t_count >= 0.5) & (tl > LONG_PROMPT_BOUND))
    low_bound = float(t_lower[lowest[0]]) if len(lowest) else float(LONG_PROMPT_BOUND)
    return float(np.clip(mean, low_bound, top_bound if np.isfinite(top_bound) else mean))


def _whole_prompt_steps(lp: _LongPrompts, top: float, what: str) -> Chunking:
    """Chunking off, read from the streams having waited out whole prefills; UNKNOWN when the preemptions could
    account for every gap in the top bucket (a preempted request's next ITL sample spans its wait)."""
    parts = lp.parts
    preempted = counter_increase(parts[PREEMPTIONS], by_le=False) if PREEMPTIONS in parts else 0.0
    if preempted >= max(top * lp.n_long * lp.streams, 0.5):
        return UNKNOWN
    return Chunking(False, None, "inferred from metrics", what + ": the streams waited out whole prefills",
                    long_prefill_s=lp.t_long, budget_floor=lp.floor, long_prompt_tokens=lp.prompt)


def _why_not_whole(lp: _LongPrompts, top: float, waited: tuple[float, float] | None) -> str:
    """Why a longest gap of at least T still reads as chunked (K above its limit, no interval holding a whole
    prefill: `waited` as `longest_wait` gave it, or the slowest step sized under the whole prompt); "" when the
    longest gap was shorter than T."""
    if lp.gap < lp.t_long:
        return ""
    if lp.more_than_whole_steps():
        return (f", but that bucket holds {top:.1f} gaps per long prefill per running stream (a whole prompt per "
                "step leaves at most about 1)")
    if waited is not None:
        return (f", but no scrape interval's ITL sum per running stream reached {WHOLE_WAIT_SHARE:g} x the "
                f"{waited[1]:.3g} s prefill (at most {waited[0]:.3g} s; a whole prompt's step leaves each stream its "
                "whole prefill)")
    return (", but the slowest step, sized exactly, held under the whole prompt: two chunks whose gaps end in "
            "one scrape interval leave each stream the whole prefill too")


def _estimate(lp: _LongPrompts, top: float, exact) -> tuple[float, float, bool, str]:
    """(the budget estimate, the smallest chunk the slowest gap's bucket allows, whether the estimate is P / K, how
    it was read): the slowest step sized exactly where the scrapes resolve it (slow_step.py), else the smaller of
    P x G' / T, read high (a bucket's upper bound), and P / K, a prompt's share per top-bucket gap: high when the
    short last chunk's step falls in a lower bucket, low when it counts as a gap too (Chunking.unsettled_band)."""
    itl = lp.itl
    support = max(0.0, 1.0 - 0.5 * lp.n_long * lp.streams / itl[1][-1])
    _, lo, hi = Q.bucket_quantile(support, itl[0], itl[1][None, :])
    slowest = float(hi[0]) if np.isfinite(hi[0]) else 2 * float(lo[0])
    by_time, by_count = lp.prompt * min(slowest, lp.gap) / lp.t_long, lp.prompt / max(top, 1.0)
    est = float(min(by_time, by_count))
    if exact is not None:
        return exact.chunk_tokens, exact.chunk_tokens, False, f": prefills spread over steps; {exact.describe()}"
    floor = lp.prompt * min(float(lo[0]), min(slowest, lp.gap)) / lp.t_long if np.isfinite(lo[0]) else lp.floor
    return est, floor, bool(by_count < by_time), (f": prefills spread over steps; the slowest step of each held "
                                                  f"about {est:.0f} of a {lp.prompt:.0f}-token prompt")


def _straddled(lp: _LongPrompts, est: float, floor: float) -> bool:
    """The buckets leave a whole prompt's step possible and rule out one holding half of it or less: the slowest
    gap's bucket reaches past the lower bound of the prefill time's bucket, and its lower bound (which the gap
    exceeds) is at least half that bucket's upper bound. Held-out 143: a whole 1,750-token step's gaps in (0.3 s,
    0.4 s], its prefill time in (0.3 s, 0.5 s] read 0.45 s by interpolation, which left 89 % of the prompt to the
    step, under the 0.9 margin. The bounds come back from `est` and `floor` with rounding, hence `isclose`."""
    gap_hi, gap_lo = est * lp.t_long / lp.prompt, floor * lp.t_long / lp.prompt
    t_lo, half = lp.t_bucket[0], 0.5 * lp.t_bucket[1]
    return gap_hi > t_lo and not np.isclose(gap_hi, t_lo) and (gap_lo >= half or bool(np.isclose(gap_lo, half)))


def _bounds(lp: _LongPrompts, est: float, floor: float) -> str:
    """The gap's and the prefill time's buckets, where they decided it (`_straddled`)."""
    if est >= WHOLE_WAIT_SHARE * lp.prompt:
        return ""
    t = lp.t_long / lp.prompt
    return (f" (the slowest gap's bucket, {floor * t:.3g}-{est * t:.3g} s, and the prefill time's, "
            f"{lp.t_bucket[0]:.3g}-{lp.t_bucket[1]:.3g} s, leave one step anything from half the prompt to all of it)")


def _slow_steps(lp: _LongPrompts, slo: float | None) -> tuple[float | None, float | None, str]:
    """(P / (S - 1), P / S, how they read) from S, the gaps above the SLO per long prefill per running stream
    less those long prefills did not cause: S >= 2 slow steps per prompt held at most P / (S - 1) tokens each
    (all but the last chunk are full), wherever in the ITL buckets they fell, and S >= 1.5 held P / S on
    average. None for each the count does not reach, and for both without an SLO."""
    if slo is None or not slo > 0:
        return None, None, ""
    itl = lp.itl
    lower, per_bucket = _per_bucket(itl[0], itl[1][None, :])
    apart = _slow_gaps_apart(lp.parts[f"{lp.itl_family}_bucket"], lp.intervals, slo, lp.t_long)
    slow = max(float(per_bucket[0, lower >= slo].sum()) - apart, 0.0) / (lp.n_long * lp.streams)
    bound = share = None
    what = ""
    if slow >= 2.0:
        bound = float(lp.prompt / (slow - 1.0))
        what += (f"; {slow:.1f} gaps above the SLO per long prefill per running stream: no step held more than "
                 f"about {bound:.0f}")
    if slow >= SLOW_STEPS_MIN:
        share = float(lp.prompt / slow)
        if slow < 2.0:
            what += f"; {slow:.1f} gaps above the SLO per long prefill per running stream"
        what += f" (about {share:.0f} prompt tokens per such step on average)"
    return bound, share, what


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
    """An inferred "on" overruled by a freeze of at least 3/4 of a long prefill with nothing moving: no counter
    rose and no scheduler gauge changed, so no step ended (vLLM sends the gauges after every step), and one step
    held everything about as long as a whole prefill takes (a chunk step holds one chunk's share of it).
    `freezes`: (seconds nothing moved, still frozen at the last scrape), as `stream_stalls._freezes` reads them;
    a freeze that ended counts as one still open does. The ITL histogram need not hold a gap that long: while the
    next step is another whole prompt, the streams that waited through the first have still had no token
    (held-out 139's `h139-small-nochunk-1350-s2` quick: five whole-prompt steps of 3.4-10.8 s, no decode among
    them, the data ending 25 s into the streams' gap with no ITL sample above 0.2 s). 84f507e asked for that gap
    when a freeze could span several chunk steps that moved no counter (held-out 68's 448-token chunks); since
    e3b26d7 each such step ends the freeze (it moves the KV usage)."""
    longest = max((s for s, _ in freezes), default=0.0)
    if inferred.enabled and inferred.long_prefill_s and longest >= FROZEN_SHARE * inferred.long_prefill_s:
        return Chunking(False, None, "inferred from metrics",
                        f"the streams froze for {longest:.1f} s with nothing moving, as long as a whole "
                        f"prefill ({inferred.long_prefill_s:.3g} s): one step held the whole prompt, or most of it",
                        long_prefill_s=inferred.long_prefill_s, long_prompt_tokens=inferred.long_prompt_tokens)
    return inferred
