"""Fleet source: a Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir) → the same frames as the store.

The idea: three `query_range` selectors fetch the raw series over the window at resolution `step` —
`{__name__=~"(ray_)?vllm[:_].+"}` (every spelling, `vllm.PREFIXES`), `{__name__=~"DCGM_FI_.+"}` and the scrape meta series `up` /
`scrape_duration_seconds` — each narrowed by the caller's label selector (instance, model_name, pod,
…; `model_name` is not applied to DCGM or `up`, which do not carry it). Every returned series then goes
through the same vocabulary as a scraped text: vLLM's alias table (with the blocks unit of 0.8.x read
from `/api/v1/metadata`), `_created` series dropped, `le` split off; DCGM fields mapped to canonical
names and base units. Targets are keyed by the `job` label; `instance` stays in the labels. Long
windows are split so no query asks for more than 10,000 points per series (Prometheus allows 11,000).

    >>> frames = load("http://127.0.0.1:9090", start_ns, end_ns, selector={"model_name": "tiny"}, step="5s")
"""

from __future__ import annotations

import json
import math
import re
import time

import numpy as np
import pandas as pd
import requests

from stallscope.core import schema
from stallscope.collectors import dcgm, vllm
from stallscope.core.errors import CollectorError

MAX_POINTS = 10_000
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")  # validates selector keys, not exposition
_NOT_ON_DCGM = {"model_name", "engine"}


def matchers(selector: dict[str, str], drop: set[str] = frozenset()) -> str:
    """PromQL label matchers for an exact-match selector: {"pod": "a"} → `,pod="a"`."""
    out = []
    for key, value in selector.items():
        if not _LABEL_NAME.match(str(key)) or key == "__name__":
            raise CollectorError(f"selector label {key!r} is not a valid Prometheus label name")
        if key in drop:
            continue
        escaped = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        out.append(f',{key}="{escaped}"')
    return "".join(out)


def _status(exc: CollectorError, status: int | None) -> CollectorError:
    exc.status = status
    return exc


def _step_seconds(step) -> float:
    from stallscope.core.config import parse_duration
    from stallscope.core.errors import ConfigError

    try:
        value = parse_duration(step if step is not None else "5s")
    except ConfigError as exc:
        raise CollectorError(f"step: {exc}") from None
    if value <= 0:
        raise CollectorError(f"step must be positive, got {step!r}")
    return value


