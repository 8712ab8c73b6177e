"""`stallscope rules`: print the Prometheus rules rendered from the thresholds, or check a rule file.

The flags override single thresholds of `rules/thresholds.yaml` (or of `--thresholds FILE`), so the
printed rules and the analyzers can share one user file:

    stallscope rules --itl-slo 0.15 --kv-threshold 0.9 > stallscope.rules.yaml
    stallscope rules --format prometheusrule --label release=prom --namespace monitoring | kubectl apply -f -
    stallscope rules --check stallscope.rules.yaml        # runs `promtool check rules`
"""

from __future__ import annotations

import argparse
import re

from stallscope.core.errors import InputError

# flag -> (threshold key, help)
THRESHOLD_FLAGS = {
    "--itl-slo": ("itl_slo_s", "ITL P99 SLO, seconds"),
    "--ttft-slo": ("ttft_slo_s", "TTFT P99 SLO, seconds"),
    "--prefill-rate": ("prefill_tokens_rate_high", "prompt tokens/s that count as high prefill load"),
    "--kv-threshold": ("kv_usage_high", "KV cache usage ratio 0-1 that counts as pressure"),
    "--preemptions-rate": ("preemptions_rate_high", "preemptions/s that count as frequent"),
    "--waiting": ("waiting_high", "waiting requests that count as queueing"),
    "--dram-active": ("dram_active_high", "DCGM_FI_PROF_DRAM_ACTIVE ratio that counts as memory-busy"),
    "--tensor-active": ("tensor_active_low", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE ratio below which tensor cores idle"),
    "--generation-rate": ("generation_tokens_rate_low", "tokens/s below which a scheduler with waiting requests is stalled"),
}
FORMATS = ("prometheus", "prometheusrule")
GROUPS = ("all", "vllm", "gpu", "scrape", "fleet")
DEFAULT_RESOURCE_LABELS = {"app.kubernetes.io/part-of": "stallscope", "release": "kube-prometheus-stack"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--thresholds", metavar="FILE", help="thresholds YAML merged over the defaults")
    for flag, (key, help_text) in THRESHOLD_FLAGS.items():
        parser.add_argument(flag, type=float, dest=key, metavar="N", help=help_text)
    parser.add_argument("--window-short", metavar="DUR", help="short window of the recording rules (default 1m)")
    parser.add_argument("--window-long", metavar="DUR", help="long window of the recording rules (default 5m)")
    parser.add_argument("--for", dest="for_", action="append", default=[], metavar="ALERT=DUR",
                        help="`for:` of one alert, e.g. VLLMDecodeStarvation=1m (repeatable)")
    parser.add_argument("--format", choices=FORMATS, default="prometheus",
                        help="a rule file (default) or a kube-prometheus-stack PrometheusRule resource")
    parser.add_argument("--group", choices=GROUPS, default="all", help="which rule group(s) to print")
    parser.add_argument("--label", action="append", default=[], metavar="K=V",
                        help="label on the PrometheusRule resource (repeatable; default release=kube-prometheus-stack)")
    parser.add_argument("--alert-label", action="append", default=[], metavar="K=V",
                        help="extra label on every alert, e.g. team=inference (repeatable)")
    parser.add_argument("--name", default="stallscope", help="PrometheusRule metadata.name")
    parser.add_argument("--namespace", help="PrometheusRule metadata.namespace")
    parser.add_argument("--runbook-base-url", metavar="URL", help="URL of docs/runbooks.md; #<alertname> is appended")
    parser.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    parser.add_argument("--check", metavar="FILE", help="run `promtool check rules` on FILE (a rule file or a PrometheusRule)")


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _thresholds(args) -> dict:
    from stallscope.core.config import load_thresholds

    overrides = {key: getattr(args, key) for key, _ in THRESHOLD_FLAGS.values()}
    windows = {k: v for k, v in (("short", args.window_short), ("long", args.window_long)) if v is not None}
    if windows:
        overrides["windows"] = windows
    fors = _pairs(args.for_, "--for")
    if fors:
        overrides["for"] = fors
    return load_thresholds(args.thresholds, **overrides)


PROMTOOL_HINT = ("install the Debian/Ubuntu package `prometheus` (apt-get install prometheus) "
                 "or a release from https://prometheus.io/download/")


def check_file(path: str) -> int:
    """`promtool check rules` on a rule file or on the `spec` of a PrometheusRule; 0 ok, 1 invalid."""
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    import yaml

    src = Path(path)
    if not src.is_file():
        raise InputError(f"rule file not found: {path}")
    tool = shutil.which("promtool")
    if tool is None:
        raise InputError(f"promtool not found on PATH, cannot check {path}; {PROMTOOL_HINT}")
    try:
        doc = yaml.safe_load(src.read_text())
    except (yaml.YAMLError, UnicodeDecodeError):
        doc = None  # promtool reports the syntax error itself
    with tempfile.TemporaryDirectory() as tmp:
        target = src
        if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule":
            target = Path(tmp) / (src.stem + ".spec.yaml")
            target.write_text(yaml.safe_dump(doc.get("spec") or {}, sort_keys=False))
        proc = subprocess.run([tool, "check", "rules", str(target)], capture_output=True, text=True)
    print((proc.stdout + proc.stderr).replace(str(target), path).rstrip())
    return 0 if proc.returncode == 0 else 1


def run(args) -> int:
    if args.check:
        return check_file(args.check)
    from stallscope.rules import render

    labels = _pairs(args.alert_label, "--alert-label")
    for key in labels:
        if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", key):
            raise InputError(f"--alert-label name {key!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
    docs = render.render_files(_thresholds(args), args.runbook_base_url or render.DEFAULT_RUNBOOK_BASE, labels)
    if args.group != "all":
        docs = {f: d for f, d in docs.items() if f.startswith(args.group + ".")}
    if args.format == "prometheusrule":
        resource = render.prometheus_rule(docs, args.name, args.namespace,
                                          {**DEFAULT_RESOURCE_LABELS, **_pairs(args.label, "--label")})
        text = render.dump(resource, header="# Rendered by `stallscope rules --format prometheusrule`.\n")
    else:
        merged = {"groups": [g for d in docs.values() for g in d["groups"]]}
        text = render.dump(merged, header="# Rendered by `stallscope rules` from the stallscope thresholds.\n")
    if args.output:
        try:
            with open(args.output, "w") as fh:
                fh.write(text)
        except OSError as exc:
            raise InputError(f"cannot write {args.output}: {exc.strerror}") from None
    else:
        print(text, end="")
    return 0
