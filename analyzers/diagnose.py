"""The one diagnosis: every detector over each target's frames, as a typed `Report`.

`diagnose([(name, {"samples", "gpu", "steps", "whatif_inputs", "chunking"}), ...])` runs the signals
grid and every detector once per group (any frame may be absent; findings carry their samples' target or GPU) and
adds the whole-run ITL/TTFT quantiles of each group with samples, under the group's name.
`stallscope analyze`, the dashboards and the demo all call it; the renderers only format its Report.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from stallscope.analyzers import kv_pressure, memory_bound, signals, stream_stalls
from stallscope.analyzers import quantiles as Q
from stallscope.analyzers.advice import budget_advisor
from stallscope.analyzers.finding import Finding, by_start, to_frame
from stallscope.analyzers.signals import ITL, TTFT, scrape_interval_ns, split_metrics
from stallscope.core.config import load_thresholds
from stallscope.core.errors import InputError

log = logging.getLogger(__name__)


@dataclass
class Report:
    """What the text, JSON and HTML renderers show: findings once, as records; the frame on demand."""

    findings: list[Finding] = field(default_factory=list)
    signals: pd.DataFrame | None = None
    quantiles: dict = field(default_factory=dict)
    thresholds: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    roofline: dict | None = None
    request_views: dict = field(default_factory=dict)  # {"series", "heatmaps", "summary"}: analyzers/request_views

    def findings_frame(self) -> pd.DataFrame:
        """The `findings` frame (for figure shading), in the report's order."""
        return to_frame(self.findings)


def diagnose(groups, *, thresholds: dict | None = None, roofline_cost: dict | None = None,
             window_s: float | None = None, require_window: bool = False, model: str | None = None) -> Report:
    """The Report of `(name, {"samples", "gpu", "steps", "whatif_inputs"})` groups, in the given order.

    A group whose samples do not fill one window is left out with a warning naming it; with
    `require_window` (`stallscope analyze`) an InputError says how many scrapes it needs when no group has
    enough (a live dashboard keeps showing what it has while a store fills).
    `whatif_inputs` (stallscope.analyzers.budget.WhatifInputs, e.g. a run directory's) sizes the
    decode_starvation budget; without it the budget is simulated from the group's steps and samples.
    `model` (--model) names the model whose shapes split the metrics' prefill cost (analyzers/chunk_cost.py);
    default each target's own `model_name`.

    >>> # diagnose([("", {"samples": samples, "steps": steps})]).findings_frame()[["kind", "severity"]]
    """
    th = thresholds or load_thresholds()
    report = Report(thresholds=th)
    sigs = []
    groups = _enough_scrapes(list(groups), window_s, require_window)
    for name, fr in groups:
        samples = fr.get("samples")
        sig, found = _diagnose_one(samples, fr.get("gpu"), fr.get("steps"), th, roofline_cost, window_s,
                                   fr.get("whatif_inputs"), fr.get("chunking"), model)
        if sig is not None:
            sigs.append(sig)
            report.quantiles[name] = whole_run_quantiles(samples, th)
        report.findings += found
    report.signals = pd.concat(sigs, ignore_index=True) if sigs else None
    return report


MIN_WINDOW_SCRAPES = 5  # signals.choose_grid: a window spans at least 4 scrape intervals


def _enough_scrapes(groups: list, window_s: float | None, strict: bool) -> list:
    """The groups whose samples fill one window; a warning names each that does not, and an InputError says
    how many scrapes a window needs when no group with samples does."""
    keep, short = [], []
    for name, fr in groups:
        samples = fr.get("samples")
        if samples is None or not len(samples):
            keep.append((name, fr))
            continue
        ts = np.unique(samples["ts"].to_numpy(dtype=np.int64))
        need = MIN_WINDOW_SCRAPES
        if window_s is not None and len(ts) > 1:
            need = max(2, int(np.ceil(window_s * 1e9 / scrape_interval_ns(samples))) + 1)
        if len(ts) >= need:
            keep.append((name, fr))
        else:
            short.append(f"{name or 'the target'} has {len(ts)} scrape{'s' * (len(ts) != 1)}, a window needs {need}")
    for text in short:
        log.warning("%s: not diagnosed (collect for longer, or scrape more often)", text)
    if strict and short and not any(fr.get("samples") is not None and len(fr["samples"]) for _, fr in keep) \
            and not any(fr.get("gpu") is not None and len(fr["gpu"]) for _, fr in keep):
        raise InputError(f"too few scrapes to diagnose: {'; '.join(short)} (collect for longer, or scrape more often)")
    return keep


