"""KV cache: block usage, running and waiting requests, preemptions per second."""

from __future__ import annotations

import dash
from dash import Input, Output, callback, dcc, html

from stallscope.dashboards import data
from stallscope.render import figures as figs

dash.register_page(__name__, path="/kv-cache", name="KV cache", order=2)

layout = html.Div([
    html.Div([dcc.Graph(id="kv_cache-usage"), dcc.Graph(id="kv_cache-preemptions"),
              dcc.Graph(id="kv_cache-running"), dcc.Graph(id="kv_cache-waiting")], className="grid"),
], className="page")


@callback(Output("kv_cache-usage", "figure"), Output("kv_cache-running", "figure"),
          Output("kv_cache-waiting", "figure"), Output("kv_cache-preemptions", "figure"),
          Input("app-live", "n_intervals"))
def update(_tick):
    src = data.current()
    usage = figs.lines(src.gauge("vllm:kv_cache_usage_perc"), "KV-cache usage (blocks held / pool)", "ratio")
    usage.add_hline(y=float(src.thresholds["kv_usage_high"]), line_dash="dot", line_color="#c0392b",
                    annotation_text="pressure threshold")
    running = figs.lines(src.gauge("vllm:num_requests_running"), "Running requests", "requests", step=True)
    waiting = figs.lines(src.gauge("vllm:num_requests_waiting"), "Waiting requests", "requests", step=True)
    preempt = figs.lines(src.rate("vllm:num_preemptions_total"), "Preemptions", "per second")
    return usage, running, waiting, preempt
