"""The slowest engine step, sized in prompt tokens from histogram `_sum`s and `_count`s, which are exact.

The idea: vLLM 0.33's ITL buckets are too coarse to size a chunk (1 s to 2.5 s is one bucket, and a 511-token chunk
step and a 700-token one both fall in it on a slow host), but a histogram's `_sum` and `_count` are exact. Every
running stream waits for the same step, so in a scrape interval in which one step ended, the ITL `_sum` over its
`_count` is that step's gap. G is the median long prompt's slowest such mean, the ceil(n / 2)-th largest over n long
prompts (P and T below are their means too, and a host's one-off pause is no chunk: held-out 66's full pass read
448-token chunks at up to 1.38 x from steps a neighbour's burst slowed by 60 %). When G is at least the scrape
interval, the scrapes came faster than the slow steps and G is the slowest step (a mean never exceeds the gap it
averages; with coarser scrapes it mixes several steps and is not used). Exactly so when its interval saw about one
token per running stream (`one_step`); with two each it mixes the slow step with a faster one and reads it low,
which is still a floor under the slowest step. Where the faster gaps fell in lower ITL buckets than the slow one,
the buckets unmix them: each faster gap is at most its bucket's upper bound, so the top bucket's samples average at
least the interval's sum less those bounds (`top_bucket_floor`), and that floor stands for the interval when most
running streams have a sample in the top bucket (about one each: `one_step`). In the scrape intervals that finished
long prompts only (over the 500 bound, none under it: vLLM observes a request's prompt size and prefill time
together when it finishes), the token and prefill-time histograms' `_sum` over `_count` are those prompts' exact
mean size P and prefill time T (first scheduled to first token: every step that computed part of the prompt). The
slowest step then held about P x G / T of a prompt. It reads a few per cent high: the slowest step is the last full
chunk, whose attention spans the whole prefix. When prompts queue, each one's prefill also spans steps that computed
its neighbours' chunks, so T outlasts its own steps and P x G / T reads low; then the prompt tokens computed per
second over the run, R, size the step from the other side: a step that fills the budget computes prompt tokens
fastest, so R x G is at most about the largest chunk, and near it when prefills run back to back. The estimate is
the larger of the two (docs/accuracy.md, "The slowest step from `_sum` / `_count`").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stallscope.analyzers.signals import _per_bucket
from stallscope.analyzers.workload import PREFILL_TIME, interval_increase

LONG_PROMPT_BOUND = 500       # vLLM's request-token buckets: 1-2-5 series; "long" = above the 500 bound
STREAMS_SEEN = 0.5   # an interval's mean counts when at least half the running streams got a token in it
ONE_STEP = 1.25      # ... and is one step's gap when its ITL count is at most this x the running streams


@dataclass(frozen=True)
class SlowStep:
    """G, P, T and R as the module docstring defines them; `prompts` the long prompts P and T are the mean of."""

    step_s: float
    prompt_tokens: float
    prefill_s: float
    prompts: float
    scrape_s: float
    prompt_rate: float = 0.0
    one_step: bool = False   # G's interval saw about one token per running stream: G is that step's gap, not a mix

    @property
    def chunk_tokens(self) -> float:
        """The prompt tokens the slowest step held: the larger of P x G / T and R x G.

        >>> SlowStep(1.0, 1850.0, 3.7, 2.0, 0.5).chunk_tokens, SlowStep(1.0, 1250.0, 3.4, 2.0, 0.5, 560.0).chunk_tokens
        (500.0, 560.0)
        """
        return max(self.prompt_share, self.prompt_rate * self.step_s)

    @property
    def prompt_share(self) -> float:
        """P x G / T."""
        return self.prompt_tokens * min(self.step_s, self.prefill_s) / self.prefill_s

    def describe(self) -> str:
        """What sized the step, for a finding's evidence."""
        head = f"the slowest ({self.step_s:.3g} s, the largest scrape interval's mean ITL) held about "
        if self.prompt_rate * self.step_s > self.prompt_share:
            return (head + f"{self.chunk_tokens:.0f} prompt tokens at the run's {self.prompt_rate:.0f} a second (a "
                    f"{self.prompt_tokens:.0f}-token prompt's {self.prefill_s:.3g} s prefill spanned steps it shared)")
        return head + (f"{self.chunk_tokens:.0f} of a {self.prompt_tokens:.0f}-token prompt prefilled in "
                       f"{self.prefill_s:.3g} s (exact means)")


def prompt_intervals(parts: dict, family: str) -> pd.DataFrame | None:
    """Per scrape interval, from a token histogram: `sum` (tokens), `short` (prompts at or under the 500 bound)
    and `long` (prompts over it) finished; None when its `_sum`, `_count` or buckets are missing."""
    rows = [parts.get(f"{family}{end}") for end in ("_sum", "_count", "_bucket")]
    if any(r is None or not len(r) for r in rows):
        return None
    f = pd.concat({"sum": interval_increase(rows[0]), "count": interval_increase(rows[1]),
                   "short": interval_increase(rows[2][rows[2]["le"] == LONG_PROMPT_BOUND])}, axis=1).fillna(0.0)
    return f.assign(long=f["count"] - f["short"]).sort_index()


