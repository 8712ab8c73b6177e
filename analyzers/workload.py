"""Workload model: when requests arrive and how long their prompts and outputs are.

A `Workload` mixes up to three arrival processes, all bounded by `duration_s`:
1. open-loop Poisson arrivals at `rate_hz` (what a fleet of independent clients looks like;
   derived from the `vllm:request_prompt_tokens` / `vllm:request_generation_tokens` histograms and
   the request rate);
2. `sessions` closed-loop streams that send their next request as soon as the previous one ends
   (the `stallscope loadgen` steady sessions);
3. one long prompt every `long_every_s` seconds (the loadgen's prefill spikes), or, paced by progress
   as `stallscope repro` does, once the previous long prompt has its first token and the sessions have
   streamed `long_every_tokens` tokens each since (the simulator fires those).
Lengths are `LengthDist`s: bucket masses sampled uniformly inside each bucket `(lo, hi]`, so a
Prometheus histogram, an exact list of observed lengths and a fixed flag value share one type.
A request is "long" when its prompt has at least `long_threshold_tokens` tokens; predictions
report TTFT separately for long and short prompts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from stallscope.analyzers.step_cost import trace_token_times
from stallscope.core.errors import InputError

PROMPT_HIST = "vllm:request_prompt_tokens"
OUTPUT_HIST = "vllm:request_generation_tokens"
PREFILL_TIME = "vllm:request_prefill_time_seconds"   # first scheduled to first token, per request


@dataclass(frozen=True)
class LengthDist:
    """A distribution of token counts: probability `p[i]` spread uniformly over `(lo[i], hi[i]]`.

    >>> d = LengthDist.from_buckets([10, 20, float("inf")], [0, 4, 4])
    >>> d.lo, d.hi, d.p
    ((10.0,), (20.0,), (1.0,))
    >>> d.mean()
    15.5
    """

    lo: tuple
    hi: tuple
    p: tuple

    @classmethod
    def fixed(cls, n: int) -> "LengthDist":
        if int(n) < 1:
            raise InputError(f"token count must be >= 1, got {n}")
        return cls((float(n) - 1,), (float(n),), (1.0,))

    @classmethod
    def empirical(cls, values) -> "LengthDist":
        vals, counts = np.unique(np.asarray(list(values), dtype=int), return_counts=True)
        if len(vals) == 0 or vals.min() < 1:
            raise InputError(f"observed token counts must be >= 1 and non-empty, got {list(vals)[:5]}")
        return cls(tuple(float(v) - 1 for v in vals), tuple(float(v) for v in vals),
                   tuple(float(c) / counts.sum() for c in counts))

    @classmethod
    def from_buckets(cls, les, cumulative) -> "LengthDist":
        """From a Prometheus histogram's `le` bounds and cumulative counts (increases over a window).

        Mass in the `+Inf` bucket is placed just above the last finite bound.
        """
        order = np.argsort(np.asarray(les, dtype=float))
        les = np.asarray(les, dtype=float)[order]
        cum = np.maximum.accumulate(np.asarray(cumulative, dtype=float)[order])
        mass = np.diff(np.concatenate([[0.0], cum]))
        if cum.size == 0 or cum[-1] <= 0:
            raise InputError("histogram has no observations in the window")
        lo, hi, p = [], [], []
        prev = 0.0
        finite_max = les[np.isfinite(les)].max() if np.isfinite(les).any() else 1.0
        for le, m in zip(les, mass):
            top = le if np.isfinite(le) else max(finite_max * 1.25, prev + 1)
            if m > 0:
                lo.append(float(prev)), hi.append(float(max(top, prev + 1))), p.append(float(m / cum[-1]))
            prev = top
        return cls(tuple(lo), tuple(hi), tuple(p))

    def mean(self) -> float:
        return float(sum(pi * (math.floor(h) + math.floor(l) + 1) / 2 for l, h, pi in zip(self.lo, self.hi, self.p)))

    def quantile_hi(self, q: float) -> float:
        """Upper bound of the bucket holding quantile q (a conservative length)."""
        cum = np.cumsum(self.p)
        return float(self.hi[int(np.searchsorted(cum, q - 1e-12))])

    def sample(self, rng: np.random.Generator, n: int | None = None):
        """Integer lengths ≥ 1: pick a bucket by mass, then an integer uniformly in (lo, hi]."""
        size = 1 if n is None else n
        idx = rng.choice(len(self.p), size=size, p=np.asarray(self.p) / sum(self.p))
        lo = np.floor(np.asarray(self.lo)[idx]).astype(int) + 1
        hi = np.maximum(np.floor(np.asarray(self.hi)[idx]).astype(int), lo)
        out = np.maximum(rng.integers(lo, hi + 1), 1)
        return int(out[0]) if n is None else out


@dataclass(frozen=True)
class Workload:
    """Arrivals and lengths; see the module docstring.

    >>> w = Workload(LengthDist.fixed(32), LengthDist.fixed(64), sessions=4, long_prompt_tokens=1024,
    ...              long_every_s=2.0, duration_s=5.0)
    >>> [round(t, 1) for t, *_ in w.open_arrivals(np.random.default_rng(0))]
    [2.0, 4.0]
    """

    prompt_tokens: LengthDist
    output_tokens: LengthDist
    rate_hz: float = 0.0
    sessions: int = 0
    long_prompt_tokens: int = 0
    long_output_tokens: int = 1
    long_every_s: float = 0.0
    long_first_s: float | None = None      # first long prompt (default: long_every_s)
    long_every_tokens: int = 0             # > 0: pace long prompts by session progress instead of time
    duration_s: float = 60.0
    long_threshold_tokens: int = 0
    source: str = "flags"

    def __post_init__(self):
        if self.duration_s <= 0 or not math.isfinite(self.duration_s):
            raise InputError(f"workload duration must be > 0 s, got {self.duration_s}")
        if self.rate_hz < 0 or self.sessions < 0 or self.long_every_s < 0:
            raise InputError(f"workload rates and counts must be >= 0 (rate {self.rate_hz}, "
                             f"sessions {self.sessions}, long_every {self.long_every_s})")
        if self.long_every_tokens < 0:
            raise InputError(f"long_every_tokens must be >= 0, got {self.long_every_tokens}")
        if self.rate_hz == 0 and self.sessions == 0 and not (self.long_every_s and self.long_prompt_tokens):
            raise InputError("workload has no arrivals: give a request rate, sessions, or long prompts")
        if self.long_threshold_tokens <= 0:
            object.__setattr__(self, "long_threshold_tokens", _default_long_threshold(self))

    def is_long(self, prompt_tokens: int) -> bool:
        return prompt_tokens >= self.long_threshold_tokens

    def draw(self, rng: np.random.Generator) -> tuple[int, int]:
        """(prompt, output) lengths of one ordinary request."""
        return self.prompt_tokens.sample(rng), self.output_tokens.sample(rng)

    def open_arrivals(self, rng: np.random.Generator) -> list[tuple[float, int, int, str]]:
        """Arrivals that do not depend on the server: `(t_s, prompt, output, kind)`, sorted by t.

        `kind` is "long" for the periodic long prompts and "open" for Poisson arrivals.
        """
        out = []
        if self.long_every_s > 0 and self.long_prompt_tokens > 0 and not self.long_every_tokens:
            t = self.long_every_s if self.long_first_s is None else self.long_first_s
            while t < self.duration_s:
                out.append((t, self.long_prompt_tokens, self.long_output_tokens, "long"))
                t += self.long_every_s
        if self.rate_hz > 0:
            t = rng.exponential(1.0 / self.rate_hz)
            while t < self.duration_s:
                p, o = self.draw(rng)
                out.append((t, p, o, "open"))
                t += rng.exponential(1.0 / self.rate_hz)
        return sorted(out)

    def summary(self) -> dict:
        return {
            "source": self.source, "rate_hz": self.rate_hz, "sessions": self.sessions,
            "prompt_tokens_mean": self.prompt_tokens.mean(), "output_tokens_mean": self.output_tokens.mean(),
            "long_prompt_tokens": self.long_prompt_tokens, "long_every_s": self.long_every_s,
            "long_every_tokens": self.long_every_tokens,
            "long_threshold_tokens": self.long_threshold_tokens, "duration_s": self.duration_s,
        }


def _default_long_threshold(w: Workload) -> int:
    """4 x the median prompt bucket's top, at most the long prompt's length."""
    four_medians = 4 * int(w.prompt_tokens.quantile_hi(0.5))
    return max(1, min(w.long_prompt_tokens, four_medians)) if w.long_prompt_tokens > 0 else max(2, four_medians)


def workload_from_samples(samples: pd.DataFrame, *, duration_s: float | None = None,
                          source: str = "metrics") -> Workload:
    """Open-loop workload from a `samples` frame (stallscope.core.schema) of vLLM scrapes.

    1. Each histogram's per-`le` increase over the frame's time span (counter resets handled, summed
       over label sets) gives the prompt and output length distributions.
    2. The request rate is the increase of `vllm:request_prompt_tokens_count` over the span.
    Raises InputError when the histograms are absent or saw no finished requests.
    """
    if samples is None or len(samples) == 0:
        raise InputError(f"{source}: no samples")
    span_s = (samples["ts"].max() - samples["ts"].min()) / 1e9
    if span_s <= 0:
        raise InputError(f"{source}: samples span no time (one scrape); need at least two")
    prompt = _hist_dist(samples, PROMPT_HIST, source)
    output = _hist_dist(samples, OUTPUT_HIST, source)
    count = counter_increase(samples[samples["metric"] == PROMPT_HIST + "_count"], by_le=False)
    rate = float(count) / span_s
    if rate <= 0:
        raise InputError(f"{source}: `{PROMPT_HIST}_count` did not increase: no requests finished in the window")
    return Workload(prompt, output, rate_hz=rate, duration_s=duration_s or span_s, source=source)


def _hist_dist(samples: pd.DataFrame, name: str, source: str) -> LengthDist:
    rows = samples[samples["metric"] == name + "_bucket"]
    if rows.empty:
        raise InputError(f"{source}: histogram `{name}` not found in the samples")
    inc = counter_increase(rows, by_le=True)
    if inc.max() <= 0:
        raise InputError(f"{source}: histogram `{name}` has no observations in the window")
    return LengthDist.from_buckets(inc.index.to_numpy(), inc.to_numpy())


def counter_increase(rows: pd.DataFrame, *, by_le: bool):
    """Counter increase per series (reset-aware, like PromQL), summed over series (per `le`)."""
    if rows.empty:
        return 0.0
    key = _series_key(rows)
    frame = rows.assign(_key=key + ("|" + rows["le"].astype(str) if by_le else ""))
    total: dict = {}
    for _, series in frame.sort_values("ts").groupby("_key", sort=False):
        inc = float(_increments(series["value"].to_numpy(dtype=float)).sum())
        k = float(series["le"].iloc[0]) if by_le else 0.0
        total[k] = total.get(k, 0.0) + inc
    if by_le:
        return pd.Series(total).sort_index()
    return total.get(0.0, 0.0)


def _series_key(rows: pd.DataFrame) -> pd.Series:
    """One key per series: its labels (and target when the rows carry one)."""
    key = rows["labels"].map(lambda d: json.dumps(d, sort_keys=True) if isinstance(d, dict) else str(d))
    return key + "|" + rows["target"].astype(str) if "target" in rows else key


def _increments(v: np.ndarray) -> np.ndarray:
    """A counter's increase between consecutive samples; after a reset (a drop) the new value is the increase."""
    d = np.diff(v)
    return np.where(d >= 0, d, v[1:])


