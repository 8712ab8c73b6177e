"""Fleet triage: episodes per replica from the server-evaluated window tests, and the ranking.

The idea: the server answers, per replica and grid point, whether streams are impaired (a severity code:
3 critical, 2 missed the SLO or frozen, 1 interference; analyzers/episodes.py's window states), whether
prefill load was there, whether the KV cache was under pressure (3 critical, 2 warning, 1 near full only;
kv_pressure.window_codes), and how many scrapes the window holds (`rules/fleet.py`'s `episode_exprs`). Here the
points become
episodes with the detectors' own merging (`signals.episodes`):

- impaired windows at most one window apart form one episode (episodes.find); it is `decode_starvation`
  when prefill load shows in it or within one window after it (a prompt is counted when its prefill
  completes), else `stream_stall` (the drill-down's finding names its cause: preemption, prefill chunks,
  slow decode or a stuck engine);
- `kv_pressure`: at least two consecutive windows, dips shorter than a window do not split, and the pool ran
  out in one of them (code 2 or 3);
- `absent`: grid points where a replica that the fleet knows reported nothing (dead, or not scraped) while
  the fleet's first sample was already in.

Replicas rank by time in episodes (seconds, every kind but `absent` first), then worst severity, then name.
The top K are drilled down with the one `diagnose()` on their raw series (`Replica.findings`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stallscope.analyzers.finding import severity_rank
from stallscope.analyzers.signals import episodes

KINDS = ("decode_starvation", "stream_stall", "kv_pressure", "absent")
SEVERITY = {3: "critical", 2: "warning", 1: "info"}


@dataclass(frozen=True)
class FlaggedRun:
    """One run of flagged grid points of one kind: the triage's reading, not a diagnosed episode
    (analyzers/episodes.Episode, with its cause, comes from the drill-down)."""

    kind: str
    severity: str
    start_ns: int
    end_ns: int


@dataclass
class Replica:
    """One replica's triage: its identity labels, episodes, seconds per kind; findings once drilled down."""

    name: str
    labels: dict
    episodes: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)
    findings: list | None = None
    drilled: list = field(default_factory=list)  # [(start_ns, end_ns)] of the raw pulls

    @property
    def episode_seconds(self) -> float:
        return float(sum(v for k, v in self.seconds.items() if k != "absent"))

    @property
    def worst(self) -> str | None:
        sev = [e.severity for e in self.episodes]
        return max(sev, key=severity_rank) if sev else None

    def kinds(self) -> list[str]:
        return [k for k in KINDS if self.seconds.get(k)]


@dataclass
class FleetReport:
    """The ranked replicas and how they were obtained (path, grid, query cost, per-group failures)."""

    replicas: list
    start_ns: int
    end_ns: int
    step_ns: int
    window_ns: int
    identity: tuple
    path: str
    failures: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    masks: dict = field(default_factory=dict)  # {replica: {test: value per grid point (0 = none)}}
    thresholds: dict = field(default_factory=dict)

    def grid(self) -> np.ndarray:
        return np.arange(self.start_ns, self.end_ns + 1, self.step_ns, dtype=np.int64)


def replica_episodes(masks: dict[str, np.ndarray], ts: np.ndarray, window_ns: int, step_ns: int) -> list[FlaggedRun]:
    """Episodes of one replica from {"impaired": code, "load": > 0 where prefill load, "kv_pressure": code,
    "absent": 1} per grid point (0 or NaN = none); see the module docstring."""
    n, gap = len(ts), max(1, int(window_ns // step_ns))

    def col(name):
        return np.nan_to_num(np.asarray(masks.get(name, np.zeros(n)), dtype=float))
    impaired, load = col("impaired"), col("load") > 0
    out = []
    for i, j in episodes(impaired > 0, merge_gap=gap):
        kind = "decode_starvation" if load[i:j + 1 + gap].any() else "stream_stall"
        out.append(FlaggedRun(kind, SEVERITY[int(impaired[i:j + 1].max())], int(ts[i]), int(ts[j])))
    kv = col("kv_pressure")
    for i, j in episodes(kv > 0, min_len=2, merge_gap=gap):
        if kv[i:j + 1].max() >= 2:   # a queue near a pool that never ran out is the drill-down's kv_near_full
            out.append(FlaggedRun("kv_pressure", SEVERITY[int(kv[i:j + 1].max())], int(ts[i]), int(ts[j])))
    for i, j in episodes(col("absent") > 0):
        out.append(FlaggedRun("absent", "warning", int(ts[i]), int(ts[j])))
    return out


def seconds_by_kind(eps: list[FlaggedRun], step_ns: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for e in eps:
        out[e.kind] = out.get(e.kind, 0.0) + (e.end_ns - e.start_ns + step_ns) / 1e9
    return out


def rank(replicas: list[Replica]) -> list[Replica]:
    """Most time in episodes first, then the worst severity, then absent time, then the name."""
    return sorted(replicas, key=lambda r: (-r.episode_seconds, -severity_rank(r.worst) if r.worst else 0,
                                           -r.seconds.get("absent", 0.0), r.name))


def triage(masks: dict[str, dict[str, np.ndarray]], labels: dict[str, dict], ts: np.ndarray, window_ns: int,
           step_ns: int) -> list[Replica]:
    """The ranked replicas of {replica: {kind: severity per grid point}}."""
    out = []
    for name, by_kind in masks.items():
        eps = replica_episodes(by_kind, ts, window_ns, step_ns)
        out.append(Replica(name, labels.get(name, {}), eps, seconds_by_kind(eps, step_ns)))
    return rank(out)


def absent_mask(presence: np.ndarray, fleet_first: int) -> np.ndarray:
    """1 where a replica has no scrape at a grid point from the fleet's first reported point on."""
    p = np.nan_to_num(np.asarray(presence, dtype=float))
    out = (p <= 0).astype(float)
    out[:max(0, fleet_first)] = 0.0
    return out


def drill_windows(eps: list[FlaggedRun], window_ns: int, start_ns: int, end_ns: int, *, join_ns: int = 1800 * 10**9,
                  most: int = 3) -> list[tuple[int, int]]:
    """[(start, end)] (ns) of the raw pulls for a replica: its non-absent episodes joined when less than
    `join_ns` apart, padded by two windows before (the first window's data) and one after; the `most`
    longest, in time order."""
    spans: list[list[int]] = []
    for e in sorted((e for e in eps if e.kind != "absent"), key=lambda e: e.start_ns):
        if spans and e.start_ns - spans[-1][1] <= join_ns:
            spans[-1][1] = max(spans[-1][1], e.end_ns)
        else:
            spans.append([e.start_ns, e.end_ns])
    keep = sorted(sorted(spans, key=lambda s: s[0] - s[1])[:most])
    return [(max(start_ns, a - 2 * window_ns), min(end_ns, b + window_ns)) for a, b in keep]
