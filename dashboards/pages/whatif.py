"""What-if: chunk-budget simulation; says "not available" until `stallscope.analyzers.whatif` exists."""

from __future__ import annotations

import importlib.util

import dash
from dash import Input, Output, callback, html

from stallscope.dashboards import data

dash.register_page(__name__, path="/whatif", name="What-if", order=5)

layout = html.Div([html.H2("What-if: chunk budgets"), html.Div(id="whatif-body")], className="page")


def available() -> bool:
    return importlib.util.find_spec("stallscope.analyzers.whatif") is not None


@callback(Output("whatif-body", "children"), Input("app-live", "n_intervals"))
def update(_tick):
    if not available():
        return html.P("What-if simulation is not available in this build (stallscope.analyzers.whatif "
                      "is not installed).", id="whatif-unavailable")
    steps = data.current().steps(max_bars=10**12)
    return html.P(f"What-if simulation is installed; {len(steps):,} recorded steps available. "
                  "Run `stallscope whatif` for recommendations.", id="whatif-ready")
