"""One entry point from any source to the frames the analyzers take.

    load(source, start=None, end=None, *, targets=None, selector=None, step=None, headers=None)
        -> dict[str, dict[str, pandas.DataFrame]]        # {target: {"samples": df, "gpu": df}}

`source` is one of:
  * a store file written by `stallscope collect` (`*.db`, SQLite);
  * a repro run directory `DIR/<arm>/scrapes.jsonl` (docs/run-directory.md): pass `DIR/<arm>` for one
    arm (targets keyed by their names, e.g. "vllm"), or `DIR` for every arm (keys "<arm>/<target>");
  * a `scrapes.jsonl` file, one `{"ts": unix_s, "target": "vllm", "text": "<exposition>"}` per line;
  * a Prometheus-compatible HTTP API base URL (`http://host:9090`, Thanos, Mimir), read with
    `query_range` (`selector` = label matchers such as {"instance": "...", "model_name": "...",
    "pod": "..."}; `step` = resolution, default 5 s; targets keyed by the `job` label).
`start`/`end` bound the time range (inclusive): int ns since the epoch, a datetime/pandas Timestamp
or an ISO-8601 string; None means open (a Prometheus source needs both, or defaults to the last hour).
Every frame passes `schema.validate` and carries a `target` column; frames read from a store hold their
string columns as pandas Categorical (compare with ==, isin, .str as usual; group with observed=True). Rows whose text cannot be parsed
in a jsonl source are skipped with a warning naming the line; a missing or unreadable source raises
CollectorError naming it.

    >>> frames = load("runs/demo/chunked")                       # a repro arm
    >>> frames["vllm"]["samples"].query("metric == 'vllm:kv_cache_usage_perc'")
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from stallscope.collectors import dcgm, vllm
from stallscope.collectors.exposition import ParseCache
from stallscope.collectors.run_dir import scrape_files
from stallscope.core import schema
from stallscope.core.errors import CollectorError

log = logging.getLogger(__name__)
Frames = dict[str, dict[str, pd.DataFrame]]


def load(source: str | Path, start=None, end=None, *, targets: list[str] | None = None,
         selector: dict[str, str] | None = None, step=None, headers: dict[str, str] | None = None) -> Frames:
    """Frames per target from a store, a run directory, a scrapes.jsonl or a Prometheus URL (see module doc).

    `headers` go with every Prometheus API request (e.g. {"X-Scope-OrgID": "tenant"} for Mimir).
    NaN and ±Inf values are dropped here (`drop_nonfinite`), one warning per series.
    """
    return {target: {kind: drop_nonfinite(df, kind, target) for kind, df in fr.items()}
            for target, fr in _load(source, start, end, targets, selector, step, headers).items()}


def drop_nonfinite(df: pd.DataFrame, kind: str, target: str) -> pd.DataFrame:
    """`df` without its NaN/±Inf values: the one place they become missing for the analyzers' arithmetic.

    Sources keep them as scraped (Prometheus stores them; the store too); a value that is not finite
    means "unknown" here, never a number to average, sum or size a cache with. One warning per series.
    """
    values = df["value"].to_numpy(np.float64)
    bad = ~np.isfinite(values)
    if not bad.any():
        return df
    rows = df[bad]
    if kind == "samples":
        keys = [f"{m}{_labels(lab, le)}" for m, lab, le in zip(rows["metric"], rows["labels"], rows["le"])]
    else:
        keys = [f'{m}{{gpu="{g}",uuid="{u}"}}' for m, g, u in zip(rows["metric"], rows["gpu"], rows["uuid"])]
    seen: dict[str, list] = {}
    for k, v in zip(keys, values[bad]):
        seen.setdefault(k, []).append("NaN" if v != v else ("+Inf" if v > 0 else "-Inf"))
    for k, kinds in seen.items():
        n, kinds = len(kinds), sorted(set(kinds))
        log.warning("target %s: %s has %d non-finite value%s (%s); treated as missing", target, k[:300], n,
                    "s" * (n != 1), ", ".join(sorted(kinds)))
    return df[~bad].reset_index(drop=True)


def _labels(labels: dict, le: float) -> str:
    items = [*labels.items(), *([("le", f"{le:g}")] if le == le else [])]
    return "{" + ",".join(f'{k}="{v}"' for k, v in items) + "}" if items else ""


def _load(source, start, end, targets, selector, step, headers) -> Frames:
    lo, hi = to_ns(start, "start"), to_ns(end, "end")
    text = str(source)
    if text.startswith(("http://", "https://")):
        from stallscope.collectors import prometheus_api

        return prometheus_api.load(text, lo, hi, selector=selector or {}, step=step, targets=targets,
                                   headers=headers)
    path = Path(source)
    if not path.exists():
        raise CollectorError(f"source {path} does not exist (expected a store .db, a run directory, "
                             "a scrapes.jsonl or an http:// Prometheus URL)")
    if path.is_dir():
        return _load_run_dir(path, lo, hi, targets)
    if path.suffix == ".jsonl":
        return _load_jsonl(path, lo, hi, targets)
    from stallscope.collectors import store

    con = store.connect_ro(path)
    try:
        return store.read(con, lo, hi, targets)
    finally:
        con.close()


def to_ns(value, what: str = "time") -> int | None:
    """int ns (kept), datetime/Timestamp or ISO string → int ns since the epoch; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise CollectorError(f"{what} must be a time, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, (str, _dt.datetime, pd.Timestamp)):
        try:
            ts = pd.Timestamp(value)
        except (ValueError, TypeError):
            raise CollectorError(f"{what} {value!r} is not a time (use ISO-8601 or int ns)") from None
        if ts.tzinfo is None:
            ts = ts.tz_localize("UTC")
        return int(ts.value)
    raise CollectorError(f"{what} must be int ns, a datetime or an ISO string, got {type(value).__name__} {value!r}")


def _load_run_dir(path: Path, lo, hi, targets) -> Frames:
    return {prefix + name: frames for prefix, f in scrape_files(path)
            for name, frames in _load_jsonl(f, lo, hi, targets).items()}


def iter_jsonl(path: Path, on_skip=None):
    """(line number, ts ns, target, text) for each well-formed line; bad lines are logged, skipped and
    reported to `on_skip(line_number, reason)` when given."""
    try:
        fh = open(path, encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CollectorError(f"cannot read {path}: {exc.strerror}") from None
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                ts = int(round(float(obj["ts"]) * 1e9))
                target, text = str(obj["target"]), obj["text"]
                if not isinstance(text, str):
                    raise TypeError("text is not a string")
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("%s:%d: skipped, not a scrape record (%s)", path, n, exc)
                if on_skip is not None:
                    on_skip(n, str(exc))
                continue
            yield n, ts, target, text


def _load_jsonl(path: Path, lo, hi, targets) -> Frames:
    parts: dict[str, dict[str, list]] = {}
    caches: dict[str, ParseCache] = {}
    for n, ts, target, text in iter_jsonl(path):
        if (lo is not None and ts < lo) or (hi is not None and ts > hi) or (targets and target not in targets):
            continue
        try:
            kind, df = parse_scrape(text, ts, caches.setdefault(target, ParseCache()))
        except CollectorError as exc:
            log.warning("%s:%d: skipped: %s", path, n, exc)
            continue
        parts.setdefault(target, {"samples": [], "gpu": []})[kind].append(df)
    return {t: {k: _concat(v, k, t) for k, v in kinds.items()} for t, kinds in sorted(parts.items())}


def parse_scrape(text: str, ts: int, cache: ParseCache | None = None) -> tuple[str, pd.DataFrame]:
    """("gpu", frame) for a dcgm-exporter body (it carries DCGM field names), else ("samples", frame)."""
    if "DCGM_FI_" in text:
        return "gpu", dcgm.parse(text, ts, cache=cache)
    return "samples", vllm.parse(text, ts, cache=cache)


def _concat(frames: list[pd.DataFrame], kind: str, target: str) -> pd.DataFrame:
    df = pd.concat(frames, ignore_index=True) if frames else schema.empty(kind)
    df = df.fillna({c: "" for c in ("pod", "namespace", "container", "gpu_instance") if c in df})  # absent in some
    return schema.validate(df.assign(target=pd.Series(target, index=df.index, dtype=object)), kind)
