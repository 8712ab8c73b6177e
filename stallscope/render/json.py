"""The one serializer: findings and reports as JSON-ready records (`analyze --format json`, the HTML evidence).

A finding on the wall clock (metrics) carries its target and ISO start/end; one on a trace's own
clock (`--nsys`) carries neither. Non-finite floats become null and numpy numbers plain ones.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict

import numpy as np

from stallscope.analyzers.sources import iso


def jsonable(value):
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    return value


def finding_json(f, *, wall_clock: bool = True) -> dict:
    """One stallscope.analyzers.finding.Finding as a record."""
    out = {k: v for k, v in asdict(f).items() if wall_clock or k != "target"}
    out.update(start_ns=int(f.start_ns), end_ns=int(f.end_ns), evidence=jsonable(f.evidence))
    if wall_clock:
        out.update(start=iso(f.start_ns), end=iso(f.end_ns))
    return out


def request_views_json(views: dict) -> list[dict]:
    """The whole-run request-level views (analyzers/request_views.summary) as records, NaN as null."""
    summary = (views or {}).get("summary")
    if summary is None or not len(summary):
        return []
    return [jsonable(r) for r in summary.to_dict("records")]


def report_json(sections: dict, findings: list[dict]) -> str:
    """The `analyze --format json` document: every source's sections, then every finding's record."""
    return json.dumps({**sections, "findings": findings}, indent=2, default=str) + "\n"
