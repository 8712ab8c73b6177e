"""The What-if page's figure: predicted latency and throughput against `--max-num-batched-tokens`.

Frames in (the `predictions` frame of stallscope.analyzers.whatif.predict), a figure out; budgets sit
on a log2 axis, chunked prefill off is a separate marker at the right, the ITL SLO is a dashed line
and the selected budget a vertical one.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from stallscope.render.figures import _PAGE_LAYOUT, esc

CURVES = [("itl_p99_s", "ITL P99"), ("itl_p50_s", "ITL P50"), ("ttft_long_p99_s", "TTFT P99, long prompts"),
          ("ttft_short_p99_s", "TTFT P99, short prompts")]


def whatif_curves(preds: pd.DataFrame, *, slo_s: float, selected: int | None = None,
                  recommended: int | None = None) -> go.Figure:
    """Latencies (s, log axis) and output tokens/s per budget; markers for chunking off."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.update_layout(**{**_PAGE_LAYOUT, "height": 420, "title": esc("Predicted per --max-num-batched-tokens")})
    chunked = preds[preds["enable_chunked_prefill"]].sort_values("max_num_batched_tokens")
    off = preds[~preds["enable_chunked_prefill"]]
    x = chunked["max_num_batched_tokens"].astype(float)
    for col, label in CURVES:
        fig.add_trace(go.Scatter(x=x, y=chunked[col], mode="lines+markers", name=esc(label),
                                 hovertemplate="budget %{x:.0f}: %{y:.3f} s"), secondary_y=False)
    if "slowest_step_s" in chunked and chunked["slowest_step_s"].notna().any():
        # the longest freeze a stream sees at each budget: ITL P99 cannot show it when long prompts are rare
        fig.add_trace(go.Scatter(x=x, y=chunked["slowest_step_s"], mode="lines+markers",
                                 name="slowest long-prompt step", line=dict(dash="dash"),
                                 hovertemplate="budget %{x:.0f}: %{y:.3f} s"), secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=chunked["output_tok_s"], mode="lines+markers", name="output tok/s",
                             line=dict(dash="dot"), hovertemplate="budget %{x:.0f}: %{y:.1f} tok/s"), secondary_y=True)
    if len(off):
        xo = [float(x.max() * 2 if len(x) else 1)] * len(off)
        fig.add_trace(go.Scatter(x=xo, y=off["itl_p99_s"], mode="markers", name="ITL P99, chunking off",
                                 marker=dict(symbol="x", size=11, color="#c0392b"),
                                 hovertemplate="chunked prefill off: %{y:.3f} s"), secondary_y=False)
    fig.add_hline(y=slo_s, line_dash="dash", line_color="#c0392b", annotation_text=esc(f"ITL SLO {slo_s:g} s"))
    if selected is not None:
        fig.add_vline(x=float(selected), line_color="#7f8c8d", annotation_text=esc(f"selected {selected}"))
    if recommended is not None:
        fig.add_vline(x=float(recommended), line_dash="dot", line_color="#27ae60",
                      annotation_text=esc(f"recommended {recommended}"), annotation_position="bottom right")
    fig.update_xaxes(type="log", title="--max-num-batched-tokens (x at the right: chunked prefill off)",
                     tickvals=list(x) + ([xo[0]] if len(off) else []),
                     ticktext=[str(int(v)) for v in x] + (["off"] if len(off) else []))
    fig.update_yaxes(type="log", title="seconds", secondary_y=False)
    fig.update_yaxes(title="output tokens/s", secondary_y=True, rangemode="tozero")
    return fig
