"""What the pages show, computed from frames by the analyzers; the data layer memoises the results.

Each function here is a thin adapter: it calls the analyzer or collector that owns the method
(quantiles, findings, roofline, trace steps, the loader) and reshapes the answer into the
`ts, series, ...` tables the figure helpers draw, thinned first so a day of data stays fast.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from stallscope.core import schema
from stallscope.core.errors import InputError

SERIES_LABELS = ("model_name", "instance", "pod", "engine")


def grouping_control(component_id: str):
    """The one grouping's picker (analyzers/request_views.GROUPINGS): per model by default, instance and engine
    on drill-down; the same on every page that pools series."""
    from dash import dcc, html

    options = [{"label": "model", "value": "model"}, {"label": "model, instance", "value": "instance"},
               {"label": "model, instance, engine", "value": "engine"}]
    return html.Div([html.Label("group by "), dcc.RadioItems(id=component_id, value="model", inline=True,
                                                              options=options)], className="note")


def series_name(target, labels) -> str:
    """A readable series key: the target plus the identifying labels, e.g. `vllm model_name=small engine=0`."""
    parts = [str(target)] if isinstance(target, str) and target else []
    if isinstance(labels, dict):
        parts += [f"{k}={labels[k]}" for k in SERIES_LABELS if labels.get(k) not in (None, "")]
    return " ".join(parts) or "all"


# --- sources --------------------------------------------------------------------------------
def load_source(*, db=None, prometheus=None, selector: str = "", since_s: float = 3600, focus=None) -> dict:
    """`{"samples", "gpu"}` from a store (`db=`) or a Prometheus API (`prometheus=`, last `since_s` seconds;
    `focus`: one replica's identity labels, added to the selector)."""
    from stallscope.collectors import loader
    if db is not None:
        return merge_targets(loader.load(db))
    now = time.time_ns()
    return merge_targets(loader.load(prometheus, now - int(since_s * 1e9), now,
                                     selector={**selector_dict(selector), **(focus or {})}))


def fleet_triage(url: str, selector: str, since_s: float, thresholds: dict):
    """The fleet triage (stallscope.rules.fleet_triage) of the last `since_s` seconds, without drill-down."""
    from stallscope.analyzers.quantiles import parse_selector
    from stallscope.rules.fleet_triage import triage

    now = time.time()
    return triage(url, thresholds, now - since_s, now, matchers=parse_selector(selector), drill=False)


def selector_dict(text: str) -> dict:
    """`model_name="m",pod="p"` as a dict; only equality matchers can be pushed to the loader."""
    if not text:
        return {}
    from stallscope.analyzers.quantiles import parse_selector
    out = {}
    for name, op, value in parse_selector(text):
        if op != "=":
            raise InputError(f"--selector supports only `name=\"value\"` matchers, got {name}{op}{value!r}")
        out[name] = value
    return out


def merge_targets(per_target: dict) -> dict:
    """The loader's `{target: {"samples", "gpu"}}` as one samples and one gpu frame (each keeps `target`)."""
    out = {}
    for kind in ("samples", "gpu"):          # the key names the target (a run's arms: "<arm>/<target>")
        parts = [f[kind].assign(target=name) for name, f in per_target.items() if kind in f and len(f[kind])]
        if parts:
            out[kind] = pd.concat(parts, ignore_index=True)
    return out


def load_run(path: Path) -> dict:
    """A repro run directory (or one arm): the scrapes of every arm, and `run_parts`."""
    from stallscope.collectors import loader
    return {**merge_targets(loader.load(path)), **run_parts(path)}


def run_parts(path: Path) -> dict:
    """A run directory's step traces (`target` = the arm; absent when none) and `whatif_inputs`: what
    `stallscope whatif --from PATH` simulates, or a sentence saying why the run cannot give it."""
    from stallscope.analyzers.sources import arm_chunking
    from stallscope.collectors.run_dir import RunDir
    run = RunDir.open(Path(path))
    out = {"chunking": {arm.name: arm_chunking(arm) for arm in run.arms}}
    steps = run.steps()
    if steps is not None:
        out["steps"] = steps
    from stallscope.analyzers.budget import inputs_from_run as run_inputs
    from stallscope.core.errors import ToolkitError
    try:
        out["whatif_inputs"] = run_inputs(path) if steps is not None else None
    except ToolkitError as exc:
        out["whatif_inputs"] = f"the run's what-if inputs are unusable ({exc})"
    return out


def load_steps(path: Path) -> pd.DataFrame:
    """A steps frame from a step-trace JSONL (docs/step-trace.md) or an nsys SQLite export."""
    if path.suffix in (".jsonl", ".json"):
        from stallscope.analyzers.step_cost import read_step_trace
        return read_step_trace(path)
    from stallscope.analyzers.kernel_roles import classify
    from stallscope.analyzers.trace_steps import reconstruct_steps
    from stallscope.collectors.nsight_sqlite import KERNEL, read_export
    from stallscope.core.errors import TraceError

    trace = read_export(str(path), with_launches=False)
    if KERNEL not in trace.tables:
        raise TraceError(f"{path} has no kernel table: export with `nsys export --type sqlite` after a CUDA trace")
    steps, _info = reconstruct_steps(classify(trace.kernels), trace.nvtx, trace.graph_launches)
    return schema.validate(steps, "steps")


# --- counters and histograms ----------------------------------------------------------------
def counter_rate(rows: pd.DataFrame) -> pd.DataFrame:
    """`ts, series, value`: per-second increase between consecutive samples of each series."""
    out = []
    for name, g in rows.groupby("series", sort=True):
        ts, v = g["ts"].to_numpy(), g["value"].to_numpy(dtype=float)
        if len(ts) < 2:
            continue
        inc = np.diff(v)
        inc = np.where(inc < 0, v[1:], inc)                  # a reset restarts the counter from zero
        dt = np.diff(ts) / 1e9
        out.append(pd.DataFrame({"ts": ts[1:], "series": name, "value": np.divide(inc, dt, where=dt > 0,
                                                                                 out=np.zeros_like(inc))}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["ts", "series", "value"])


def quantiles(bucket_rows: pd.DataFrame, qs, *, max_points: int, window_s: float | None = None,
              grouping: str = "model") -> pd.DataFrame:
    """`ts, series, q, value, lower, upper`: histogram_quantile(q, rate(x_bucket[window])) over time.

    Pooled per `grouping` (model; instance, engine on drill-down: analyzers/request_views.GROUPINGS), as
    every face pools. Evaluated on a grid of at most `max_points` times; the window is at least 60 s and at least
    two grid steps, so no observation is skipped. `lower`/`upper` is the bucket the quantile falls
    in: the value is only known to lie inside it.
    """
    cols = ["ts", "series", "q", "value", "lower", "upper"]
    if bucket_rows.empty:
        return pd.DataFrame(columns=cols)
    ts = np.unique(bucket_rows["ts"].to_numpy())
    interval = int(np.median(np.diff(ts))) if len(ts) > 1 else 10**9
    step = max(interval, -(-(int(ts[-1]) - int(ts[0])) // max_points))
    window_ns = max(int((window_s or 60.0) * 1e9), 2 * step, 2 * interval)
    eval_ts = np.arange(int(ts[0]) + step, int(ts[-1]) + 1, step, dtype=np.int64)
    bin_ns = step // 2
    if bin_ns > interval:  # keep the last sample of each counter per half step: increases are unchanged
        b = (bucket_rows["ts"].to_numpy() - int(ts[0])) // bin_ns
        last = bucket_rows.assign(_b=b).groupby(["series", "le", "_b"], sort=False)["ts"].idxmax()
        bucket_rows = bucket_rows.loc[np.sort(last.to_numpy())]
    from stallscope.analyzers.quantiles import quantile_range
    from stallscope.analyzers.request_views import by_labels

    family = str(bucket_rows["metric"].iloc[0])[: -len("_bucket")]
    out = []
    for q in qs:
        r = quantile_range(bucket_rows, family, q, eval_ts, window_ns, by=by_labels(bucket_rows, grouping))
        names = [series_name(lab.get("target", ""), lab) for lab in r["labels"]]
        out.append(pd.DataFrame({"ts": r["ts"].to_numpy(dtype=np.int64), "series": names, "q": q,
                                 "value": r["value"].to_numpy(dtype=float),
                                 "lower": r["bucket_lo"].to_numpy(dtype=float),
                                 "upper": r["bucket_hi"].to_numpy(dtype=float)}))
    return pd.concat(out, ignore_index=True).dropna(subset=["value"])[cols]


def spans_above(frame: pd.DataFrame, threshold: float, max_spans: int = 300) -> list[tuple[int, int]]:
    """Merged `(start_ns, end_ns)` spans where any series of a `ts, series, value` frame exceeds `threshold`.

    Spans closer than 1/`max_spans` of the whole range merge: narrower gaps would not show anyway.
    """
    hot = frame[frame["value"] > threshold].sort_values("ts")
    if hot.empty:
        return []
    ts = np.unique(hot["ts"].to_numpy())
    all_ts = np.unique(frame["ts"].to_numpy())
    gap = int(np.median(np.diff(all_ts))) if len(all_ts) > 1 else 1
    merge = max(1.5 * gap, (int(all_ts[-1]) - int(all_ts[0])) / max_spans)
    spans, start, prev = [], ts[0], ts[0]
    for t in ts[1:]:
        if t - prev > merge:
            spans.append((int(start - gap), int(prev)))
            start = t
        prev = t
    spans.append((int(start - gap), int(prev)))
    return spans


# --- findings and health --------------------------------------------------------------------
def findings(frames: dict, thresholds: dict, whatif_inputs=None, chunking: dict | None = None) -> pd.DataFrame:
    """The loaded findings frame, or the diagnosis (stallscope.analyzers.diagnose): one group per samples
    target (with its arm's steps when the source has several arms, the run's what-if inputs and the arm's
    chunked-prefill configuration from `chunking` {arm: Chunking}), plus the GPU detectors once over the gpu
    frame; sorted by start."""
    if len(frames.get("findings", ())):
        return frames["findings"].sort_values("start_ns", kind="stable").reset_index(drop=True)
    from stallscope.analyzers.diagnose import diagnose
    from stallscope.analyzers.finding import by_start, to_frame

    samples, gpu, steps = frames.get("samples"), frames.get("gpu"), frames.get("steps")
    groups = []
    if samples is not None and len(samples):
        for target, part in samples.groupby(samples["target"].fillna("").astype(object), sort=True):
            own = steps
            if steps is not None and "target" in steps and steps["target"].nunique() > 1:
                own = steps[steps["target"] == str(target).split("/")[0]]
            arm = str(target).split("/")[0] if "/" in str(target) else ""
            groups.append((target, {"samples": part, "steps": own if own is not None and len(own) else None,
                                    "whatif_inputs": whatif_inputs,
                                    "chunking": (chunking or {}).get(arm) or (chunking or {}).get("")}))
    if gpu is not None and len(gpu):
        groups.append(("", {"gpu": gpu}))
    return to_frame(by_start(diagnose(groups, thresholds=thresholds).findings))


def health(samples: pd.DataFrame, up: pd.DataFrame) -> pd.DataFrame:
    """`target, up, last_scrape_ns, samples` per target; `up` (the last `up` sample) is NaN when none was recorded."""
    cols = ["target", "up", "last_scrape_ns", "samples"]
    if samples.empty:
        return pd.DataFrame(columns=cols)
    target = samples["target"].fillna("") if "target" in samples else pd.Series("", index=samples.index)
    per = samples["ts"].groupby(target.to_numpy(dtype=object), sort=True).agg(["max", "size"])
    last_up = {}
    if len(up):
        up_target = up["target"].fillna("") if "target" in up else pd.Series("", index=up.index)
        last_up = up["value"].groupby(up_target.to_numpy(dtype=object)).last().to_dict()  # rows are time-sorted
    return pd.DataFrame([(name or "(unnamed)", float(last_up.get(name, np.nan)), int(r["max"]), int(r["size"]))
                         for name, r in per.iterrows()], columns=cols)


# --- steps ----------------------------------------------------------------------------------
def mark_steps(steps: pd.DataFrame, stall_factor: float = 3.0) -> pd.DataFrame:
    """Steps with `dur_ns`, `phase` (prefill when any prompt token ran) and `stall`.

    A stall is a step during which running requests waited for their next token: at least one
    decode was pending and the step took more than `stall_factor` x the median decode-only step.
    """
    if steps.empty:
        return steps.assign(dur_ns=pd.Series(dtype="int64"), phase=pd.Series(dtype=object),
                            stall=pd.Series(dtype=bool))
    dur = steps["end_ns"] - steps["start_ns"]
    prefill = steps["num_prefill_tokens"].fillna(0) > 0
    if "has_prefill" in steps:                                # nsys: known from the attention grids
        prefill |= steps["has_prefill"].fillna(False).astype(bool)
    decoding = steps["num_decode_tokens"].fillna(0) > 0
    if "is_decode" in steps:
        decoding |= steps["is_decode"].fillna(False).astype(bool)
    decode_only = dur[~prefill & decoding]
    typical = float(decode_only.median()) if len(decode_only) else float(dur.median())
    running = steps["num_running"].fillna(1) if "num_running" in steps else pd.Series(1, index=steps.index)
    stall = (dur > stall_factor * typical) & (running > 0)
    return steps.assign(dur_ns=dur, phase=np.where(prefill, "prefill", "decode"), stall=stall.to_numpy())


def longest_per_bin(steps: pd.DataFrame, max_bars: int) -> pd.DataFrame:
    """At most `max_bars` steps: when there are more, keep the longest step of each time bin."""
    if len(steps) <= max_bars:
        return steps
    lo, hi = int(steps["start_ns"].min()), int(steps["end_ns"].max())
    width = max(1, -(-(hi - lo) // max_bars))
    keys = (steps["start_ns"] - lo) // width
    return steps.loc[steps["dur_ns"].groupby(keys).idxmax().to_numpy()].sort_values("start_ns")


# --- roofline -------------------------------------------------------------------------------
def roofline(gpu: pd.DataFrame, max_points: int = 2000) -> dict | None:
    """Roof and measured points for the GPU model in `gpu`, from `stallscope.analyzers.roofline`.

    Returns `{"gpu", "peak_flops", "peak_bw", "points": frame(series, intensity, flops)}` or None.
    """
    from stallscope.analyzers.roofline import measured_points

    if gpu.empty:
        return None
    gpu = gpu[gpu["metric"].isin(["tensor_active", "dram_active"])]
    if gpu.empty:
        return None
    lo, hi = int(gpu["ts"].min()), int(gpu["ts"].max())
    width = max(1, -(-(hi - lo + 1) // max_points))          # one sample per GPU, metric and time bin
    last = gpu.assign(_b=(gpu["ts"] - lo) // width).groupby(["hostname", "gpu", "metric", "_b"], sort=False)["ts"].idxmax()
    roof = measured_points(gpu.loc[np.sort(last.to_numpy())])
    if roof is None:
        return None
    pts = roof["points"]                                    # one per GPU and sample: thin to distinct points
    key = pd.DataFrame({"s": pts["series"], "x": np.round(np.log10(pts["intensity"]), 2),
                        "y": np.round(np.log10(pts["flops"]), 2)})
    pts = pts[~key.duplicated()]
    if len(pts) > max_points:
        pts = pts.iloc[np.linspace(0, len(pts) - 1, max_points).astype(int)]
    return {**roof, "points": pts.reset_index(drop=True)}
