"""KV pressure: the paged KV cache runs out, requests queue and running ones are preempted.

Method, per target, on the signals grid (stallscope.analyzers.signals):

1. A window is hot when `kv_cache_usage_perc` >= `kv_usage_high` and requests wait for
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
3. The episode is `kv_pressure` only where the pool ran out: a scrape in its windows read the pool at
   `kv_usage_full` (`kv_usage_peak`: every scrape, not only the grid's instants) or requests were preempted.
   Severity is critical when preemptions reach `preemptions_rate_high` per second, else warning.
   Otherwise it is `kv_near_full` (`info`): requests waited beside a pool at 80-95 %, but the scrapes do not
   show it ran out, and vLLM's waiting-for-capacity gauge also counts requests held back by the token budget
   (over held-out 61-93, eight such pools never reached 0.95 in their step traces; docs/accuracy.md).
   A scrape that read the pool at or above `kv_usage_full` outside an episode is `kv_pressure` `info`: the
   pool was full then (the gauge is the step's own count), but nobody was measured waiting or preempted.
4. The explanation says which harm the scrapes show: preemptions, or, with none, a queue for blocks (TTFT only).
5. The recommendation quotes the capacity N from `vllm:cache_config_info` (num_gpu_blocks x block_size)
   when scraped: `--kv-cache-dtype fp8` gives 2N tokens; `--max-num-seqs` sized so peak usage fits, only where
   requests were preempted (with none, fewer running requests only lengthen the queue).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers.advice import kv_near_full_recommendation, kv_recommendation
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


def fullest_scrape(sig: pd.DataFrame) -> np.ndarray:
    """The fullest scrape each grid point knows: its instant, or any scrape of its window (`kv_usage_peak`)."""
    kv = sig["kv_usage"].to_numpy(dtype=float)
    return np.fmax(kv, sig["kv_usage_peak"].to_numpy(dtype=float)) if "kv_usage_peak" in sig else kv


def window_codes(sig: pd.DataFrame, th: dict) -> np.ndarray:
    """Per grid point of one target: 3 where preemptions reach `preemptions_rate_high` per second, 2 where the
    pool is hot (usage >= `kv_usage_high` with requests waiting or preempted) and ran out (a scrape in the window
    at `kv_usage_full`, or a preemption), 1 where it is hot only, else 0. rules/fleet.py asks the same of
    Prometheus."""
    kv, seen = sig["kv_usage"].to_numpy(dtype=float), fullest_scrape(sig)
    waiting = sig["waiting"].to_numpy(dtype=float)
    preempt = np.nan_to_num(sig["preempt_rate"].to_numpy(dtype=float))
    hot = (kv >= float(th["kv_usage_high"])) & ((waiting >= float(th["waiting_high"])) | (preempt > 0))
    ran_out = (preempt > 0) | (seen >= float(th["kv_usage_full"]))
    return np.select([preempt >= float(th["preemptions_rate_high"]), hot & ran_out, hot], [3, 2, 1], 0)


def detect(signals: pd.DataFrame, *, thresholds: dict | None = None, samples: pd.DataFrame | None = None,
           min_windows: int = 2) -> list[Finding]:
    """Findings of kind `kv_pressure` (the pool ran out) and `kv_near_full` (it queued requests near full).

    >>> # detect(signals.compute(samples), samples=samples)
    """
    th = thresholds or load_thresholds()
    infos = cache_info(samples)
    out = []
    for target, sig in signals.groupby("target", sort=True):
        sig = sig.sort_values("ts").reset_index(drop=True)
        codes = window_codes(sig, th)
        seen = fullest_scrape(sig)
        step = int(signals.attrs.get("step_ns", 0)) or 1
        gap = int(signals.attrs.get("window_ns", 0)) // step  # dips shorter than a window stay one episode
        covered = np.zeros(len(sig), dtype=bool)
        info = infos.get(target) or (next(iter(infos.values())) if len(infos) == 1 else {})
        for i, j in episodes(codes > 0, min_len=min_windows, merge_gap=gap):
            covered[i:j + 1 + gap] = True   # kv_usage_peak looks back a window: it still holds the episode's scrapes
            out.append(_episode(sig.iloc[i:j + 1], seen[i:j + 1], int(codes[i:j + 1].max()), target, th, info))
        full = (seen >= float(th["kv_usage_full"])) & ~covered
        out += [_full_pool(sig.iloc[i:j + 1], seen[i:j + 1], target, th)
                for i, j in episodes(full, min_len=1, merge_gap=gap)]
    return out


def _episode(part: pd.DataFrame, seen: np.ndarray, code: int, target: str, th: dict, info: dict) -> Finding:
    """One episode of hot windows (`code`, the highest of `window_codes` in it): `kv_pressure` where the pool ran
    out in one of them (critical at 3), else `kv_near_full` (`info`)."""
    high, full = float(th["kv_usage_high"]), float(th["kv_usage_full"])
    peak_usage = float(np.nanmax(seen)) if np.isfinite(seen).any() else float("nan")
    peak_preempt = float(np.nanmax(part["preempt_rate"].fillna(0)))
    peak_running = float(np.nanmax(part["running"].fillna(0)))
    cap = capacity_tokens(info)
    evidence = {"kv_usage_max": peak_usage, "kv_usage_high": high, "kv_usage_full": full,
                "waiting_max": float(np.nanmax(part["waiting"].fillna(0))),
                "waiting_total_max": float(np.nanmax(part["waiting_total"].fillna(0))),
                "preemptions_per_s_max": peak_preempt, "running_max": peak_running,
                "ttft_p99_s_max": float(np.nanmax(part["ttft_p99"])) if part["ttft_p99"].notna().any()
                else float("nan"), "windows": int(len(part))}
    if cap and np.isfinite(cap):
        evidence["kv_capacity_tokens"] = int(cap)
        if np.isfinite(peak_usage):
            evidence["kv_free_tokens_min"] = float(max(0.0, 1.0 - peak_usage) * cap)
    ts = part["ts"].to_numpy(dtype=np.int64)
    if code < 2:
        return Finding("kv_near_full", "info", int(ts[0]), int(ts[-1]), target, evidence,
                       _near_full_text(target, evidence), kv_near_full_recommendation(info.get("cache_dtype")))
    recommendation, extra = kv_recommendation(capacity_tokens=cap, peak_running=peak_running,
                                              peak_usage=peak_usage, kv_usage_high=high,
                                              cache_dtype=info.get("cache_dtype"), preempted=peak_preempt > 0)
    evidence.update(extra)
    return Finding("kv_pressure", "critical" if code >= 3 else "warning", int(ts[0]), int(ts[-1]), target,
                   evidence, _pressure_text(target, evidence), recommendation)


def _near_full_text(target: str, ev: dict) -> str:
    """A queue beside a pool near full that no scrape read full and nothing preempted: the scrapes cannot say
    whether it waited for blocks or for the token budget (vLLM counts both as waiting for capacity)."""
    where = f" on {target}" if target else ""
    free = ev.get("kv_free_tokens_min")
    room = (f" About {free:,.0f} of {ev['kv_capacity_tokens']:,} tokens were free at the fullest scrape: a waiting "
            "prompt longer than that waited for blocks (vLLM admits a prompt only when the whole of it fits, "
            "`scheduler_reserve_full_isl`), a shorter one for the token budget."
            if free is not None and ev.get("kv_capacity_tokens") else "")
    return (f"Up to {ev['waiting_max']:.0f} requests waited for capacity while the KV cache{where} held up to "
            f"{ev['kv_usage_max']:.0%} of its blocks (at or above the {ev['kv_usage_high']:.0%} threshold) over "
            f"{ev['windows']} windows, but no scrape read it at {ev['kv_usage_full']:.0%} and no request was "
            "preempted, so the scrapes do not show that it ran out. vLLM counts a request held back by the token "
            f"budget (`--max-num-batched-tokens`) as waiting for capacity too.{room} Either way the cost is TTFT, "
            "not the running streams' ITL.")


def _pressure_text(target: str, ev: dict) -> str:
    """What the episode's scrapes show: the pool's peak and the queue, then preemptions where there were any,
    else a queue for blocks (vLLM admits a waiting prompt only when free blocks hold all of it)."""
    where = f" on {target}" if target else ""
    peak, high = ev["kv_usage_max"], ev["kv_usage_high"]
    if not np.isfinite(peak):
        text = f"The KV cache{where}'s usage was not scraped in these {ev['windows']} windows"
    elif peak >= high:
        text = (f"The KV cache{where} held {peak:.0%} of its blocks at the fullest scrape, at or above the "
                f"{high:.0%} threshold, over {ev['windows']} windows")
    else:   # preemptions alone: V1 preempts only when an allocation fails, so the pool ran out between scrapes
        text = (f"The KV cache{where} read at most {peak:.0%} of its blocks in the scrapes (under the {high:.0%} "
                f"threshold) over {ev['windows']} windows, yet ran out between them")
    waited = ev["waiting_max"]
    text += (f", while up to {waited:.0f} requests waited for capacity. " if waited > 0
             else ", with no request waiting for capacity. ")
    if ev["preemptions_per_s_max"] > 0:
        text += (f"Preemptions reached {ev['preemptions_per_s_max']:.2f}/s: when a running request needs a new block "
                 "and none is free, the scheduler preempts the newest one and recomputes it later (a long ITL gap "
                 "for that stream), and new requests cannot be admitted until blocks free up, so they queue (TTFT "
                 "grows). ")
    else:
        free = ev.get("kv_free_tokens_min")
        room = (f", with about {free:,.0f} of {ev['kv_capacity_tokens']:,} tokens free at the fullest scrape"
                if free is not None and ev.get("kv_capacity_tokens") else "")
        text += (f"No request was preempted: the waiting requests queued for blocks{room} (vLLM admits a prompt "
                 "only when the whole of it fits, `scheduler_reserve_full_isl`), so the cost is TTFT, not the "
                 "running streams' ITL. ")
    return text + "Usage counts blocks, not tokens: each request's last block is partly empty."


def _full_pool(part: pd.DataFrame, seen: np.ndarray, target: str, th: dict) -> Finding:
    """An `info` finding: scrapes that read the pool full, with no sustained queueing or preemption beside."""
    full = float(th["kv_usage_full"])
    n = int((part["kv_usage"] >= full).sum()) or 1   # grid instants; a full scrape only between them counts once
    evidence = {"kv_usage_max": float(np.nanmax(seen)), "kv_usage_full": full, "windows_full": n,
                "waiting_max": float(np.nanmax(part["waiting"].fillna(0))),
                "preemptions_per_s_max": float(np.nanmax(part["preempt_rate"].fillna(0))),
                "running_max": float(np.nanmax(part["running"].fillna(0)))}
    where = f" on {target}" if target else ""
    explanation = (
        f"The KV cache{where} read {evidence['kv_usage_max']:.0%} full in {n} window(s) (at or above "
        f"{full:.0%}): a running request's next block may not have been there. Requests did not wait for "
        f"capacity or get preempted for two windows (up to {evidence['waiting_max']:.0f} waiting, "
        f"{evidence['preemptions_per_s_max']:.2f} preemptions/s), so no harm was measured: this is headroom "
        "to watch, not pressure.")
    ts = part["ts"].to_numpy(dtype=np.int64)
    return Finding("kv_pressure", "info", int(ts[0]), int(ts[-1]), target, evidence, explanation,
                   "none while nothing waits or is preempted; if it recurs with them, docs/runbooks.md#vllmkvcachepressure")
