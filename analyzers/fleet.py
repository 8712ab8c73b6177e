"""Fleet triage: episodes per replica from the server-evaluated window tests, and the ranking.

The idea: the server answers, per replica and grid point, whether the window is in a decode-starvation or
a KV-pressure window (value = severity, 2 critical or 1 warning; `rules/fleet.py`'s `episode_exprs`, the
detectors' tests and thresholds) and how many scrapes it holds. Here the points become episodes with the
detectors' own merging (`signals.episodes`):

- `decode_starvation`: flagged windows merge while their windows overlap (gap <= window / step);
- `kv_pressure`: at least two consecutive windows, dips shorter than a window do not split;
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

KINDS = ("decode_starvation", "kv_pressure", "absent")
SEVERITY = {2: "critical", 1: "warning"}


@dataclass(frozen=True)
class Episode:
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
    masks: dict = field(default_factory=dict)  # {replica name: {kind: severity per grid point (0 = none)}}
    thresholds: dict = field(default_factory=dict)

    def grid(self) -> np.ndarray:
        return np.arange(self.start_ns, self.end_ns + 1, self.step_ns, dtype=np.int64)


def replica_episodes(masks: dict[str, np.ndarray], ts: np.ndarray, window_ns: int, step_ns: int) -> list[Episode]:
    """Episodes of one replica from {kind: severity per grid point (0 or NaN = none)}."""
    gap = max(0, int(window_ns // step_ns))
    rules = {"decode_starvation": dict(min_len=1, merge_gap=gap), "kv_pressure": dict(min_len=2, merge_gap=gap),
             "absent": dict(min_len=1, merge_gap=0)}
    out = []
    for kind in KINDS:
        sev = np.nan_to_num(np.asarray(masks.get(kind, np.zeros(len(ts))), dtype=float))
        for i, j in episodes(sev > 0, **rules[kind]):
            out.append(Episode(kind, SEVERITY[2 if sev[i:j + 1].max() >= 2 else 1], int(ts[i]), int(ts[j])))
    return out


def seconds_by_kind(eps: list[Episode], step_ns: int) -> dict[str, float]:
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


def drill_windows(eps: list[Episode], window_ns: int, start_ns: int, end_ns: int, *, join_ns: int = 1800 * 10**9,
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
