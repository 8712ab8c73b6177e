"""Where `stallscope whatif` gets its three inputs: a step-cost model, a workload and the server shape.

Each resolver takes the parsed CLI namespace and raises InputError naming the missing or bad input;
`resolve_inputs` gathers them into one `WhatifInputs`. A run directory (docs/run-directory.md) holds
arms `DIR/<arm>/{steps.jsonl, scrapes.jsonl, loadgen.json, server.json}`; every arm's steps feed one
fit, and the first arm's loadgen result is the workload. `run_inputs(DIR)` is exactly what
`stallscope whatif --from DIR` simulates; `analyze` and the dashboard use it for a run directory.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from stallscope.analyzers.budget import WhatifInputs
from stallscope.analyzers.step_cost import StepCostModel, fit_step_cost, read_step_trace, roofline_cost
from stallscope.analyzers.workload import LengthDist, Workload, read_json, workload_from_samples, workload_with
from stallscope.core.errors import InputError, ToolkitError
from stallscope.engine.config import SchedulerConfig


def arm_dirs(run_dir: str | Path) -> list[Path]:
    """The arm directories of a run (the directory itself when it is one arm), in name order."""
    path = Path(run_dir)
    if not path.is_dir():
        raise InputError(f"run directory not found: {run_dir}")
    if any((path / f).is_file() for f in ("steps.jsonl", "scrapes.jsonl", "loadgen.json")):
        return [path]
    arms = sorted(p for p in path.iterdir() if p.is_dir() and
                  any((p / f).is_file() for f in ("steps.jsonl", "scrapes.jsonl", "loadgen.json")))
    if not arms:
        raise InputError(f"{run_dir} is not a run directory: no steps.jsonl, scrapes.jsonl or loadgen.json "
                         "in it or in any arm under it")
    return arms


def run_steps(run_dir: str | Path) -> pd.DataFrame | None:
    """Every arm's step trace in one frame; request ids are prefixed with the arm so they stay distinct."""
    frames = []
    for arm in arm_dirs(run_dir):
        if (arm / "steps.jsonl").is_file():
            f = read_step_trace(arm / "steps.jsonl")
            f["trace"] = arm.name
            if "num_scheduled_tokens" in f:
                f["num_scheduled_tokens"] = f["num_scheduled_tokens"].map(
                    lambda d, a=arm.name: {f"{a}/{k}": v for k, v in d.items()} if isinstance(d, dict) else d)
            frames.append(f)
    return pd.concat(frames, ignore_index=True) if frames else None


def resolve_inputs(args) -> WhatifInputs:
    """Step cost, workload, server shape, request overhead and the run's own budgets, from the CLI flags."""
    cost = resolve_cost(args)
    workload = resolve_workload(args)
    shape = resolve_shape(args)
    return WhatifInputs(cost, workload, shape, calibrate_from_run(args, workload, cost, shape),
                        run_budgets=run_budgets(args.run_dir) if args.run_dir else (),
                        source=f"the run {args.run_dir}" if args.run_dir else "the given inputs")


def run_inputs(run_dir: str | Path) -> WhatifInputs:
    """The inputs of `stallscope whatif --from RUN_DIR` with no other flag: every caller that has a run
    directory (analyze, the dashboard) simulates the same thing."""
    import argparse

    from stallscope.cli.whatif import add_arguments

    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return resolve_inputs(parser.parse_args([f"--from={run_dir}"]))


def run_budgets(run_dir: str | Path) -> tuple:
    """The `--max-num-batched-tokens` of the run's chunked-prefill arms (from each `server.json`)."""
    cfgs = [arm_engine_config(a) for a in arm_dirs(run_dir)]
    return tuple(sorted({c.max_num_batched_tokens for c in cfgs if c is not None and c.enable_chunked_prefill}))


def resolve_cost(args) -> StepCostModel:
    if args.steps:
        return fit_step_cost(read_step_trace(args.steps), source=args.steps)
    if args.nsys:
        return _nsys_cost(args.nsys)
    if args.run_dir:
        steps = run_steps(args.run_dir)
        if steps is not None:
            return fit_step_cost(steps, source=f"{args.run_dir} (steps.jsonl of every arm)")
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


def resolve_workload(args) -> Workload:
    base = None
    if args.run_dir:
        base = _run_workload(args.run_dir)
    elif args.db or args.prometheus:
        base = _metrics_workload(args)
    flags = {"rate_hz": args.rate, "sessions": args.sessions, "long_prompt_tokens": args.long_prompt_tokens,
             "long_output_tokens": args.long_output_tokens, "long_every_s": args.long_every,
             "duration_s": args.duration,
             "prompt_tokens": LengthDist.fixed(args.prompt_tokens) if args.prompt_tokens else None,
             "output_tokens": LengthDist.fixed(args.output_tokens) if args.output_tokens else None}
    if base is None:
        if not args.prompt_tokens or not args.output_tokens:
            raise InputError("no workload source: give --from, --db or --prometheus, or explicit "
                             "--prompt-tokens and --output-tokens with --sessions or --rate")
        base = Workload(LengthDist.fixed(args.prompt_tokens), LengthDist.fixed(args.output_tokens),
                        rate_hz=args.rate or 0.0, sessions=args.sessions or 0,
                        long_prompt_tokens=args.long_prompt_tokens or 0,
                        long_output_tokens=args.long_output_tokens or 1, long_every_s=args.long_every or 0.0,
                        duration_s=args.duration or 60.0, source="flags")
        return base
    changed = {k: v for k, v in flags.items() if v is not None}
    if not changed:
        return base
    # the long/short split follows the new lengths; recompute it
    return workload_with(base, **changed, long_threshold_tokens=0, source=base.source + " + flags")


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