class Client:
    """query_range / metadata against one API base URL (e.g. http://prom:9090 or a Mimir /prometheus)."""

    def __init__(self, url: str, timeout: float = 30.0, headers: dict[str, str] | None = None):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update(headers or {})
        self.bytes_received = 0  # answer bodies, for the fleet path's accounting
        self.warnings: list[str] = []  # `warnings` of successful answers (Thanos/Mimir partial responses)

    def _get(self, path: str, params: dict, post: bool = False) -> dict:
        """`data` of one API answer; a failure is one CollectorError whose `status` is the HTTP status
        (None when unreachable). `post` sends the parameters as a form (long fleet queries)."""
        try:
            if post:
                r = self.session.post(f"{self.url}/api/v1/{path}", data=params, timeout=self.timeout)
            else:
                r = self.session.get(f"{self.url}/api/v1/{path}", params=params, timeout=self.timeout)
        except requests.RequestException as exc:
            raise _status(CollectorError(f"Prometheus API {self.url} unreachable: {type(exc).__name__}"), None) from None
        self.bytes_received += len(r.content)
        try:
            body = r.json()
        except ValueError:
            raise _status(CollectorError(f"Prometheus API {self.url}/api/v1/{path} answered HTTP {r.status_code} "
                                         "with a body that is not JSON"), r.status_code) from None
        if not isinstance(body, dict):
            raise self._shape(path, f"JSON {json.dumps(body)[:60]} instead of an object")
        if r.status_code != 200 or body.get("status") != "success":
            raise _status(CollectorError(f"Prometheus API {self.url} rejected {path}: "
                                         f"{body.get('errorType', r.status_code)}: {str(body.get('error', ''))[:200]}"),
                          r.status_code)
        if not isinstance(body.get("data"), dict):
            raise self._shape(path, "no `data` object")
        if isinstance(body.get("warnings"), list):
            self.warnings += [str(w)[:300] for w in body["warnings"]]
        return body["data"]

    def _shape(self, path: str, what: str) -> CollectorError:
        return CollectorError(f"Prometheus API {self.url}/api/v1/{path} answered {what}")

    def _matrix(self, data: dict) -> list[dict]:
        """`data.result` of a query_range answer, checked: each series a `metric` of string labels
        with `__name__`, and `values` of [unix seconds, "number"] pairs (read as floats here)."""
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise self._shape("query_range", f"resultType {data.get('resultType')!r} with no `result` list "
                                             "(expected a matrix)")
        out = []
        for i, series in enumerate(result):
            metric = series.get("metric") if isinstance(series, dict) else None
            if not isinstance(metric, dict) or not all(isinstance(v, str) for v in metric.values()):
                raise self._shape("query_range", f"series {i} without a `metric` object of string labels")
            if not isinstance(metric.get("__name__"), str):
                raise self._shape("query_range", f"series {i} without `__name__`: {str(metric)[:120]}")
            try:
                float(metric.get("le", 0))
            except ValueError:
                raise self._shape("query_range", f"series {metric['__name__']} with a bucket bound "
                                                 f"le={metric['le'][:40]!r}, not a number") from None
            values = series.get("values")
            if not isinstance(values, list):
                raise self._shape("query_range", f"series {metric['__name__']} without a `values` list")
            out.append({"metric": metric, "values": [self._point(metric["__name__"], p) for p in values]})
        return out

    def _point(self, name: str, point) -> tuple[float, float]:
        try:
            t, v = point
            t, v = float(t), float(v)
        except (TypeError, ValueError):
            raise self._shape("query_range", f"a sample of {name} that is not [time, number]: "
                                             f"{str(point)[:80]}") from None
        if not 0 <= t < 9e9:  # NaN/Inf or out of int64 ns
            raise self._shape("query_range", f"a sample of {name} at time {t!r}, not a unix time in seconds")
        return t, v

    def query_range(self, expr: str, start_s: float, end_s: float, step_s: float) -> list[dict]:
        """Series of a range query, with windows split to stay under MAX_POINTS per series."""
        merged: dict[tuple, dict] = {}
        t = start_s
        while t <= end_s:
            stop = min(end_s, t + step_s * (MAX_POINTS - 1))
            for series in self._matrix(self._get("query_range", {"query": expr, "start": f"{t:.3f}",
                                                                 "end": f"{stop:.3f}", "step": f"{step_s:g}"})):
                key = tuple(sorted(series["metric"].items()))
                merged.setdefault(key, {"metric": series["metric"], "values": []})["values"] += series["values"]
            t = stop + step_s
        return list(merged.values())

    def help_text(self, metric: str) -> str:
        try:
            entries = self._get("metadata", {"metric": metric}).get(metric, [])
        except CollectorError:
            return ""  # metadata is optional (older Thanos/Mimir); the unit flag is then unknown
        return " ".join(str(e.get("help", "")) for e in entries if isinstance(e, dict)) if isinstance(entries, list) else ""


