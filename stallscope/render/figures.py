"""Plotly figure helpers shared by the `analyze --html` report and the dashboard: frames in, figures out.

The idea: every figure takes the analyzers' tidy frames (the signals grid, the findings frame, a
roofline dict) and nothing else, so the report and the Dash pages draw the same evidence the same way.
Every string that comes from input (targets, labels, model names) passes through `esc` before it
reaches plotly, which renders a subset of HTML in titles and labels.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

KIND_COLOURS = {"decode_starvation": "rgba(231,76,60,0.18)", "itl_high": "rgba(241,196,15,0.22)",
                "kv_pressure": "rgba(142,68,173,0.18)", "kv_near_full": "rgba(142,68,173,0.07)",
                "scheduler_stall": "rgba(52,73,94,0.2)",
                "memory_bound_decode": "rgba(52,152,219,0.15)"}
_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=50, b=40), legend=dict(orientation="h", y=-0.12))


def esc(text) -> str:
    """HTML-escape a string from input before plotly sees it."""
    return html.escape(str(text), quote=True)


def _t(ns) -> pd.DatetimeIndex:
    return pd.to_datetime(np.asarray(ns, dtype="int64"), unit="ns", utc=True)


def _shade_findings(fig: go.Figure, findings: pd.DataFrame | None, kinds=None) -> None:
    if findings is None or not len(findings):
        return
    seen = set()
    for f in findings.itertuples():
        if kinds and f.kind not in kinds:
            continue
        colour = KIND_COLOURS.get(f.kind, "rgba(127,127,127,0.15)")
        fig.add_vrect(x0=_t([f.start_ns])[0], x1=_t([f.end_ns])[0], fillcolor=colour, line_width=0, layer="below")
        if f.kind not in seen:  # one legend entry per kind
            seen.add(f.kind)
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=esc(f"finding: {f.kind}"),
                                     marker=dict(size=12, color=colour.rsplit(",", 1)[0] + ",0.6)", symbol="square")))


def latency_figure(signals: pd.DataFrame, findings: pd.DataFrame | None = None, *, slo_s: float | None = None,
                   title: str = "Latency: ITL and TTFT quantiles, prefill load") -> go.Figure:
    """ITL P50/P99, TTFT P50/P99 and prompt tokens/s per target over time; findings shaded."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06, row_heights=[0.45, 0.3, 0.25],
                        subplot_titles=("inter-token latency (s)", "time to first token (s)",
                                        "prefill load: prompt tokens/s (bars) and long prefills"))
    for target, sig in signals.groupby("target", sort=True):
        name = esc(target or "all")
        x = _t(sig["ts"])
        for row, kind in ((1, "itl"), (2, "ttft")):
            for q, dash in (("p99", "solid"), ("p50", "dot")):
                fig.add_trace(go.Scatter(x=x, y=sig[f"{kind}_{q}"], mode="lines", line=dict(dash=dash),
                                         name=f"{name} {kind.upper()} {q.upper()}"), row=row, col=1)
        fig.add_trace(go.Bar(x=x, y=sig["prompt_rate"], name=f"{name} prompt tokens/s", opacity=0.6), row=3, col=1)
        spikes = sig[sig["long_prefill_rate"].fillna(0) > 0]
        if len(spikes):
            fig.add_trace(go.Scatter(x=_t(spikes["ts"]), y=spikes["prompt_rate"], mode="markers",
                                     marker=dict(symbol="triangle-up", size=9, color="#c0392b"),
                                     name=f"{name} long prefill completed"), row=3, col=1)
    if slo_s:
        fig.add_hline(y=slo_s, line=dict(color="#c0392b", dash="dash"), row=1, col=1,
                      annotation_text=f"ITL SLO {slo_s * 1e3:.0f} ms")
    _shade_findings(fig, findings, kinds={"decode_starvation", "itl_high"})
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_layout(title=esc(title), height=720, barmode="overlay", **_LAYOUT)
    return fig


