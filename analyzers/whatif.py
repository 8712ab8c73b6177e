"""What-if: replay a workload through the reference scheduler in simulated time, per token budget.

1. The policy is the reference engine's own `Scheduler` + `KVCacheManager` (stallscope.refserver):
   `schedule()` picks the step, `update_from_output()` applies it. Nothing here re-implements
   chunking, admission or preemption; only the model is replaced by a clock.
2. Each step's duration comes from a `StepCostModel` evaluated on the step's batch features
   (prefill tokens, decode requests, KV tokens read, ...), times a residual drawn from the fit's
   residuals measured at a similar predicted duration (seeded), plus a measured inter-step gap.
3. Every request that catches up with its tokens gets one token at the step's end, as the engine
   does. Arrivals come from the `Workload`: Poisson and periodic long prompts are fixed in advance,
   closed-loop sessions send their next request when the previous one finishes.
4. Per request we keep arrival, first-token time and token times; TTFT and ITL (gaps between a
   request's consecutive tokens, as `vllm bench serve` and the loadgen define them) are aggregated
   as P50/P99, TTFT split into long and short prompts. `recommend` picks the largest budget whose
   predicted ITL P99 meets the SLO, else the one with the lowest ITL P99 (`meets_slo: False`);
   stallscope.analyzers.budget chooses the candidate budgets and is what every caller goes through.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from stallscope.analyzers.step_cost import StepCostModel, batch_features
from stallscope.analyzers.workload import Workload
from stallscope.core.errors import InputError
from stallscope.engine.kv_cache_manager import KVCacheManager
from stallscope.engine.request import Request, SamplingParams
from stallscope.engine.scheduler import Scheduler

DRAIN_LIMIT = 10  # simulate at most this many durations (+60 s) while draining in-flight requests
PREDICTION_COLUMNS = [
    "max_num_batched_tokens", "enable_chunked_prefill", "ttft_p50_s", "ttft_p99_s", "ttft_long_p50_s", "ttft_long_p99_s",
    "ttft_short_p50_s", "ttft_short_p99_s", "itl_p50_s", "itl_p99_s", "output_tok_s",
    "num_requests", "num_long", "num_unfinished", "num_steps", "num_preemptions",
]


@dataclass(frozen=True)
class ServerShape:
    """The engine flags the simulation holds fixed (everything but the budget and chunking)."""

    max_num_seqs: int = 128
    block_size: int = 16
    num_kv_blocks: int = 1 << 20      # default: effectively unbounded
    max_model_len: int = 2048


@dataclass
class SimRequest:
    request_id: str
    kind: str                          # "session", "open" or "long"
    arrival_s: float
    num_prompt_tokens: int
    max_tokens: int
    session: int | None = None
    token_times_s: list = field(default_factory=list)


@dataclass
class SimResult:
    requests: list[SimRequest]
    num_steps: int
    num_preemptions: int
    horizon_s: float
    steps: list = field(default_factory=list)   # StepStats-shaped dicts (docs/step-trace.md) if recorded


# Fraction of the ITL SLO `recommend` keeps free for the prediction's own error (docs/whatif.md).
DEFAULT_HEADROOM = 0.2

def simulate(workload: Workload, cost: StepCostModel, *, max_num_batched_tokens: int,
             enable_chunked_prefill: bool = True, shape: ServerShape = ServerShape(), seed: int = 0,
             noise: bool = True, drain: bool = True, record_steps: bool = False,
             request_overhead_s=0.0) -> SimResult:
    """Run one budget. Returns every request with its token times (simulated seconds from 0).

    `request_overhead_s` delays each request's arrival at the scheduler after it is sent (HTTP,
    tokenization, the engine thread's command hop): seconds, or a sequence of measured delays to
    draw from per request; TTFT still counts from the send.
    With `record_steps`, `SimResult.steps` holds one step-trace record per simulated step, with
    simulated times in ns from 0, so the simulation can be compared with (or fitted like) a real trace.

    Example:
        res = simulate(w, model, max_num_batched_tokens=512)
        summarize(res, w)["itl_p99_s"]
    """
    if max_num_batched_tokens < 1:
        raise InputError(f"max_num_batched_tokens must be >= 1, got {max_num_batched_tokens}")
    rng = np.random.default_rng(seed)
    overheads = np.atleast_1d(np.asarray(request_overhead_s, dtype=float))
    kv = KVCacheManager(shape.num_kv_blocks, shape.block_size)
    sched = Scheduler(kv, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=shape.max_num_seqs,
                      enable_chunked_prefill=enable_chunked_prefill, max_model_len=shape.max_model_len)
    arrivals: list = []                 # heap of (t, seq, SimRequest)
    seq = 0
    sims: dict[str, SimRequest] = {}

    def push(t, kind, prompt, out, session=None):
        nonlocal seq
        prompt = max(1, min(int(prompt), shape.max_model_len - 1))
        out = max(1, min(int(out), shape.max_model_len - prompt))
        if -(-(prompt + out) // shape.block_size) > shape.num_kv_blocks:
            return None                 # the engine rejects a request the whole pool cannot hold
        sr = SimRequest(f"sim-{seq}", kind, t, prompt, out, session)
        heapq.heappush(arrivals, (t + (overheads[rng.integers(overheads.size)] if overheads.size > 1
                                       else float(overheads[0])), seq, sr))
        seq += 1
        return sr

    for t, p, o, kind in workload.open_arrivals(rng):
        push(t, kind, p, o)
    for s in range(workload.sessions):
        push(0.0, "session", *workload.draw(rng), session=s)

    # progress-paced long prompts (repro): next one when the last has its first token and the sessions
    # have streamed `long_every_tokens` each since
    paced = workload.long_every_tokens > 0 and workload.long_prompt_tokens > 0 and workload.sessions > 0
    session_tokens, mark, last_long = 0, 0, None
    t, steps, preemptions, trace = 0.0, 0, 0, []
    while True:
        while arrivals and arrivals[0][0] <= t:
            _, _, sr = heapq.heappop(arrivals)
            sims[sr.request_id] = sr
            sched.add_request(Request(sr.request_id, [1] * sr.num_prompt_tokens,
                                      SamplingParams(max_tokens=sr.max_tokens, ignore_eos=True),
                                      arrival_ns=int(sr.arrival_s * 1e9)))
        if not sched.has_unfinished_requests():
            if not arrivals or (arrivals[0][0] >= workload.duration_s and not drain):
                break
            t = arrivals[0][0]
            continue
        if t >= workload.duration_s and (not drain or t > DRAIN_LIMIT * workload.duration_s + 60.0):
            break                        # bounded: an overloaded server would never drain
        out = sched.schedule()
        num_running, num_waiting = len(sched.running), len(sched.waiting)
        preemptions += len(out.preempted_request_ids)
        if not out.scheduled_requests:   # nothing fits (a pool too small for any request): give up
            break
        chunks = [(r.num_computed_tokens, out.num_scheduled_tokens[r.request_id],
                   not (out.num_scheduled_tokens[r.request_id] == 1 and r.num_computed_tokens >= r.num_prompt_tokens))
                  for r in out.scheduled_requests]
        dt = cost.predict(**batch_features(chunks))
        if noise:
            dt = cost.draw(dt, rng)
        sampled = {r.request_id: 1 for r in out.scheduled_requests
                   if r.num_computed_tokens + out.num_scheduled_tokens[r.request_id] >= r.num_tokens}
        t_end = t + dt
        for req in sched.update_from_output(out, sampled):
            sr = sims[req.request_id]
            sr.token_times_s.append(t_end)
            session_tokens += sr.session is not None
            if sr is last_long and len(sr.token_times_s) == 1:
                mark = session_tokens
            if req.is_finished and sr.session is not None and t_end < workload.duration_s:
                push(t_end, "session", *workload.draw(rng), session=sr.session)
        if (paced and t_end < workload.duration_s and (last_long is None or last_long.token_times_s)
                and session_tokens - mark >= workload.long_every_tokens * workload.sessions):
            last_long = push(t_end, "long", workload.long_prompt_tokens, workload.long_output_tokens)
        if record_steps:
            trace.append({
                "step": steps, "start_ns": int(round(t * 1e9)), "end_ns": int(round(t_end * 1e9)),
                "num_prefill_tokens": out.num_prefill_tokens, "num_decode_tokens": out.num_decode_tokens,
                "num_prefill_reqs": out.num_prefill_reqs, "num_decode_reqs": out.num_decode_reqs,
                "num_running": num_running, "num_waiting": num_waiting,
                "num_preempted": len(out.preempted_request_ids), "kv_blocks_used": kv.num_used_blocks,
                "kv_blocks_total": kv.num_total_blocks, "num_scheduled_tokens": dict(out.num_scheduled_tokens)})
        steps += 1
        t = t_end + (cost.draw_gap(rng) if noise else cost.gap_s)
    return SimResult(list(sims.values()), steps, preemptions, t, trace)


def _pct(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summarize(result: SimResult, workload: Workload) -> dict:
    """P50/P99 TTFT (all, long, short), pooled ITL and output tokens/s, over completed requests.

    As the loadgen (and `vllm bench serve`) measure: requests sent before the workload's duration
    that finished; throughput = their output tokens / the time of the last token.
    """
    return _summarize([result], workload)


def _summarize(results: list, workload: Workload) -> dict:
    """`summarize` over several runs pooled: quantiles over all their requests, tokens / summed run time,
    counts per run (the validation pools its measured rounds the same way)."""
    long_, short, itl, tokens, elapsed, n_done, n_unfinished = [], [], [], 0, 0.0, 0, 0
    for result in results:
        sent = [r for r in result.requests if r.arrival_s < workload.duration_s]
        done = [r for r in sent if len(r.token_times_s) >= r.max_tokens]
        long_ += [r.token_times_s[0] - r.arrival_s for r in done if workload.is_long(r.num_prompt_tokens)]
        short += [r.token_times_s[0] - r.arrival_s for r in done if not workload.is_long(r.num_prompt_tokens)]
        itl += [np.diff(r.token_times_s) for r in done if len(r.token_times_s) > 1]
        tokens += sum(len(r.token_times_s) for r in done)
        elapsed += max((r.token_times_s[-1] for r in done), default=0.0)
        n_done, n_unfinished = n_done + len(done), n_unfinished + len(sent) - len(done)
    itl = np.concatenate(itl or [np.empty(0)])
    n = len(results)
    return {
        "ttft_p50_s": _pct(long_ + short, 50), "ttft_p99_s": _pct(long_ + short, 99),
        "ttft_long_p50_s": _pct(long_, 50), "ttft_long_p99_s": _pct(long_, 99),
        "ttft_short_p50_s": _pct(short, 50), "ttft_short_p99_s": _pct(short, 99),
        "itl_p50_s": _pct(itl, 50), "itl_p99_s": _pct(itl, 99),
        "output_tok_s": tokens / elapsed if elapsed > 0 else 0.0,
        "num_requests": n_done / n, "num_long": len(long_) / n, "num_unfinished": n_unfinished / n,
    }


def predict(workload: Workload, cost: StepCostModel, budgets, *, include_unchunked: bool = False,
            shape: ServerShape = ServerShape(), seed: int = 0, noise: bool = True,
            request_overhead_s=0.0, seeds: int = 1) -> pd.DataFrame:
    """One row per budget (and one for chunked prefill off): the predicted latencies and throughput.

    With `seeds` > 1 the quantiles pool the requests of that many seeded simulations (a P99 over a
    few dozen long prompts is nearly their maximum, so pooled runs estimate it as a longer run would;
    the validation pools its measured rounds the same way), throughput is tokens over the summed run
    time, and counts are per run.

    >>> from stallscope.analyzers.workload import LengthDist
    >>> w = Workload(LengthDist.fixed(16), LengthDist.fixed(32), sessions=2, duration_s=2.0)
    >>> m = StepCostModel(intercept_s=0.01, coef_s={"prefill_tokens": 1e-4})
    >>> predict(w, m, [64])["itl_p99_s"].round(3).tolist()
    [0.01]
    """
    budgets = sorted({int(b) for b in budgets})
    if not budgets or budgets[0] < 1:
        raise InputError(f"budgets must be positive integers, got {budgets}")
    arms = [(b, True) for b in budgets]
    if include_unchunked:
        arms.append((max(max(budgets), shape.max_model_len), False))
    rows = []
    for budget, chunked in arms:
        runs = [simulate(workload, cost, max_num_batched_tokens=budget, enable_chunked_prefill=chunked,
                         shape=shape, seed=seed + k, noise=noise, request_overhead_s=request_overhead_s)
                for k in range(max(1, seeds))]
        rows.append({"max_num_batched_tokens": budget, "enable_chunked_prefill": chunked,
                     **_summarize(runs, workload), "num_steps": float(np.mean([r.num_steps for r in runs])),
                     "num_preemptions": float(np.mean([r.num_preemptions for r in runs]))})
    return pd.DataFrame(rows, columns=PREDICTION_COLUMNS)


def calibrate_overhead(workload: Workload, cost: StepCostModel, measured_ttft_short_p50_s: float, *,
                       max_num_batched_tokens: int, enable_chunked_prefill: bool,
                       shape: ServerShape = ServerShape(), seed: int = 0, seeds: int = 2) -> float:
    """The request overhead (s) that makes the simulated short-prompt TTFT P50 match a measured run.

    The measured run is the one the step costs came from (same budget and chunking). Bisection over
    [0, measured P50]; returns 0 when the simulation is already slower than the measurement.
    """
    def p50(overhead):
        vals = [summarize(simulate(workload, cost, max_num_batched_tokens=max_num_batched_tokens,
                                   enable_chunked_prefill=enable_chunked_prefill, shape=shape, seed=seed + k,
                                   request_overhead_s=overhead), workload)["ttft_short_p50_s"]
                for k in range(seeds)]
        return float(np.nanmean(vals))

    if not measured_ttft_short_p50_s > 0 or p50(0.0) >= measured_ttft_short_p50_s:
        return 0.0
    lo, hi = 0.0, float(measured_ttft_short_p50_s)
    for _ in range(8):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p50(mid) < measured_ttft_short_p50_s else (lo, mid)
    return (lo + hi) / 2


def recommend(predictions: pd.DataFrame, itl_slo_s: float, headroom: float = DEFAULT_HEADROOM) -> dict:
    """The largest chunked budget whose predicted ITL P99 is at most `itl_slo_s` x (1 - `headroom`).

    The headroom covers the prediction's own error (validated to within 20 %, docs/whatif.md): a budget
    predicted right at the SLO meets it only about half the time. When no budget keeps that headroom,
    the largest that meets the bare SLO is returned, and says so. Among the budgets that meet it the
    largest has the fewest chunks per long prompt, so as a rule the shortest long-prompt TTFT. When none
    meets the SLO, the budget with the lowest predicted ITL P99 (the largest on a tie) is returned with
    `meets_slo: False`, and `reason` gives its long-prompt TTFT P99.

    >>> p = pd.DataFrame({"max_num_batched_tokens": [256, 512, 1024], "enable_chunked_prefill": [True] * 3,
    ...                   "itl_p99_s": [0.05, 0.15, 0.3], "ttft_long_p99_s": [3.0, 2.0, 1.5]})
    >>> [recommend(p, 0.2)["max_num_batched_tokens"], recommend(p, 0.16)["max_num_batched_tokens"],
    ...  recommend(p, 0.16, headroom=0)["max_num_batched_tokens"]]
    [512, 256, 512]
    >>> recommend(p.iloc[1:], 0.16)["reason"]
    'largest simulated budget with predicted ITL P99 0.150 s <= SLO 0.16 s, but without the 20% headroom (0.128 s): expect misses; at a long-prompt TTFT P99 of 2.00 s'
    >>> recommend(p, 0.01)["reason"]
    'no simulated budget meets the ITL SLO 0.01 s; 256 predicts the lowest ITL P99, 0.050 s, at a long-prompt TTFT P99 of 3.00 s'
    """
    if not itl_slo_s > 0:
        raise InputError(f"ITL SLO must be > 0 s, got {itl_slo_s}")
    if not 0 <= headroom < 1:
        raise InputError(f"headroom must be in [0, 1), got {headroom}")
    chunked = predictions[predictions["enable_chunked_prefill"]].sort_values("max_num_batched_tokens")
    if chunked.empty:
        raise InputError("no chunked-prefill budget was simulated")
    itl = chunked["itl_p99_s"].to_numpy(dtype=float)
    finite = np.isfinite(itl)
    target = itl_slo_s * (1.0 - headroom)
    roomy = finite & (itl <= target)
    meets = bool((itl[finite] <= itl_slo_s).any())
    if roomy.any():
        row = chunked[roomy].iloc[-1]
    elif meets:
        row = chunked[finite & (itl <= itl_slo_s)].iloc[-1]
    elif finite.any():
        row = chunked[finite & (itl == itl[finite].min())].iloc[-1]
    else:
        row = chunked.iloc[-1]
    budget = int(row["max_num_batched_tokens"])
    ttft = float(row.get("ttft_long_p99_s", float("nan")))
    ttft_text = f"long-prompt TTFT P99 of {ttft:.2f} s" if np.isfinite(ttft) else "no long prompt completed"
    if roomy.any():
        room = f" less {headroom:.0%} headroom" if headroom else ""
        reason = (f"largest simulated budget with predicted ITL P99 {row['itl_p99_s']:.3f} s "
                  f"<= SLO {itl_slo_s:g} s{room}, at a {ttft_text}")
    elif meets:
        reason = (f"largest simulated budget with predicted ITL P99 {row['itl_p99_s']:.3f} s <= SLO {itl_slo_s:g} s, "
                  f"but without the {headroom:.0%} headroom ({target:.3f} s): expect misses; at a {ttft_text}")
    elif finite.any():
        reason = (f"no simulated budget meets the ITL SLO {itl_slo_s:g} s; {budget} predicts the lowest ITL P99, "
                  f"{row['itl_p99_s']:.3f} s, at a {ttft_text}")
    else:
        reason = (f"no simulated budget completed a request, so none can be said to meet the ITL SLO "
                  f"{itl_slo_s:g} s; {budget} is the largest simulated")
    return {
        "max_num_batched_tokens": budget, "meets_slo": meets, "itl_slo_s": float(itl_slo_s),
        "headroom": float(headroom), "within_headroom": bool(roomy.any()),
        "predicted_itl_p99_s": float(row["itl_p99_s"]), "predicted_ttft_long_p99_s": ttft,
        "flags": f"--enable-chunked-prefill --max-num-batched-tokens {budget}",
        "reason": reason,
    }


def trace_token_times(steps: pd.DataFrame) -> dict[str, list[int]]:
    """Engine-side token times (step `end_ns`) per request, rebuilt from a step trace.

    1. Each scheduled entry is a decode or a prefill chunk. An entry of more than one token is a
       chunk; a one-token entry of a request that is already decoding is a decode; other one-token
       entries are decodes only as far as the step's `num_decode_tokens` leaves room (a prompt's last
       chunk can be a single token).
    2. A decode always yields a token; a chunk yields one when the request's next entry is a decode
       (it finished the prompt) or when it never appears again (it finished).
    These are the timestamps vLLM's `vllm:inter_token_latency_seconds` is computed from, free of
    HTTP and client delivery effects.
    """
    steps = steps.sort_values("start_ns", kind="stable")
    decodes = steps["num_decode_tokens"].to_numpy(dtype=float) if "num_decode_tokens" in steps else None
    entries: list[list] = []                  # per step: [rid, is_decode]
    decoding: set = set()
    for i, d in enumerate(steps["num_scheduled_tokens"]):
        d = d if isinstance(d, dict) else {}
        row = []
        ones = [rid for rid, n in d.items() if int(n) == 1]
        sure = sum(1 for rid in ones if rid in decoding)
        room = (int(decodes[i]) - sure) if decodes is not None and np.isfinite(decodes[i]) else len(ones)
        for rid, n in d.items():
            is_decode = int(n) == 1 and (rid in decoding or room > 0)
            if int(n) == 1 and rid not in decoding and is_decode:
                room -= 1
            (decoding.add if is_decode else decoding.discard)(rid)
            row.append([rid, is_decode])
        entries.append(row)
    times: dict[str, list[int]] = {}
    next_is_decode: dict[str, bool | None] = {}
    for end_ns, row in zip(steps["end_ns"].to_numpy(dtype=np.int64)[::-1], entries[::-1]):
        for rid, is_decode in row:
            if is_decode or next_is_decode.get(rid, None) in (True, None):
                times.setdefault(rid, []).append(int(end_ns))
            next_is_decode[rid] = is_decode
    return {rid: t[::-1] for rid, t in times.items()}


def trace_itl(steps: pd.DataFrame) -> np.ndarray:
    """Engine-side inter-token latencies (s), pooled over requests, from a step trace."""
    gaps = [np.diff(np.asarray(t, dtype=np.int64)) / 1e9 for t in trace_token_times(steps).values() if len(t) > 1]
    return np.concatenate(gaps) if gaps else np.empty(0)
