"""Step stalls: the exact engine steps that froze the running streams, from a step trace (ground truth).

The idea: a request that decodes in two consecutive decode steps sees an inter-token gap equal to the
time between those steps' ends. So, over the `steps` frame sorted by start:

1. Keep steps that computed decode tokens; the gap of each is `end_ns` minus the previous decode
   step's `end_ns` (a prefill-only step in between is inside the gap, as it is for the streams).
2. The baseline is the rolling median gap (centred, `window_steps` steps).
3. A stall is a gap above max(`min_gap_s`, k x baseline). Its cause is `prefill` when the steps in the
   gap computed at least `min_prefill_tokens` prompt tokens, else `preemption` when a step preempted,
   else `short_prefill` (fewer prompt tokens) or `other`.
4. `window_truth` marks which sliding metric windows contain a stall end, for precision/recall of a
   detector's flagged windows against this ground truth.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = ["step", "start_ns", "end_ns", "gap_s", "baseline_s", "num_prefill_tokens", "num_decode_tokens",
           "num_running", "cause"]


def find_stalls(steps: pd.DataFrame, *, min_gap_s: float = 0.2, k: float = 3.0, window_steps: int = 51,
                cause: str | None = None, min_prefill_tokens: float = 1) -> pd.DataFrame:
    """Stalled decode gaps (columns `COLUMNS`), longest first within time order.

    >>> s = pd.DataFrame({"step": [0, 1, 2, 3], "start_ns": [0, 10, 20, 1000], "end_ns": [10, 20, 1000, 1010],
    ...                   "num_prefill_tokens": [0., 0, 900, 0], "num_decode_tokens": [4., 4, 4, 4]})
    >>> find_stalls(s, min_gap_s=5e-7)[["step", "cause"]].values.tolist()
    [[2, 'prefill']]
    """
    if steps is None or not len(steps):
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "cause" else "float64") for c in COLUMNS})
    st = steps.sort_values("start_ns", kind="stable").reset_index(drop=True)
    decode = np.flatnonzero(st["num_decode_tokens"].fillna(0).to_numpy() > 0)
    if len(decode) < 2:
        return find_stalls(None)
    end = st["end_ns"].to_numpy(dtype=np.int64)
    prefill = st["num_prefill_tokens"].fillna(0).to_numpy(dtype=float)
    preempt = st["num_preempted"].fillna(0).to_numpy(dtype=float) if "num_preempted" in st else np.zeros(len(st))
    running = st["num_running"].to_numpy(dtype=float) if "num_running" in st else np.full(len(st), np.nan)
    prefill_cum = np.concatenate([[0.0], np.cumsum(prefill)])
    preempt_cum = np.concatenate([[0.0], np.cumsum(preempt)])
    prev, cur = decode[:-1], decode[1:]
    gap = (end[cur] - end[prev]) / 1e9
    baseline = pd.Series(gap).rolling(window_steps, center=True, min_periods=1).median().to_numpy()
    stalled = gap > np.maximum(min_gap_s, k * baseline)
    pre_tokens = prefill_cum[cur + 1] - prefill_cum[prev + 1]  # prompt tokens in steps (prev, cur]
    pre_empt = preempt_cum[cur + 1] - preempt_cum[prev + 1]
    causes = np.where(pre_tokens >= min_prefill_tokens, "prefill",
                      np.where(pre_empt > 0, "preemption", np.where(pre_tokens > 0, "short_prefill", "other")))
    idx = np.flatnonzero(stalled)
    out = pd.DataFrame({
        "step": st["step"].to_numpy()[cur[idx]].astype(np.int64),
        "start_ns": end[prev[idx]], "end_ns": end[cur[idx]], "gap_s": gap[idx], "baseline_s": baseline[idx],
        "num_prefill_tokens": pre_tokens[idx], "num_decode_tokens": st["num_decode_tokens"].to_numpy(dtype=float)[cur[idx]],
        "num_running": running[cur[idx]], "cause": causes[idx].astype(object),
    })
    if cause is not None:
        out = out[out["cause"] == cause].reset_index(drop=True)
    return out


def window_truth(stalls: pd.DataFrame, eval_ts: np.ndarray, window_ns: int,
                 scrape_ts: np.ndarray | None = None) -> np.ndarray:
    """For each window [t - w, t], whether a stall ended inside it.

    With `scrape_ts`, a stall counts only where the metrics can show it: the scrapes just before and
    just after its end must both lie inside the window (a rate sees an increase between two samples).
    """
    eval_ts = np.asarray(eval_ts, dtype=np.int64)
    ends = np.sort(stalls["end_ns"].to_numpy(dtype=np.int64)) if len(stalls) else np.array([], dtype=np.int64)
    if scrape_ts is None:
        return np.searchsorted(ends, eval_ts, side="right") > np.searchsorted(ends, eval_ts - window_ns, side="right")
    scrapes = np.unique(np.asarray(scrape_ts, dtype=np.int64))
    k = np.searchsorted(scrapes, ends, side="left")  # first scrape at or after the end
    ok = (k > 0) & (k < len(scrapes))
    before, after = scrapes[k[ok] - 1], scrapes[k[ok]]
    truth = np.zeros(len(eval_ts), dtype=bool)
    for b, a in zip(before, after):
        truth |= (eval_ts - window_ns <= b) & (a <= eval_ts)
    return truth


def precision_recall(flagged: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """Precision and recall of flagged windows against ground-truth windows (NaN when undefined).

    >>> precision_recall(np.array([1, 1, 0, 0], bool), np.array([1, 0, 0, 1], bool))
    (0.5, 0.5)
    """
    flagged, truth = np.asarray(flagged, bool), np.asarray(truth, bool)
    tp = float((flagged & truth).sum())
    p = tp / float(flagged.sum()) if flagged.any() else float("nan")
    r = tp / float(truth.sum()) if truth.any() else float("nan")
    return p, r
