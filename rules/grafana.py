"""The Grafana dashboard, generated with grafana-foundation-sdk's types from the thresholds and views the rules use.

The idea: nothing here is a number or a query of its own. Every request panel is a view of
`analyzers/request_views.VIEWS` and every query its `promql()` (the same expressions the Dash page and the
report evaluate), pooled per `model_name` with `$__rate_interval`; SLO lines and verdict colours come from
`rules/thresholds.yaml`; the verdict panels read the recording rules and the `ALERTS` of the alert rules that
`rules/render.py` writes from the same thresholds. Variables: `datasource`, `model_name`, `instance`,
`engine` (drill-down: pick one instance or engine and every panel narrows to it).

    >>> from stallscope.core.config import load_thresholds
    >>> doc = json.loads(to_json(build(load_thresholds())))
    >>> [v["name"] for v in doc["templating"]["list"]]
    ['datasource', 'model_name', 'instance', 'engine']
"""

from __future__ import annotations

import json

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, timeseries
from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as mc
from grafana_foundation_sdk.models import dashboard as md
from grafana_foundation_sdk.models import prometheus as mp

from stallscope.analyzers import request_views as RV
from stallscope.rules import render as R

DS = md.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = RV.SELECTOR
MODEL_SEL = 'model_name=~"$model_name",instance=~"$instance"'
VERDICT_ALERTS = ("VLLMDecodeStarvation", "VLLMKVCachePressure", "VLLMSchedulerStalled")
ANNOTATION_EXPR = f'ALERTS{{alertstate="firing",alertname=~"{"|".join(VERDICT_ALERTS)}",model_name=~"$model_name"}}'
DCGM = [("Tensor pipe active", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "percentunit", "tensor_active_low"),
        ("DRAM active", "DCGM_FI_PROF_DRAM_ACTIVE", "percentunit", "dram_active_high"),
        ("GPU power", "DCGM_FI_DEV_POWER_USAGE", "watt", "")]


def _query(expr: str, legend: str, ref: str, *, fmt=None) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).range().datasource(DS)
    return q.format(fmt) if fmt else q


def _thresholds(steps: list[tuple[float | None, str]]) -> gd.ThresholdsConfig:
    return gd.ThresholdsConfig().mode(md.ThresholdsMode.ABSOLUTE).steps(
        [md.Threshold(value=v, color=c) for v, c in steps])


