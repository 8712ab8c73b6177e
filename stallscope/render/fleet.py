"""Fleet triage renderings: the ranked table (text, JSON), the heat map (replica x time, coloured by kind), the HTML.

Only layout of `analyzers.fleet.FleetReport`: the ranking, the episodes and the drilled-down findings are
computed below. The heat map is the figure the report and the dashboard's Fleet page share; a replica's
row is painted with the kind and severity of the episode covering each grid point.
Strings from labels are escaped in HTML; plotly's JSON escapes `<`, `>` and `/`.
"""

from __future__ import annotations

import datetime as dt
import io
import json

import numpy as np

from stallscope.analyzers.fleet import KINDS
from stallscope.analyzers.sources import iso
from stallscope.render.html import _CSS, _e, _findings_html, _table
from stallscope.render.json import finding_json, jsonable

# heat map codes (the episode's kind and severity; info counts as warning)
CODES = [("none", "#f4f4f4"), ("absent", "#9e9e9e"), ("kv_pressure warning", "#f6c667"),
         ("kv_pressure critical", "#e67e22"), ("stream_stall warning", "#90caf9"), ("stream_stall critical", "#1565c0"),
         ("decode_starvation warning", "#e57373"), ("decode_starvation critical", "#b71c1c")]
_CODE = {name: i for i, (name, _) in enumerate(CODES)}