def long_prompt_mean(intervals: pd.DataFrame | None, short_mean: float | None = None) -> float | None:
    """The long prompts' mean size from a token histogram's `_sum` (analyzers/chunking_inference.py): the sum less
    the short prompts, each the mean size of the prompts finished in scrape intervals that finished no long one,
    over the long prompts' count; `intervals` as `prompt_intervals` gives them. Where no such interval shows the
    short prompts' size (scrapes as coarse as the long prompts' arrivals), `short_mean` stands in for it (from
    their buckets: `short_bucket_mean`). None when no long prompt finished, or short ones did and neither gives
    their size. The buckets alone read a 950-token prompt as 750, a 1,050-token one as 1,500."""
    if intervals is None:
        return None
    n_long, n_short = float(intervals["long"].sum()), float(intervals["short"].sum())
    quiet = intervals[(intervals["long"] < 0.5) & (intervals["short"] > 0)]
    if n_long < 0.5 or (n_short > 0 and quiet.empty and short_mean is None):
        return None
    if n_short > 0 and not quiet.empty:
        short_mean = float(quiet["sum"].sum() / quiet["short"].sum())
    return (float(intervals["sum"].sum()) - n_short * (short_mean or 0.0)) / n_long


def short_bucket_mean(les: np.ndarray, lower: np.ndarray, counts: np.ndarray) -> float | None:
    """The mean size of the prompts at or under the 500 bound from a token histogram's bucket bounds, lower edges
    and counts per bucket (`signals._per_bucket`), each prompt at its bucket's middle (uniform within a bucket, as
    `histogram_quantile` assumes); None without such prompts, or when that guess moves the long prompts' mean
    further, at worst, than their own buckets leave it open: over all the prompts, the short ones' half bucket
    widths sum to at least the long ones'.

    >>> les = np.array([20.0, 50.0, 500.0, 1000.0, 2000.0])
    >>> short_bucket_mean(les, np.array([0.0, 20.0, 50.0, 500.0, 1000.0]), np.array([0.0, 20.0, 0.0, 0.0, 4.0]))
    35.0
    """
    upto = int(np.searchsorted(les, LONG_PROMPT_BOUND, side="right"))
    half = np.where(np.isfinite(les), (les - lower) / 2.0, np.inf)
    spread = counts * np.where(counts > 0, half, 0.0)     # an empty +Inf bucket adds nothing
    if not counts[:upto].sum() > 0 or spread[:upto].sum() >= spread[upto:].sum():
        return None
    return float((counts[:upto] * (lower[:upto] + half[:upto])).sum() / counts[:upto].sum())


@dataclass(frozen=True)
class LongPrompts:
    """The long prompts' exact mean size P (tokens) and prefill time T (s), over `count` of them."""

    tokens: float
    prefill_s: float
    count: float


def long_prompts(parts: dict, intervals: pd.DataFrame | None) -> LongPrompts | None:
    """P and T over the scrape intervals that finished long prompts and no short one (module docstring); None
    without the prefill-time `_sum` or such an interval."""
    t_sum = parts.get(f"{PREFILL_TIME}_sum")
    if intervals is None or t_sum is None or not len(t_sum):
        return None
    f = intervals.assign(t=interval_increase(t_sum).reindex(intervals.index).fillna(0.0))
    only = f[(f["long"] >= 0.5) & (f["short"] < 0.5)]
    n = float(only["long"].sum())
    if n < 0.5 or not float(only["t"].sum()) > 0:
        return None
    return LongPrompts(float(only["sum"].sum()) / n, float(only["t"].sum()) / n, n)


def _slowest_mean(itl_sum: pd.DataFrame, itl_count: pd.DataFrame, streams: float,
                  running: pd.DataFrame | None = None, rank: int = 1,
                  itl_bucket: pd.DataFrame | None = None) -> tuple[float, bool] | None:
    """The `rank`-th largest scrape interval's slowest gap floor among those in which most running streams got a
    token, and whether that gap's samples came from about one step. The floor is the interval's ITL `_sum` /
    `_count` or, larger where the interval's top ITL bucket holds most running streams' samples, those samples'
    mean (`top_bucket_floor`): every running stream waits on the same steps, so one slow token each in the top
    bucket is one slow step, and the interval's faster gaps, each at most its bucket's upper bound, no longer read
    it low (a mean never exceeds the gap it averages, so a mix reads the slowest step low; held-out 144's 2.12 s
    step and its 0.66 s sibling ended in one interval, whose mean read 1.43 s). `one` is whether the samples the
    floor averages were at most `ONE_STEP` x the running gauge (the larger of the interval's two ends)."""
    f = pd.concat({"s": interval_increase(itl_sum), "c": interval_increase(itl_count)}, axis=1).fillna(0.0)
    f = f[f["c"] >= max(STREAMS_SEEN * streams, 0.5)]
    if not len(f):
        return None
    f = f.assign(g=f["s"] / f["c"], n=f["c"])
    top = top_bucket_floor(itl_bucket, f["s"]) if itl_bucket is not None and len(itl_bucket) else None
    if top is not None:
        top = top.reindex(f.index)
        unmixed = (top["n"] >= max(STREAMS_SEEN * streams, 0.5)) & (top["floor"] > f["g"])
        f.loc[unmixed, "g"], f.loc[unmixed, "n"] = top.loc[unmixed, "floor"], top.loc[unmixed, "n"]
    at = f["g"].sort_values(ascending=False, kind="stable").index[min(rank, len(f)) - 1]
    ends = streams_at_ends(running)
    one = bool(ends is not None and at in ends.index and f.loc[at, "n"] <= ONE_STEP * max(float(ends.loc[at]), 1.0))
    return float(f.loc[at, "g"]), one


