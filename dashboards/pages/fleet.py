"""Fleet: every replica of a Prometheus source as a heat map (replica x time, coloured by kind), ranked.

The triage is `stallscope.rules.fleet_triage` (PromQL push-down, docs/fleet.md), drawn with the report's
own figure (`stallscope.render.fleet.heatmap_figure`). Clicking a replica's row focuses the data source on
that replica and opens its Latency page; the KV cache page then shows the same replica.
"""

from __future__ import annotations

import dash
from dash import Input, Output, callback, dcc, html

from stallscope.dashboards import data
from stallscope.render import fleet as render

dash.register_page(__name__, path="/fleet", name="Fleet", order=7)

layout = html.Div([
    dcc.Location(id="fleet-nav", refresh=True),
    html.P("One row per replica, most time in episodes first; colour: the kind and severity of each window. "
           "Click a row to open that replica's Latency and KV cache pages.", className="note"),
    html.P(id="fleet-summary"),
    dcc.Graph(id="fleet-heat"),
], className="page")


@callback(Output("fleet-heat", "figure"), Output("fleet-summary", "children"), Input("app-live", "n_intervals"))
def update(_tick):
    report = data.current().fleet_report()
    if report is None:
        return {}, "Fleet triage needs a Prometheus source: `stallscope dashboard --prometheus URL --fleet`."
    hot = sum(r.episode_seconds > 0 for r in report.replicas)
    failed = f"; {len(report.failures)} replica groups failed" if report.failures else ""
    return render.heatmap_figure(report), (f"{len(report.replicas)} replicas, {hot} with episodes; query path: "
                                           f"{report.path}{failed}.")


@callback(Output("fleet-nav", "href"), Input("fleet-heat", "clickData"), prevent_initial_call=True)
def open_replica(click):
    """Focus the clicked replica and go to its Latency page."""
    src = data.current()
    report = src.fleet_report()
    points = (click or {}).get("points") or []
    if report is None or not points:
        return dash.no_update
    name = points[0].get("y")
    replica = next((r for r in report.replicas if r.name == name), None)
    if replica is None:
        return dash.no_update
    src.focus(replica.labels)
    return "/latency"
