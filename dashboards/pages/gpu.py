"""GPU: tensor versus DRAM activity, SM activity and power per GPU; a roofline with measured points."""

from __future__ import annotations

import dash
import pandas as pd
from dash import Input, Output, callback, dcc, html

from stallscope.dashboards import data, views
from stallscope.render import figures as figs

dash.register_page(__name__, path="/gpu", name="GPU", order=4)

layout = html.Div([
    html.P("Decode-dominated load reads weights and KV (DRAM active high) while tensor cores idle; "
           "prefill is the opposite.", className="note"),
    html.Div([dcc.Graph(id="gpu-tensor-dram"), dcc.Graph(id="gpu-roofline"),
              dcc.Graph(id="gpu-sm"), dcc.Graph(id="gpu-power")], className="grid"),
], className="page")


@callback(Output("gpu-tensor-dram", "figure"), Output("gpu-sm", "figure"), Output("gpu-power", "figure"),
          Output("gpu-roofline", "figure"), Input("app-live", "n_intervals"))
def update(_tick):
    src = data.current()
    both = pd.concat([src.gpu_metric(m).assign(series=lambda f, m=m: f["series"] + " " + m.split("_")[0])
                      for m in ("tensor_active", "dram_active")], ignore_index=True)
    tensor_dram = figs.lines(both, "Tensor vs DRAM active", "ratio of time")
    sm = figs.lines(src.gpu_metric("sm_active"), "SM active", "ratio of time")
    power = figs.lines(src.gpu_metric("power_w"), "Power", "W")
    roof = figs.page_roofline(src.memo(("roofline",), lambda: views.roofline(src.frames()["gpu"])))
    return tensor_dram, sm, power, roof