def top_bucket_floor(itl_bucket: pd.DataFrame, sums: pd.Series) -> pd.DataFrame:
    """Per scrape interval (`sums`' index, the ITL `_sum`'s increase), `n`, the ITL samples in the highest bucket
    that gained any, and `floor`, a floor under their mean: the interval's sum less every other sample at its
    bucket's upper bound, over `n`, kept within that bucket's bounds (NaN where no bucket gained a sample)."""
    le = itl_bucket["le"].astype(float)
    les = np.sort(le.unique())
    cum = pd.concat({b: interval_increase(itl_bucket[le == b]) for b in les}, axis=1).reindex(sums.index).fillna(0.0)
    lowers, per = _per_bucket(les, cum.to_numpy())
    used = per >= 0.5
    top = np.where(used.any(axis=1), len(les) - 1 - np.argmax(used[:, ::-1], axis=1), -1)
    at = np.maximum(top, 0)
    below = np.where(np.arange(len(les))[None, :] < top[:, None], per * np.where(np.isfinite(les), les, 0.0), 0.0)
    n = np.where(top >= 0, per[np.arange(len(per)), at], np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        floor = np.minimum(np.maximum((sums.to_numpy(dtype=float) - below.sum(axis=1)) / n, lowers[at]), les[at])
    return pd.DataFrame({"n": n, "floor": np.where(top >= 0, floor, np.nan)}, index=sums.index)


def streams_at_ends(running: pd.DataFrame | None) -> pd.Series | None:
    """Per scrape (the interval ending there), the running gauge at the interval's start or end, the larger: a
    stream that finished inside the interval was in it too; None without the gauge."""
    if running is None or not len(running):
        return None
    gauge = running.groupby("ts")["value"].sum().sort_index()
    return pd.concat([gauge, gauge.shift(1)], axis=1).max(axis=1)


def slowest_step(parts: dict, itl_family: str, intervals: pd.DataFrame | None, long: LongPrompts | None,
                 streams: float) -> SlowStep | None:
    """The SlowStep of one target's series (`parts` as `signals.split_metrics` gives them, with the ITL `_sum` and
    `_count`; `intervals` as `prompt_intervals` and `long` as `long_prompts` give them); None when the scrapes are
    coarser than the slowest step or no interval finished long prompts alone."""
    rows = [parts.get(n) for n in (f"{itl_family}_sum", f"{itl_family}_count")]
    if intervals is None or long is None or any(r is None or not len(r) for r in rows):
        return None
    # the median long prompt's slowest step, as P and T are its size and prefill: at least half of them had one
    # this slow, and a host's one-off slow steps (a pause, a neighbour's burst) are no chunk
    rank = max(math.ceil(round(float(intervals["long"].sum())) / 2), 1)
    found = _slowest_mean(rows[0], rows[1], streams, parts.get("vllm:num_requests_running"), rank,
                          parts.get(f"{itl_family}_bucket"))
    ts = np.unique(rows[0]["ts"].to_numpy())
    if found is None or len(ts) < 2:
        return None
    g, one = found
    scrape = float(np.median(np.diff(ts))) / 1e9
    if not (g >= scrape and np.isfinite(g)):
        return None
    rate = float(intervals["sum"].sum()) / (float(ts[-1] - ts[0]) / 1e9)
    return SlowStep(g, long.tokens, long.prefill_s, long.count, scrape, rate, one)


def longest_wait(parts: dict, itl_family: str, long: LongPrompts | None) -> tuple[float, float] | None:
    """(M, T): the largest scrape interval's ITL `_sum` per running stream, and the long prompts' exact mean
    prefill time. A step that held a whole prompt leaves every running stream a gap of about T, all ending in one
    interval, so M reaches about T; steps of part of a prompt leave at most one such step plus the interval. The
    streams are the running gauge at the interval's start or end, the larger: a stream that finished inside the
    interval waited in it too (read at the end alone, the run's last intervals, as its sessions finish, gave a few
    streams the whole batch's wait). None without the series or `long` (as `long_prompts` gives it)."""
    rows = [parts.get(n) for n in (f"{itl_family}_sum", "vllm:num_requests_running")]
    if long is None or any(r is None or not len(r) for r in rows):
        return None
    streams = streams_at_ends(rows[1])
    waited = interval_increase(rows[0])
    per = (waited / streams.reindex(waited.index).clip(lower=1.0)).dropna()
    if not len(per):
        return None
    return float(per.max()), long.prefill_s
