"""Where `stallscope whatif` gets its three inputs from its flags: a step-cost model, a workload and the server shape.

Each resolver turns flags into the analyzers' arguments and raises InputError naming the missing or
bad input. With `--from RUN_DIR` the rest is `stallscope.analyzers.budget.inputs_from_run`, what
`analyze` and the dashboard simulate for a run directory too.
"""

from __future__ import annotations

import time
from pathlib import Path

from stallscope.analyzers.budget import WhatifInputs, inputs_from_run, one_target_workload, run_cost
from stallscope.analyzers.step_cost import StepCostModel, fit_step_cost, read_step_trace, roofline_cost
from stallscope.analyzers.workload import LengthDist, Workload, workload_with
from stallscope.collectors.run_dir import RunDir
from stallscope.core.errors import InputError, ToolkitError
from stallscope.engine.config import SchedulerConfig

SHAPE_FLAGS = ("max_num_seqs", "block_size", "num_gpu_blocks", "max_model_len")


def resolve_inputs(args) -> WhatifInputs:
    """Step cost, workload, server shape, request overhead and the run's own budgets, from the CLI flags."""
    run = RunDir.open(args.run_dir) if args.run_dir else None
    cost = resolve_cost(args, run)
    shape = {name: getattr(args, name) for name in SHAPE_FLAGS if getattr(args, name, None) is not None}
    if run is not None:
        return inputs_from_run(run, cost=cost, workload_changes=_workload_flags(args), shape_changes=shape,
                               request_overhead_s=args.request_overhead)
    return WhatifInputs(cost, resolve_workload(args), SchedulerConfig(**shape), float(args.request_overhead or 0.0),
                        source="the given inputs")


def resolve_cost(args, run: RunDir | None = None) -> StepCostModel:
    if args.steps:
        return fit_step_cost(read_step_trace(args.steps), source=args.steps)
    if args.nsys:
        return _nsys_cost(args.nsys)
    cost = run_cost(run) if run is not None else None
    if cost is not None:
        return cost
    if args.gpu or args.roofline_model:
        return _roofline(args.gpu, args.roofline_model, args.tp)
    raise InputError("no step-cost source: give --steps FILE, --nsys FILE, a run directory with steps.jsonl "
                     "(--from), or --gpu and --roofline-model for a roofline estimate")


def _nsys_cost(path: str) -> StepCostModel:
    from stallscope.analyzers.kernel_roles import classify
    from stallscope.analyzers.trace_steps import reconstruct_steps
    from stallscope.collectors.nsight_sqlite import read_export

    if not Path(path).is_file():
        raise InputError(f"nsys export not found: {path}")
    trace = read_export(path)
    if trace.kernels.empty:
        raise InputError(f"{path}: no CUDA kernels in the export, so no steps to fit")
    steps, _ = reconstruct_steps(classify(trace.kernels), trace.nvtx, trace.graph_launches)
    known = steps["num_prefill_tokens"].notna() & steps["num_decode_tokens"].notna()
    if not known.any():
        raise InputError(f"{path}: the steps rebuilt from this trace carry no token counts (no vLLM NVTX "
                         "`execute_context_..._generation_...` ranges); use --steps or --gpu/--roofline-model")
    return fit_step_cost(steps[known], source=path)


def _roofline(gpu: str | None, model: str | None, tp: int) -> StepCostModel:
    """Step cost from the roofline tables (stallscope.analyzers.roofline); TP splits FLOPs and bytes."""
    if not gpu or not model:
        raise InputError(f"a roofline estimate needs both --gpu and --roofline-model (got gpu={gpu!r}, model={model!r})")
    from stallscope.analyzers import roofline

    spec, mspec = roofline.gpu_spec(gpu), roofline.model_spec(model)
    return roofline_cost(
        peak_flops=spec.peak_flops(mspec.weight_dtype) * tp, hbm_bytes_s=spec.bandwidth * tp,
        n_params=mspec.matmul_params, weight_bytes=mspec.weight_bytes(),
        kv_bytes_per_token=mspec.kv_bytes_per_token("auto"), n_layers=mspec.num_layers,
        hidden_size=mspec.num_heads * mspec.head_dim, overhead_s=0.002,
        source=f"roofline of {spec.name} / {mspec.name} / tp={tp} (60% of peak, 2 ms overhead)")


def _workload_flags(args) -> dict:
    """The workload flags that were given, as Workload fields."""
    flags = {"rate_hz": args.rate, "sessions": args.sessions, "long_prompt_tokens": args.long_prompt_tokens,
             "long_output_tokens": args.long_output_tokens, "long_every_s": args.long_every,
             "duration_s": args.duration,
             "prompt_tokens": LengthDist.fixed(args.prompt_tokens) if args.prompt_tokens else None,
             "output_tokens": LengthDist.fixed(args.output_tokens) if args.output_tokens else None}
    return {k: v for k, v in flags.items() if v is not None}


def resolve_workload(args) -> Workload:
    """Without a run directory: the metrics' workload (`--db`, `--prometheus`) with the flags applied, else the flags'."""
    if args.db or args.prometheus:
        base, changed = _metrics_workload(args), _workload_flags(args)
        # the long/short split follows the new lengths; recompute it
        return workload_with(base, **changed, long_threshold_tokens=0, source=base.source + " + flags") if changed else base
    if not args.prompt_tokens or not args.output_tokens:
        raise InputError("no workload source: give --from, --db or --prometheus, or explicit "
                         "--prompt-tokens and --output-tokens with --sessions or --rate")
    return Workload(**_workload_flags(args), source="flags")  # Workload's defaults for the flags not given


def _metrics_workload(args) -> Workload:
    from stallscope.analyzers.quantiles import parse_selector
    from stallscope.collectors.loader import load

    selector = {k: v for k, op, v in parse_selector(args.selector) if op == "="} if args.selector else None
    source = args.db or args.prometheus
    now = time.time_ns()
    end = _when(args.until, now, "--until") if args.until else (now if args.prometheus else None)
    since = args.since or ("1h" if args.prometheus else None)
    start = _when(since, end if end is not None else now, "--since") if since else None
    frames = load(source, start, end, selector=selector, targets=[args.target] if args.target else None)
    return one_target_workload(frames, source)


def _when(text: str, ref_ns: int, flag: str) -> int:
    """A duration back from `ref_ns` (`30m`), or a time: int ns since the epoch or ISO-8601."""
    from stallscope.collectors.loader import to_ns
    from stallscope.core.config import parse_duration

    text = str(text).strip()
    if text.isdigit():
        return int(text)
    try:
        return ref_ns - int(parse_duration(text) * 1e9)
    except ToolkitError:
        pass
    try:
        return to_ns(text, flag)
    except ToolkitError:
        raise InputError(f"{flag} {text!r} is neither a duration (30m) nor a time (int ns or ISO-8601)") from None
