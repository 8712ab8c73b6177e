"""The metric sources of `stallscope analyze`: run directories, stores and Prometheus, on one timeline.

Each source is loaded through `stallscope.collectors.loader` into frames per target; a target is named
`<source>/<target>` when several sources are given (a run directory's arms are already `<arm>/<target>`),
so arms stay apart while sharing one time axis. Each target gets its own signals grid and detectors
(`stallscope.analyzers.findings.diagnose`); a repro arm's `steps.jsonl` adds the exact offending steps.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import logging
import sys
import time
from pathlib import Path

from stallscope.core.errors import InputError

log = logging.getLogger(__name__)


class _Source(argparse.Action):
    """Stores the value(s) and marks that a metric source was given (the analyze `SOURCES` seam)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string:  # an option: append
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)
        if values:
            namespace.metrics = True


def add_arguments(parser) -> None:
    parser.set_defaults(metrics=False)
    parser.add_argument("runs", nargs="*", action=_Source, metavar="RUN_DIR",
                        help="a repro run directory or one arm of it (also a store .db or a scrapes.jsonl)")
    parser.add_argument("--db", action=_Source, metavar="FILE", help="a store written by `stallscope collect` (repeatable)")
    parser.add_argument("--prometheus", action=_Source, metavar="URL",
                        help="a Prometheus-compatible API base URL, read with query_range (repeatable)")
    parser.add_argument("--since", help="start: ISO-8601 time, int ns, or a duration ago (`30m`)")
    parser.add_argument("--until", help="end: ISO-8601 time, int ns, or a duration ago (`0m` = now)")
    parser.add_argument("--selector", help='label matchers for --prometheus, e.g. model_name="m",pod="p"')
    parser.add_argument("--resolution", help="query_range step for --prometheus (default 5s)")
    parser.add_argument("--steps", metavar="FILE", help="a step trace (steps.jsonl) to attach exact offending steps")
    parser.add_argument("--thresholds", metavar="YAML", help="threshold overrides (keys of rules/thresholds.yaml)")
    parser.add_argument("--itl-slo", type=float, metavar="SECONDS", help="ITL SLO (default itl_slo_s, 0.2 s)")
    parser.add_argument("--window", help="sliding window (default: windows.short, shrunk for short runs)")
    parser.add_argument("--gpu", help="GPU for roofline figures and costs (default: from GPU data)")
    parser.add_argument("--model", help="model for roofline costs (default: from model_name when known)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size for roofline costs (default 1)")
    parser.add_argument("--html", metavar="FILE", help="also write a standalone HTML report")
    parser.add_argument("--fail-on", choices=["info", "warning", "critical"], default="critical",
                        help="exit 1 when any finding is at or above this severity (default critical)")


def _time(value, what: str):
    if value is None:
        return None
    text = str(value).strip()
    if text and text[-1] in "smhdwy" and text[0].isdigit():
        from stallscope.core.config import parse_duration

        return time.time_ns() - int(parse_duration(text) * 1e9)
    if text.isdigit():
        return int(text)
    from stallscope.collectors.loader import to_ns

    return to_ns(text, what)


