"""The metric sources of `stallscope analyze` on one timeline: run directories, stores and Prometheus.

Each source is loaded through `stallscope.collectors.loader` into frames per target; a target is named
`<source>/<target>` when several sources are given (a run directory's arms are already `<arm>/<target>`),
so arms stay apart while sharing one time axis. A repro arm's `steps.jsonl` joins its targets' frames.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

from stallscope.analyzers import chunking as C
from stallscope.analyzers import roofline as R
from stallscope.analyzers.budget import arm_engine_config, inputs_from_run
from stallscope.analyzers.diagnose import diagnose
from stallscope.analyzers.step_cost import read_step_trace
from stallscope.collectors import loader
from stallscope.collectors.run_dir import RunDir
from stallscope.core.errors import InputError, ToolkitError

log = logging.getLogger(__name__)


def iso(ns) -> str:
    """`2025-11-29T07:06:40Z`: the ISO form of the JSON output."""
    return dt.datetime.fromtimestamp(int(ns) / 1e9, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def load_sources(given: list[tuple[str, str]], lo: int | None = None, hi: int | None = None, *,
                 selector: dict | None = None, resolution=None, steps_path=None,
                 whatif_inputs=lambda run_dir: None, chunking: C.Chunking | None = None,
                 headers: dict | None = None, log_steps=None) -> tuple[dict, dict]:
    """({name: {"samples", "gpu", "steps", "whatif_inputs", "chunking"}}, {name: source description}) of every
    `(kind, source)` given, kind "run", "db" or "prometheus"; `whatif_inputs(run_dir)` gives a run's
    what-if inputs (or None) unless `steps_path` names one step trace for every target. A run directory's
    arms carry the chunked-prefill configuration their server.json records; other targets get `chunking`
    (the user's flags), else none (inferred from each target's metrics). `log_steps(lo_ns, hi_ns)` gives the steps
    of a vLLM server's iteration-details log for metrics over that span (collectors.vllm_log.read_iterations_for);
    they go to every target without a step trace of its own."""
    frames, sources = {}, {}
    for kind, src in given:
        if kind == "prometheus" and not str(src).startswith(("http://", "https://")):
            raise InputError(f"--prometheus {src!r} is not an http:// or https:// URL")
        if kind != "prometheus" and not Path(src).exists():
            raise InputError(f"{'--db ' if kind == 'db' else ''}{src} does not exist")
        if kind == "prometheus" and (lo is None) != (hi is None):
            raise InputError("--prometheus needs both --since and --until (or neither: the last hour)")
        loaded = loader.load(src, lo, hi, selector=selector if kind == "prometheus" else None,
                             step=resolution if kind == "prometheus" else None, headers=headers)
        prefix = f"{Path(str(src).rstrip('/')).name}/" if len(given) > 1 else ""
        whatif = whatif_inputs(src) if kind == "run" and Path(src).is_dir() and not steps_path else None
        arms = {a.name: a for a in RunDir.open(src).arms} if kind == "run" and Path(src).is_dir() else {}
        for target, fr in loaded.items():
            name = prefix + target
            fr = {k: v.assign(target=name) for k, v in fr.items()}
            arm = arms.get(target.split("/")[0] if "/" in target else "")
            steps = read_step_trace(steps_path) if steps_path else arm.steps() if arm else None
            if steps is None and log_steps is not None and len(fr["samples"]):
                steps = log_steps(int(fr["samples"]["ts"].min()), int(fr["samples"]["ts"].max()))
            fr["steps"] = steps
            fr["whatif_inputs"] = whatif
            fr["chunking"] = arm_chunking(arm) or chunking
            frames[name] = fr
            ts = [int(f["ts"].min()) for f in (fr["samples"], fr["gpu"]) if len(f)]
            te = [int(f["ts"].max()) for f in (fr["samples"], fr["gpu"]) if len(f)]
            sources[name] = {"source": str(src), "kind": kind, "samples": int(len(fr["samples"])),
                             "gpu": int(len(fr["gpu"])), "steps": 0 if steps is None else int(len(steps)),
                             "start": iso(min(ts)) if ts else None, "end": iso(max(te)) if te else None}
    if not frames:
        raise InputError("the sources hold no samples for the given time range: "
                         + ", ".join(str(s) for _, s in given))
    _check_recognised(frames)
    return frames, sources


def arm_chunking(arm) -> C.Chunking | None:
    """The chunking an arm's server.json records; None without one (or when it does not parse: warned)."""
    if arm is None:
        return None
    try:
        return C.from_engine_config(arm_engine_config(arm))
    except ToolkitError as exc:
        log.warning("%s: %s; chunked prefill is inferred from the metrics instead", arm.path, exc)
        return None


