"""`stallscope grafana`: the dashboard is grafana-foundation-sdk's model, built from the thresholds and the one
table of request views; every query is valid PromQL (promtool)."""

import json
import subprocess

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from conftest import require_tool
from stallscope.analyzers import request_views as RV
from stallscope.cli import main
from stallscope.core.config import load_thresholds
from stallscope.rules import grafana as G


@pytest.fixture(scope="module")
def doc():
    return json.loads(G.to_json(G.build(load_thresholds())))


def _panels(doc):
    return {p["title"]: p for p in doc["panels"] if p["type"] != "row"}


def test_json_loads_through_the_sdk_model_and_round_trips(doc):
    model = Dashboard.from_json(doc)
    assert model.title == "stallscope: vLLM serving" and len(model.panels) == len(doc["panels"])
    assert json.loads(json.dumps(model, cls=JSONEncoder)) == doc


def test_variables_annotations_and_one_grouping(doc):
    names = [v["name"] for v in doc["templating"]["list"]]
    assert names == ["datasource", "model_name", "instance", "engine"]
    assert doc["templating"]["list"][0]["query"] == "prometheus"
    assert all(v["allValue"] == ".*" and v["multi"] for v in doc["templating"]["list"][1:])
    ann = doc["annotations"]["list"][0]["expr"]
    assert ann.startswith("ALERTS{") and all(a in ann for a in G.VERDICT_ALERTS)
    for title, expr in G.expressions(doc):
        if expr.startswith("histogram_quantile"):  # not the verdicts, which read the recording rules
            assert "sum by (le, model_name)" in expr and "[$__rate_interval]" in expr, title


def test_every_request_view_is_on_the_dashboard_with_the_analyzers_promql(doc):
    panels = _panels(doc)
    for v in RV.VIEWS:
        exprs = [t["expr"] for t in panels[v.title]["targets"]]
        assert exprs == [e for _, e in RV.promql(v)], v.key
        if v.kind == "histogram":
            assert [t["legendFormat"].split()[0] for t in panels[v.title]["targets"]] == [
                "P50", "P90", "P95", "P99", "mean"]
        if v.heatmap:
            hm = panels[f"{v.title}: requests per bucket"]
            assert hm["type"] == "heatmap" and hm["targets"][0]["format"] == "heatmap"
    assert {"DRAM active", "Tensor pipe active", "GPU power"} <= set(panels)


def test_slo_lines_and_verdicts_follow_the_thresholds(tmp_path):
    custom = tmp_path / "t.yaml"
    custom.write_text("itl_slo_s: 0.15\nttft_slo_s: 3\n")
    out = tmp_path / "d.json"
    assert main(["grafana", "--thresholds", str(custom), "--out", str(out)]) == 0
    panels = _panels(json.loads(out.read_text()))
    steps = lambda p: [s["value"] for s in p["fieldConfig"]["defaults"]["thresholds"]["steps"]]  # noqa: E731
    assert steps(panels["Inter-token latency"])[1] == 0.15 and steps(panels["Time to first token"])[1] == 3
    assert panels["Inter-token latency"]["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
    assert steps(panels["ITL P99 vs SLO 0.15 s"]) == [None, 0.15]
    assert "model_name_instance_quantile:vllm_inter_token_latency_seconds:histogram_quantile_rate1m" in \
        panels["ITL P99 vs SLO 0.15 s"]["targets"][0]["expr"]
    assert steps(panels["DRAM active"])[1] == load_thresholds()["dram_active_high"]


def test_configmap_and_bad_input(tmp_path, capsys):
    assert main(["grafana", "--format", "configmap", "--namespace", "monitoring"]) == 0
    cm = yaml.safe_load(capsys.readouterr().out)
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["stallscope-vllm.json"])["uid"] == "stallscope-vllm"
    assert main(["grafana", "--out", str(tmp_path / "no" / "d.json")]) == 2
    assert "cannot write --out" in capsys.readouterr().err
    assert main(["grafana", "--uid", "a b"]) == 2


def test_every_query_is_promql_promtool_accepts(doc, tmp_path):
    promtool = require_tool("promtool", "prometheus")
    exprs = G.expressions(doc)
    assert len(exprs) > 70
    rules = [{"record": f"dashboard:q{i}", "expr": G.fixed(e)} for i, (_, e) in enumerate(exprs)]
    assert not any("$" in r["expr"] for r in rules)
    f = tmp_path / "q.yaml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("prefix", ["vllm_", "ray_vllm:"])
def test_another_metric_spelling_renames_every_vllm_metric(prefix, tmp_path, capsys):
    assert main(["grafana", "--metric-prefix", prefix]) == 0
    doc = json.loads(capsys.readouterr().out)
    exprs = [e for _, e in G.expressions(doc)]
    import re

    names = {n for e in exprs for n in re.findall(r"\b[a-z_:]*vllm[:_][a-z0-9_]+", e)}
    assert names and all(n.startswith(prefix) or n.startswith("model_name_instance") for n in names), names
    assert f"label_values({prefix}num_requests_running" in doc["templating"]["list"][1]["query"]


def test_docs_table_names_every_panel(doc):
    from conftest import ROOT

    text = (ROOT / "docs" / "grafana.md").read_text()
    missing = [t for t in _panels(doc) if t.split(" vs ")[0].split(": requests per")[0] not in text]
    assert not missing, f"panels missing from docs/grafana.md: {missing}"