def _hours(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def rows(report, top: int | None = None) -> list[dict]:
    """The ranked table as records: rank, replica, labels, time in episodes per kind, worst severity."""
    out = []
    for i, r in enumerate(report.replicas[:top] if top else report.replicas, 1):
        out.append({"rank": i, "replica": r.name, "labels": r.labels, "episode_s": r.episode_seconds,
                    "seconds": dict(r.seconds), "worst": r.worst, "kinds": r.kinds(),
                    "episodes": [{"kind": e.kind, "severity": e.severity, "start": iso(e.start_ns),
                                  "end": iso(e.end_ns), "start_ns": e.start_ns, "end_ns": e.end_ns}
                                 for e in r.episodes],
                    "drilled": [{"start": iso(a), "end": iso(b)} for a, b in r.drilled],
                    "findings": None if r.findings is None else [finding_json(f) for f in r.findings]})
    return out


def fleet_json(report) -> str:
    doc = {"fleet": {"path": report.path, "identity": list(report.identity), "start": iso(report.start_ns),
                     "end": iso(report.end_ns), "step_s": report.step_ns / 1e9, "window_s": report.window_ns / 1e9,
                     "replicas": len(report.replicas), "with_episodes": sum(r.episode_seconds > 0
                                                                            for r in report.replicas),
                     "stats": report.stats, "failures": report.failures},
           "ranking": rows(report)}
    return json.dumps(jsonable(doc), indent=2, default=str) + "\n"


def fleet_text(report, top: int = 15) -> str:
    """The query path and cost, the ranked table (replicas with episodes, at most `top`), the failures
    per replica group, and the drilled-down findings."""
    from rich.console import Console
    from rich.table import Table

    con = Console(record=True, file=io.StringIO(), width=160, highlight=False)
    s = report.stats
    con.print(f"fleet triage: {len(report.replicas)} replicas, {iso(report.start_ns)} - {iso(report.end_ns)}, "
              f"window {report.window_ns / 1e9:g} s, step {report.step_ns / 1e9:g} s; path: {report.path} "
              f"(replica = {', '.join(report.identity)}); {s.get('requests', 0)} queries in "
              f"{s.get('groups', 0)} groups, {s.get('samples', 0)} points, {s.get('bytes', 0) / 1e6:.1f} MB",
              markup=False)
    hot = [r for r in report.replicas if r.episode_seconds > 0 or r.seconds.get("absent")]
    table = Table(title=f"replicas by time in episodes ({len(hot)} of {len(report.replicas)} with any)")
    for c in ("#", "replica", "in episodes", "decode starvation", "stream stall", "kv pressure", "absent", "worst",
              "findings"):
        table.add_column(c)
    for i, r in enumerate(hot[:top], 1):
        table.add_row(str(i), r.name, _hours(r.episode_seconds),
                      *(_hours(r.seconds[k]) if r.seconds.get(k) else "-" for k in KINDS),
                      r.worst or "-", "-" if r.findings is None else str(len(r.findings)))
    con.print(table)
    for group, fail in report.failures.items():
        con.print(f"FAILED {group} ({len(fail['replicas'])} replicas): {fail['error']}", markup=False)
    for r in hot[:top]:
        for f in r.findings or []:
            con.print(f"{f.severity.upper()} {f.kind} on {r.name}  {iso(f.start_ns)} - {iso(f.end_ns)}", markup=False)
            con.print("  recommendation: " + f.recommendation, markup=False)
    return con.export_text()


def heat_codes(report, rows_max: int = 200) -> tuple[list[str], np.ndarray]:
    """(replica names in rank order, codes (R, T)) for the first `rows_max` replicas: each grid point painted
    with the kind and severity of the episode covering it (decode starvation over stream stalls over KV
    pressure over absence)."""
    replicas = report.replicas[:rows_max]
    grid = report.grid()
    z = np.zeros((len(replicas), len(grid)))
    for i, r in enumerate(replicas):
        for e in r.episodes:
            sev = "critical" if e.severity == "critical" else "warning"
            code = _CODE["absent"] if e.kind == "absent" else _CODE[f"{e.kind} {sev}"]
            span = (grid >= e.start_ns) & (grid <= e.end_ns)
            z[i, span] = np.maximum(z[i, span], code)
    return [r.name for r in replicas], z


def heatmap_figure(report, rows_max: int = 200):
    """Plotly heat map: one row per replica (rank order, top first), one column per grid point."""
    import plotly.graph_objects as go

    names, z = heat_codes(report, rows_max)
    times = [dt.datetime.fromtimestamp(t / 1e9, dt.timezone.utc) for t in report.grid()]
    k = len(CODES)
    scale = [[edge, color] for i, (_, color) in enumerate(CODES) for edge in (i / k, (i + 1) / k)]
    fig = go.Figure(go.Heatmap(z=z, x=times, y=names, zmin=-0.5, zmax=k - 0.5, colorscale=scale,
                               colorbar={"tickvals": list(range(k)), "ticktext": [c for c, _ in CODES]},
                               hovertemplate="%{y}<br>%{x}<extra></extra>"))
    fig.update_layout(title="fleet: replica x time, coloured by kind", height=max(300, 18 * len(names) + 140),
                      yaxis={"autorange": "reversed", "type": "category"}, margin={"l": 260})
    return fig


def fleet_html(report, top: int = 15, title: str = "stallscope fleet triage") -> str:
    from plotly.offline import get_plotlyjs

    s = report.stats
    parts = [f"<h1>{_e(title)}</h1>",
             f"<p>{len(report.replicas)} replicas from {_e(iso(report.start_ns))} to {_e(iso(report.end_ns))}; "
             f"window {report.window_ns / 1e9:g} s, step {report.step_ns / 1e9:g} s. Query path: "
             f"<b>{_e(report.path)}</b> (a replica is <code>{_e(', '.join(report.identity))}</code>); "
             f"{_e(s.get('requests', 0))} queries, {_e(s.get('samples', 0))} points, "
             f"{_e(round(s.get('bytes', 0) / 1e6, 1))} MB.</p>"]
    if report.failures:
        parts.append("<h2>Failed replica groups</h2>")
        parts.append(_table(["group", "replicas", "error"], [[g, len(f["replicas"]), f["error"]]
                                                             for g, f in report.failures.items()]))
    parts.append("<h2>Heat map</h2>")
    parts.append(heatmap_figure(report).to_html(full_html=False, include_plotlyjs=False))
    parts.append("<h2>Ranking</h2>")
    parts.append(_table(["#", "replica", "in episodes", "decode starvation", "stream stall", "kv pressure", "absent",
                         "worst"],
                        [[r["rank"], r["replica"], _hours(r["episode_s"]),
                          *(_hours(r["seconds"][k]) if r["seconds"].get(k) else "-" for k in KINDS), r["worst"] or "-"]
                         for r in rows(report, top)]))
    for r in report.replicas[:top]:
        if r.findings is not None:
            parts.append(f"<h2>Findings on {_e(r.name)} ({len(r.findings)})</h2>")
            parts.append(_findings_html(r.findings))
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}'
            f"</title><style>{_CSS}</style><script type=\"text/javascript\">{get_plotlyjs()}</script></head>"
            f"<body>{body}</body></html>\n")