def kv_figure(signals: pd.DataFrame, findings: pd.DataFrame | None = None, *, kv_high: float | None = None,
              title: str = "KV cache: usage, queue and preemptions") -> go.Figure:
    """KV usage (blocks), running/waiting requests and preemptions/s per target; KV findings shaded."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=("kv_cache_usage_perc (blocks, 0-1)", "requests running / waiting",
                                        "preemptions per second"))
    for target, sig in signals.groupby("target", sort=True):
        name = esc(target or "all")
        x = _t(sig["ts"])
        fig.add_trace(go.Scatter(x=x, y=sig["kv_usage"], mode="lines", name=f"{name} KV usage"), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=sig["running"], mode="lines", name=f"{name} running"), row=2, col=1)
        fig.add_trace(go.Scatter(x=x, y=sig["waiting"], mode="lines", line=dict(dash="dot"),
                                 name=f"{name} waiting"), row=2, col=1)
        fig.add_trace(go.Scatter(x=x, y=sig["preempt_rate"], mode="lines", name=f"{name} preemptions/s"),
                      row=3, col=1)
    if kv_high is not None:
        fig.add_hline(y=kv_high, line=dict(color="#8e44ad", dash="dash"), row=1, col=1,
                      annotation_text=f"near full at {kv_high:.0%}")
    _shade_findings(fig, findings, kinds={"kv_pressure", "kv_near_full", "scheduler_stall"})
    fig.update_layout(title=esc(title), height=640, **_LAYOUT)
    return fig


def roofline_figure(roof: dict, title: str | None = None) -> go.Figure:
    """Log-log roofline: min(peak, bandwidth x intensity), the ridge, and operating points.

    `roof` has `gpu`, `peak_flops`, `peak_bw` and `points` (frame: series, intensity, flops).
    """
    peak, bw = float(roof["peak_flops"]), float(roof["peak_bw"])
    ridge = peak / bw
    x = np.logspace(-1, max(4.0, np.log10(ridge) + 1), 200)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=np.minimum(peak, bw * x), mode="lines", name=f"roof (ridge {ridge:.0f} FLOP/B)",
                             line=dict(color="#2c3e50")))
    pts = roof.get("points")
    if pts is not None and len(pts):
        for series, part in pts.groupby("series", sort=True):
            fig.add_trace(go.Scatter(x=part["intensity"], y=part["flops"], mode="markers", name=esc(series),
                                     marker=dict(size=7, opacity=0.6)))
    fig.add_vline(x=ridge, line=dict(dash="dot", color="#7f8c8d"))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(type="log", title="FLOP/s")
    fig.update_layout(title=esc(title or f"Roofline: {roof.get('gpu', '')}"), height=480, **_LAYOUT)
    return fig


# --- the dashboard pages' figures ------------------------------------------------------------------
# `ts, series, value` tables (data.DataSource views) in, figures out. Times are drawn on a date axis
# as float ms since the epoch: numeric arrays skip plotly's per-element validation, which matters at 24 h.

SEVERITY_COLOUR = {"critical": "#c0392b", "warning": "#e67e22", "info": "#2e86c1"}
PHASE_COLOUR = {"prefill": "#e67e22", "decode": "#2e86c1"}
# template "none" plus a few colours: the stock templates cost ~60 ms of deep copies per figure.
_AXIS = dict(gridcolor="#e5e5e5", zerolinecolor="#cccccc", linecolor="#999999", automargin=True)
_PAGE_LAYOUT = dict(template="none", margin=dict(l=60, r=20, t=40, b=40), height=320, paper_bgcolor="white",
               plot_bgcolor="white", font=dict(family="system-ui, sans-serif", size=12),
               colorway=["#2e86c1", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#d4ac0d"],
               legend=dict(orientation="h", y=-0.25), xaxis=_AXIS, yaxis=_AXIS)


def _dt(ns) -> np.ndarray:
    """int ns -> float ms since the epoch, what a plotly date axis reads."""
    return np.asarray(ns, dtype="int64") / 1e6


def _figure(title: str, **layout) -> go.Figure:
    fig = go.Figure(layout={**_PAGE_LAYOUT, "title": esc(title), **layout})
    fig.update_xaxes(type="date")
    return fig


def empty_figure(title: str, message: str) -> go.Figure:
    fig = go.Figure(layout={**_PAGE_LAYOUT, "title": esc(title)})
    fig.add_annotation(text=esc(message), showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def lines(frame: pd.DataFrame, title: str, ytitle: str, *, step: bool = False) -> go.Figure:
    """One line per `series` of a `ts, series, value` frame."""
    if frame.empty:
        return empty_figure(title, "no data for this metric")
    fig = _figure(title, yaxis_title=esc(ytitle))
    fig.add_traces([go.Scatter(x=_dt(g["ts"]), y=g["value"].to_numpy(dtype=float), name=esc(name), mode="lines",
                               line_shape="hv" if step else "linear")
                    for name, g in frame.groupby("series", sort=True)])
    return fig


def shade(fig: go.Figure, spans, *, colour="rgba(245,176,65,0.25)", label="prefill spike") -> go.Figure:
    """Shade `(start_ns, end_ns)` spans across the plot: one filled trace on a hidden 0-1 axis, not a
    shape per span (plotly validates each shape, which is seconds for a day of spikes)."""
    if not len(spans):
        return fig
    xs, ys = [], []
    for lo, hi in spans:
        xs += [lo / 1e6, lo / 1e6, hi / 1e6, hi / 1e6, None]
        ys += [0, 1, 1, 0, None]
    fig.add_trace(go.Scatter(x=xs, y=ys, yaxis="y2", fill="toself", fillcolor=colour, mode="none",
                             name=esc(label), hoverinfo="skip"))
    fig.update_layout(yaxis2=dict(range=[0, 1], overlaying="y", visible=False, fixedrange=True))
    return fig


def latency(quant: pd.DataFrame, title: str, *, slo_s: float | None = None, spans=()) -> go.Figure:
    """P50/P99 lines per series; the bucket each point falls in as a band; points above `slo_s` marked."""
    if quant.empty:
        return empty_figure(title, "no histogram samples for this metric")
    fig = _figure(title, yaxis_title="seconds")
    for (name, q), g in quant.groupby(["series", "q"], sort=True):
        x, label = _dt(g["ts"]), esc(f"P{q * 100:g} {name}")
        fig.add_trace(go.Scatter(x=x, y=g["upper"].replace(np.inf, np.nan).to_numpy(dtype=float), mode="lines", line_width=0,
                                 showlegend=False, hoverinfo="skip", legendgroup=label))
        fig.add_trace(go.Scatter(x=x, y=g["lower"].to_numpy(dtype=float), mode="lines", line_width=0, fill="tonexty",
                                 fillcolor="rgba(46,134,193,0.12)", name=f"bucket of {label}",
                                 hoverinfo="skip", legendgroup=label, showlegend=False))
        fig.add_trace(go.Scatter(
            x=x, y=g["value"].to_numpy(dtype=float), mode="lines", name=label, legendgroup=label,
            customdata=np.column_stack([g["lower"], g["upper"]]),
            hovertemplate="%{y:.3f} s (bucket %{customdata[0]:g}-%{customdata[1]:g} s)<extra>" + label + "</extra>"))
    if slo_s is not None:
        fig.add_hline(y=slo_s, line_dash="dot", line_color="#c0392b", annotation_text=f"SLO {slo_s:g} s")
        stalls = quant[(quant["q"] == quant["q"].max()) & (quant["value"] > slo_s)]
        if len(stalls):
            fig.add_trace(go.Scatter(x=_dt(stalls["ts"]), y=stalls["value"].to_numpy(dtype=float), mode="markers",
                                     name="stall (P99 > SLO)", marker=dict(color="#c0392b", symbol="x-thin-open",
                                                                            size=6, line_width=1.5)))
    return shade(fig, spans)


def findings_timeline(findings: pd.DataFrame) -> go.Figure:
    """One bar per finding from its start to its end, a row per kind, coloured by severity."""
    if findings.empty:
        return empty_figure("Findings timeline", "no findings")
    fig = _figure("Findings timeline", barmode="overlay", height=260)
    for sev, g in findings.groupby("severity", sort=True):
        start = _dt(g["start_ns"])
        width_ms = (g["end_ns"] - g["start_ns"]).clip(lower=1_000_000).to_numpy() / 1e6
        fig.add_trace(go.Bar(base=start, x=width_ms, y=[esc(f"{k} {t}".strip()) for k, t in zip(g["kind"], g["target"])], orientation="h",
                             name=esc(sev), marker_color=SEVERITY_COLOUR.get(sev, "#7f8c8d"),
                             hovertext=[esc(t) for t in g["target"]]))
    return fig


def steps_bars(steps: pd.DataFrame, title: str = "Engine steps") -> go.Figure:
    """A bar per step spanning its start..end, height = duration, prefill and decode coloured, stalls marked."""
    if steps.empty:
        return empty_figure(title, "no step trace: pass --run DIR with steps.jsonl, or --trace FILE")
    fig = _figure(title, yaxis_title="step duration (ms)", bargap=0)
    for phase, g in steps.groupby("phase", sort=True):
        dur_ms = g["dur_ns"].to_numpy() / 1e6
        fig.add_trace(go.Bar(
            x=_dt(g["start_ns"] + g["dur_ns"] // 2), y=dur_ms, width=np.maximum(dur_ms, 0.001),
            name=esc(phase), marker_color=PHASE_COLOUR.get(phase, "#7f8c8d"),
            customdata=np.column_stack([g["step"], g["num_prefill_tokens"].fillna(-1), g["num_decode_tokens"].fillna(-1)]),
            hovertemplate="step %{customdata[0]}: %{y:.1f} ms, prefill %{customdata[1]} tok, decode %{customdata[2]} tok"))
    stalls = steps[steps["stall"]]
    if len(stalls):
        fig.add_trace(go.Scatter(x=_dt(stalls["start_ns"] + stalls["dur_ns"] // 2), y=stalls["dur_ns"].to_numpy() / 1e6,
                                 mode="markers", name="stall", marker=dict(color="#c0392b", symbol="x", size=9)))
    fig.update_layout(xaxis_rangeslider_visible=True, height=420)
    return fig


def page_roofline(roof: dict | None) -> go.Figure:
    """Log-log roofline: the compute roof, the bandwidth roof and measured operating points."""
    if not roof:
        return empty_figure("Roofline", "roofline needs GPU data (DCGM or NVML) of a known GPU model")
    peak, bw = float(roof["peak_flops"]), float(roof["peak_bw"])
    ridge = peak / bw
    x = np.logspace(-1, 4, 200)
    fig = go.Figure(layout={**_PAGE_LAYOUT, "title": esc(f"Roofline: {roof.get('gpu', '')}")})
    fig.add_trace(go.Scatter(x=x, y=np.minimum(peak, bw * x), mode="lines", name=f"roof (ridge {ridge:.0f} FLOP/B)"))
    pts = roof["points"]
    fig.add_traces([go.Scatter(x=g["intensity"].to_numpy(dtype=float), y=g["flops"].to_numpy(dtype=float),
                               mode="markers", name=esc(f"measured {name}"), marker=dict(size=8))
                    for name, g in pts.groupby("series", sort=True)])
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(type="log", title="FLOP/s")
    return fig
