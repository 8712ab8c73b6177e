"""Plotly figures for the dashboard pages: `ts, series, value` tables in, figures out.

Times arrive as int ns and are drawn as UTC datetimes. Every string that came from the data
(series names, targets, kinds) is HTML-escaped before plotly sees it, because plotly renders a
subset of HTML in names, hover text and annotations.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

SEVERITY_COLOUR = {"critical": "#c0392b", "warning": "#e67e22", "info": "#2e86c1"}
PHASE_COLOUR = {"prefill": "#e67e22", "decode": "#2e86c1"}
_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=40, b=40), height=320,
               legend=dict(orientation="h", y=-0.25))


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def _dt(ns) -> pd.DatetimeIndex:
    return pd.to_datetime(np.asarray(ns, dtype="int64"), unit="ns", utc=True)


def empty_figure(title: str, message: str) -> go.Figure:
    fig = go.Figure(layout=dict(title=esc(title), **_LAYOUT))
    fig.add_annotation(text=esc(message), showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def lines(frame: pd.DataFrame, title: str, ytitle: str, *, step: bool = False) -> go.Figure:
    """One line per `series` of a `ts, series, value` frame."""
    if frame.empty:
        return empty_figure(title, "no data for this metric")
    fig = go.Figure(layout=dict(title=esc(title), yaxis_title=esc(ytitle), **_LAYOUT))
    for name, g in frame.groupby("series", sort=True):
        fig.add_trace(go.Scattergl(x=_dt(g["ts"]), y=g["value"], name=esc(name), mode="lines",
                                   line_shape="hv" if step else "linear"))
    return fig


def shade(fig: go.Figure, spans, *, colour="#f5b041", label="prefill spike") -> go.Figure:
    """Shade `(start_ns, end_ns)` spans across the plot."""
    for i, (lo, hi) in enumerate(spans):
        fig.add_vrect(x0=_dt([lo])[0], x1=_dt([hi])[0], fillcolor=colour, opacity=0.18, line_width=0,
                      annotation_text=esc(label) if i == 0 else None, annotation_position="top left")
    return fig


def latency(quant: pd.DataFrame, title: str, *, slo_s: float | None = None, spans=()) -> go.Figure:
    """P50/P99 lines per series; the bucket each point falls in as a band; points above `slo_s` marked."""
    if quant.empty:
        return empty_figure(title, "no histogram samples for this metric")
    fig = go.Figure(layout=dict(title=esc(title), yaxis_title="seconds", **_LAYOUT))
    for (name, q), g in quant.groupby(["series", "q"], sort=True):
        x, label = _dt(g["ts"]), esc(f"P{q * 100:g} {name}")
        fig.add_trace(go.Scatter(x=x, y=g["upper"].replace(np.inf, np.nan), mode="lines", line_width=0,
                                 showlegend=False, hoverinfo="skip", legendgroup=label))
        fig.add_trace(go.Scatter(x=x, y=g["lower"], mode="lines", line_width=0, fill="tonexty",
                                 fillcolor="rgba(46,134,193,0.12)", name=f"bucket of {label}",
                                 hoverinfo="skip", legendgroup=label, showlegend=False))
        fig.add_trace(go.Scatter(
            x=x, y=g["value"], mode="lines", name=label, legendgroup=label,
            customdata=np.column_stack([g["lower"], g["upper"]]),
            hovertemplate="%{y:.3f} s (bucket %{customdata[0]:g}-%{customdata[1]:g} s)<extra>" + label + "</extra>"))
    if slo_s is not None:
        fig.add_hline(y=slo_s, line_dash="dot", line_color="#c0392b", annotation_text=f"SLO {slo_s:g} s")
        stalls = quant[(quant["q"] == quant["q"].max()) & (quant["value"] > slo_s)]
        if len(stalls):
            fig.add_trace(go.Scatter(x=_dt(stalls["ts"]), y=stalls["value"], mode="markers", name="stall",
                                     marker=dict(color="#c0392b", symbol="x", size=8)))
    return shade(fig, spans)


def findings_timeline(findings: pd.DataFrame) -> go.Figure:
    """One bar per finding from its start to its end, a row per kind, coloured by severity."""
    if findings.empty:
        return empty_figure("Findings timeline", "no findings")
    fig = go.Figure(layout=dict(title="Findings timeline", **_LAYOUT))
    for sev, g in findings.groupby("severity", sort=True):
        start = _dt(g["start_ns"])
        width_ms = (g["end_ns"] - g["start_ns"]).clip(lower=1_000_000).to_numpy() / 1e6
        fig.add_trace(go.Bar(base=start, x=width_ms, y=[esc(k) for k in g["kind"]], orientation="h",
                             name=esc(sev), marker_color=SEVERITY_COLOUR.get(sev, "#7f8c8d"),
                             hovertext=[esc(t) for t in g["target"]]))
    fig.update_xaxes(type="date")
    fig.update_layout(barmode="overlay")
    return fig


def steps_bars(steps: pd.DataFrame, title: str = "Engine steps") -> go.Figure:
    """A bar per step spanning its start..end, height = duration, prefill and decode coloured, stalls marked."""
    if steps.empty:
        return empty_figure(title, "no step trace: pass --run DIR with steps.jsonl, or --trace FILE")
    fig = go.Figure(layout=dict(title=esc(title), yaxis_title="step duration (ms)", bargap=0, **_LAYOUT))
    for phase, g in steps.groupby("phase", sort=True):
        dur_ms = g["dur_ns"].to_numpy() / 1e6
        fig.add_trace(go.Bar(
            x=_dt(g["start_ns"] + g["dur_ns"] // 2), y=dur_ms, width=np.maximum(dur_ms, 0.001),
            name=esc(phase), marker_color=PHASE_COLOUR.get(phase, "#7f8c8d"),
            customdata=np.column_stack([g["step"], g["num_prefill_tokens"].fillna(-1), g["num_decode_tokens"].fillna(-1)]),
            hovertemplate="step %{customdata[0]}: %{y:.1f} ms, prefill %{customdata[1]} tok, decode %{customdata[2]} tok"))
    stalls = steps[steps["stall"]]
    if len(stalls):
        fig.add_trace(go.Scatter(x=_dt(stalls["start_ns"] + stalls["dur_ns"] // 2), y=stalls["dur_ns"] / 1e6,
                                 mode="markers", name="stall", marker=dict(color="#c0392b", symbol="x", size=9)))
    fig.update_layout(xaxis=dict(rangeslider=dict(visible=True)), height=420)
    return fig


def roofline(roof: dict | None) -> go.Figure:
    """Log-log roofline: the compute roof, the bandwidth roof and measured operating points."""
    if not roof:
        return empty_figure("Roofline", "roofline needs GPU data (DCGM or NVML) of a known GPU model")
    peak, bw = float(roof["peak_flops"]), float(roof["peak_bw"])
    ridge = peak / bw
    x = np.logspace(-1, 4, 200)
    fig = go.Figure(layout=dict(title=esc(f"Roofline: {roof.get('gpu', '')}"), **_LAYOUT))
    fig.add_trace(go.Scatter(x=x, y=np.minimum(peak, bw * x), mode="lines", name=f"roof (ridge {ridge:.0f} FLOP/B)"))
    pts = roof["points"]
    fig.add_trace(go.Scatter(x=pts["intensity"], y=pts["flops"], mode="markers", name="measured",
                             text=[esc(s) for s in pts["series"]], marker=dict(size=9)))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(type="log", title="FLOP/s")
    return fig
