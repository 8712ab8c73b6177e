"""What-if: replay a workload through the reference scheduler in simulated time, per token budget.

1. The loop is the engine's own `EngineCore` (stallscope.engine): `schedule()` picks the step,
   `update_from_output()` applies it. Nothing here re-implements chunking, admission or preemption;
   only the model is replaced by a cost model that advances a simulated clock.
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
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from stallscope.analyzers.step_cost import StepCostModel, batch_features
from stallscope.analyzers.workload import Workload
from stallscope.core.errors import InputError
from stallscope.engine.config import SchedulerConfig
from stallscope.engine.core import EngineCore
from stallscope.engine.request import Request, SamplingParams

DRAIN_LIMIT = 10  # simulate at most this many durations (+60 s) while draining in-flight requests
PREDICTION_COLUMNS = [
    "max_num_batched_tokens", "enable_chunked_prefill", "ttft_p50_s", "ttft_p99_s", "ttft_long_p50_s", "ttft_long_p99_s",
    "ttft_short_p50_s", "ttft_short_p99_s", "itl_p50_s", "itl_p99_s", "output_tok_s",
    "num_requests", "num_long", "num_unfinished", "num_steps", "num_preemptions",
]


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
    steps: list = field(default_factory=list)   # StepStats-shaped dicts (docs/step-trace.md) if recorded


# Fraction of the ITL SLO `recommend` keeps free for the prediction's own error (docs/whatif.md).
DEFAULT_HEADROOM = 0.2

class _SimClock:
    """Simulated time: seconds from 0 as a float (token times), read as ns by the engine loop."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> int:
        return int(round(self.t * 1e9))


def _cost_executor(cost: StepCostModel, clock: _SimClock, rng, noise: bool):
    """The model replaced by the cost model: a step advances the clock by its predicted (drawn) time and
    gives a token to every request that caught up with its tokens."""
    def execute(out) -> dict[str, int]:
        if not out.scheduled_requests:
            return {}
        dt = cost.predict(**batch_features(out.chunks()))
        clock.t += cost.draw(dt, rng) if noise else dt
        return {r.request_id: 1 for r in out.scheduled_requests
                if r.num_computed_tokens + out.num_scheduled_tokens[r.request_id] >= r.num_tokens}
    return execute


