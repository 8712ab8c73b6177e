"""Findings: one typed record per diagnosed problem, from the detector to the renderer.

The idea: a detector says *what* (kind, severity, window, target), *why* (evidence figures in base
units and a one-paragraph explanation) and *what to change* (vLLM flags with their expected effect).
Detectors return `list[Finding]`; `to_frame` gives the `findings` frame the figures shade, and
`stallscope.render.json` is the one serializer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pandas as pd

from stallscope.core.errors import InputError
from stallscope.core.schema import columns, empty, validate

SEVERITIES = ("info", "warning", "critical")


def severity_rank(severity: str) -> int:
    """0 for info, 1 warning, 2 critical; an unknown name is an InputError that names it."""
    try:
        return SEVERITIES.index(severity)
    except ValueError:
        raise InputError(f"unknown severity {severity!r}; choose one of {', '.join(SEVERITIES)}") from None


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem over one time window (ns).

    >>> f = Finding("kv_pressure", "warning", 0, 10, "a", {"kv_usage": 0.93}, "...", "--kv-cache-dtype fp8")
    >>> to_frame([f])["severity"].tolist()
    ['warning']
    """

    kind: str
    severity: str
    start_ns: int
    end_ns: int
    target: str = ""
    evidence: dict = field(default_factory=dict)
    explanation: str = ""
    recommendation: str = ""

    def __post_init__(self):
        severity_rank(self.severity)


def by_start(findings) -> list[Finding]:
    """`findings` sorted by (start_ns, kind), keeping the order of ties."""
    return sorted(findings, key=lambda f: (f.start_ns, f.kind))


def to_frame(findings) -> pd.DataFrame:
    """The `findings` frame (schema.FRAMES["findings"]) of a list of Finding, in the list's order."""
    if not findings:
        return empty("findings")
    df = pd.DataFrame([asdict(f) for f in findings], columns=columns("findings"))
    return validate(df.astype({"start_ns": "int64", "end_ns": "int64"}), "findings")
