"""Ground truth from a run's own step trace, and the scores of a detector's findings against it (issue 16).

The rule, written once (docs/accuracy.md, "Scenario matrix"), never reading a detector's signals:

- `decode_starvation`: a gap between consecutive decode steps (end of one to the end of the next) longer
  than the ITL SLO that contains a step computing >= 512 prompt tokens; or the run ends inside such a gap
  (from the last decode step's end to the run's end, longer than the SLO, a step of >= 512 prompt tokens
  started in it while other running requests waited to decode).
- `kv_pressure`: a step that preempted, or left KV usage (kv_blocks_used / (num_gpu_blocks - 1), vLLM's denominator) >= 0.95;
  each such step's episode runs from the previous step's end to its own end.
- Episodes are those intervals (ns), merged where they touch or overlap.

Scores: run level (a kind is true / flagged in a run), episode level (true episodes hit by a finding of
the kind, findings that touch a true episode, seconds of overlap), contradictions (findings of kinds
that deny each other, e.g. `itl_high`, "not starvation", and `decode_starvation`, overlapping each other
inside one true episode on one target) and time to detect (when the first finding was raised, minus
the episode's onset; a window-based finding is raised at its first window's end).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

LONG_PREFILL_TOKENS = 512
KV_USAGE_HIGH = 0.95
KINDS = ("decode_starvation", "kv_pressure")
CONTRADICTORY = (frozenset({"decode_starvation", "itl_high"}),)
WINDOW_START_KINDS = ("decode_starvation", "itl_high")  # findings whose start is a window's start


def merge(intervals) -> list[tuple[int, int]]:
    """Sorted intervals, merged where they touch or overlap.

    >>> merge([(5, 9), (0, 2), (2, 4)])
    [(0, 4), (5, 9)]
    """
    out: list[list[int]] = []
    for s, e in sorted((int(s), int(e)) for s, e in intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _col(st: pd.DataFrame, name: str, default: float = 0.0) -> np.ndarray:
    return st[name].fillna(default).to_numpy(dtype=float) if name in st else np.full(len(st), default)


def starvation_episodes(steps: pd.DataFrame, slo_s: float, *, run_end_ns: int | None = None,
                        min_prefill_tokens: int = LONG_PREFILL_TOKENS) -> list[tuple[int, int]]:
    """True `decode_starvation` intervals (ns) of a steps frame; the run ends at `run_end_ns` (default:
    the last step's end); steps that start after it are not part of the run."""
    if steps is None or not len(steps):
        return []
    st = steps.sort_values("start_ns", kind="stable").reset_index(drop=True)
    run_end = int(st["end_ns"].max()) if run_end_ns is None else int(run_end_ns)
    st = st[st["start_ns"].to_numpy(dtype=np.int64) < run_end].reset_index(drop=True)
    end = st["end_ns"].to_numpy(dtype=np.int64)
    prefill = _col(st, "num_prefill_tokens")
    decode = np.flatnonzero((_col(st, "num_decode_tokens") > 0) & (end <= run_end))
    slo_ns = slo_s * 1e9
    out = []
    for prev, cur in zip(decode[:-1], decode[1:]):
        if end[cur] - end[prev] > slo_ns and prefill[prev + 1:cur + 1].max() >= min_prefill_tokens:
            out.append((end[prev], end[cur]))
    if len(decode):  # the open gap at the run's end
        last = decode[-1]
        tail = np.arange(last + 1, len(st))
        others = _col(st, "num_running", np.inf) - _col(st, "num_prefill_reqs")
        long = tail[prefill[tail] >= min_prefill_tokens]
        if run_end - end[last] > slo_ns and len(long) and (others[long] > 0).any():
            out.append((end[last], run_end))
    return merge(out)


def kv_usage(steps: pd.DataFrame) -> np.ndarray:
    """Each step's KV usage as the rule reads it: kv_blocks_used / (num_gpu_blocks - 1)."""
    pool = _col(steps, "num_gpu_blocks", np.nan) - 1      # block 0 is the null block, as in vLLM's BlockPool
    with np.errstate(invalid="ignore", divide="ignore"):
        return _col(steps, "kv_blocks_used") / pool


def kv_episodes(steps: pd.DataFrame, *, run_end_ns: int | None = None,
                usage_high: float = KV_USAGE_HIGH) -> list[tuple[int, int]]:
    """True `kv_pressure` intervals (ns): steps that preempted or left the pool >= `usage_high` full."""
    if steps is None or not len(steps):
        return []
    st = steps.sort_values("start_ns", kind="stable").reset_index(drop=True)
    if run_end_ns is not None:
        st = st[st["start_ns"].to_numpy(dtype=np.int64) < int(run_end_ns)].reset_index(drop=True)
    hot = (_col(st, "num_preempted") > 0) | (kv_usage(st) >= usage_high)
    end = st["end_ns"].to_numpy(dtype=np.int64)
    begin = np.concatenate([st["start_ns"].to_numpy(dtype=np.int64)[:1], end[:-1]])
    return merge((begin[i], end[i]) for i in np.flatnonzero(hot))


def episodes(steps: pd.DataFrame, slo_s: float, *, run_end_ns: int | None = None) -> dict:
    """{kind: true intervals} for `KINDS`."""
    return {"decode_starvation": starvation_episodes(steps, slo_s, run_end_ns=run_end_ns),
            "kv_pressure": kv_episodes(steps, run_end_ns=run_end_ns)}


def flagged(findings: list[dict], kind: str, min_severity: str = "warning") -> list[dict]:
    """Findings (records of `analyze --format json`) of `kind` at or above `min_severity`."""
    rank = {"info": 0, "warning": 1, "critical": 2}
    return [f for f in findings if f["kind"] == kind and rank[f["severity"]] >= rank[min_severity]]


def _overlap(a0, a1, b0, b1) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def episode_scores(true: list[tuple[int, int]], found: list[dict]) -> dict:
    """Episode-level overlap of findings with true intervals.

    >>> episode_scores([(0, 10), (20, 30)], [{"start_ns": 5, "end_ns": 12}, {"start_ns": 40, "end_ns": 50}])
    {'episodes': 2, 'hit': 1, 'findings': 2, 'on_truth': 1, 'true_s': 2e-08, 'overlap_s': 5e-09}
    """
    hit = sum(any(_overlap(s, e, f["start_ns"], f["end_ns"]) for f in found) for s, e in true)
    on_truth = sum(any(_overlap(s, e, f["start_ns"], f["end_ns"]) for s, e in true) for f in found)
    spans = merge((f["start_ns"], f["end_ns"]) for f in found)
    overlap = sum(_overlap(s, e, a, b) for s, e in true for a, b in spans)
    return {"episodes": len(true), "hit": hit, "findings": len(found), "on_truth": on_truth,
            "true_s": sum(e - s for s, e in true) / 1e9, "overlap_s": overlap / 1e9}


def contradictions(true: list[tuple[int, int]], findings: list[dict]) -> int:
    """Pairs of findings of contradictory kinds, on one target, overlapping each other inside a true episode.

    >>> f = [{"kind": "decode_starvation", "target": "a", "start_ns": 0, "end_ns": 10},
    ...      {"kind": "itl_high", "target": "a", "start_ns": 5, "end_ns": 15}]
    >>> contradictions([(0, 20)], f), contradictions([(12, 20)], f)
    (1, 0)
    """
    n = 0
    for s, e in true:
        inside = [f for f in findings if _overlap(s, e, f["start_ns"], f["end_ns"])]
        for i, a in enumerate(inside):
            for b in inside[i + 1:]:
                both = _overlap(max(s, a["start_ns"]), min(e, a["end_ns"]), b["start_ns"], b["end_ns"])
                if frozenset({a["kind"], b["kind"]}) in CONTRADICTORY and a.get("target") == b.get("target") and both:
                    n += 1
    return n


def raised_ns(finding: dict, window_ns: int) -> int:
    """When a live evaluation could first raise `finding`: its first window's end."""
    return int(finding["start_ns"]) + (int(window_ns) if finding["kind"] in WINDOW_START_KINDS else 0)


def times_to_detect(true: list[tuple[int, int]], found: list[dict], window_ns: int) -> list[float | None]:
    """Per true episode, seconds from its onset to the first finding raised for it (0 when one was
    already raised and still open), or None when no finding was raised by a window after its end.

    >>> times_to_detect([(10, 20), (100, 110)], [{"kind": "decode_starvation", "start_ns": 0, "end_ns": 30}], 15)
    [5e-09, None]
    """
    out = []
    for s, e in true:
        raised = [raised_ns(f, window_ns) for f in found
                  if f["end_ns"] >= s and raised_ns(f, window_ns) <= e + window_ns]
        out.append(max(min(raised) - s, 0) / 1e9 if raised else None)
    return out


def run_scores(rows: list[tuple[set, set]]) -> dict:
    """{kind: {precision, recall, tp, fp, fn}} over runs given as (true kinds, flagged kinds); NaN when undefined.

    >>> run_scores([({"kv_pressure"}, {"kv_pressure"}), (set(), {"kv_pressure"})])["kv_pressure"]["precision"]
    0.5
    """
    out = {}
    for kind in KINDS:
        tp = sum(kind in t and kind in f for t, f in rows)
        fp = sum(kind not in t and kind in f for t, f in rows)
        fn = sum(kind in t and kind not in f for t, f in rows)
        out[kind] = {"precision": tp / (tp + fp) if tp + fp else float("nan"),
                     "recall": tp / (tp + fn) if tp + fn else float("nan"), "tp": tp, "fp": fp, "fn": fn}
    return out
