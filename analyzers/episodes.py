"""Episodes: one continuous stretch of impaired streams on one target, with one cause decided by all its evidence.

The idea: judged window by window, one stall flips between explanations; judged once, over every window it
spans, it gets one cause, and the finding says which evidence decided it.

1. Per window of the signals grid (stallscope.analyzers.signals), streams are *impaired* when
   - `missed`: ITL P99's whole bucket is at or above the SLO (the alert rule's test), or >= 5 % of stream
     time sat in gaps above it (a long freeze that a per-observation P99 over a long window hides);
   - `frozen`: requests are RUNNING and the live mean gap per stream (running / live generation rate) is
     above the SLO: a stall seen while it lasts, before any ITL sample records it;
   - `still`: requests are RUNNING and nothing has moved for longer than the SLO at scrape resolution
     (`nothing_for_s`), while the live window still averages in the tokens from before the freeze; it has no
     PromQL form, so the alert rules and the fleet push-down see such a freeze once the live window does;
   - `interference`: 1-5 % of stream time in gaps above the SLO while P99 stayed under it (info-grade).
   Impaired windows at most one window apart form one episode; a sleeping engine's windows are not impaired.
2. Evidence over the episode and one window after it (a prompt's tokens are counted when its prefill
   completes): long prefill completions, ITL samples above the SLO, preemptions, windows frozen while
   prompt tokens were computed at `prefill_tokens_rate_high` or more, windows frozen with nothing moving (one
   step holding everything: nothing came out over the live window and the latest scrape saw no step end, or
   `still`; a lone prompt prefilled in chunks puts out nothing, but its steps move the scheduler's gauges).
   Counts come from the windows' rates (`span_count`), whole also where an episode touches the data's first or
   last evaluation (a run that starts with a burst, or whose data end just after a stall).
3. The cause, first match (`CAUSES`; `decided_by` names the evidence):
   - `stuck`: nothing came out (fewer than `generation_tokens_rate_low` tokens/s and no computed prompt token
     over the live window, the test of the VLLMSchedulerStalled rule) for longer than
     `for.VLLMSchedulerStalled`, or for two windows when chunked prefill is known on (no step of a bounded
     budget takes that long), whether or not steps ended: a stuck engine core or a livelock;
   - `preemption`: preemptions number at least half the ITL samples above the SLO (each preempted request
     stalls once, for its recompute), or the samples they leave number fewer than half the running streams
     (`FEW_STREAMS`): every decode waits for the whole step, so a step that held a long prompt past the SLO
     stalls every running stream at once, and a few stalls beside preemptions are theirs;
   - `prefill_chunks`: prefill work, but no step computed a long prompt: chunked prefill is on at a budget
     under the long-prefill cut plus the running decodes scheduled before any chunk (known: the running
     median less the prefilling request, at least 1), or, when unknown, no step outlasted the live window
     and each stream stalled more than 1.5 times per long prefill (ITL samples above the SLO in windows where a long
     prefill completed, less the target's rate away from long prefills; stallscope.analyzers.chunking), or
     long prefills completed but fewer than half of the episode's ITL samples above the SLO came at them
     (`PREFILL_SHARE_MIN`: the cause is what made most stalls, here the steady steps with prompt work in
     them). `iteration_tokens_total` counts a prompt's tokens in the step that completes it, so a "long
     prefill" there may be a short chunk that finished a prompt beside other short prompts; stalls that do
     not cluster at those steps show it; or, whatever the configuration, long prefills completed (no freeze
     still open, no frozen window computing prompts) while fewer ITL samples above the SLO came at them than
     half the running streams (`FEW_STREAMS`): a step that held a long prompt past the SLO stalls every one;
   - `prefill`: a long prefill completed, or prompt tokens were computed at `prefill_tokens_rate_high` or
     more while the streams were frozen, or the streams are frozen with nothing moving (one engine step in progress; with
     chunking off it is a whole prompt's prefill) for less than the stuck bound: decode starvation;
   - `slow_decode`: none of these: the decode step itself is slow.
4. Severity: the ITL SLO as users state it, a P99 (the spikes starvation is seen as), judged over its
   reference window (`windows.short`, the alert rules' window; in a run's first such window the first full
   one, the whole run when shorter), never over a grid window a short run shrank: `warning` when more than
   1 % of that window's ITL observations lie in buckets at or above the SLO, a freeze still open where the
   window ends counting one observation of its length so far per running request (as a client's P99 counts
   the gap it is waiting in); `critical` at twice the SLO; `info` otherwise, whatever the cause: freezes or
   gaps above the SLO while the P99 met it are reported with their numbers (the reference window's
   stream-time share above the SLO, `itl_ref_share`, and the longest freeze). `stuck` is critical, and so
   is a freeze that stayed frozen for the `for:` of the VLLMDecodeStarvationInProgress alert (30 s): what
   pages someone is never `info`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from stallscope.analyzers.chunking import (FEW_STREAMS, LONG_PREFILL_TOKENS, STALLS_PER_PREFILL_CHUNKED, Chunking,
                                           decodes_beside)
from stallscope.analyzers.signals import episodes as runs_of
from stallscope.core.config import parse_duration

MISSED_SHARE, INTERFERENCE_SHARE = 0.05, 0.01
P99_TAIL = 0.01   # the ITL SLO is a P99: missed when more than 1 % of observations lie at or above it
PREFILL_SHARE_MIN = 0.5   # the share of above-SLO ITL samples long prefills must explain to be the cause (3)
CAUSES = ("stuck", "preemption", "prefill_chunks", "prefill", "slow_decode")
TIMELINE_ROWS = 40   # an episode's evidence timeline: at most this many windows
TIMELINE = ("ts", "itl_p99", "itl_stall_share", "live_mean_itl", "nothing_for_s", "unserved_for_s", "prompt_rate",
            "long_prefill_rate", "gen_rate", "preempt_rate", "running", "waiting", "kv_usage")


@dataclass(frozen=True)
class Episode:
    """Windows `i..j` of one target's signals (sorted by ts); `ongoing` when it runs to the last window."""

    target: str
    i: int
    j: int
    start_ns: int
    end_ns: int
    cause: str
    severity: str
    decided_by: str
    evidence: dict = field(default_factory=dict)
    timeline: list = field(default_factory=list)
    ongoing: bool = False
    reading: str | None = None   # where the configuration decided: `decided_by` after its description