def _run_workload(run_dir: str) -> Workload:
    arms = arm_dirs(run_dir)
    for arm in arms:
        if (arm / "loadgen.json").is_file():
            return workload_from_loadgen(read_json(arm / "loadgen.json"), str(arm / "loadgen.json"))
    from stallscope.collectors.loader import load

    frames = load(arms[0])
    return _one_target_workload(frames, str(arms[0]))


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
    return _one_target_workload(frames, source)


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


def _one_target_workload(frames: dict, source: str) -> Workload:
    with_samples = {t: f["samples"] for t, f in frames.items() if len(f.get("samples", ())) > 0}
    if not with_samples:
        raise InputError(f"{source}: no vLLM samples in the selected range")
    if len(with_samples) > 1:
        raise InputError(f"{source}: several targets ({', '.join(sorted(with_samples))}); "
                         "pick one with --target (or --from DIR/<arm>)")
    (target, samples), = with_samples.items()
    return workload_from_samples(samples, source=f"{source} (target {target})")


def arm_engine_config(arm: Path):
    """The EngineConfig an arm's server ran with, from its `server.json` argv; None when absent."""
    import argparse

    from stallscope.cli.refserver import add_arguments, engine_config

    path = Path(arm) / "server.json"
    if not path.is_file():
        return None
    argv = read_json(path).get("argv")
    if not isinstance(argv, list) or "refserver" not in argv:
        raise InputError(f"{path}: expected {{\"argv\": [..., \"refserver\", flags...]}}")
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    try:
        ns, _ = parser.parse_known_args([str(a) for a in argv[argv.index("refserver") + 1:]])
    except SystemExit:
        raise InputError(f"{path}: the server's flags do not parse") from None
    return engine_config(ns)


def intake_delays(arm: Path) -> np.ndarray:
    """Seconds from each request's send (loadgen) to the engine's receipt of it, per arm.

    The trace does not name the loadgen's requests, so each kind (short, long: total scheduled
    tokens >= the spec's long prompt) is matched in order, first sent to first received. The engine's
    receipt is the trace's `arrival_ns` (the server's hand-off to the engine, after HTTP parsing and
    tokenization), so this is the server's intake alone: queueing in the engine, which the simulation
    models itself, is not in it. Traces without `arrival_ns` fall back to the first scheduled step,
    which also holds any wait in WAITING.
    """
    arm = Path(arm)
    steps = read_step_trace(arm / "steps.jsonl").sort_values("start_ns", kind="stable")
    run = read_json(arm / "loadgen.json")
    if "num_scheduled_tokens" not in steps or not isinstance(run.get("spec"), dict):
        return np.empty(0)
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


def calibrate_from_run(args, workload: Workload, cost: StepCostModel, shape: SchedulerConfig):
    """The request overhead: `--request-overhead` seconds, else the intake delays measured in the run
    (`intake_delays` of the arm that supplies the workload; the simulator draws one per request),
    else 0.
    """
    if args.request_overhead is not None:
        return float(args.request_overhead)
    if not args.run_dir:
        return 0.0
    # the arm whose loadgen result is the workload (the first with one): other arms may have queued
    # far longer in WAITING, which the simulation adds by itself
    for arm in arm_dirs(args.run_dir):
        if (arm / "loadgen.json").is_file():
            delays = intake_delays(arm) if (arm / "steps.jsonl").is_file() else np.empty(0)
            return delays if delays.size else 0.0
    return 0.0


def resolve_shape(args) -> SchedulerConfig:
    """Server flags held fixed: explicit flags, else what the run shows, else vLLM's defaults."""
    shape = SchedulerConfig()
    found = {}
    if args.run_dir:
        steps = run_steps(args.run_dir)
        cfgs = [c for c in (arm_engine_config(a) for a in arm_dirs(args.run_dir)) if c is not None]
        if cfgs:
            found.update(max_num_seqs=cfgs[0].max_num_seqs, block_size=cfgs[0].block_size,
                         num_gpu_blocks=cfgs[0].num_gpu_blocks, max_model_len=cfgs[0].resolved_max_model_len)
        elif steps is not None and "kv_blocks_total" in steps and steps["kv_blocks_total"].notna().any():
            found["num_gpu_blocks"] = int(steps["kv_blocks_total"].max())
    for name in ("max_num_seqs", "block_size", "num_gpu_blocks", "max_model_len"):
        value = getattr(args, name, None)
        if value is not None:
            found[name] = int(value)
    return SchedulerConfig(**{**vars(shape), **found})