def _check_recognised(frames: dict) -> None:
    """Warn for each target that exposes no vLLM family (any spelling) and no DCGM field; raise when none does."""
    from stallscope.collectors.vllm import is_vllm

    blind = []
    for name, fr in frames.items():
        metrics = fr["samples"]["metric"].unique() if len(fr["samples"]) else []
        if not len(fr["gpu"]) and not any(is_vllm(str(m)) for m in metrics):
            seen = sorted({str(m) for m in metrics} - {"up", "scrape_duration_seconds"})[:3]
            log.warning("target %s exposes no vLLM (vllm:, vllm_, ray_vllm:, ray_vllm_) or DCGM family%s", name,
                        f" (it has {', '.join(seen)}, ...)" if seen else "")
            blind.append(name)
    if len(blind) == len(frames):
        raise InputError(f"no vLLM or DCGM metric recognised in {', '.join(blind)[:300]}: "
                         "nothing to analyze (is this a vLLM /metrics or dcgm-exporter scrape?)")


def run_whatif_inputs(run_dir):
    """The run's what-if inputs as `stallscope whatif --from` resolves them (one budget for every arm's
    decode_starvation finding); None, with a warning, when the run cannot give them (no step trace,
    a malformed loadgen result): the findings then simulate each arm's own trace."""
    try:
        run = RunDir.open(run_dir)
        return inputs_from_run(run) if run.steps() is not None else None
    except ToolkitError as exc:
        log.warning("what-if inputs of %s: %s; the budget is simulated from each arm's trace instead", run_dir, exc)
        return None


def roofline_for(frames: dict, gpu_name, model, tp):
    """(measured roofline points or the GPU's peaks, the roofline step-cost model or None)."""
    points = None
    for fr in frames.values():
        if len(fr["gpu"]):
            points = R.measured_points(fr["gpu"])
            if points:
                break
    if gpu_name:
        spec = R.gpu_spec(gpu_name)
        if points is None:
            points = {"gpu": spec.name, "peak_flops": spec.peak_flops(), "peak_bw": spec.bandwidth, "points": None}
    cost = None
    if model and (gpu_name or points):
        cost = R.roofline_cost(R.model_spec(model), R.gpu_spec(gpu_name or points["gpu"]), tp=tp)
    return points, cost


def diagnose_sources(given: list[tuple[str, str]], lo=None, hi=None, *, thresholds=None, window_s=None,
                     selector=None, resolution=None, steps_path=None, gpu=None, model=None, tp: int = 1,
                     chunking: C.Chunking | None = None, headers: dict | None = None, log_steps=None):
    """The Report of `(kind, source)` metric sources (kind "run", "db" or "prometheus"), with the roofline;
    `chunking` is the configuration the user says the servers ran (chunking.from_flags); `headers` go with
    every Prometheus API request; `log_steps` the steps of the server's iteration-details log (load_sources)."""
    frames, sources = load_sources(given, lo, hi, selector=selector, resolution=resolution, steps_path=steps_path,
                                   whatif_inputs=run_whatif_inputs, chunking=chunking, headers=headers,
                                   log_steps=log_steps)
    roof, cost = roofline_for(frames, gpu, model, tp)
    out = diagnose(frames.items(), thresholds=thresholds, roofline_cost=cost, window_s=window_s, require_window=True,
                   model=model)
    out.sources, out.roofline = sources, roof
    out.request_views = request_views_of(frames)
    return out


def request_views_of(frames: dict, grouping: str = "model", selector=None) -> dict:
    """The request-level views of every target's samples pooled on one timeline, per model by default, of the
    series `selector` matches (e.g. `model_name=~"a|b"`): {"series": {view key: frame}, "heatmaps": ..., "summary": frame}."""
    import pandas as pd

    from stallscope.analyzers import request_views as RV

    parts = [fr["samples"] for fr in frames.values() if len(fr["samples"])]
    if not parts:
        return {}
    samples = pd.concat(parts, ignore_index=True)
    eval_ts, window = RV.default_grid(samples)
    return {"series": RV.compute(samples, grouping=grouping, selector=selector),
            "heatmaps": {v.key: RV.heatmap(samples, v, eval_ts, window, selector=selector)
                         for v in RV.VIEWS if v.heatmap},
            "summary": RV.summary(samples, grouping=grouping, selector=selector), "window_s": window / 1e9}