def _col(sig: pd.DataFrame, name: str, fill: float = np.nan) -> np.ndarray:
    a = sig[name].to_numpy(dtype=float) if name in sig else np.full(len(sig), np.nan)
    return np.where(np.isnan(a), fill, a) if fill == fill else a


def window_states(sig: pd.DataFrame, slo: float, gen_low: float = 0.5) -> dict[str, np.ndarray]:
    """Per-window boolean states (module docstring, 1), the severity ratio of each window, and whether the
    SLO was missed (`missed_ref`) or missed twice over (`critical_ref`) over its reference window (4)."""
    p99_lo, share = _col(sig, "itl_p99_lo", 0.0), _col(sig, "itl_stall_share", 0.0)
    running, live = _col(sig, "running", 0.0), _col(sig, "live_mean_itl")
    awake = _col(sig, "asleep", 0.0) < 1
    live_gap = np.where(running > 0, np.where(np.isnan(live), 0.0, live), 0.0)
    frozen = awake & (running > 0) & (live_gap > slo)
    # at scrape resolution: nothing has moved for longer than the SLO, while the live window still averages in
    # the tokens from before (no PromQL form, so the fleet push-down and the alert rules see it a live window on)
    nothing_for = _col(sig, "nothing_for_s", 0.0)
    still = awake & (running > 0) & (nothing_for > slo)
    missed = awake & ((p99_lo >= slo) | (share >= MISSED_SHARE))
    interference = awake & ~missed & ~frozen & ~still & (share >= INTERFERENCE_SHARE)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.maximum.reduce([p99_lo / slo, share / (2 * MISSED_SHARE), np.where(frozen, live_gap / slo, 0.0),
                                   np.where(still, nothing_for / slo, 0.0)])
    # the alert rules' test: fewer than `generation_tokens_rate_low` tokens/s and no prompt token over the live
    # window (rules/render.py); at scrape resolution, no progress for longer than the SLO (a live window longer
    # than the freeze still holds the tokens from before it)
    quiet = frozen & (_col(sig, "live_gen_rate", 0.0) < gen_low) & (_col(sig, "live_prompt_rate", 0.0) <= 0)
    # one step holding everything: not where the latest scrape saw a step end (a counter or a scheduler gauge
    # moved: a lone prompt prefilled in chunks puts out nothing until its last chunk, but its steps end)
    stepping = _col(sig, "nothing_for_s") == 0
    nothing = (quiet & ~stepping) | still
    missed_ref, critical_ref = _slo_missed(sig, slo, p99_lo)
    return {"missed": missed, "frozen": frozen, "still": still, "interference": interference, "ratio": ratio,
            "nothing_moves": nothing, "quiet_live_window": quiet, "missed_ref": awake & missed_ref,
            "critical_ref": awake & critical_ref}


