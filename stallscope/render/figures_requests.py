"""Plotly figures of the request-level views (`analyzers/request_views.py`), shared by the Dash page and the report.

The idea: a view's frame (`ts, group, series, value, bucket_lo, bucket_hi`) becomes one figure with a line per
(group, series), the same series Grafana's panel shows for the same PromQL; quantiles carry the bucket they
fall in as a band, latency views the SLO line from `rules/thresholds.yaml`; heatmaps show observations per
bucket per window. Strings from input pass through `esc`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from stallscope.render.figures import _figure, _dt, empty_figure, esc

_YTITLE = {"s": "seconds", "short": "", "reqps": "requests/s", "percentunit": "ratio"}
_DASH = {"P50": "dot", "P90": "dashdot", "P95": "dash", "P99": "solid", "mean": "longdash"}


def view_figure(frame: pd.DataFrame, view, *, slo_s: float | None = None) -> go.Figure:
    """A line per (group, series) of one view; quantile buckets as bands; the SLO line when given."""
    title = f"{view.title}" + (f" (vLLM: {view.vllm_panel})" if view.vllm_panel else "")
    if frame is None or frame.empty:
        return empty_figure(title, f"no samples of {view.metric}")
    fig = _figure(title, yaxis_title=_YTITLE.get(view.unit, ""), height=340)
    for (group, series), g in frame.groupby(["group", "series"], sort=True):
        x, label = _dt(g["ts"]), esc(f"{series} {group}")
        if g["bucket_lo"].notna().any():
            fig.add_trace(go.Scatter(x=x, y=g["bucket_hi"].replace(np.inf, np.nan).to_numpy(dtype=float), mode="lines",
                                     line_width=0, showlegend=False, hoverinfo="skip", legendgroup=label))
            fig.add_trace(go.Scatter(x=x, y=g["bucket_lo"].to_numpy(dtype=float), mode="lines", line_width=0,
                                     fill="tonexty", fillcolor="rgba(46,134,193,0.10)", showlegend=False,
                                     hoverinfo="skip", legendgroup=label))
        fig.add_trace(go.Scatter(x=x, y=g["value"].to_numpy(dtype=float), mode="lines", name=label, legendgroup=label,
                                 line=dict(dash=_DASH.get(str(series), "solid"))))
    if slo_s is not None:
        fig.add_hline(y=slo_s, line_dash="dot", line_color="#c0392b", annotation_text=f"SLO {slo_s:g} s")
    return fig


def heatmap_figure(hm: pd.DataFrame, view) -> go.Figure:
    """Observations per bucket (y: the bucket's upper bound) per window (x), as vLLM's length heatmaps."""
    title = f"{view.title}: requests per bucket"
    if hm is None or hm.empty:
        return empty_figure(title, f"no samples of {view.metric}_bucket")
    grid = hm.pivot_table(index="le", columns="ts", values="value", aggfunc="sum").sort_index()
    labels = [("+Inf" if np.isinf(le) else f"{le:g}") for le in grid.index]
    fig = _figure(title, yaxis_title="bucket (le)", height=340)
    fig.add_trace(go.Heatmap(x=_dt(grid.columns.to_numpy()), y=labels, z=grid.to_numpy(dtype=float),
                             colorscale="Spectral_r", colorbar=dict(title="requests")))
    fig.update_yaxes(type="category")
    return fig


def summary_rows(summary: pd.DataFrame, views) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the whole-run table: one row per (view, group), one column per series."""
    series = ["P50", "P90", "P95", "P99", "mean"]
    header = ["view", "group", *series, "other"]
    rows = []
    for v in views:
        part = summary[summary["view"] == v.key]
        for group, g in part.groupby("group", sort=True):
            texts = dict(zip(g["series"], g["text"]))
            other = ", ".join(f"{k}: {t}" for k, t in texts.items() if k not in series)
            rows.append([v.title, group, *(texts.get(s, "") for s in series), other])
    return header, rows