def load(url: str, start_ns: int | None, end_ns: int | None, *, selector: dict[str, str], step=None,
         targets: list[str] | None = None, timeout: float = 30.0, headers: dict[str, str] | None = None):
    """{job: {"samples": df, "gpu": df}} for start..end (ns; default the last hour) at resolution `step`."""
    end_s = time.time() if end_ns is None else end_ns / 1e9
    start_s = end_s - 3600 if start_ns is None else start_ns / 1e9
    if start_s > end_s:
        raise CollectorError(f"start {start_ns} is after end {end_ns}")
    step_s = _step_seconds(step)
    client = Client(url, timeout, headers)
    sel, sel_gpu = matchers(selector), matchers(selector, _NOT_ON_DCGM)
    if targets:
        jobs = "|".join(re.escape(t) for t in targets)
        sel, sel_gpu = sel + f',job=~"{jobs}"', sel_gpu + f',job=~"{jobs}"'
    vllm_series = client.query_range(f'{{__name__=~"{vllm.PROMQL_NAME_RE}"{sel}}}', start_s, end_s, step_s)
    meta = client.query_range(f'{{__name__=~"up|scrape_duration_seconds"{sel_gpu}}}', start_s, end_s, step_s)
    gpu_series = client.query_range(f'{{__name__=~"DCGM_FI_.+"{sel_gpu}}}', start_s, end_s, step_s)
    blocks = {old for old, raw in _raw_families(vllm_series).items() if "blocks" in client.help_text(raw + "_total")}
    samples = _samples_rows(vllm_series + meta, blocks)
    gpu = _gpu_rows(gpu_series)
    jobs = sorted(set(samples) | set(gpu))
    return {job: {"samples": _samples_frame(samples.get(job, []), job), "gpu": _gpu_frame(gpu.get(job, []), job)}
            for job in jobs}


def _samples_rows(series: list[dict], blocks: set[str]) -> dict[str, list]:
    # spelling and alias resolution is per scrape target, as in vllm.parse: (job, instance) → names
    present: dict[tuple, set] = {}
    for s in series:
        present.setdefault((s["metric"].get("job"), s["metric"].get("instance")), set()).add(s["metric"]["__name__"])
    dropped = {key: vllm.superseded(names) for key, names in present.items()}
    out: dict[str, list] = {}
    for s in series:
        m = dict(s["metric"])
        name = m.pop("__name__")
        job = m.pop("job", "prometheus")
        if name.endswith("_created"):
            continue
        metric, old = vllm.canonical(name)
        if name in dropped[(s["metric"].get("job"), m.get("instance"))]:
            continue  # both spellings scraped: today's name wins, as in vllm.parse
        if old in blocks:
            m["unit"] = "blocks"
        le = float(m.pop("le")) if "le" in m else math.nan
        for t, v in s["values"]:
            out.setdefault(job, []).append((int(round(float(t) * 1e9)), metric, name, m, le, float(v)))
    return out


def _raw_families(series: list[dict]) -> dict[str, str]:
    """{old family that may count blocks: its name as scraped (any prefix spelling)} of the series present."""
    out = {}
    for s in series:
        raw = s["metric"]["__name__"]
        for old in vllm.MAY_BE_BLOCKS:
            if vllm.spelling(raw).startswith(old):
                out[old] = raw[:len(raw) - len(vllm.spelling(raw)) + len(old)]
    return out


def _samples_frame(rows: list, job: str) -> pd.DataFrame:
    rows.sort(key=lambda r: r[0])
    ts, metric, source, labels, le, value = zip(*rows) if rows else ((),) * 6
    return schema.samples_frame(ts, metric, source, labels, le, value, target=job)


def _gpu_rows(series: list[dict]) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in series:
        m = s["metric"]
        counter = m["__name__"].removesuffix("_total") in dcgm.COUNTERS
        mapped = dcgm.map_sample(m["__name__"], m, counter)
        if mapped is None or not s["values"]:
            continue
        metric, factor, _, lab = mapped
        ts, values = zip(*s["values"])
        values = np.array(values, dtype=np.float64)
        out.setdefault(m.get("job", "prometheus"), []).extend(
            (int(round(float(t) * 1e9)), metric, lab, v * factor)
            for t, v, b in zip(ts, values.tolist(), dcgm.blank(values, counter)) if not b)
    return out


def _gpu_frame(rows: list, job: str) -> pd.DataFrame:
    rows.sort(key=lambda r: r[0])
    ts, metric, labels, value = zip(*rows) if rows else ((),) * 4
    return schema.gpu_frame(ts, metric=metric, value=value, target=job,
                            **{c: [lab[c] for lab in labels] for c in dcgm.COLUMNS})
