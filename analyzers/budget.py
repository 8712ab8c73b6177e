"""The budget recommendation: which `--max-num-batched-tokens` to run, one answer for every caller.

`stallscope whatif`, the `decode_starvation` finding of `analyze` and the dashboard's What-if page
all call `recommend_budget(inputs, itl_slo_s)`, so one run directory and one SLO give one budget.
1. `WhatifInputs` is everything the simulation holds fixed: the step-cost model, the workload, the
   server shape, the request overhead and the budgets the run itself used. A run directory resolves
   them through `stallscope.cli.whatif_inputs.run_inputs` (every arm's steps, the loadgen
   result, `server.json`, the measured intake delays); frames alone (a store plus a step trace)
   through `inputs_from_frames`.
2. `candidate_budgets` is the list simulated when none is given: 256, 512, 1,024, 2,048, 4,096 and
   the run's own chunked budget, none below the block size (the engine rejects those).
3. `stallscope.analyzers.whatif.predict` simulates each candidate and `whatif.recommend` applies the
   rule (docs/whatif.md, "Recommendation").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stallscope.analyzers.step_cost import StepCostModel
from stallscope.analyzers.whatif import DEFAULT_HEADROOM, predict, recommend
from stallscope.analyzers.workload import Workload
from stallscope.core.errors import InputError
from stallscope.engine.config import SchedulerConfig

DEFAULT_BUDGETS = (256, 512, 1024, 2048, 4096)


@dataclass(frozen=True, eq=False)   # eq=False: hashed by identity, so results are cached per inputs object
class WhatifInputs:
    """What one what-if simulation holds fixed (everything but the budget)."""

    cost: StepCostModel
    workload: Workload
    shape: SchedulerConfig = SchedulerConfig()
    request_overhead_s: object = 0.0       # seconds, or an array of measured delays drawn per request
    run_budgets: tuple = ()                # the chunked --max-num-batched-tokens the run's arms used
    source: str = "the step trace"         # what the inputs came from, for explanations


def candidate_budgets(run_budgets=(), *, block_size: int = 16, base=DEFAULT_BUDGETS) -> list[int]:
    """The budgets simulated by default: `base` plus the run's own, none below `block_size`.

    >>> candidate_budgets((80,), block_size=16)
    [80, 256, 512, 1024, 2048, 4096]
    >>> candidate_budgets((8,), block_size=16)
    [256, 512, 1024, 2048, 4096]
    """
    return sorted({int(b) for b in (*base, *run_budgets) if int(b) >= block_size})


def check_budgets(budgets, *, block_size: int) -> list[int]:
    """Sorted distinct budgets; InputError naming the first one below 1 or below the block size."""
    out = sorted({int(b) for b in budgets})
    if not out or out[0] < 1:
        raise InputError(f"budgets must be positive integers, got {out}")
    if out[0] < block_size:
        raise InputError(f"budget {out[0]} is below --block-size {block_size}: the engine rejects a "
                         "--max-num-batched-tokens smaller than one KV block")
    return out


def inputs_from_frames(steps: pd.DataFrame, samples: pd.DataFrame | None = None, *,
                       max_duration_s: float = 60.0, source: str = "the step trace") -> WhatifInputs:
    """Inputs from frames alone: the cost fitted on `steps`; the workload from the steps' per-request
    counts, else the samples' length histograms and request rate, else the steps' per-step counts (a
    coarse steady-decoders model); at most `max_duration_s` simulated. InputError when nothing fits.
    """
    from stallscope.analyzers.step_cost import fit_step_cost
    from stallscope.analyzers.workload import (workload_from_samples, workload_from_step_counts,
                                               workload_from_steps, workload_with)

    if steps is None or len(steps) == 0:
        raise InputError("no recorded engine steps to fit the step cost on")
    cost = fit_step_cost(steps, source=source)
    w, reasons = None, []
    for make in (lambda: workload_from_steps(steps), lambda: workload_from_samples(samples, source="the metrics"),
                 lambda: workload_from_step_counts(steps)):
        try:
            w = make()
            break
        except (InputError, TypeError, KeyError) as exc:
            reasons.append(str(exc))
    if w is None:
        raise InputError("no workload: " + "; ".join(reasons))
    w = workload_with(w, duration_s=min(w.duration_s, max_duration_s))
    longest = max(2048, int(max(w.prompt_tokens.hi)) + int(max(w.output_tokens.hi)) + 1,
                  w.long_prompt_tokens + w.long_output_tokens + 1)
    blocks = steps["kv_blocks_total"].max() if "kv_blocks_total" in steps else float("nan")
    shape = SchedulerConfig(max_model_len=longest,
                        num_gpu_blocks=int(blocks) if np.isfinite(blocks) and blocks > 0 else SchedulerConfig.num_gpu_blocks)
    return WhatifInputs(cost, w, shape, source=source)


def recommend_budget(inputs: WhatifInputs, itl_slo_s: float, *, budgets=None, include_unchunked: bool = False,
                     seed: int = 0, noise: bool = True, headroom: float = DEFAULT_HEADROOM) -> dict:
    """Simulate every budget (default: `candidate_budgets` of the inputs) and recommend one.

    Returns {"predictions": frame (one row per budget, `whatif.PREDICTION_COLUMNS`), "recommendation":
    `whatif.recommend`'s dict, "budgets": the chunked budgets simulated}. Cached per inputs object, so
    the findings of several arms of one run simulate once.

    >>> from stallscope.analyzers.workload import LengthDist
    >>> w = Workload(LengthDist.fixed(16), LengthDist.fixed(32), sessions=2, duration_s=2.0)
    >>> i = WhatifInputs(StepCostModel(intercept_s=0.01), w, run_budgets=(64,))
    >>> recommend_budget(i, 0.2)["recommendation"]["max_num_batched_tokens"]
    4096
    """
    if budgets is None:
        budgets = candidate_budgets(inputs.run_budgets, block_size=inputs.shape.block_size)
    budgets = tuple(check_budgets(budgets, block_size=inputs.shape.block_size))
    preds = _predict(inputs, budgets, bool(include_unchunked), int(seed), bool(noise)).copy()
    return {"predictions": preds, "recommendation": recommend(preds, itl_slo_s, headroom), "budgets": list(budgets)}


@functools.lru_cache(maxsize=8)
def _predict(inputs: WhatifInputs, budgets: tuple, include_unchunked: bool, seed: int, noise: bool) -> pd.DataFrame:
    return predict(inputs.workload, inputs.cost, budgets, include_unchunked=include_unchunked, shape=inputs.shape,
                   seed=seed, noise=noise, request_overhead_s=inputs.request_overhead_s)