def _refs():
    return iter("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def view_panel(view: RV.View, th: dict, prefix: str = "vllm:"):
    """The panel of one request view: its `promql()` series, legend per model, the SLO line when it has one."""
    refs = _refs()
    legend_of = lambda name: f"{name} {{{{model_name}}}}" if view.kind != "by_label" else "{{finished_reason}} {{model_name}}"  # noqa: E731
    panel = (timeseries.Panel().title(view.title).description(_describe(view)).datasource(DS).unit(view.unit)
             .span(12).height(8).line_width(1).fill_opacity(0).legend(_legend())
             .tooltip(gc.VizTooltipOptions().mode(mc.TooltipDisplayMode.MULTI)))
    for name, expr in RV.promql(view, prefix=prefix):
        panel = panel.with_target(_query(expr, legend_of(name), next(refs)))
    if view.slo:
        panel = (panel.thresholds(_thresholds([(None, "transparent"), (float(th[view.slo]), "red")]))
                 .thresholds_style(gc.GraphThresholdsStyleConfig().mode(mc.GraphTresholdsStyleMode.DASHED)))
    return panel


def heatmap_panel(view: RV.View, prefix: str = "vllm:"):
    """Observations per bucket per window, as vLLM's prompt/generation length heatmaps."""
    return (heatmap.Panel().title(f"{view.title}: requests per bucket").description(_describe(view))
            .datasource(DS).span(12).height(8).calculate(False).show_legend().show_tooltip()
            .with_target(_query(RV.heatmap_promql(view, prefix=prefix), "{{le}}", "A", fmt=mp.PromQueryFormat.HEATMAP)))


def _describe(view: RV.View) -> str:
    matches = f" vLLM's dashboards: \"{view.vllm_panel}\"." if view.vllm_panel else " Only stallscope has it."
    return f"{view.what}.{matches} Computed the same way by `stallscope analyze` / the Dash Requests page."


def verdict_panels(th: dict, prefix: str = "vllm:") -> list:
    """Stat panels: the alert verdicts (from ALERTS; 0 = OK) and ITL/TTFT P99 of the recording rules vs the SLO."""
    out = []
    for alert in VERDICT_ALERTS:
        expr = (f'sum by (model_name) (ALERTS{{alertname="{alert}",alertstate="firing",{MODEL_SEL}}}) '
                f'or sum by (model_name) (0 * {RV.spelled("vllm:num_requests_running", prefix)}{{{MODEL_SEL}}})')
        out.append(stat.Panel().title(alert).description(f"firing {alert} alerts per model (rules/{R.ALERTS[alert][0]})")
                   .datasource(DS).span(4).height(4).with_target(_query(expr, "{{model_name}}", "A"))
                   .thresholds(_thresholds([(None, "green"), (1.0, "red")]))
                   .mappings([md.ValueMap(options={"0": md.ValueMappingResult(text="OK", color="green")})])
                   .reduce_options(_last()))
    short = R.fmt_duration(R.parse_duration(th["windows"]["short"]))
    for name, metric, key in (("ITL P99", "vllm_inter_token_latency_seconds", "itl_slo_s"),
                              ("TTFT P99", "vllm_time_to_first_token_seconds", "ttft_slo_s")):
        expr = f'max by (model_name) ({R.name_quantile(metric, short)}{{quantile="0.99",{MODEL_SEL}}})'
        out.append(stat.Panel().title(f"{name} vs SLO {th[key]:g} s").datasource(DS).unit("s").span(6).height(4)
                   .description(f"worst instance's {name} over {short} (recording rule), red above {key}")
                   .with_target(_query(expr, "{{model_name}}", "A")).reduce_options(_last())
                   .thresholds(_thresholds([(None, "green"), (float(th[key]), "red")])))
    return out


def fleet_panels(prefix: str = "vllm:") -> list:
    """Running and waiting requests in total and engines reporting, per model."""
    running, waiting = (RV.spelled(m, prefix) for m in ("vllm:num_requests_running", "vllm:num_requests_waiting"))
    exprs = [("Running (total)", f"sum by (model_name) ({running}{{{SEL}}})"),
             ("Waiting (total)", f"sum by (model_name) ({waiting}{{{SEL}}})"),
             ("Engines reporting", f"count by (model_name) ({running}{{{SEL}}})")]
    return [stat.Panel().title(t).datasource(DS).span(4).height(4).with_target(_query(e, "{{model_name}}", "A"))
            .reduce_options(_last()) for t, e in exprs]


def _legend() -> gc.VizLegendOptions:
    return (gc.VizLegendOptions().display_mode(mc.LegendDisplayMode.LIST).placement(mc.LegendPlacement.BOTTOM)
            .show_legend(True).calcs([]))


def _last() -> gc.ReduceDataOptions:
    return gc.ReduceDataOptions().calcs(["lastNotNull"]).values(False)


def gpu_panels(th: dict) -> list:
    """DCGM tensor versus DRAM activity (the memory-bound verdict's inputs) and power, per GPU."""
    out = []
    for title, field, unit, key in DCGM:
        p = (timeseries.Panel().title(title).datasource(DS).unit(unit).span(8).height(8).legend(_legend())
             .with_target(_query(f'avg by (Hostname, gpu) ({field}{{instance=~"$instance"}})',
                                 "{{Hostname}} gpu{{gpu}}", "A")))
        if key:
            p = (p.thresholds(_thresholds([(None, "transparent"), (float(th[key]), "orange")]))
                 .thresholds_style(gc.GraphThresholdsStyleConfig().mode(mc.GraphTresholdsStyleMode.DASHED)))
        out.append(p)
    return out


def _variables(prefix: str = "vllm:") -> list:
    running = RV.spelled("vllm:num_requests_running", prefix)
    label_query = lambda sel, label: f"label_values({running}{sel}, {label})"  # noqa: E731
    out = [gd.DatasourceVariable("datasource").label("Data source").type("prometheus")]
    for name, sel in (("model_name", ""), ("instance", '{model_name=~"$model_name"}'),
                      ("engine", '{model_name=~"$model_name",instance=~"$instance"}')):
        out.append(gd.QueryVariable(name).label(name).datasource(DS).query(label_query(sel, name))
                   .multi(True).include_all(True).all_value(".*").refresh(md.VariableRefresh.ON_TIME_RANGE_CHANGED)
                   .current(md.VariableOption(selected=True, text="All", value="$__all")))
    return out


def build(th: dict, *, title: str = "stallscope: vLLM serving", uid: str = "stallscope-vllm",
          prefix: str = "vllm:") -> md.Dashboard:
    """The dashboard model: verdicts, fleet, every request view (+ heatmaps), GPU; alert annotations.
    `prefix` spells vLLM's metric names as the datasource holds them (`vllm_` behind OpenTelemetry); the
    verdicts read the recording rules and ALERTS, whose names do not change."""
    R.check(th)
    d = (gd.Dashboard(title).uid(uid).tags(["vllm", "stallscope"]).time("now-1h", "now").refresh("30s")
         .description("Generated by `stallscope grafana` from rules/thresholds.yaml (docs/grafana.md).")
         .tooltip(md.DashboardCursorSync.CROSSHAIR).variables(_variables(prefix))
         .annotation(gd.AnnotationQuery().name("stallscope alerts").datasource(DS).enable(True)
                     .icon_color("red").expr(ANNOTATION_EXPR)))
    requests = [p for v in RV.VIEWS
                for p in [view_panel(v, th, prefix), *([heatmap_panel(v, prefix)] if v.heatmap else [])]]
    ids = iter(range(1, 1000))
    for row, panels in (("Verdicts", verdict_panels(th, prefix) + fleet_panels(prefix)),
                        ("Requests (pooled per model_name)", requests), ("GPU (DCGM)", gpu_panels(th))):
        d = d.with_row(gd.Row(row).id(next(ids)))
        for p in panels:
            d = d.with_panel(p.id(next(ids)))
    return d.build()


def to_json(model: md.Dashboard) -> str:
    return json.dumps(model, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def configmap(text: str, *, name: str = "stallscope-grafana-dashboard", namespace: str | None = None,
              label: str = "grafana_dashboard") -> dict:
    """A ConfigMap the Grafana sidecar (kube-prometheus-stack) picks up by its `grafana_dashboard: "1"` label."""
    meta = {"name": name, "labels": {label: "1", "app.kubernetes.io/part-of": "stallscope"}}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"stallscope-vllm.json": text}}


def expressions(doc: dict) -> list[tuple[str, str]]:
    """(panel title, expr) of every query of a dashboard JSON document, annotations included."""
    out = [(f"annotation {a.get('name')}", a["expr"]) for a in doc.get("annotations", {}).get("list", []) if a.get("expr")]
    for p in doc.get("panels", []):
        for panel in [p, *p.get("panels", [])]:
            out += [(panel.get("title", ""), t["expr"]) for t in panel.get("targets") or [] if t.get("expr")]
    return out


GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h", "$model_name": ".*",
                     "$instance": ".*", "$engine": ".*"}


def fixed(expr: str, values: dict[str, str] | None = None) -> str:
    """`expr` with Grafana's built-in and dashboard variables replaced by fixed values (for promtool or a plain
    Prometheus query): `$__rate_interval` → 1m, `$model_name` → `.*` (All), ..."""
    values = {**GRAFANA_VARIABLES, **(values or {})}
    for name in sorted(values, key=len, reverse=True):  # `$__rate_interval` before `$__range`
        expr = expr.replace(name, values[name])
    return expr
