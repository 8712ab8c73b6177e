"""Latency: ITL and TTFT P50/P99 pooled per model (instance, engine on drill-down) with bucket bounds, prefill
spikes shaded, stalls marked."""

from __future__ import annotations

import dash
from dash import Input, Output, callback, dcc, html

from stallscope.dashboards import data, views
from stallscope.render import figures as figs

dash.register_page(__name__, path="/latency", name="Latency", order=1)

ITL = "vllm:inter_token_latency_seconds"
TTFT = "vllm:time_to_first_token_seconds"

layout = html.Div([
    views.grouping_control("latency-grouping"),
    html.P("Bands show the histogram bucket each quantile falls in: the true value lies inside it. "
           "Shaded spans: prompt-token rate above the prefill-load threshold.", className="note"),
    dcc.Graph(id="latency-itl"),
    dcc.Graph(id="latency-ttft"),
], className="page")


@callback(Output("latency-itl", "figure"), Output("latency-ttft", "figure"), Input("app-live", "n_intervals"),
          Input("latency-grouping", "value"))
def update(_tick, grouping="model"):
    src = data.current()
    t = src.thresholds
    spans = views.spans_above(src.rate("vllm:prompt_tokens_total"), float(t["prefill_tokens_rate_high"]))
    grouping = grouping or "model"
    itl = figs.latency(src.quantiles(ITL, grouping=grouping), "Inter-token latency (ITL) P50 / P99", slo_s=float(t["itl_slo_s"]), spans=spans)
    ttft = figs.latency(src.quantiles(TTFT, grouping=grouping), "Time to first token (TTFT) P50 / P99", slo_s=float(t["ttft_slo_s"]), spans=spans)
    return itl, ttft
