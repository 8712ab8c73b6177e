"""Stream stalls: every episode of impaired streams becomes exactly one finding, of the kind its cause names.

The idea: decode_starvation, itl_high and scheduler_stall deny each other, so they are one classification,
made once per episode (stallscope.analyzers.episodes), never three detectors voting window by window:
`prefill` -> decode_starvation, `stuck` -> scheduler_stall, `prefill_chunks` / `preemption` / `slow_decode`
-> itl_high with that `likely_cause`. Each target is judged on its own data: its chunked-prefill
configuration (given, else inferred from its own stalls), its own cost figures and budget advice.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers import chunking as C
from stallscope.analyzers import chunking_inference as CI
from stallscope.analyzers import decode_starvation as DS
from stallscope.analyzers import episodes as E
from stallscope.analyzers import itl_high, scheduler_stall
from stallscope.analyzers.chunk_cost import model_of
from stallscope.analyzers.finding import Finding
from stallscope.analyzers.signals import live_window
from stallscope.analyzers.step_stalls import find_stalls
from stallscope.core.config import load_thresholds

KIND = {"prefill": "decode_starvation", "stuck": "scheduler_stall", "prefill_chunks": "itl_high",
        "preemption": "itl_high", "slow_decode": "itl_high"}


def detect(signals: pd.DataFrame, *, thresholds: dict | None = None, steps: pd.DataFrame | None = None,
           roofline_cost: dict | None = None, budget_advice=None, chunking: C.Chunking | None = None,
           samples: pd.DataFrame | None = None, model: str | None = None) -> list[Finding]:
    """One finding per episode per target. `chunking` is the configuration the server ran (None: infer it per
    target from its `samples`' histograms, else from its stalls); `budget_advice` (advice.budget_advisor's
    callable) gives the what-if budget, called only for a finding that recommends one. `model` (--model) names
    the model whose shapes split the metrics' prefill cost (stallscope.analyzers.chunk_cost); default each
    target's own `model_name`.

    >>> # detect(signals.compute(samples), steps=steps)[0].kind
    """
    th = thresholds or load_thresholds()
    window = int(signals.attrs.get("window_ns", 60 * 10**9))
    step = int(signals.attrs.get("step_ns", window)) or window
    live = int(signals.attrs.get("live_ns", live_window(window, step)))
    stalls = find_stalls(steps, min_gap_s=float(th["itl_slo_s"])) if steps is not None and len(steps) else None
    out = []
    for target, sig in signals.groupby("target", sort=True):
        sig = sig.sort_values("ts").reset_index(drop=True)
        own = samples[samples["target"].fillna("") == target] if samples is not None and "target" in samples else None
        known = chunking if chunking is not None and chunking.enabled is not None else None
        if known is None and own is not None:
            known = CI.infer_from_histograms(own, float(th["itl_slo_s"]))
            known = known if known.enabled is not None else None
        first = known or C.UNKNOWN
        eps = E.find(sig, thresholds=th, chunking=first, window_ns=window, step_ns=step, live_ns=live)
        if known is not None and known.source == "inferred from metrics":
            known = CI.frozen_through_prefill(known, _freezes(sig, eps))
        config = known or _inferred(eps)
        # the causes depend on the configuration: judge again with the one that holds (an unknown one, whatever it
        # says of why, judges as the first did)
        if config != first and not (config.enabled is None and first.enabled is None):
            eps = E.find(sig, thresholds=th, chunking=config, window_ns=window, step_ns=step, live_ns=live)
        cost = DS.estimate_cost(sig, steps, roofline_cost, config, own, model_of(own, model))
        out += [_finding(ep, sig, th, cost, config, stalls, budget_advice) for ep in eps]
    return out


def _freezes(sig: pd.DataFrame, eps: list) -> list[tuple[float, bool]]:
    """(seconds nothing moved, still frozen at the last scrape) of the freezes inside one target's episodes:
    the one open at its last scrape, and the longest that ended before that one began (scrapes moved again
    after it). Without the scrapes' `nothing_for_s`, each episode's freeze, open while the episode is."""
    if "nothing_for_s" not in sig or not eps:
        return [(ep.evidence["nothing_moves_s"], ep.ongoing) for ep in eps]
    inside = np.zeros(len(sig), dtype=bool)
    for ep in eps:
        inside[ep.i:ep.j + 1] = True
    still = np.nan_to_num(sig["nothing_for_s"].to_numpy(dtype=float)) * inside
    ts = sig["ts"].to_numpy(dtype=np.int64)
    ago = (ts[-1] - ts) / 1e9
    open_s = float(still[-1])
    return [(open_s, True), (float(still[ago >= open_s - 1e-6].max()), False)]


def _inferred(eps: list) -> C.Chunking:
    """The chunking one target's episodes imply, pooled over every episode with long prefills whose stalls
    preemptions do not explain (a preempted request's gap spans its wait and recompute, not one step). Only the
    stalls at its long prefills count, over the rate elsewhere (`itl_samples_above_slo_at_prefills`): whole
    prompts just under the long bound stall every stream too, and counted as a long prompt's they read as its
    chunk steps."""
    eps = [ep for ep in eps if ep.evidence["long_prefills"] > 0 and ep.cause != "preemption"]
    above = sum(ep.evidence["itl_samples_above_slo_at_prefills"] for ep in eps)
    per = [(ep.evidence["long_prefills"] * ep.evidence["running_median"]) for ep in eps]
    total = sum(per)
    return CI.infer(above / total if total > 0 else float("nan"), total)


def _finding(ep: E.Episode, sig: pd.DataFrame, th: dict, cost: dict, config: C.Chunking, stalls,
             budget_advice) -> Finding:
    slo = float(th["itl_slo_s"])
    part = {c: sig[c].to_numpy()[ep.i:ep.j + 1] for c in sig.columns if c != "target"}
    ev = DS.evidence(part, slo, stalls, ep.start_ns, ep.end_ns)
    ev.update({"cause": ep.cause, "decided_by": ep.decided_by, "ongoing": ep.ongoing, "episode": dict(ep.evidence),
               "timeline": ep.timeline, **config.as_evidence(), "chunking": config.describe()})
    where = f" on {ep.target}" if ep.target else ""
    kind = KIND[ep.cause]
    running = float(np.nanmedian(part["running"])) if np.isfinite(part["running"].astype(float)).any() else 0.0

    def recommend(budget_in_use=None, in_use_floor=None):
        return DS.recommend(slo, cost, config, running, budget_advice, budget_in_use, in_use_floor)

    if kind == "decode_starvation":
        explanation = DS.explain(ep, ev, where, slo, config)
        recommendation, extra = recommend()
        ev.update(extra)
    elif kind == "scheduler_stall":
        explanation, recommendation = scheduler_stall.texts(ep, where)
    else:
        explanation, recommendation = itl_high.texts(ep.cause, ep, ev, where, slo, cost, config, recommend)
    if ep.severity == "info" and "reference_itl_share_above_slo" in ep.evidence:
        explanation += " " + _within_slo(ep.evidence, slo)
    return Finding(kind, ep.severity, ep.start_ns, ep.end_ns, ep.target, ev, explanation, recommendation)


def _within_slo(ev: dict, slo: float) -> str:
    """Why an episode is `info` (episodes docstring, 4), with its numbers."""
    return (f"Severity info: the ITL P99 over the SLO's reference window met the {slo * 1000:.0f} ms SLO "
            f"({ev['reference_itl_share_above_slo']:.2%} of gaps at or above it, at most 1 % for a P99), although "
            f"{ev['reference_stream_time_above_slo']:.1%} of stream time sat in gaps above it; if your SLO bounds "
            f"every gap rather than the P99, treat this as a miss.")