def interval_increase(rows: pd.DataFrame) -> pd.Series:
    """A counter's increase per scrape interval (reset-aware), summed over series, indexed by the interval's
    closing ts; empty for no rows."""
    if rows.empty:
        return pd.Series(dtype=float)
    parts = [pd.Series(_increments(s["value"].to_numpy(dtype=float)), index=s["ts"].to_numpy()[1:])
             for _, s in rows.assign(_key=_series_key(rows)).sort_values("ts").groupby("_key", sort=False)
             if len(s) > 1]
    return pd.concat(parts).groupby(level=0).sum() if parts else pd.Series(dtype=float)


def workload_with(w: Workload, **changes) -> Workload:
    """A copy with explicit flag values applied (None values are ignored)."""
    return replace(w, **{k: v for k, v in changes.items() if v is not None})


def workload_from_loadgen(data: dict, source: str) -> Workload:
    """The loadgen's scenario (refserver/loadgen.py `LoadSpec` + its request records) as a Workload.

    Sessions, prompt lengths, long-prompt cadence (first at `long_every_s`, or paced by session
    progress with `long_every_tokens` as `repro` does) and duration come from `spec`; session output
    lengths are the records' exact `max_tokens` (the loadgen draws them from
    [N/2, 3N/2]); a prompt is long exactly when the loadgen sent it as a long request.
    """
    spec = data.get("spec")
    if not isinstance(spec, dict):
        raise InputError(f"{source}: not a loadgen result (no `spec` object)")
    try:
        sessions = int(spec["sessions"])
        duration = float(spec["duration_s"])
        prompt = int(spec["short_prompt_tokens"])
        mean_out = int(spec["max_tokens"])
        long_tokens = int(spec["long_prompt_tokens"])
        long_every = float(spec["long_every_s"])
        long_out = int(spec["long_max_tokens"])
        long_every_tokens = int(spec.get("long_every_tokens") or 0)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{source}: loadgen spec field {exc} missing or not a number") from None
    outs = [r.get("max_tokens") for r in data.get("records", ()) if isinstance(r, dict) and r.get("kind") == "short"]
    outs = [int(x) for x in outs if isinstance(x, (int, float)) and x >= 1]
    output = (LengthDist.empirical(outs) if outs else
              LengthDist((float(max(1, mean_out // 2) - 1),), (float(max(1, mean_out * 3 // 2)),), (1.0,)))
    return Workload(LengthDist.fixed(prompt), output, sessions=sessions, long_prompt_tokens=long_tokens,
                    long_output_tokens=long_out, long_every_s=long_every, duration_s=duration,
                    long_every_tokens=long_every_tokens,
                    long_threshold_tokens=long_tokens if long_tokens > prompt else 0, source=source)


def intake_delays(steps: pd.DataFrame | None, loadgen: dict | None) -> np.ndarray:
    """Seconds from each request's send (one arm's loadgen result) to the engine's receipt of it (its steps).

    The trace does not name the loadgen's requests, so each kind (short, long: total scheduled
    tokens >= the spec's long prompt) is matched in order, first sent to first received. The engine's
    receipt is the trace's `arrival_ns` (the server's hand-off to the engine, after HTTP parsing and
    tokenization), so this is the server's intake alone: queueing in the engine, which the simulation
    models itself, is not in it. Traces without `arrival_ns` fall back to the first scheduled step,
    which also holds any wait in WAITING.
    """
    run = loadgen or {}
    if steps is None or "num_scheduled_tokens" not in steps or not isinstance(run.get("spec"), dict):
        return np.empty(0)
    steps = steps.sort_values("start_ns", kind="stable")
    arrivals = steps["arrival_ns"] if "arrival_ns" in steps else [None] * len(steps)
    first: dict = {}
    total: dict = {}
    for start, sched, arrived in zip(steps["start_ns"], steps["num_scheduled_tokens"], arrivals):
        for rid, n in (sched.items() if isinstance(sched, dict) else ()):
            received = arrived.get(rid) if isinstance(arrived, dict) else None
            first.setdefault(rid, int(start if received is None else received))
            total[rid] = total.get(rid, 0) + int(n)
    long_tokens = int(run["spec"].get("long_prompt_tokens") or 0)
    out = []
    for kind, is_long in (("short", False), ("long", True)):
        served = sorted(first[r] for r in first if long_tokens and (total[r] >= long_tokens) == is_long)
        sent = sorted(float(r["start_ts"]) for r in run.get("records", ()) if r.get("kind") == kind)
        n = min(len(served), len(sent))
        out.extend(np.maximum(np.asarray(served[:n]) / 1e9 - np.asarray(sent[:n]), 0.0))
    out = np.asarray(out, dtype=float)
    horizon = float(run["spec"].get("duration_s") or 0) + float(run["spec"].get("drain_s") or 0)
    sane = out[out <= horizon]
    return sane if sane.size * 2 >= out.size else np.empty(0)  # clocks that do not line up: no figure


def workload_from_steps(steps: pd.DataFrame, *, source: str = "steps") -> Workload:
    """Open-loop workload rebuilt from a step trace with `num_scheduled_tokens`.

    Each request's output length is its token count (stallscope.analyzers.step_cost.trace_token_times),
    its prompt the rest of its scheduled tokens (recompute after preemption counts too), and the
    arrival rate the requests first scheduled per second of trace.
    """
    if "num_scheduled_tokens" not in steps or len(steps) < 2:
        raise InputError(f"{source}: the steps carry no per-request token counts (`num_scheduled_tokens`)")
    tokens = trace_token_times(steps)
    scheduled: dict = {}
    for d in steps["num_scheduled_tokens"]:
        for rid, n in (d.items() if isinstance(d, dict) else ()):
            scheduled[rid] = scheduled.get(rid, 0) + int(n)
    outs = [len(tokens.get(rid, ())) for rid in scheduled]
    prompts = [max(1, scheduled[rid] - max(o - 1, 0)) for rid, o in zip(scheduled, outs)]
    done = [(p, o) for p, o in zip(prompts, outs) if o >= 1]
    if not done:
        raise InputError(f"{source}: no request produced a token in the trace")
    span_s = (int(steps["end_ns"].max()) - int(steps["start_ns"].min())) / 1e9
    return Workload(LengthDist.empirical([p for p, _ in done]), LengthDist.empirical([o for _, o in done]),
                    rate_hz=len(done) / max(span_s, 1e-9), duration_s=max(span_s, 1e-3), source=source)


def workload_from_step_counts(steps: pd.DataFrame, *, source: str = "step counts") -> Workload:
    """A coarse workload from per-step token counts alone (an nsys steps frame, a trace without
    `num_scheduled_tokens`): steady decoders and periodic prefills, the article's scenario.

    Sessions = the median decode batch of decode-only steps, each output about twice the mean context
    the KV pool shows per session (median `kv_blocks_used` x 16 tokens / sessions; 256 without it);
    long prompts = the median prefill of the steps that prefilled, once per span / their count. From
    a chunked trace the "prompt" is a chunk, so prefer the metrics or a full step trace.
    """
    pf = steps["num_prefill_tokens"].to_numpy(dtype=float)
    dec = steps["num_decode_tokens"].to_numpy(dtype=float)
    ok = np.isfinite(pf) & np.isfinite(dec)
    if ok.sum() < 2:
        raise InputError(f"{source}: the steps carry no prefill/decode token counts")
    pf, dec = pf[ok], dec[ok]
    span_s = (int(steps["end_ns"].max()) - int(steps["start_ns"].min())) / 1e9
    decode_only = dec[pf == 0]
    sessions = int(round(np.median(decode_only))) if len(decode_only) else int(round(np.median(dec)))
    prefills = pf[pf > 0]
    long_tokens = int(np.median(prefills)) if len(prefills) else 0
    used = steps["kv_blocks_used"].to_numpy(dtype=float) if "kv_blocks_used" in steps else np.empty(0)
    used = used[np.isfinite(used)]
    output = int(np.clip(2 * np.median(used) * 16 / max(sessions, 1), 8, 4096)) if len(used) else 256
    return Workload(LengthDist.fixed(1), LengthDist.fixed(output), sessions=max(sessions, 1 if not long_tokens else 0),
                    long_prompt_tokens=long_tokens, long_output_tokens=1,
                    long_every_s=span_s / len(prefills) if len(prefills) else 0.0,
                    duration_s=max(span_s, 1e-3), source=source)
