"""The standalone `analyze --html` report: one self-contained HTML file (plotly.js inlined, no network).

The idea: the report is a rendering of the analysis result and nothing more. Sections: sources,
whole-run quantiles (printed no finer than their bucket), findings (explanation, evidence,
recommendation), the request-level views (whole-run table and a figure per view, as the Dash Requests
page), then the evidence on one timeline: ITL/TTFT P50/P99 with prefill spikes and findings
shaded; KV usage, waiting, running and preemptions; the roofline when GPU data exists. Every string
from the input is HTML-escaped here or in `dashboards.figures`; plotly's JSON escapes `<`, `>` and `/`.
Plotting lives in `stallscope.render.figures`; this module only assembles.
"""

from __future__ import annotations

import datetime as dt
import html
import json

from stallscope.render.json import jsonable

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1200px;color:#222}
h1{font-size:1.5em} h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table.t{border-collapse:collapse;margin:8px 0} table.t td,table.t th{border:1px solid #ddd;padding:4px 8px;text-align:left}
.finding{border-left:6px solid #999;padding:6px 12px;margin:10px 0;background:#fafafa}
.critical{border-color:#c0392b} .warning{border-color:#e67e22} .info{border-color:#2980b9}
code{background:#f2f2f2;padding:1px 3px} pre{white-space:pre-wrap;font-size:0.85em;background:#f7f7f7;padding:6px}
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _iso(ns) -> str:
    try:
        return dt.datetime.fromtimestamp(int(ns) / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ns)


def _md_code(text: str) -> str:
    """Escape, then turn `backticks` into <code> (the only markup recommendations use)."""
    parts = _e(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _table(header, rows) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="t"><tr>{head}</tr>{body}</table>'


def _findings_html(findings) -> str:
    if not findings:
        return "<p>No findings.</p>"
    out = []
    for f in findings:
        evidence = json.dumps(jsonable(f.evidence), indent=1, default=str)
        out.append(
            f'<div class="finding {f.severity}"><b>{_e(f.kind)}</b> ({_e(f.severity)})'
            f' on <b>{_e(f.target or "all")}</b>, {_e(_iso(f.start_ns))} to {_e(_iso(f.end_ns))}'
            f'<p>{_md_code(f.explanation)}</p>'
            f'<p><b>Recommendation:</b> {_md_code(f.recommendation)}</p>'
            f'<details><summary>evidence</summary><pre>{_e(evidence)}</pre></details></div>')
    return "\n".join(out)


def _request_views_html(views: dict, th: dict) -> list[str]:
    """The request-level views: the whole-run table, then a figure per view (the Dash Requests page's)."""
    if not views:
        return []
    from stallscope.analyzers import request_views as RV
    from stallscope.render import figures_requests as FR

    header, rows = FR.summary_rows(views["summary"], RV.VIEWS)
    out = ["<h2>Request-level views</h2>",
           f"<p>Pooled per model; the PromQL of each is in docs/grafana.md. Whole run: each expression evaluated "
           f"once over the run; figures: windows of {views.get('window_s', 0):g} s.</p>", _table(header, rows)]
    figs = [FR.view_figure(views["series"].get(v.key), v, slo_s=th.get(v.slo) if v.slo else None)
            for v in RV.VIEWS if len(views["series"].get(v.key, ()))]
    figs += [FR.heatmap_figure(hm, RV.BY_KEY[k]) for k, hm in views.get("heatmaps", {}).items() if len(hm)]
    return out + [f.to_html(full_html=False, include_plotlyjs=False) for f in figs]


def render_html(report, *, findings=None, title: str = "stallscope analysis") -> str:
    """HTML text of a stallscope.analyzers.diagnose.Report. `findings` (default: the report's) are the
    findings listed, e.g. with an Nsight export's too; the timeline shades the report's own."""
    from plotly.offline import get_plotlyjs

    from stallscope.render import figures

    th = report.thresholds or {}
    findings = report.findings if findings is None else findings
    parts = [f"<h1>{_e(title)}</h1>",
             f"<p>Generated {_e(dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M:%S UTC'))} by "
             "<code>stallscope analyze</code>. Quantiles follow PromQL's histogram_quantile and are shown as "
             "the bucket they fall in.</p>", "<h2>Sources</h2>"]
    srcs = report.sources
    parts.append(_table(["name", "source", "samples", "gpu rows", "steps", "from", "to"],
                        [[k, v.get("source", ""), v.get("samples", 0), v.get("gpu", 0), v.get("steps", 0),
                          v.get("start", ""), v.get("end", "")] for k, v in srcs.items()]))
    parts.append("<h2>Whole-run quantiles per diagnosed target</h2>")
    q = report.quantiles
    parts.append(_table(["target", "ITL P50", "ITL P99", "TTFT P50", "TTFT P99", "stream time in ITL gaps > SLO"],
                        [[t, *(v.get(k, {}).get("text", "n/a") for k in ("itl_p50", "itl_p99", "ttft_p50",
                                                                          "ttft_p99", "itl_time_above_slo"))]
                         for t, v in q.items()]))
    parts += _request_views_html(getattr(report, "request_views", None) or {}, th)
    parts.append(f"<h2>Findings ({len(findings)})</h2>")
    parts.append(_findings_html(findings))
    figs = []
    sig = report.signals
    if sig is not None and len(sig):
        ff = report.findings_frame()
        figs.append(figures.latency_figure(sig, ff, slo_s=th.get("itl_slo_s")))
        figs.append(figures.kv_figure(sig, ff, kv_high=th.get("kv_usage_high")))
    if report.roofline:
        figs.append(figures.roofline_figure(report.roofline))
    if figs:
        parts.append("<h2>Timeline</h2>")
        parts += [f.to_html(full_html=False, include_plotlyjs=False) for f in figs]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}'
            f"</title><style>{_CSS}</style><script type=\"text/javascript\">{get_plotlyjs()}</script></head>"
            f"<body>{body}</body></html>\n")

