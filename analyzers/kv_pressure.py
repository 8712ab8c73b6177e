"""KV pressure: the paged KV cache is nearly full, requests queue and running ones are preempted.

Method, per target, on the signals grid (stallscope.analyzers.signals):

1. A window is under pressure when `kv_cache_usage_perc` >= `kv_usage_high` and requests wait for
   capacity (`num_requests_waiting_by_reason{reason="capacity"}` >= `waiting_high`; before vLLM 0.20
   `num_requests_waiting`, which also counts requests deferred for a LoRA slot or an async KV load) or
   preemptions rose (`rate(num_preemptions_total)` > 0).
   The gauge counts *blocks* pinned by running requests (prefix-cached free blocks excluded), not tokens:
   a request holds ceil(tokens / block_size) blocks, so usage can read 1.0 with part-empty last blocks.
   Preemptions at or above `preemptions_rate_high` per second count on their own: V1 preempts (by
   recompute) only when an allocation fails, i.e. the pool was full at that instant, and a scrape every
   few seconds easily samples the gauge just after the victim's blocks were freed.
2. It must be sustained: at least two consecutive windows; dips shorter than one window do not split
   an episode.
3. Severity is critical when preemptions reach `preemptions_rate_high` per second, else warning.
4. The recommendation quotes the capacity N from `vllm:cache_config_info` (num_gpu_blocks x block_size)
   when scraped: `--kv-cache-dtype fp8` gives 2N tokens; `--max-num-seqs` sized so peak usage fits.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers.advice import kv_recommendation
from stallscope.analyzers.finding import Finding
from stallscope.analyzers.signals import episodes
from stallscope.core.config import load_thresholds


def cache_info(samples: pd.DataFrame | None) -> dict[str, dict]:
    """{target: cache_config_info labels} from the latest `vllm:cache_config_info` of each target."""
    if samples is None or not len(samples):
        return {}
    rows = samples[samples["metric"] == "vllm:cache_config_info"]
    out = {}
    targets = rows["target"] if "target" in rows else pd.Series("", index=rows.index)
    for t, lab in zip(targets, rows["labels"]):
        out[t or ""] = dict(lab)
    return out


def capacity_tokens(info: dict) -> float | None:
    """KV capacity in tokens from cache_config_info labels, or None when they do not say."""
    try:
        if info.get("kv_cache_size_tokens") not in (None, "", "None"):
            return float(info["kv_cache_size_tokens"])
        return float(info["num_gpu_blocks"]) * float(info["block_size"])
    except (KeyError, TypeError, ValueError):
        return None


def detect(signals: pd.DataFrame, *, thresholds: dict | None = None, samples: pd.DataFrame | None = None,
           min_windows: int = 2) -> list[Finding]:
    """Findings of kind `kv_pressure`.

    >>> # detect(signals.compute(samples), samples=samples)
    """
    th = thresholds or load_thresholds()
    high = float(th["kv_usage_high"])
    infos = cache_info(samples)
    out = []
    for target, sig in signals.groupby("target", sort=True):
        sig = sig.sort_values("ts").reset_index(drop=True)
        kv = sig["kv_usage"].to_numpy(dtype=float)
        waiting = sig["waiting"].to_numpy(dtype=float)
        preempt = sig["preempt_rate"].to_numpy(dtype=float)
        mask = ((kv >= high) & ((waiting >= float(th["waiting_high"])) | (preempt > 0))) \
            | (np.nan_to_num(preempt) >= float(th["preemptions_rate_high"]))
        ts = sig["ts"].to_numpy(dtype=np.int64)
        step = int(signals.attrs.get("step_ns", 0)) or 1
        gap = int(signals.attrs.get("window_ns", 0)) // step  # dips shorter than a window stay one episode
        for i, j in episodes(mask, min_len=min_windows, merge_gap=gap):
            part = sig.iloc[i:j + 1]
            peak_usage = float(np.nanmax(part["kv_usage"]))
            peak_preempt = float(np.nanmax(part["preempt_rate"].fillna(0)))
            peak_running = float(np.nanmax(part["running"].fillna(0)))
            info = infos.get(target) or (next(iter(infos.values())) if len(infos) == 1 else {})
            cap = capacity_tokens(info)
            evidence = {"kv_usage_max": peak_usage, "kv_usage_high": high,
                        "waiting_max": float(np.nanmax(part["waiting"].fillna(0))),
                        "waiting_total_max": float(np.nanmax(part["waiting_total"].fillna(0))),
                        "preemptions_per_s_max": peak_preempt, "running_max": peak_running,
                        "ttft_p99_s_max": float(np.nanmax(part["ttft_p99"])) if part["ttft_p99"].notna().any()
                        else float("nan"), "windows": int(len(part))}
            recommendation, extra = kv_recommendation(capacity_tokens=cap, peak_running=peak_running,
                                                      peak_usage=peak_usage, kv_usage_high=high,
                                                      cache_dtype=info.get("cache_dtype"))
            evidence.update(extra)
            where = f" on {target}" if target else ""
            explanation = (
                f"The KV cache{where} ran full for {len(part)} windows (block usage peaked at {peak_usage:.0%} "
                f"in the scrapes; the threshold is {high:.0%}) while up to {evidence['waiting_max']:.0f} requests waited and preemptions "
                f"reached {peak_preempt:.2f}/s. New requests cannot be admitted until blocks free up, so they "
                "queue (TTFT grows), and when a running request needs a new block the scheduler preempts the "
                "newest one and recomputes it later (a long ITL gap for that stream). Usage counts blocks, not "
                "tokens: each request's last block is partly empty.")
            severity = "critical" if peak_preempt >= float(th["preemptions_rate_high"]) else "warning"
            out.append(Finding("kv_pressure", severity, int(ts[i]), int(ts[j]), target, evidence,
                               explanation, recommendation))
    return out