def _diagnose_one(samples, gpu, steps, th, roofline_cost, window_s, whatif_inputs, chunking=None, model=None):
    """(signals frame or None, findings by start) of one group; every detector runs once. `chunking`
    (stallscope.analyzers.chunking.Chunking) is the configuration the group's server ran, when known; `model`
    the model the user names (--model; its shapes split the metrics' prefill cost), else each target's
    `model_name`."""
    found, sig = [], None
    if samples is not None and len(samples):
        eval_ts, window = signals.choose_grid(samples, th, window_s=window_s)
        sig = signals.compute(samples, thresholds=th, eval_ts=eval_ts, window_ns=window)
        advice = budget_advisor(steps, samples, float(th["itl_slo_s"]), whatif_inputs)
        found += stream_stalls.detect(sig, thresholds=th, steps=steps, roofline_cost=roofline_cost,
                                      budget_advice=advice, chunking=chunking, samples=samples, model=model)
        found += kv_pressure.detect(sig, thresholds=th, samples=samples)
    if gpu is not None and len(gpu):
        found += memory_bound.detect(gpu, signals=sig, thresholds=th)
    return sig, by_start(found)


def whole_run_quantiles(samples, thresholds: dict) -> dict:
    """ITL/TTFT P50/P99 over the whole run, each with its bucket and a bucket-honest text."""
    out = {}
    if not len(samples):
        return out
    t0, t1 = int(samples["ts"].min()), int(samples["ts"].max())
    window = t1 - t0 + scrape_interval_ns(samples)
    parts = split_metrics(samples, [f + s for f in (*ITL, TTFT) for s in ("_bucket", "_sum")])
    itl = next((f for f in ITL if f + "_bucket" in parts), ITL[0])
    out["itl_time_above_slo"] = _time_above_slo(parts, itl, t1, window, float(thresholds["itl_slo_s"]))
    for family, tag in ((itl, "itl"), (TTFT, "ttft")):
        rows = parts.get(family + "_bucket", samples.iloc[:0])
        for q in (0.5, 0.99):
            r = Q.quantile_range(rows, family, q, np.array([t1]), window, by=())
            key = f"{tag}_p{int(q * 100)}"
            if len(r) and np.isfinite(r["value"].iloc[0]):
                v, lo, hi = (float(r[c].iloc[0]) for c in ("value", "bucket_lo", "bucket_hi"))
                out[key] = {"value_s": v, "bucket_s": [lo, None if np.isinf(hi) else hi],
                            "text": Q.format_quantile(v, lo, hi)}
            else:
                out[key] = {"value_s": None, "bucket_s": None, "text": "n/a"}
    return out


def _time_above_slo(parts: dict, family: str, t1: int, window: int, slo: float) -> dict:
    """Share of stream time spent in ITL gaps above the SLO over the whole run (a lower bound: each gap
    counts as its bucket's lower edge). Unlike P99 it does not under-weight a long stall."""
    empty = {"share": None, "text": "n/a"}
    if family + "_bucket" not in parts or family + "_sum" not in parts:
        return empty
    rates = Q.bucket_rates(parts[family + "_bucket"], family, np.array([t1]), window, by=())
    total = Q.rate_range(parts[family + "_sum"], family + "_sum", np.array([t1]), window, by=())
    if not rates or not len(total) or not total["value"].iloc[0] > 0:
        return empty
    _, les, counts = next(iter(rates.values()))
    per_bucket = np.diff(np.concatenate([[0.0], np.maximum.accumulate(np.nan_to_num(counts[0]))]))
    lower = np.concatenate([[0.0], les[:-1]])
    share = float((per_bucket * lower)[lower >= slo].sum() / total["value"].iloc[0])
    return {"share": min(share, 1.0), "slo_s": slo, "text": f">= {min(share, 1.0):.1%}"}
