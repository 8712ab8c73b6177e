"""The budget recommendation: which `--max-num-batched-tokens` to run, one answer for every caller.

`stallscope whatif`, the `decode_starvation` finding of `analyze` and the dashboard's What-if page
all call `recommend_budget(inputs, itl_slo_s)`, so one run directory and one SLO give one budget.
1. `WhatifInputs` is everything the simulation holds fixed: the step-cost model, the workload, the
   server shape, the request overhead and the budgets the run itself used. A run directory resolves
   them through `inputs_from_run` (every arm's steps, the loadgen result, `server.json`, the
   measured intake delays); frames alone (a store plus a step trace) through `inputs_from_frames`.
2. `candidate_budgets` is the list simulated when none is given: 256, 512, 1,024, 2,048, 4,096 and
   the run's own chunked budget, none below the block size (the engine rejects those).
3. `stallscope.analyzers.whatif.predict` simulates each candidate and `whatif.recommend` applies the
   rule (docs/whatif.md, "Recommendation") among the budgets whose slowest long-prompt step
   (stallscope.analyzers.chunk_step) fits the SLO less the headroom: a freeze once per long prompt is
   one ITL sample per stream, which P99 cannot see.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from stallscope.analyzers.chunk_step import largest_budget_within, slowest_step_s
from stallscope.analyzers.step_cost import StepCostModel, fit_step_cost
from stallscope.analyzers.whatif import DEFAULT_HEADROOM, predict, recommend
from stallscope.analyzers.workload import (Workload, intake_delays, workload_from_loadgen, workload_from_samples,
                                           workload_from_step_counts, workload_from_steps, workload_with)
from stallscope.collectors.run_dir import Arm, RunDir
from stallscope.core.errors import InputError
from stallscope.engine.config import SchedulerConfig
from stallscope.refserver.config import EngineConfig

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
    return WhatifInputs(cost, w, SchedulerConfig(max_model_len=longest, **_steps_pool(steps)), source=source)


def inputs_from_run(run: RunDir | str | Path, *, cost: StepCostModel | None = None,
                    workload_changes: dict | None = None, shape_changes: dict | None = None,
                    request_overhead_s=None) -> WhatifInputs:
    """What `stallscope whatif --from RUN_DIR` simulates (analyze and the dashboard simulate the same):
    the cost fitted on every arm's steps unless `cost` is given; the first loadgen result's workload,
    else the first arm's metrics, with `workload_changes` (flag values; None ignored); the shape of the
    first server.json, else the pool size the steps show, with `shape_changes`; the intake delays
    measured in the arm that gives the workload unless `request_overhead_s`; the run's chunked budgets.
    """
    run = run if isinstance(run, RunDir) else RunDir.open(run)
    cost = cost or run_cost(run)
    if cost is None:
        raise InputError(f"{run.path}: no arm has a steps.jsonl to fit the step cost on")
    workload, workload_arm = _run_workload(run)
    if any(v is not None for v in (workload_changes or {}).values()):  # the long/short split follows new lengths
        workload = workload_with(workload, **workload_changes, long_threshold_tokens=0,
                                 source=workload.source + " + flags")
    configs = [c for c in (arm_engine_config(a) for a in run.arms) if c is not None]
    shape = configs[0].scheduler_config if configs else SchedulerConfig(**_steps_pool(run.steps()))
    shape = replace(shape, **{k: int(v) for k, v in (shape_changes or {}).items() if v is not None})
    if request_overhead_s is None:   # other arms may have queued far longer in WAITING, which the simulation adds
        delays = intake_delays(workload_arm.steps(), workload_arm.loadgen()) if workload_arm else ()
        request_overhead_s = delays if len(delays) else 0.0
    budgets = tuple(sorted({c.max_num_batched_tokens for c in configs if c.enable_chunked_prefill}))
    return WhatifInputs(cost, workload, shape, request_overhead_s, run_budgets=budgets, source=f"the run {run.path}")


def run_cost(run: RunDir) -> StepCostModel | None:
    """The step cost fitted on every arm's steps in one fit (request ids kept apart per arm, busy gaps
    never spanning two arms); None when no arm has steps."""
    steps = run.steps(prefix_ids=True)
    return None if steps is None else fit_step_cost(steps.rename(columns={"target": "trace"}),
                                                    source=f"{run.path} (steps.jsonl of every arm)")


def _run_workload(run: RunDir) -> tuple[Workload, Arm | None]:
    """The first arm's loadgen result as the workload (and that arm), else the first arm's metrics."""
    for arm in run.arms:
        data = arm.loadgen()
        if data is not None:
            return workload_from_loadgen(data, str(arm.path / "loadgen.json")), arm
    from stallscope.collectors.loader import load

    return one_target_workload(load(run.arms[0].path), str(run.arms[0].path)), None


def one_target_workload(frames: dict, source: str) -> Workload:
    """The workload of the one target with vLLM samples; InputError when none or several have some."""
    with_samples = {t: f["samples"] for t, f in frames.items() if len(f.get("samples", ())) > 0}
    if not with_samples:
        raise InputError(f"{source}: no vLLM samples in the selected range")
    if len(with_samples) > 1:
        raise InputError(f"{source}: several targets ({', '.join(sorted(with_samples))}); "
                         "pick one with --target (or --from DIR/<arm>)")
    (target, samples), = with_samples.items()
    return workload_from_samples(samples, source=f"{source} (target {target})")


def _steps_pool(steps: pd.DataFrame | None) -> dict:
    """The pool size the steps show, as SchedulerConfig's `num_gpu_blocks`; {} when they show none."""
    blocks = steps["num_gpu_blocks"].max() if steps is not None and "num_gpu_blocks" in steps else float("nan")
    return {"num_gpu_blocks": int(blocks)} if np.isfinite(blocks) and blocks > 0 else {}