def _slo_missed(sig, slo, p99_lo) -> tuple[np.ndarray, np.ndarray]:
    """Module docstring, 4: more than 1 % of the reference window's ITL observations (signals' `itl_ref_*`, a
    freeze still open counted) at or above the SLO, and at or above twice it."""
    count = _col(sig, "itl_ref_count")
    if np.isnan(count).all():   # no reference counts (a signals frame from elsewhere): the window's own P99
        return p99_lo >= slo, p99_lo >= 2 * slo
    total = np.nan_to_num(count)
    return ((total > 0) & (_col(sig, "itl_ref_above", 0.0) > P99_TAIL * total),
            (total > 0) & (_col(sig, "itl_ref_above2", 0.0) > P99_TAIL * total))


def find(sig: pd.DataFrame, *, thresholds: dict, chunking: Chunking, window_ns: int, step_ns: int,
         live_ns: int) -> list[Episode]:
    """The episodes of one target's signals frame (sorted by ts)."""
    slo = float(thresholds["itl_slo_s"])
    st = window_states(sig, slo, float(thresholds.get("generation_tokens_rate_low", 0.5)))
    paged = _frozen_long(sig, st["frozen"], parse_duration(
        thresholds.get("for", {}).get("VLLMDecodeStarvationInProgress", "30s")))
    st["missed_ref"], st["critical_ref"] = st["missed_ref"] | paged, st["critical_ref"] | paged
    impaired = st["missed"] | st["frozen"] | st["still"] | st["interference"]
    per_window = max(1, window_ns // max(step_ns, 1))
    st["above_excess"] = _above_excess(sig, per_window)
    out = []
    for i, j in runs_of(impaired, merge_gap=per_window):
        out.append(_episode(sig, st, i, j, slo=slo, thresholds=thresholds, chunking=chunking, window_ns=window_ns,
                            step_ns=step_ns, live_ns=live_ns, after=per_window))
    return out


def _above_excess(sig: pd.DataFrame, per_window: int) -> np.ndarray:
    """ITL samples above the SLO per second in windows where a long prefill completed, less the target's rate in
    windows with no long prefill within a window (a slow decode step's own stalls are not the prefill's); 0
    elsewhere."""
    above, long = _col(sig, "itl_above_slo_rate", 0.0), _col(sig, "long_prefill_rate", 0.0) > 0
    csum = np.concatenate([[0], np.cumsum(long)])
    idx = np.arange(len(long))
    near = csum[np.minimum(idx + per_window + 1, len(long))] - csum[np.maximum(idx - per_window, 0)] > 0
    baseline = float(np.median(above[~near])) if (~near).any() else 0.0
    return np.where(long, np.clip(above - baseline, 0.0, None), 0.0)


def _tally(sig: pd.DataFrame, st: dict, i: int, j: int, after: int, step_s: float, live_s: float,
           prefill_rate_high: float, window_s: float) -> dict:
    """The evidence figures of windows i..j (prefill completions also up to `after` windows later) of `window_s`
    seconds each."""
    k = min(len(sig), j + 1 + after)
    running = _col(sig, "running", 0.0)[i:j + 1]
    long_prefills = span_count(_col(sig, "long_prefill_rate", 0.0), i, k, step_s, window_s)
    above = span_count(_col(sig, "itl_above_slo_rate", 0.0), i, k, step_s, window_s)
    above_prefill = span_count(st["above_excess"], i, k, step_s, window_s)
    preempt = span_count(_col(sig, "preempt_rate", 0.0), i, j + 1, step_s, window_s)
    streams = float(np.median(running[running > 0])) if (running > 0).any() else 0.0
    long_work = st["frozen"][i:j + 1] & (_col(sig, "live_prompt_rate", 0.0)[i:j + 1] >= prefill_rate_high)
    nothing = st["nothing_moves"][i:j + 1]
    # how long nothing moved: what the scrapes measured (nothing_for_s); without it (a signals frame from
    # elsewhere), a run of live windows without progress spans them all
    run_nothing = max((b - a + 1 for a, b in runs_of(st["quiet_live_window"][i:j + 1])), default=0)
    measured = _col(sig, "nothing_for_s")[i:j + 1]
    quiet_s = run_nothing * step_s + live_s if run_nothing else 0.0
    nothing_s = float(np.nanmax(measured)) if np.isfinite(measured).any() else quiet_s
    with np.errstate(divide="ignore", invalid="ignore"):
        per_prefill = above_prefill / (long_prefills * streams) if long_prefills > 0 and streams > 0 else float("nan")
    return {"windows": j - i + 1, "window_s": window_s, "windows_missed": int(st["missed"][i:j + 1].sum()),
            "windows_frozen": int((st["frozen"] | st["still"])[i:j + 1].sum()), "long_prefills": long_prefills,
            "itl_samples_above_slo": above, "itl_samples_above_slo_at_prefills": above_prefill,
            "preemptions": preempt, "running_median": streams,
            "stalls_per_long_prefill_per_stream": per_prefill,
            "windows_frozen_computing_prompts": int(long_work.sum()), "windows_nothing_moves": int(nothing.sum()),
            "nothing_moves_s": nothing_s, "windows_quiet": int(st["quiet_live_window"][i:j + 1].sum()),
            "nothing_out_s": max(nothing_s, quiet_s),
            "windows_prefill_free": int((_col(sig, "prompt_rate", 0.0)[i:j + 1] <= 0).sum()),
            **_reference(sig, i, j)}


def span_count(rate: np.ndarray, i: int, k: int, step_s: float, window_s: float) -> float:
    """The events of windows i..k-1 from their rates: each rate times the grid step, which counts an event once
    where it lies in window / step windows of the span, and at least the most any one of its windows held (rate
    times window). An event near the data's first or last evaluation lies in fewer windows (in one, at the very
    end), so there the sum alone reads it as a fraction of itself. Both figures are at most the true count.

    >>> r = np.array([0.0, 0.0, 0.0, 1.0])   # 4 events in the last of four 4 s windows, 1 s apart
    >>> float(r.sum() * 1.0), span_count(r, 0, 4, 1.0, 4.0)
    (1.0, 4.0)
    """
    r = np.nan_to_num(np.asarray(rate[i:k], dtype=float))
    if not len(r):
        return 0.0
    return float(max(r.sum() * step_s, r.max() * window_s))


def _reference(sig: pd.DataFrame, i: int, j: int) -> dict:
    """The worst reference-window figures of windows i..j: the share of ITL observations at or above the SLO
    (the P99 missed above 1 %) and of stream time in gaps above it."""
    count = _col(sig, "itl_ref_count")[i:j + 1]
    if not np.isfinite(count).any():
        return {}
    with np.errstate(divide="ignore", invalid="ignore"):
        above = np.where(count > 0, _col(sig, "itl_ref_above", 0.0)[i:j + 1] / count, 0.0)
    return {"reference_itl_share_above_slo": float(np.nanmax(above)),
            "reference_stream_time_above_slo": float(np.nanmax(_col(sig, "itl_ref_share", 0.0)[i:j + 1]))}


def _preempted(ev: dict, streams: float) -> str | None:
    """The evidence that preemptions made the episode's stalls (module docstring 3, `preemption`), else None."""
    above, pre = ev["itl_samples_above_slo"], ev["preemptions"]
    if not (pre > 0) or ev["windows_frozen_computing_prompts"] > 0:
        return None
    if pre >= 0.5 * above:
        return f"{pre:.0f} preemptions against {above:.0f} ITL samples above the SLO"
    if above - pre < FEW_STREAMS * streams:
        return (f"{pre:.0f} preemptions against {above:.0f} ITL samples above the SLO; the {above - pre:.0f} they "
                f"leave are fewer than half the {streams:.0f} running streams, and a step that held a long prompt "
                "past the SLO stalls every one")
    return None


def _cause(ev: dict, chunking: Chunking, stuck_after_s: float,
           ongoing_nothing: bool) -> tuple[str, str, str | None]:
    """(cause, the evidence that decided it, and where the configuration decided, that evidence after its
    description), first match of module docstring 3."""
    known_chunked = chunking.enabled is True and chunking.source != "inferred from metrics"
    stuck_bound = 2 * ev["window_s"] if known_chunked else stuck_after_s
    # nothing came out (the VLLMSchedulerStalled test), whether or not steps ended: a livelock's steps move the
    # scheduler's gauges but put out nothing
    out_s = ev["nothing_out_s"]
    if ev["windows_quiet"] >= 2 and out_s > stuck_bound:
        return "stuck", (f"no output and no computed prompt token for {out_s:.0f} s with "
                         f"{ev['running_median']:.0f} requests RUNNING, longer than {stuck_bound:.0f} s"), None
    above = ev["itl_samples_above_slo"]
    running = ev["running_median"]
    streams = running if np.isfinite(running) and running > 1 else 1.0
    preempted = _preempted(ev, streams)
    if preempted:
        return "preemption", preempted, None
    prefill_work = ev["long_prefills"] > 0 or ev["windows_frozen_computing_prompts"] > 0
    decodes = decodes_beside(running)
    holds = chunking.holds_long_prefills(decodes=decodes)
    per = ev["stalls_per_long_prefill_per_stream"]
    # a step outlasted the live window, then a prefill completed: whole-prompt steps, unless the configuration
    # (given or read off the histograms) says the steps were chunks
    whole_steps = ev["windows_nothing_moves"] > 0 and holds is not False
    at_prefills = ev["itl_samples_above_slo_at_prefills"]
    elsewhere = (holds is None and ev["long_prefills"] > 0 and above > 0
                 and at_prefills < PREFILL_SHARE_MIN * above)    # the stalls did not cluster at the long prefills
    # a step that held a long prompt past the SLO stalls every running stream at once; long prefills that fewer
    # than half the streams stalled at held nobody past it (a freeze still open has left no sample yet)
    unfelt = (not ongoing_nothing and ev["long_prefills"] > 0 and ev["windows_frozen_computing_prompts"] == 0
              and above > 0 and at_prefills < FEW_STREAMS * streams)
    if prefill_work and (holds is False or unfelt or (holds is None and not whole_steps
                                                      and (per > STALLS_PER_PREFILL_CHUNKED or elsewhere))):
        beside = f" beside {decodes} running decodes" if (chunking.budget or 0) >= LONG_PREFILL_TOKENS else ""
        if holds is False:
            reading = (f"no step is taken to compute {LONG_PREFILL_TOKENS}+ prompt tokens; "
                       f"{chunking.unsettled_reading()}, a band the metrics cannot settle"
                       if chunking.estimate_unsettled() else
                       f"no step computes {LONG_PREFILL_TOKENS}+ prompt tokens{beside}")
            return "prefill_chunks", f"{chunking.describe()}: {reading}", reading
        if holds is None and not whole_steps and per > STALLS_PER_PREFILL_CHUNKED:
            why = (f"{per:.1f} ITL samples above the SLO per long prefill per stream: every chunk step of a "
                   "prompt was slow, so its steps were chunks")
        elif elsewhere:
            why = (f"{at_prefills:.0f} of the {above:.0f} ITL samples above the SLO came at the "
                   f"{ev['long_prefills']:.1f} long prefills, under {PREFILL_SHARE_MIN:.0%}: the steady steps, "
                   "with prompt work in them, made most stalls, not a long prompt's step")
        else:   # unfelt
            why = (f"{at_prefills:.0f} of the {above:.0f} ITL samples above the SLO came at the "
                   f"{ev['long_prefills']:.1f} long prefills, fewer than half the {streams:.0f} running streams: no "
                   "long prompt's step held them (such a step stalls every one); the steps with prompt work in "
                   "them made the stalls")
        return "prefill_chunks", why, None
    if prefill_work:
        if ev["long_prefills"] > 0 and whole_steps:
            return "prefill", (f"{ev['long_prefills']:.1f} long prefills completed after the streams froze with "
                               f"nothing moving for {ev['nothing_moves_s']:.1f} s: one step held "
                               f"{chunking.step_held()}"), None
        if ev["long_prefills"] > 0:
            return "prefill", f"{ev['long_prefills']:.1f} long prefills completed" + _per_prefill(
                per, at_prefills, streams, chunking), None
        return "prefill", (f"{ev['windows_frozen_computing_prompts']} windows with streams frozen while a long "
                           "prompt's worth of prompt tokens was computed"), None
    if ongoing_nothing:
        return "prefill", (f"streams frozen with nothing moving for {ev['nothing_moves_s']:.1f} s (under the "
                           f"{stuck_bound:.0f} s stuck bound): one engine step is in progress, and "
                           + ("with chunked prefill off such a step prefills whole prompts"
                              if holds else "a prompt's tokens are counted only when its prefill completes")), None
    return "slow_decode", "no prefill work and no preemption in the episode", None


def _per_prefill(per: float, at_prefills: float, streams: float, chunking: Chunking) -> str:
    """What the stalls per long prefill per stream say of a `prefill` episode: about one stall per prompt, or,
    under half of one, that not every such step held the streams past the SLO but those that did stalled at
    least half of them (a burst of short prompts computed together counts as a long prefill too)."""
    if per != per:
        return ""
    if per >= FEW_STREAMS:
        return (f", {per:.1f} ITL samples above the SLO per long prefill per stream (one stall per prompt: its "
                f"slowest step held {chunking.step_held()})")
    return (f", {per:.1f} ITL samples above the SLO per long prefill per stream: not every such step held the "
            f"streams past the SLO, but the {at_prefills:.0f} samples above it at them are at least half the "
            f"{streams:.0f} running streams, as a step of {LONG_PREFILL_TOKENS}+ prompt tokens past the SLO leaves")


def _frozen_long(sig: pd.DataFrame, frozen: np.ndarray, bound_s: float) -> np.ndarray:
    """Windows inside a run of frozen windows that lasted `bound_s` or more by then (the `for:` of the
    VLLMDecodeStarvationInProgress alert: what pages someone is never `info`)."""
    ts = _col(sig, "ts", 0.0)
    out = np.zeros(len(frozen), dtype=bool)
    for a, b in runs_of(frozen):
        out[a:b + 1] = (ts[a:b + 1] - ts[a]) / 1e9 >= bound_s
    return out


def _severity(cause: str, st: dict, i: int, j: int) -> str:
    """Module docstring, 4: streams missed the SLO only where the P99 over its reference window missed it
    (`missed_ref`, `critical_ref` at twice it, a freeze past the in-progress alert's `for:` included);
    anything less is `info`."""
    if cause == "stuck":
        return "critical"
    if not st["missed_ref"][i:j + 1].any():
        return "info"
    return "critical" if st["critical_ref"][i:j + 1].any() else "warning"


def _episode(sig, st, i, j, *, slo, thresholds, chunking, window_ns, step_ns, live_ns, after) -> Episode:
    step_s, live_s = step_ns / 1e9, live_ns / 1e9
    ev = _tally(sig, st, i, j, after, step_s, live_s, float(thresholds["prefill_tokens_rate_high"]), window_ns / 1e9)
    stuck_after = parse_duration(thresholds.get("for", {}).get("VLLMSchedulerStalled", "2m"))
    ongoing = j == len(sig) - 1
    nothing_now = bool(st["nothing_moves"][j]) and ongoing
    cause, decided, reading = _cause(ev, chunking, stuck_after, nothing_now)
    ts = sig["ts"].to_numpy(dtype=np.int64)
    cols = [c for c in TIMELINE if c in sig]
    rows = np.arange(i, j + 1)
    if len(rows) > TIMELINE_ROWS:   # evenly thinned, the worst window always kept
        worst = i + int(np.nanargmax(np.nan_to_num(st["ratio"][i:j + 1], nan=-1.0)))
        rows = np.union1d(rows[np.linspace(0, len(rows) - 1, TIMELINE_ROWS - 1).astype(int)], [worst])
    timeline = [{c: (int(v) if c == "ts" else float(v)) for c, v in zip(cols, row)}
                for row in sig[cols].iloc[rows].itertuples(index=False)]
    target = str(sig["target"].iloc[0]) if "target" in sig and len(sig) else ""
    return Episode(target, i, j, int(ts[i] - window_ns), int(ts[j]), cause, _severity(cause, st, i, j), decided,
                   ev, timeline, ongoing, reading)
