"""Trace: engine steps as bars, prefill and decode coloured, stalls marked; zooming re-queries the range."""

from __future__ import annotations

import dash
import pandas as pd
from dash import Input, Output, State, callback, dcc, html

from stallscope.dashboards import data
from stallscope.render import figures as figs

dash.register_page(__name__, path="/trace", name="Trace", order=5)

layout = html.Div([
    html.P("Each bar is one engine step: its width is the step's wall time, its height the same in ms. "
           "Zoom in to see every step of a range.", className="note"),
    dcc.Dropdown(id="trace-arm", clearable=False, placeholder="arm", style={"maxWidth": "240px"}),
    html.Div(id="trace-summary"),
    dcc.Graph(id="trace-steps", config={"scrollZoom": True}),
], className="page")


def zoom_range(relayout: dict | None) -> tuple[int | None, int | None]:
    """The x range (ns) a plotly relayout event asks for; (None, None) for autorange or no zoom."""
    if not relayout or relayout.get("xaxis.autorange"):
        return None, None
    lo = relayout.get("xaxis.range[0]") or (relayout.get("xaxis.range") or [None])[0]
    hi = relayout.get("xaxis.range[1]") or (relayout.get("xaxis.range") or [None, None])[1]
    if lo is None or hi is None:
        return None, None
    return int(pd.Timestamp(lo, tz="UTC").value), int(pd.Timestamp(hi, tz="UTC").value)


@callback(Output("trace-arm", "options"), Output("trace-arm", "value"), Input("app-live", "n_intervals"),
          State("trace-arm", "value"))
def arms(_tick, chosen):
    """The arms a repro run's steps came from; the first one until the user picks another."""
    names = data.current().step_targets()
    return [{"label": n, "value": n} for n in names], (chosen if chosen in names else (names[0] if names else None))


@callback(Output("trace-steps", "figure"), Output("trace-summary", "children"),
          Input("trace-steps", "relayoutData"), Input("trace-arm", "value"), Input("app-live", "n_intervals"))
def update(relayout, arm, _tick):
    src = data.current()
    start, end = zoom_range(relayout)
    steps = src.steps(start, end, target=arm)
    fig = figs.steps_bars(steps, f"Engine steps of arm {arm}" if arm else "Engine steps")
    if start is not None:
        fig.update_xaxes(range=[start / 1e6, end / 1e6])
    total = src.steps(max_bars=10**12, target=arm) if start is None else steps
    summary = (f"{len(total):,} steps shown of this range, {int(total['stall'].sum()) if len(total) else 0} stalls, "
               f"{int((total['phase'] == 'prefill').sum()) if len(total) else 0} with prefill")
    return fig, summary
