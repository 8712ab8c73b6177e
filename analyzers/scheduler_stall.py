"""Scheduler stall: requests wait, the running set does not change, and almost no tokens come out (livelock).

Method, per target, on the signals grid: a window stalls when requests wait for capacity (`waiting`:
`num_requests_waiting_by_reason{reason="capacity"}` where scraped, else `num_requests_waiting`) >=
`waiting_high`, `num_requests_running` > 0 and unchanged since the previous window, and
`rate(generation_tokens_total)` < `generation_tokens_rate_low`, and the engine is awake (a sleeping engine,
`engine_sleep_state` on a state other than "awake", generates nothing by design). Two or more consecutive
windows make one critical finding, unless the freeze ended with a long prefill completing within one window
after it (`long_prefill_rate` > 0): an unchunked prefill-only step also stops generation while requests
wait, and decode_starvation reports it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers.finding import Finding
from stallscope.analyzers.signals import episodes
from stallscope.core.config import load_thresholds


def detect(signals: pd.DataFrame, *, thresholds: dict | None = None, min_windows: int = 2) -> list[Finding]:
    """Findings of kind `scheduler_stall`.

    >>> # detect(signals.compute(samples))
    """
    th = thresholds or load_thresholds()
    out = []
    for target, sig in signals.groupby("target", sort=True):
        sig = sig.sort_values("ts").reset_index(drop=True)
        running = sig["running"].to_numpy(dtype=float)
        steady = np.concatenate([[False], running[1:] == running[:-1]])
        awake = np.nan_to_num(sig["asleep"].to_numpy(dtype=float)) < 1
        mask = ((sig["waiting"].to_numpy(dtype=float) >= float(th["waiting_high"])) & (running > 0) & steady & awake
                & (np.nan_to_num(sig["gen_rate"].to_numpy(dtype=float), nan=0.0)
                   < float(th["generation_tokens_rate_low"])))
        ts = sig["ts"].to_numpy(dtype=np.int64)
        step = int(signals.attrs.get("step_ns", 0)) or int(signals.attrs.get("window_ns", 1))
        after = max(1, int(signals.attrs.get("window_ns", step)) // step) + 1
        long_prefill = np.nan_to_num(sig["long_prefill_rate"].to_numpy(dtype=float))
        for i, j in episodes(mask, min_len=min_windows):
            if long_prefill[j + 1:j + 1 + after].any():
                continue  # the "freeze" was one long prefill step
            part = sig.iloc[i:j + 1]
            evidence = {"waiting_max": float(part["waiting"].max()), "running": float(part["running"].median()),
                        "generation_tokens_per_s_max": float(np.nan_to_num(part["gen_rate"]).max()),
                        "kv_usage_max": float(part["kv_usage"].max()), "windows": int(len(part))}
            where = f" on {target}" if target else ""
            explanation = (
                f"The scheduler{where} made no progress: {evidence['running']:.0f} requests stayed RUNNING and "
                f"{evidence['waiting_max']:.0f} waited, yet generation ran at "
                f"{evidence['generation_tokens_per_s_max']:.2f} tokens/s. Typical causes are a livelock where "
                "running requests are preempted and readmitted without finishing (KV cache too small for their "
                "context), a stuck engine core, or a hung collective in tensor parallelism.")
            recommendation = ("Check the engine logs for repeated preemptions or a hung worker; if the KV cache "
                              "cannot hold the running requests' context, lower `--max-num-seqs` or "
                              "`--max-model-len`, or use `--kv-cache-dtype fp8`.")
            out.append(Finding("scheduler_stall", "critical", int(ts[i]), int(ts[j]), target, evidence,
                               explanation, recommendation))
    return out