class _Arrivals:
    """Requests on their way to the scheduler: a heap by the time they reach it (sent + a request overhead)."""

    def __init__(self, shape: SchedulerConfig, request_overhead_s, rng):
        self.shape, self.rng, self.heap, self.seq = shape, rng, [], 0
        self.overheads = np.atleast_1d(np.asarray(request_overhead_s, dtype=float))

    def push(self, t, kind, prompt, out, session=None) -> SimRequest | None:
        shape, overheads = self.shape, self.overheads
        prompt = max(1, min(int(prompt), shape.max_model_len - 1))
        out = max(1, min(int(out), shape.max_model_len - prompt))
        if -(-(prompt + out) // shape.block_size) > shape.num_gpu_blocks:
            return None                 # the engine rejects a request the whole pool cannot hold
        sr = SimRequest(f"sim-{self.seq}", kind, t, prompt, out, session)
        heapq.heappush(self.heap, (t + (overheads[self.rng.integers(overheads.size)] if overheads.size > 1
                                        else float(overheads[0])), self.seq, sr))
        self.seq += 1
        return sr

    def admit(self, core: EngineCore, sims: dict, t: float) -> None:
        """Hand every request that has reached the scheduler by `t` to it."""
        while self.heap and self.heap[0][0] <= t:
            received_s, _, sr = heapq.heappop(self.heap)
            sims[sr.request_id] = sr
            core.scheduler.add_request(Request(sr.request_id, [1] * sr.num_prompt_tokens,
                                               SamplingParams(max_tokens=sr.max_tokens, ignore_eos=True),
                                               arrival_ns=int(round(received_s * 1e9))))


class _LongPacer:
    """Progress-paced long prompts (repro): the next one when the last has its first token and the sessions
    have streamed `long_every_tokens` each since."""

    def __init__(self, workload: Workload):
        self.w = workload
        self.on = workload.long_every_tokens > 0 and workload.long_prompt_tokens > 0 and workload.sessions > 0
        self.session_tokens, self.mark, self.last = 0, 0, None

    def token(self, sr: SimRequest) -> None:
        self.session_tokens += sr.session is not None
        if sr is self.last and len(sr.token_times_s) == 1:
            self.mark = self.session_tokens

    def due(self, t: float) -> bool:
        return (self.on and t < self.w.duration_s and (self.last is None or bool(self.last.token_times_s))
                and self.session_tokens - self.mark >= self.w.long_every_tokens * self.w.sessions)


def _next_step(core: EngineCore, arrivals: _Arrivals, sims: dict, clock: _SimClock, w: Workload, drain: bool) -> bool:
    """Admit what has arrived, jumping an idle clock to the next arrival; False when the run is over
    (bounded while draining: an overloaded server would never drain)."""
    while True:
        arrivals.admit(core, sims, clock.t)
        if core.scheduler.has_unfinished_requests():
            break
        if not arrivals.heap or (arrivals.heap[0][0] >= w.duration_s and not drain):
            return False
        clock.t = arrivals.heap[0][0]
    return not (clock.t >= w.duration_s and (not drain or clock.t > DRAIN_LIMIT * w.duration_s + 60.0))


def simulate(workload: Workload, cost: StepCostModel, *, max_num_batched_tokens: int,
             enable_chunked_prefill: bool = True, shape: SchedulerConfig = SchedulerConfig(), seed: int = 0,
             noise: bool = True, drain: bool = True, record_steps: bool = False,
             request_overhead_s=0.0) -> SimResult:
    """Run one budget. Returns every request with its token times (simulated seconds from 0).

    `shape` gives the scheduler's other flags; its budget and chunking are replaced by the arguments.
    `request_overhead_s` delays each request's arrival at the scheduler after it is sent (HTTP,
    tokenization, the engine thread's command hop): seconds, or a sequence of measured delays to
    draw from per request; TTFT still counts from the send.
    With `record_steps`, `SimResult.steps` holds one step-trace record per simulated step, with
    simulated times in ns from 0 (`arrival_ns`: the receipt, after the overhead), so the simulation can be compared with (or fitted like) a real trace.

    Example:
        res = simulate(w, model, max_num_batched_tokens=512)
        summarize(res, w)["itl_p99_s"]
    """
    if max_num_batched_tokens < 1:
        raise InputError(f"max_num_batched_tokens must be >= 1, got {max_num_batched_tokens}")
    rng = np.random.default_rng(seed)
    clock = _SimClock()
    shape = replace(shape, max_num_batched_tokens=max_num_batched_tokens, enable_chunked_prefill=enable_chunked_prefill)
    core = EngineCore(shape, _cost_executor(cost, clock, rng, noise), clock)
    arrivals, pacer, sims = _Arrivals(shape, request_overhead_s, rng), _LongPacer(workload), {}
    for t, p, o, kind in workload.open_arrivals(rng):
        arrivals.push(t, kind, p, o)
    for s in range(workload.sessions):
        arrivals.push(0.0, "session", *workload.draw(rng), session=s)
    steps, preemptions, trace = 0, 0, []
    while _next_step(core, arrivals, sims, clock, workload, drain):
        changed, stats = core.step()
        preemptions += stats.num_preempted
        if not stats.num_scheduled_tokens:   # nothing fits (a pool too small for any request): give up
            break
        t_end = clock.t
        for req in changed:
            sr = sims[req.request_id]
            sr.token_times_s.append(t_end)
            pacer.token(sr)
            if req.is_finished and sr.session is not None and t_end < workload.duration_s:
                arrivals.push(t_end, "session", *workload.draw(rng), session=sr.session)
        if pacer.due(t_end):
            pacer.last = arrivals.push(t_end, "long", workload.long_prompt_tokens, workload.long_output_tokens)
        if record_steps:
            trace.append(asdict(stats))
        steps += 1
        clock.t = t_end + (cost.draw_gap(rng) if noise else cost.gap_s)
    return SimResult(list(sims.values()), steps, preemptions, trace)


def _pct(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summarize(result: SimResult | list[SimResult], workload: Workload) -> dict:
    """P50/P99 TTFT (all, long, short), pooled ITL and output tokens/s, over completed requests.

    As the loadgen (and `vllm bench serve`) measure: requests sent before the workload's duration
    that finished; throughput = their output tokens / the time of the last token. A list of runs is
    pooled: quantiles over all their requests, tokens / summed run time, counts per run (the
    validation pools its measured rounds the same way).
    """
    results = result if isinstance(result, list) else [result]
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
            shape: SchedulerConfig = SchedulerConfig(), seed: int = 0, noise: bool = True,
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
                     **summarize(runs, workload), "num_steps": float(np.mean([r.num_steps for r in runs])),
                     "num_preemptions": float(np.mean([r.num_preemptions for r in runs]))})
    return pd.DataFrame(rows, columns=PREDICTION_COLUMNS)


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
        case, pick = "roomy", roomy
    elif meets:
        case, pick = "bare", finite & (itl <= itl_slo_s)
    elif finite.any():
        case, pick = "lowest", finite & (itl == itl[finite].min())
    else:
        case, pick = "none", np.ones_like(finite)
    row = chunked[pick].iloc[-1]
    budget = int(row["max_num_batched_tokens"])
    ttft = float(row.get("ttft_long_p99_s", float("nan")))
    return {
        "max_num_batched_tokens": budget, "meets_slo": meets, "itl_slo_s": float(itl_slo_s),
        "headroom": float(headroom), "within_headroom": bool(roomy.any()),
        "predicted_itl_p99_s": float(row["itl_p99_s"]), "predicted_ttft_long_p99_s": ttft,
        "flags": f"--enable-chunked-prefill --max-num-batched-tokens {budget}",
        "reason": _reason(case, budget, float(row["itl_p99_s"]), ttft, itl_slo_s, headroom),
    }


def _reason(case: str, budget: int, itl_p99_s: float, ttft_long_p99_s: float, itl_slo_s: float, headroom: float) -> str:
    """Why `recommend` picked `budget`: within the headroom, within the bare SLO, the lowest ITL, or none ran."""
    ttft = (f"long-prompt TTFT P99 of {ttft_long_p99_s:.2f} s" if np.isfinite(ttft_long_p99_s)
            else "no long prompt completed")
    if case == "roomy":
        room = f" less {headroom:.0%} headroom" if headroom else ""
        return f"largest simulated budget with predicted ITL P99 {itl_p99_s:.3f} s <= SLO {itl_slo_s:g} s{room}, at a {ttft}"
    if case == "bare":
        return (f"largest simulated budget with predicted ITL P99 {itl_p99_s:.3f} s <= SLO {itl_slo_s:g} s, but without "
                f"the {headroom:.0%} headroom ({itl_slo_s * (1.0 - headroom):.3f} s): expect misses; at a {ttft}")
    if case == "lowest":
        return (f"no simulated budget meets the ITL SLO {itl_slo_s:g} s; {budget} predicts the lowest ITL P99, "
                f"{itl_p99_s:.3f} s, at a {ttft}")
    return (f"no simulated budget completed a request, so none can be said to meet the ITL SLO "
            f"{itl_slo_s:g} s; {budget} is the largest simulated")