def arm_engine_config(arm: Arm) -> EngineConfig | None:
    """The EngineConfig an arm's server ran with: server.json's `engine` (what `repro` records); None without
    server.json. Run directories recorded before `engine` was written hold only the argv: its engine flags
    are read instead (`EngineConfig.from_flags`)."""
    data, path = arm.server_config(), arm.path / "server.json"
    if data is None:
        return None
    if isinstance(data.get("engine"), dict):
        try:
            return EngineConfig(**data["engine"])
        except TypeError as exc:
            raise InputError(f"{path}: `engine` is not an engine configuration ({exc})") from None
    argv = data.get("argv")
    if not isinstance(argv, list) or "refserver" not in argv:
        raise InputError(f"{path}: expected {{\"engine\": {{...}}}} or {{\"argv\": [..., \"refserver\", flags...]}}")
    try:
        return EngineConfig.from_flags(argv[argv.index("refserver") + 1:])
    except ValueError:
        raise InputError(f"{path}: the server's flags do not parse") from None


def recommend_budget(inputs: WhatifInputs, itl_slo_s: float, *, budgets=None, include_unchunked: bool = False,
                     seed: int = 0, noise: bool = True, headroom: float = DEFAULT_HEADROOM) -> dict:
    """Simulate every budget (default: `candidate_budgets` of the inputs, plus the largest whose slowest
    long-prompt step fits the SLO less the headroom) and recommend one: `whatif.recommend`'s rule among the
    budgets whose slowest long-prompt step (stallscope.analyzers.chunk_step) fits that bound, since ITL P99
    cannot see a freeze that comes once per long prompt; among all of them when none fits.

    Returns {"predictions": frame (one row per budget, `whatif.PREDICTION_COLUMNS` and
    `slowest_step_s`), "recommendation": `whatif.recommend`'s dict plus `predicted_slowest_step_s` and
    `step_bound_s`, "budgets": the chunked budgets simulated}. Cached per inputs object, so the findings
    of several arms of one run simulate once.

    >>> from stallscope.analyzers.workload import LengthDist
    >>> w = Workload(LengthDist.fixed(16), LengthDist.fixed(32), sessions=2, duration_s=2.0)
    >>> i = WhatifInputs(StepCostModel(intercept_s=0.01), w, run_budgets=(64,))
    >>> recommend_budget(i, 0.2)["recommendation"]["max_num_batched_tokens"]
    4096
    """
    bound_s = itl_slo_s * (1.0 - headroom)
    if budgets is None:
        fits = largest_budget_within(inputs.cost, inputs.workload, bound_s)
        budgets = candidate_budgets(inputs.run_budgets, block_size=inputs.shape.block_size) + (
            [fits] if fits and fits >= inputs.shape.block_size else [])
    budgets = tuple(check_budgets(budgets, block_size=inputs.shape.block_size))
    preds = _predict(inputs, budgets, bool(include_unchunked), int(seed), bool(noise)).copy()
    preds["slowest_step_s"] = [slowest_step_s(inputs.cost, inputs.workload, b) if on else float("nan")
                               for b, on in zip(preds["max_num_batched_tokens"], preds["enable_chunked_prefill"])]
    slow = preds["slowest_step_s"].to_numpy(dtype=float)
    ok = ~preds["enable_chunked_prefill"].to_numpy(dtype=bool) | np.isnan(slow) | (slow <= bound_s)
    within = preds[ok] if preds[ok]["enable_chunked_prefill"].any() else preds
    rec = recommend(within, itl_slo_s, headroom)
    row = within[within["enable_chunked_prefill"] & (within["max_num_batched_tokens"] == rec["max_num_batched_tokens"])]
    slowest = float(row["slowest_step_s"].iloc[0])
    rec["predicted_slowest_step_s"] = slowest if np.isfinite(slowest) else None      # None: no long prompt
    rec["step_bound_s"] = bound_s
    return {"predictions": preds, "recommendation": rec, "budgets": list(budgets)}


@functools.lru_cache(maxsize=8)
def _predict(inputs: WhatifInputs, budgets: tuple, include_unchunked: bool, seed: int, noise: bool) -> pd.DataFrame:
    return predict(inputs.workload, inputs.cost, budgets, include_unchunked=include_unchunked, shape=inputs.shape,
                   seed=seed, noise=noise, request_overhead_s=inputs.request_overhead_s)
