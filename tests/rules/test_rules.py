"""The Prometheus rules: rendered from the one thresholds file, valid for promtool, unit-tested at both
sides of every `for:`, documented in a runbook, and exported by `stallscope rules`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from promserver import promtool
from stallscope.cli import main
from stallscope.core.config import load_thresholds, parse_duration
from stallscope.rules import render

RULES = ROOT / "rules"
RULE_FILES = sorted(RULES.glob("*.rules.yaml"))
TEST_FILES = sorted((RULES / "tests").glob("*.test.yaml"))
RUNBOOK = ROOT / "docs" / "runbooks.md"


def _alerts() -> dict[str, dict]:
    out = {}
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    out[rule["alert"]] = rule
    return out


def test_committed_rule_files_equal_the_rendered_ones():
    rendered = render.render_files(load_thresholds())
    assert sorted(rendered) == [p.name for p in RULE_FILES]
    for name, doc in rendered.items():
        assert (RULES / name).read_text() == render.dump(doc), (
            f"rules/{name} is stale: run `python -m stallscope.rules.render`")


def test_promtool_check_rules_accepts_every_rule_file():
    proc = subprocess.run([promtool(), "check", "rules", *map(str, RULE_FILES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(RULE_FILES)
    assert "SUCCESS: 31 rules found" in proc.stdout  # 20 recording rules + 7 vLLM alerts


def test_promtool_unit_tests_pass():
    assert [p.name for p in TEST_FILES] == ["fleet.test.yaml", "gpu.test.yaml", "scrape.test.yaml", "vllm.test.yaml"]
    proc = subprocess.run([promtool(), "test", "rules", *map(str, TEST_FILES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(TEST_FILES)


def test_promtool_unit_tests_can_fail(tmp_path):
    """Shortening one `for:` by a single interval must break the 'not one interval before' case."""
    th = load_thresholds(**{"for": {"VLLMKVCachePressure": "4m45s"}})
    for name, doc in render.render_files(th).items():
        (tmp_path / name).write_text(render.dump(doc))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "vllm.test.yaml").write_text((RULES / "tests" / "vllm.test.yaml").read_text())
    proc = subprocess.run([promtool(), "test", "rules", str(tmp_path / "tests" / "vllm.test.yaml")],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "alertname: VLLMKVCachePressure, time: 10m," in proc.stdout + proc.stderr


def _cases() -> dict[str, dict[str, list]]:
    """alertname -> {"positive": [(test name, fire time, before time)], "negative": [test name]}."""
    cases: dict[str, dict[str, list]] = {}
    for path in TEST_FILES:
        doc = yaml.safe_load(path.read_text())
        step = parse_duration(doc["evaluation_interval"])
        for test in doc["tests"]:
            by_alert: dict[str, list] = {}
            for check in test.get("alert_rule_test", []):
                by_alert.setdefault(check["alertname"], []).append(
                    (parse_duration(check["eval_time"]), check.get("exp_alerts") or []))
            for alert, checks in by_alert.items():
                entry = cases.setdefault(alert, {"positive": [], "negative": []})
                silent = {t for t, exp in checks if not exp}
                fired = [(t, exp) for t, exp in checks if exp]
                if not fired:
                    entry["negative"].append(test["name"])
                for t, exp in fired:
                    assert t - step in silent, f"{test['name']}: no silent check one interval before {t}s"
                    entry["positive"].append((test["name"], t, exp))
    return cases


def test_every_alert_has_a_positive_and_a_negative_promtool_test():
    cases = _cases()
    alerts = _alerts()
    assert sorted(alerts) == sorted(render.ALERTS)
    for alert, rule in alerts.items():
        assert cases.get(alert, {}).get("positive"), f"{alert} has no positive promtool test"
        assert cases[alert]["negative"], f"{alert} has no negative (lookalike) promtool test"
        for name, _, exp in cases[alert]["positive"]:
            for e in exp:
                assert e["exp_labels"]["severity"] == rule["labels"]["severity"], name
                assert set(e["exp_annotations"]) == {"summary", "description", "runbook_url"}, name


def test_every_alert_carries_severity_summary_description_and_runbook():
    for alert, rule in _alerts().items():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), alert
        ann = rule["annotations"]
        assert ann["summary"].endswith("."), alert
        assert "{{ $labels." in ann["description"] and "{{ $value" in ann["description"], alert
        assert ann["runbook_url"].endswith(f"docs/runbooks.md#{alert.lower()}"), alert
        assert parse_duration(rule.get("for", "0s")) == parse_duration(load_thresholds()["for"][alert]), alert
    assert _alerts()["GPUMemoryBoundDecode"]["labels"]["severity"] == "info"


def test_every_alert_has_a_runbook_section_that_says_how_to_confirm_and_fix():
    text = RUNBOOK.read_text()
    sections = dict(re.findall(r"^## (\S+)\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M))
    for alert in _alerts():
        body = sections.get(alert.lower())
        assert body is not None, f"docs/runbooks.md lacks `## {alert.lower()}`"
        assert "stallscope analyze" in body, f"runbook {alert.lower()} does not say how to confirm"
        assert re.search(r"`--[a-z]", body), f"runbook {alert.lower()} names no flag that fixes it"


def test_recording_rules_follow_level_metric_operations():
    records = [r["record"] for p in RULE_FILES for g in yaml.safe_load(p.read_text())["groups"]
               for r in g["rules"] if "record" in r]
    assert len(records) == 28   # 10 per window (1m, 5m), the live-window rates (30s), the running sum,
    for name in records:        # and the fleet triage's 5 window tests per replica (rules/fleet.rules.yaml)
        level, metric, ops = name.split(":")
        assert level in ("model_name_instance", "model_name_instance_quantile",
                         "namespace_pod_instance_model_name_engine"), name
        assert metric.startswith("vllm_") and ops.endswith(("1m", "5m", "30s", "sum")), name
    assert "model_name_instance_quantile:vllm_inter_token_latency_seconds:histogram_quantile_rate1m" in records
    assert "model_name_instance:vllm_num_preemptions:rate5m" in records


def test_short_windows_and_for_render_through_the_thresholds():
    th = load_thresholds(windows={"short": "15s", "long": "30s"}, **{"for": {"VLLMDecodeStarvation": "5s"}})
    doc = render.render_files(th)["vllm.rules.yaml"]
    rules = {r.get("alert") or r["record"] + r.get("labels", {}).get("quantile", ""): r
             for r in doc["groups"][0]["rules"]}
    starv = rules["VLLMDecodeStarvation"]
    assert starv["for"] == "5s"
    assert starv["expr"].startswith(
        'model_name_instance_quantile:vllm_inter_token_latency_seconds:histogram_quantile_rate15s{quantile="0.99"} > 0.2')
    assert "[30s]" in rules["model_name_instance:vllm_prompt_tokens:rate30s"]["expr"]


@pytest.mark.parametrize("seconds, text", [(60, "1m"), (90, "90s"), (0, "0s"), (7200, "2h"), (0.5, "500ms"),
                                           (300, "5m")])
def test_fmt_duration(seconds, text):
    assert render.fmt_duration(seconds) == text
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("override, message", [
    ({"itl_slo_s": -1}, "threshold 'itl_slo_s' must be a number >= 0, got -1"),
    ({"kv_usage_high": 1.5}, "threshold 'kv_usage_high' is a ratio 0-1, got 1.5"),
    ({"waiting_high": "many"}, "threshold 'waiting_high' must be a number >= 0, got 'many'"),
    ({"windows": {"short": "0s"}}, "window 'short' must be positive, got '0s'"),
    ({"itl_slo_s": float("nan")}, "threshold 'itl_slo_s' must be a number >= 0, got nan"),
])
def test_bad_thresholds_name_the_value(override, message):
    from stallscope.core.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        render.render_files(load_thresholds(**override))


# --- `stallscope rules` -------------------------------------------------------------------------


def test_cli_prints_a_rule_file_promtool_accepts(tmp_path, capsys):
    assert main(["rules", "--itl-slo", "0.15", "--kv-threshold", "0.9", "--alert-label", "team=inference"]) == 0
    text = capsys.readouterr().out
    doc = yaml.safe_load(text)
    assert [g["name"] for g in doc["groups"]] == ["stallscope-vllm", "stallscope-gpu", "stallscope-scrape",
                                                 "stallscope-fleet"]
    alerts = {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}
    assert alerts["VLLMInterTokenLatencyHigh"]["expr"].endswith('{quantile="0.99"} > 0.15')
    assert alerts["VLLMKVCachePressure"]["expr"].endswith(">= 0.9")
    assert all(a["labels"]["team"] == "inference" for a in alerts.values())
    out = tmp_path / "stallscope.rules.yaml"
    out.write_text(text)
    assert main(["rules", "--check", str(out)]) == 0
    assert "SUCCESS: 39 rules found" in capsys.readouterr().out  # with the 5 fleet recording rules


def test_cli_prometheusrule_resource_with_labels(tmp_path, capsys):
    out = tmp_path / "pr.yaml"
    assert main(["rules", "--format", "prometheusrule", "--label", "release=prom", "--label", "team=ml",
                 "--namespace", "monitoring", "--group", "vllm", "--runbook-base-url",
                 "https://wiki.example/runbooks", "-o", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    assert doc["metadata"] == {"name": "stallscope", "namespace": "monitoring",
                               "labels": {"app.kubernetes.io/part-of": "stallscope", "release": "prom",
                                          "team": "ml"}}
    assert [g["name"] for g in doc["spec"]["groups"]] == ["stallscope-vllm"]
    urls = [r["annotations"]["runbook_url"] for r in doc["spec"]["groups"][0]["rules"] if "alert" in r]
    assert urls[0] == "https://wiki.example/runbooks#vllmdecodestarvation" and len(urls) == 8
    assert main(["rules", "--check", str(out)]) == 0  # the resource's spec is checked
    assert "SUCCESS: 31 rules found" in capsys.readouterr().out


def test_cli_thresholds_file_and_for_overrides(tmp_path, capsys):
    user = tmp_path / "th.yaml"
    user.write_text("itl_slo_s: 0.3\nwindows: {short: 30s}\n")
    assert main(["rules", "--thresholds", str(user), "--for", "VLLMDecodeStarvation=1m", "--group", "vllm"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    starv = next(r for r in doc["groups"][0]["rules"] if r.get("alert") == "VLLMDecodeStarvation")
    assert starv["for"] == "1m"
    assert starv["expr"].startswith(
        'model_name_instance_quantile:vllm_inter_token_latency_seconds:histogram_quantile_rate30s{quantile="0.99"} > 0.3')


def test_cli_check_reports_a_broken_rule_file(tmp_path, capsys):
    bad = tmp_path / "bad.rules.yaml"
    bad.write_text("groups:\n- name: x\n  rules:\n  - alert: A\n    expr: up ==\n")
    promtool()
    assert main(["rules", "--check", str(bad)]) == 1
    assert "could not parse expression" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["rules", "--check", "/nonexistent/x.yaml"], "stallscope: error: rule file not found: /nonexistent/x.yaml"),
    (["rules", "--itl-slo", "-0.5"], "stallscope: error: threshold 'itl_slo_s' must be a number >= 0, got -0.5"),
    (["rules", "--for", "VLLMNope=1m"], "stallscope: error: unknown threshold 'VLLMNope' in overrides:for"),
    (["rules", "--for", "VLLMDecodeStarvation"], "stallscope: error: --for expects KEY=VALUE, got 'VLLMDecodeStarvation'"),
    (["rules", "--window-short", "soon"], "stallscope: error: bad duration 'soon'"),
    (["rules", "--label", "=x", "--format", "prometheusrule"], "stallscope: error: --label expects KEY=VALUE, got '=x'"),
    (["rules", "--alert-label", "team-name=x"], "stallscope: error: --alert-label name 'team-name' is not a Prometheus label name"),
    (["rules", "--thresholds", "/nonexistent/th.yaml"], "stallscope: error: thresholds file not found"),
])
def test_cli_bad_input_is_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


def test_cli_check_without_promtool_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    path = RULE_FILES[0]
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["rules", "--check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"stallscope: error: promtool not found on PATH, cannot check {path}")
    assert "apt-get install prometheus" in err and "prometheus.io/download" in err


def test_the_rules_and_the_analyzer_watch_the_same_step_gauges():
    """A step ended where one of the scheduler's gauges changed: the in-progress alert (`changes()` over each of
    rules/render.py's STEP_GAUGES) and the analyzer's `nothing_for_s` (analyzers/signals.py) read the same gauges,
    the rules with vLLM's pre-0.12 KV name beside today's."""
    from stallscope.analyzers.signals import STEP_GAUGES as ANALYZER
    from stallscope.collectors.vllm import canonical
    from stallscope.rules.render import STEP_GAUGES as RULES

    assert sorted({canonical(g)[0] for g in RULES}) == sorted(ANALYZER)
    assert "vllm:gpu_cache_usage_perc" in RULES and len(RULES) == len(ANALYZER) + 1
