"""Requests: vLLM's request-level views (E2E, TTFT, ITL, queue, prefill, decode, lengths, finish reasons, request
rate, throughput, prefix-cache hit rate), P50/P90/P95/P99 and mean, pooled per model; instance and engine on
drill-down. The numbers are `analyzers/request_views`, the same expressions the Grafana dashboard runs."""

from __future__ import annotations

import dash
from dash import Input, Output, callback, dcc, html

from stallscope.analyzers import request_views as RV
from stallscope.dashboards import data, views
from stallscope.render import figures_requests as figs

dash.register_page(__name__, path="/requests", name="Requests", order=3)

GRAPHS = [v.key for v in RV.VIEWS] + [f"{v.key}-heatmap" for v in RV.VIEWS if v.heatmap]

layout = html.Div([
    views.grouping_control("requests-grouping"),
    dcc.Dropdown(id="requests-model", multi=True, placeholder="all models (model_name)", className="note"),
    html.P("Each panel is the PromQL of `stallscope grafana` evaluated here (docs/grafana.md); bands show the "
           "histogram bucket each quantile falls in.", className="note"),
    html.Div([dcc.Graph(id=f"requests-{key}") for key in GRAPHS], className="grid"),
], className="page")


@callback(*(Output(f"requests-{key}", "figure") for key in GRAPHS), Output("requests-model", "options"),
          Input("requests-grouping", "value"), Input("app-live", "n_intervals"), Input("requests-model", "value"))
def update(grouping, _tick, models=None):
    src = data.current()
    computed = src.request_views(grouping or "model", tuple(models or ()))
    series, heatmaps = computed.get("series", {}), computed.get("heatmaps", {})
    out = [figs.view_figure(series.get(v.key), v, slo_s=float(src.thresholds[v.slo]) if v.slo else None)
           for v in RV.VIEWS]
    return (*out, *(figs.heatmap_figure(heatmaps.get(v.key), v) for v in RV.VIEWS if v.heatmap),
            [{"label": m, "value": m} for m in src.model_names()])