def _iso(ns) -> str:
    return dt.datetime.fromtimestamp(int(ns) / 1e9, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _step_trace(arm_dir: Path):
    from stallscope.analyzers.step_cost import read_step_trace

    path = arm_dir / "steps.jsonl"
    return read_step_trace(path) if path.is_file() and path.stat().st_size else None


def load_sources(args) -> tuple[dict, dict]:
    """({name: {"samples", "gpu", "steps"}}, {name: source description}) for every metric source given."""
    from stallscope.analyzers.quantiles import parse_selector
    from stallscope.collectors import loader

    lo, hi = _time(args.since, "--since"), _time(args.until, "--until")
    if lo is not None and hi is not None and hi < lo:
        raise InputError(f"--until {args.until!r} is before --since {args.since!r}")
    given = [("run", r) for r in (args.runs or [])] + [("db", d) for d in (args.db or [])] + [
        ("prometheus", u) for u in (args.prometheus or [])]
    selector = None
    if args.selector:
        matchers = parse_selector(args.selector)
        if any(op != "=" for _, op, _ in matchers):
            raise InputError(f"--selector {args.selector!r}: only equality matchers (label=\"value\") are supported")
        selector = {k: v for k, _, v in matchers}
    frames, sources = {}, {}
    for kind, src in given:
        if kind == "prometheus" and not str(src).startswith(("http://", "https://")):
            raise InputError(f"--prometheus {src!r} is not an http:// or https:// URL")
        if kind != "prometheus" and not Path(src).exists():
            raise InputError(f"{'--db ' if kind == 'db' else ''}{src} does not exist")
        if kind == "prometheus" and (lo is None) != (hi is None):
            raise InputError("--prometheus needs both --since and --until (or neither: the last hour)")
        loaded = loader.load(src, lo, hi, selector=selector if kind == "prometheus" else None,
                             step=args.resolution if kind == "prometheus" else None)
        prefix = f"{Path(str(src).rstrip('/')).name}/" if len(given) > 1 else ""
        whatif = _run_whatif_inputs(src) if kind == "run" and not args.steps else None
        for target, fr in loaded.items():
            name = prefix + target
            fr = {k: v.assign(target=name) for k, v in fr.items()}
            steps = None
            if kind == "run":
                arm = Path(src) / target.split("/")[0] if "/" in target else Path(src)
                steps = _step_trace(arm) if arm.is_dir() else None
            if args.steps:
                from stallscope.analyzers.step_cost import read_step_trace

                steps = read_step_trace(args.steps)
            fr["steps"] = steps
            fr["whatif_inputs"] = whatif
            frames[name] = fr
            ts = [int(f["ts"].min()) for f in (fr["samples"], fr["gpu"]) if len(f)]
            te = [int(f["ts"].max()) for f in (fr["samples"], fr["gpu"]) if len(f)]
            sources[name] = {"source": str(src), "kind": kind, "samples": int(len(fr["samples"])),
                             "gpu": int(len(fr["gpu"])), "steps": 0 if steps is None else int(len(steps)),
                             "start": _iso(min(ts)) if ts else None, "end": _iso(max(te)) if te else None}
    if not frames:
        raise InputError("the sources hold no samples for the given time range: "
                         + ", ".join(str(s) for _, s in given))
    return frames, sources


def _run_whatif_inputs(run_dir):
    """The run's what-if inputs as `stallscope whatif --from` resolves them (one budget for every arm's
    decode_starvation finding); None, with a warning, when the run cannot give them (no step trace,
    a malformed loadgen result): the findings then simulate each arm's own trace."""
    from stallscope.analyzers.budget import inputs_from_run
    from stallscope.collectors.run_dir import RunDir
    from stallscope.core.errors import ToolkitError

    try:
        run = RunDir.open(run_dir)
        return inputs_from_run(run) if run.steps() is not None else None
    except ToolkitError as exc:
        log.warning("what-if inputs of %s: %s; the budget is simulated from each arm's trace instead", run_dir, exc)
        return None


def whole_run_quantiles(samples, thresholds: dict) -> dict:
    """ITL/TTFT P50/P99 over the whole run, each with its bucket and a bucket-honest text."""
    import numpy as np

    from stallscope.analyzers import quantiles as Q
    from stallscope.analyzers.signals import ITL, TTFT, scrape_interval_ns, split_metrics

    out = {}
    if not len(samples):
        return out
    t0, t1 = int(samples["ts"].min()), int(samples["ts"].max())
    window = t1 - t0 + scrape_interval_ns(samples)
    parts = split_metrics(samples, [f + s for f in (*ITL, TTFT) for s in ("_bucket", "_sum")])
    itl = next((f for f in ITL if f + "_bucket" in parts), ITL[0])
    out["itl_time_above_slo"] = _time_above_slo(parts, itl, t1, window, float(thresholds["itl_slo_s"]))
    for family, tag in ((itl, "itl"), (TTFT, "ttft")):
        rows = parts.get(family + "_bucket", samples.iloc[:0])
        for q in (0.5, 0.99):
            r = Q.quantile_range(rows, family, q, np.array([t1]), window, by=())
            key = f"{tag}_p{int(q * 100)}"
            if len(r) and np.isfinite(r["value"].iloc[0]):
                v, lo, hi = (float(r[c].iloc[0]) for c in ("value", "bucket_lo", "bucket_hi"))
                out[key] = {"value_s": v, "bucket_s": [lo, None if np.isinf(hi) else hi],
                            "text": Q.format_quantile(v, lo, hi)}
            else:
                out[key] = {"value_s": None, "bucket_s": None, "text": "n/a"}
    return out


def _time_above_slo(parts: dict, family: str, t1: int, window: int, slo: float) -> dict:
    """Share of stream time spent in ITL gaps above the SLO over the whole run (a lower bound: each gap
    counts as its bucket's lower edge). Unlike P99 it does not under-weight a long stall."""
    import numpy as np

    from stallscope.analyzers import quantiles as Q

    empty = {"share": None, "text": "n/a"}
    if family + "_bucket" not in parts or family + "_sum" not in parts:
        return empty
    rates = Q.bucket_rates(parts[family + "_bucket"], family, np.array([t1]), window, by=())
    total = Q.rate_range(parts[family + "_sum"], family + "_sum", np.array([t1]), window, by=())
    if not rates or not len(total) or not total["value"].iloc[0] > 0:
        return empty
    _, les, counts = next(iter(rates.values()))
    per_bucket = np.diff(np.concatenate([[0.0], np.maximum.accumulate(np.nan_to_num(counts[0]))]))
    lower = np.concatenate([[0.0], les[:-1]])
    share = float((per_bucket * lower)[lower >= slo].sum() / total["value"].iloc[0])
    return {"share": min(share, 1.0), "slo_s": slo, "text": f">= {min(share, 1.0):.1%}"}


def _roofline(args, frames: dict):
    from stallscope.analyzers import roofline as R

    gpu_name = args.gpu
    points = None
    for fr in frames.values():
        if len(fr["gpu"]):
            points = R.measured_points(fr["gpu"])
            if points:
                break
    if gpu_name:
        spec = R.gpu_spec(gpu_name)
        if points is None:
            points = {"gpu": spec.name, "peak_flops": spec.peak_flops(), "peak_bw": spec.bandwidth, "points": None}
    cost = None
    if args.model and (gpu_name or points):
        cost = R.roofline_cost(R.model_spec(args.model), R.gpu_spec(gpu_name or points["gpu"]), tp=args.tp)
    return points, cost


def analyze(args):
    """Load, diagnose and summarise every metric source: the dict the text/JSON/HTML outputs share."""
    import pandas as pd

    from stallscope.analyzers.findings import Finding, diagnose
    from stallscope.core.config import load_thresholds, parse_duration

    th = load_thresholds(args.thresholds, itl_slo_s=args.itl_slo)
    if args.itl_slo is not None and args.itl_slo <= 0:
        raise InputError(f"--itl-slo must be positive, got {args.itl_slo}")
    window_s = parse_duration(args.window) if args.window else None
    if window_s is not None and window_s <= 0:
        raise InputError(f"--window must be positive, got {args.window!r}")
    if args.tp < 1:
        raise InputError(f"--tp must be >= 1, got {args.tp}")
    frames, sources = load_sources(args)
    roof, cost = _roofline(args, frames)
    sigs, found, quantiles = [], [], {}
    for name, fr in frames.items():
        sig, f = diagnose(fr["samples"], fr["gpu"], fr["steps"], thresholds=th, roofline_cost=cost, window_s=window_s,
                          whatif_inputs=fr["whatif_inputs"])
        if sig is not None:
            sig = sig.assign(target=name)
            sigs.append(sig)
            quantiles[name] = whole_run_quantiles(fr["samples"], th)
        if len(f):
            found.append(f.assign(target=[t if t else name for t in f["target"]]))
    findings = pd.concat(found, ignore_index=True) if found else None
    records = [] if findings is None else [
        {**Finding(**{c: r[c] for c in findings.columns}).to_json(), "start": _iso(r["start_ns"]), "end": _iso(r["end_ns"])}
        for _, r in findings.iterrows()]
    return {"findings": records, "quantiles": quantiles, "sources": sources, "thresholds": th,
            "signals": pd.concat(sigs, ignore_index=True) if sigs else None, "findings_frame": findings,
            "roofline": roof}


def render_text(result: dict) -> str:
    from rich.console import Console
    from rich.table import Table

    from stallscope.render.html import _iso as iso

    con = Console(record=True, file=io.StringIO(), width=120, highlight=False)
    src = Table(title="sources")
    for c in ("name", "source", "samples", "gpu rows", "steps", "from", "to"):
        src.add_column(c)
    for k, v in result["sources"].items():
        src.add_row(k, v["source"], str(v["samples"]), str(v["gpu"]), str(v["steps"]), str(v["start"]), str(v["end"]))
    con.print(src)
    q = Table(title="whole-run quantiles (the bucket each falls in)")
    for c in ("target", "ITL P50", "ITL P99", "TTFT P50", "TTFT P99", "stream time in ITL gaps > SLO"):
        q.add_column(c)
    for t, v in result["quantiles"].items():
        q.add_row(t, *(v.get(k, {}).get("text", "n/a") for k in ("itl_p50", "itl_p99", "ttft_p50", "ttft_p99",
                                                                  "itl_time_above_slo")))
    con.print(q)
    fs = result["findings"]
    con.print(f"[bold]findings: {len(fs)}[/]" if fs else "findings: none")
    for f in fs:
        con.print(f"[bold]{f['severity'].upper()}[/] {f['kind']} on {f['target'] or 'all'}  "
                  f"{iso(f['start_ns'])} - {iso(f['end_ns'])}", markup=True)
        con.print("  " + f["explanation"], markup=False)
        con.print("  recommendation: " + f["recommendation"], markup=False)
    return con.export_text()


def finish(args, report: dict) -> int:
    """Write --html and map --fail-on to the exit code (1 when any finding is at or above it)."""
    from stallscope.analyzers.findings import severity_rank

    result = getattr(args, "_metrics_result", None)
    if args.html:
        from stallscope.render.html import render_html

        page = {"title": "stallscope analysis", "findings": report.get("findings", []),
                "quantiles": report.get("quantiles", {}), "sources": report.get("sources", {}),
                "thresholds": (result or {}).get("thresholds"), "signals": (result or {}).get("signals"),
                "findings_frame": (result or {}).get("findings_frame"), "roofline": (result or {}).get("roofline")}
        try:
            Path(args.html).write_text(render_html(page), encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write --html {args.html}: {exc.strerror}") from None
        sys.stderr.write(f"stallscope: wrote {args.html}\n")
    floor = severity_rank(args.fail_on)
    return 1 if any(severity_rank(f.get("severity", "info")) >= floor for f in report.get("findings", [])) else 0


def from_metrics(args):
    """The `SourceResult` of the metric sources (analyze's per-source seam)."""
    from stallscope.cli.analyze import SourceResult

    result = analyze(args)
    args._metrics_result = result
    text = render_text(result) if args.format == "text" else ""
    return SourceResult(sections={"quantiles": result["quantiles"], "sources": result["sources"]},
                        findings=result["findings"], text=text)


__all__ = ["add_arguments", "from_metrics", "finish", "analyze", "json"]
