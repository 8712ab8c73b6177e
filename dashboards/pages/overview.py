"""Overview: the findings (severity, explanation, recommendation), their timeline, and source health."""

from __future__ import annotations

import time

import dash
import pandas as pd
from dash import Input, Output, callback, dcc, html

from stallscope.dashboards import data
from stallscope.render import figures as figs

dash.register_page(__name__, path="/", name="Overview", order=0)

MAX_CARDS = 50  # the most severe first; the timeline above shows every finding

layout = html.Div([
    html.H2("Findings"),
    dcc.Graph(id="overview-timeline", style={"height": "260px"}),
    html.Div(id="overview-findings"),
    html.H2("Sources"),
    html.Div(id="overview-health"),
], className="page")


def _when(ns) -> str:
    return pd.Timestamp(int(ns), unit="ns", tz="UTC").strftime("%Y-%m-%d %H:%M:%S UTC")


def _figure_text(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple, dict)) and len(str(v)) > 80:
        return f"[{len(v)} items]"
    return str(v)


def _evidence(ev) -> str:
    return ", ".join(f"{k} = {_figure_text(v)}" for k, v in ev.items()) if isinstance(ev, dict) else ""


def finding_card(row) -> html.Div:
    return html.Div([
        html.Div([html.Span(row.severity, className="severity"), html.B(row.kind),
                  html.Span(f"  {row.target}  " if row.target else "  "),
                  html.Span(f"{_when(row.start_ns)} to {_when(row.end_ns)}", className="when")]),
        html.P(row.explanation, className="explanation"),
        html.P(["Recommendation: ", html.Code(row.recommendation)], className="recommendation"),
        html.Details([html.Summary("evidence"), html.Small(_evidence(row.evidence), className="evidence")]),
    ], className=f"finding {row.severity}")


def summary_line(found: pd.DataFrame) -> str:
    counts = found["severity"].value_counts()
    parts = [f"{counts[s]} {s}" for s in ("critical", "warning", "info") if s in counts]
    return f"{len(found)} findings: " + ", ".join(parts) if len(found) else "No findings."


def health_table(health: pd.DataFrame, now_ns: int) -> html.Table:
    head = html.Tr([html.Th(c) for c in ("target", "up", "last scrape", "age", "samples")])
    rows = []
    for r in health.itertuples(index=False):
        up = "unknown" if pd.isna(r.up) else ("up" if r.up >= 1 else "DOWN")
        rows.append(html.Tr([html.Td(r.target), html.Td(up), html.Td(_when(r.last_scrape_ns)),
                             html.Td(f"{(now_ns - r.last_scrape_ns) / 1e9:,.0f} s"), html.Td(f"{r.samples:,}")]))
    return html.Table([head, *rows], className="health")


@callback(Output("overview-findings", "children"), Output("overview-timeline", "figure"),
          Output("overview-health", "children"), Input("app-live", "n_intervals"))
def update(_tick):
    src = data.current()
    found = src.findings()
    rank = found["severity"].map({"critical": 0, "warning": 1, "info": 2}).fillna(3)
    ordered = found.assign(_rank=rank).sort_values(["_rank", "start_ns"], kind="stable")
    shown = ordered.head(MAX_CARDS)
    more = f" Showing the {MAX_CARDS} most severe; the timeline shows all." if len(found) > MAX_CARDS else ""
    cards = [html.P(summary_line(found) + more, id="overview-summary"),
             *(finding_card(r) for r in shown.itertuples(index=False))]
    health = src.health()
    table = health_table(health, time.time_ns()) if len(health) else html.P("No scrape samples in this source.")
    return cards, figs.findings_timeline(found), table
