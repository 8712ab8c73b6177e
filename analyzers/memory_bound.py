"""Memory-bound decode: the GPU streams memory (DRAM active high) while its tensor cores idle.

Method, per GPU (hostname, gpu), from the `gpu` frame (DCGM exporter or NVML, canonical metric names):

1. On one grid (the signals grid when given, else the GPU samples' own times) take the instant
   `dram_active` and `tensor_active` ratios.
2. A window is memory bound when dram_active >= `dram_active_high` and tensor_active <= `tensor_active_low`,
   and the load is decode-dominated when vLLM metrics exist (generation rate > 0 and prompt rate below the
   generation rate). Two or more consecutive windows make one `memory_bound_decode` finding, severity info:
   decode is expected to be bandwidth bound; the finding explains the batch-size lever.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers import quantiles as Q
from stallscope.analyzers.finding import Finding
from stallscope.analyzers.signals import episodes
from stallscope.core.config import load_thresholds


def _gpu_series(gpu: pd.DataFrame, metric: str, eval_ts: np.ndarray) -> dict:
    rows = gpu[gpu["metric"] == metric]
    out = {}
    for (host, idx), part in rows.groupby(["hostname", "gpu"], sort=True):
        part = part.sort_values("ts")
        out[(host, idx)] = (Q.series_instant(part["ts"].to_numpy(), part["value"].to_numpy(), eval_ts),
                            str(part["model"].iloc[-1]) if "model" in part else "")
    return out


def detect(gpu: pd.DataFrame | None, *, signals: pd.DataFrame | None = None, thresholds: dict | None = None,
           min_windows: int = 2) -> list[Finding]:
    """Findings of kind `memory_bound_decode` (severity info).

    >>> # detect(gpu_frame, signals=signals.compute(samples))
    """
    th = thresholds or load_thresholds()
    if gpu is None or not len(gpu):
        return []
    if signals is not None and len(signals):
        eval_ts = np.unique(signals["ts"].to_numpy(dtype=np.int64))
        window = int(signals.attrs.get("window_ns", 0))
        agg = signals.groupby("ts")[["gen_rate", "prompt_rate", "running"]].sum(min_count=1).reindex(eval_ts)
        gen, prompt = agg["gen_rate"].to_numpy(dtype=float), agg["prompt_rate"].to_numpy(dtype=float)
        decode_dominated = np.where(np.isnan(gen), True, (gen > 0) & (np.nan_to_num(prompt) < gen))
        running = agg["running"].to_numpy(dtype=float)
    else:
        eval_ts = np.unique(gpu["ts"].to_numpy(dtype=np.int64))
        window, decode_dominated, running = 0, np.ones(len(eval_ts), bool), np.full(len(eval_ts), np.nan)
    dram = _gpu_series(gpu, "dram_active", eval_ts)
    tensor = _gpu_series(gpu, "tensor_active", eval_ts)
    out = []
    for key, (d, model) in dram.items():
        if key not in tensor:
            continue
        t = tensor[key][0]
        mask = (d >= float(th["dram_active_high"])) & (t <= float(th["tensor_active_low"])) & decode_dominated
        for i, j in episodes(mask, min_len=min_windows):
            sl = slice(i, j + 1)
            batch = float(np.nanmedian(running[sl])) if np.isfinite(running[sl]).any() else float("nan")
            evidence = {"dram_active_mean": float(np.nanmean(d[sl])), "tensor_active_mean": float(np.nanmean(t[sl])),
                        "gpu_model": model, "running_median": batch, "windows": int(j - i + 1)}
            host, idx = key
            batch_text = f" at a median batch of {batch:.0f} running requests" if np.isfinite(batch) else ""
            explanation = (
                f"GPU {idx} on {host} ({model}) kept its memory interface {evidence['dram_active_mean']:.0%} busy "
                f"while the tensor pipes were active only {evidence['tensor_active_mean']:.0%} of cycles{batch_text}. "
                "Decode is memory bound: every step reads all weights (and each request's KV) to produce one token "
                "per request, about 1 FLOP per byte at batch 1. The lever is the batch: weights are read once per "
                "step whatever the batch, so more concurrent requests raise FLOP per byte and throughput at almost "
                "the same step time, until the ridge point or the KV cache limits it.")
            recommendation = ("If latency allows, raise concurrency (`--max-num-seqs`, more client streams) to "
                              "amortise each weight read over more tokens; `stallscope roofline` gives the "
                              "arithmetic intensity per batch size and the weight-read floor per step.")
            out.append(Finding("memory_bound_decode", "info", int(eval_ts[i] - window), int(eval_ts[j]),
                               f"{host}/gpu{idx}", evidence, explanation, recommendation))
    return out
