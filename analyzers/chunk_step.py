"""The slowest step of a long prompt's prefill at a token budget, from a fitted step cost: what bounds a freeze.

The idea: ITL P99 cannot see a freeze that happens once per long prompt (it is one sample per stream among
thousands), but every running stream waits for the slowest step of each long prompt's prefill. At budget B
vLLM schedules the running decodes first (one token each) and gives the rest of the budget to the prompt, so a
prompt of L tokens is computed in chunks of B - decodes tokens, each at a deeper context than the last; the
step-cost model (stallscope.analyzers.step_cost, its attention-pair term sees the context) prices each chunk
beside the decodes, and the slowest is what a stream waits for. With B >= L + decodes it is one whole-prompt
step.
"""

from __future__ import annotations

import math

from stallscope.analyzers.chunking import LONG_PREFILL_TOKENS
from stallscope.analyzers.step_cost import StepCostModel, batch_features
from stallscope.analyzers.workload import Workload


def long_prompt_tokens(workload: Workload) -> int:
    """The long prompt: the workload's own, else the longest prompt its length distribution holds when that is
    past its long-prompt cut or the long-prefill cut (512 tokens: a rate workload fitted from a trace keeps long
    prompts in the distribution, and in one whose every prompt is long the cut is that size)."""
    if workload.long_prompt_tokens > 0:
        return int(workload.long_prompt_tokens)
    d = workload.prompt_tokens
    longest = max((hi for hi, p in zip(d.hi, d.p) if p > 0), default=0.0)
    return int(longest) if longest > max(workload.long_threshold_tokens, 0) or longest >= LONG_PREFILL_TOKENS else 0


def _decodes(cost: StepCostModel, workload: Workload) -> tuple[int, int]:
    """(running decodes, their typical context at a prompt plus half an output): the sessions of a closed
    workload, else Little's law on an open one (arrival rate x output tokens x the decode step they make)."""
    ctx = max(int(workload.prompt_tokens.mean() + workload.output_tokens.mean() / 2), 1)
    if workload.sessions > 0 or workload.rate_hz <= 0:
        return max(int(workload.sessions), 0), ctx
    n = 1
    for _ in range(4):     # the decode step grows with the batch it carries: a few fixed-point rounds
        step = float(cost.predict(**batch_features([(ctx, 1, False)] * n)))
        n = max(1, int(round(workload.rate_hz * workload.output_tokens.mean() * step)))
    return n, ctx


def slowest_step_s(cost: StepCostModel, workload: Workload, budget: int) -> float:
    """The predicted slowest step (s, no noise) of one long prompt's prefill at `budget`; NaN without long prompts.

    >>> from stallscope.analyzers.workload import LengthDist
    >>> w = Workload(LengthDist.fixed(32), LengthDist.fixed(64), sessions=4, long_prompt_tokens=1000,
    ...              long_every_s=5.0, duration_s=10.0)
    >>> cost = StepCostModel(intercept_s=0.005, coef_s={"prefill_tokens": 1e-4, "prefill_attn_pairs": 1e-7})
    >>> round(slowest_step_s(cost, w, 4096), 3), round(slowest_step_s(cost, w, 504), 3)   # 1000 vs 500 + 500
    (0.205, 0.105)
    """
    total = long_prompt_tokens(workload)
    if total <= 0:
        return float("nan")
    decodes, ctx = _decodes(cost, workload)
    chunk = max(int(budget) - decodes, 1)
    worst, done = 0.0, 0
    while done < total:
        n = min(chunk, total - done)
        feats = batch_features([(done, n, True)] + [(ctx, 1, False)] * decodes)
        worst = max(worst, float(cost.predict(**feats)))
        done += n
    return worst


def largest_budget_within(cost: StepCostModel, workload: Workload, limit_s: float, *, block: int = 64) -> int | None:
    """The largest multiple of `block` whose slowest long-prompt step is at most `limit_s`, or None when even
    `block` tokens exceed it or there is no long prompt. Budgets past one whole-prompt step change nothing, so
    the search stops there."""
    decodes, _ = _decodes(cost, workload)
    top = long_prompt_tokens(workload) + decodes
    if top <= decodes or not limit_s > 0:
        return None
    best = None
    for b in range(block, int(math.ceil(top / block)) * block + 1, block):
        if slowest_step_s(cost, workload, b) <= limit_s:
            best = b
    return best
