"""`stallscope grafana`: write the Grafana dashboard rendered from the thresholds (and, optionally, its ConfigMap).

    stallscope grafana --out stallscope-vllm.json                     # Dashboards > New > Import
    stallscope grafana --format configmap --namespace monitoring | kubectl apply -f -   # the Grafana sidecar
"""

from __future__ import annotations

import sys

from stallscope.core.errors import InputError

FORMATS = ("json", "configmap")


def add_arguments(parser) -> None:
    parser.add_argument("--out", "-o", metavar="FILE", help="write here instead of stdout")
    parser.add_argument("--format", choices=FORMATS, default="json",
                        help="the dashboard JSON (default) or a ConfigMap for the Grafana sidecar")
    parser.add_argument("--thresholds", metavar="YAML", help="threshold overrides (keys of rules/thresholds.yaml)")
    parser.add_argument("--title", default="stallscope: vLLM serving", help="dashboard title")
    parser.add_argument("--uid", default="stallscope-vllm", help="dashboard uid (1-40 letters, digits, - or _)")
    parser.add_argument("--metric-prefix", choices=("vllm:", "vllm_", "ray_vllm:", "ray_vllm_"), default="vllm:",
                        help="how the datasource spells vLLM's metric names (vllm_ behind an OpenTelemetry pipeline, "
                             "ray_vllm: from Ray Serve; default vllm:)")
    parser.add_argument("--name", default="stallscope-grafana-dashboard", help="ConfigMap metadata.name")
    parser.add_argument("--namespace", help="ConfigMap metadata.namespace")


def _yaml(doc: dict) -> str:
    """YAML with the dashboard JSON as a literal block (`|`), as a human would write the ConfigMap."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))
    return yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=4096)


def run(args) -> int:
    import re

    from stallscope.core.config import load_thresholds
    from stallscope.rules import grafana

    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", args.uid):
        raise InputError(f"--uid must be 1-40 letters, digits, - or _, got {args.uid!r}")
    text = grafana.to_json(grafana.build(load_thresholds(args.thresholds), title=args.title, uid=args.uid,
                                         prefix=args.metric_prefix))
    if args.format == "configmap":
        text = _yaml(grafana.configmap(text, name=args.name, namespace=args.namespace))
    if not args.out:
        sys.stdout.write(text)
        return 0
    try:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise InputError(f"cannot write --out {args.out}: {exc.strerror}") from None
    sys.stderr.write(f"stallscope: wrote {args.out}\n")
    return 0
