"""The dashboard's one data-access object: frames from a store, a run directory or Prometheus,
cached per data version, downsampled on the server, and reloaded in live mode.

Pages never open files and never see a path: they call `current()` and ask it for views
(`quantiles`, `gauge`, `rate`, `gpu_metric`, `steps`, `findings`, `health`), each at most
`max_points` points per series so a 24 h store renders fast. Tests swap the source with `use()`.
Views delegate the analysis to `stallscope.analyzers` (see `views.py`).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from stallscope.core import schema
from stallscope.core.config import load_thresholds
from stallscope.core.errors import InputError
from stallscope.dashboards import views
from stallscope.dashboards.views import series_name

log = logging.getLogger(__name__)
FRAME_KINDS = ("samples", "gpu", "steps", "findings")

_CURRENT: "DataSource | None" = None


def use(source: "DataSource") -> "DataSource":
    """Make `source` the one the pages read (the app does this at start; tests swap it)."""
    global _CURRENT
    _CURRENT = source
    return source


def current() -> "DataSource":
    if _CURRENT is None:
        raise InputError("no dashboard data source configured; start with --db, --run or --prometheus")
    return _CURRENT


def downsample(frame: pd.DataFrame, max_points: int, *, ts="ts", by="series", agg="max") -> pd.DataFrame:
    """At most `max_points` rows per `by` group: bin `ts` evenly and take `agg` of every other column.

    `max` keeps spikes visible (a stall must not average away). `ts` becomes the bin's first time.
    """
    if frame.empty:
        return frame
    codes, uniques = pd.factorize(frame[by])
    if np.bincount(codes).max() <= max_points:
        return frame
    t = frame[ts].to_numpy(dtype=np.int64)
    lo, hi = int(t.min()), int(t.max())
    width = max(1, -(-(hi - lo + 1) // max_points))
    key = codes.astype(np.int64) * (max_points + 1) + (t - lo) // width   # integer keys: one cheap groupby
    value_cols = [c for c in frame.columns if c not in (ts, by)]
    out = frame[[ts, *value_cols]].groupby(key, sort=True).agg({ts: "min", **{c: agg for c in value_cols}})
    out[by] = np.asarray(uniques, dtype=object)[out.index.to_numpy() // (max_points + 1)]
    return out.reset_index(drop=True)[frame.columns]


class DataSource:
    """Frames behind the pages.

    Example:
        >>> src = DataSource.from_frames({"samples": samples_frame})
        >>> src.gauge("vllm:kv_cache_usage_perc").columns.tolist()
        ['ts', 'series', 'value']
    """

    def __init__(self, load: Callable[[], dict], *, name: str, probe: Callable[[], object] | None = None,
                 live: bool = False, max_points: int = 600, thresholds: dict | None = None):
        self._load, self._probe, self.name, self.live = load, probe, name, live
        self.max_points = max_points
        self.thresholds = thresholds or load_thresholds()
        self._lock = threading.Lock()
        self._snap: _Snapshot | None = None
        self._reloading = False

    # --- constructors -------------------------------------------------------------------------
    @classmethod
    def from_frames(cls, frames: dict, *, name: str = "frames", **kw) -> "DataSource":
        frames = {k: frames[k] for k in FRAME_KINDS if k in frames}
        return cls(lambda: frames, name=name, **kw)

    @classmethod
    def from_db(cls, path, *, live: bool = True, **kw) -> "DataSource":
        path = Path(path)
        if not path.is_file():
            raise InputError(f"store not found: {path}")

        def probe():  # the WAL file changes first while a collector writes
            return tuple(_stat(p) for p in (path, Path(f"{path}-wal")))
        return cls(lambda: views.load_source(db=path), name=f"store {path.name}", probe=probe, live=live, **kw)

    @classmethod
    def from_run(cls, path, **kw) -> "DataSource":
        path = Path(path)
        if not path.is_dir():
            raise InputError(f"run directory not found: {path}")
        return cls(lambda: views.load_run(path), name=f"run {path.name}", **kw)

    def with_run(self, path) -> "DataSource":
        """This source with a run directory's step traces and what-if inputs (a store imported from it)."""
        path = Path(path)
        if not path.is_dir():
            raise InputError(f"run directory not found: {path}")
        base = self._load
        self._load = lambda: {**(base() or {}), **views.run_parts(path)}
        return self

    def with_chunking(self, chunking) -> "DataSource":
        """This source with the chunked-prefill configuration the user stated (analyzers.chunking.Chunking) for
        every target a run directory's server.json does not configure."""
        base = self._load

        def load() -> dict:
            loaded = base() or {}
            known = {arm: c for arm, c in (loaded.get("chunking") or {}).items() if c is not None}
            return {**loaded, "chunking": {"": chunking, **known}}

        self._load = load
        return self

    @classmethod
    def from_prometheus(cls, url: str, *, selector: str = "", since_s: float = 3600, live: bool = True,
                        fleet: bool = False, **kw) -> "DataSource":
        """Raw series of the selected targets; with `fleet`, none until the Fleet page focuses one replica
        (the pages then show that replica's raw series) and the Fleet page triages the whole selector."""
        if not url.startswith(("http://", "https://")):
            raise InputError(f"--prometheus must be an http(s) URL, got {url!r}")
        period = kw.pop("refresh_s", 15)
        focus: dict = {}

        def load():
            if fleet and not focus:
                return {}
            return views.load_source(prometheus=url, selector=selector, since_s=since_s, focus=focus)
        src = cls(load, name=f"prometheus {url}", probe=lambda: int(time.time() // period), live=live, **kw)
        src._focus = focus
        src.fleet = lambda: views.fleet_triage(url, selector, since_s, src.thresholds)
        return src

    def focus(self, labels: dict) -> None:
        """Show one replica (its identity labels as equality matchers) on every page from now on."""
        if getattr(self, "_focus", None) is None:
            raise InputError(f"{self.name} is not a Prometheus source: it cannot focus a replica")
        self._focus.clear()
        self._focus.update(labels)
        with self._lock:
            self._snap = None
        self.name = self.name.split(" [", 1)[0] + " [" + ", ".join(f"{k}={v}" for k, v in labels.items()) + "]"

    def fleet_report(self):
        """The fleet triage of this source (a Prometheus source), recomputed at most every 5 minutes; None
        for other sources."""
        if getattr(self, "fleet", None) is None:
            return None
        key = int(time.time() // 300)
        cached = getattr(self, "_fleet_cache", None)
        if cached is None or cached[0] != key:
            self._fleet_cache = (key, self.fleet())
        return self._fleet_cache[1]

    def with_trace(self, path) -> "DataSource":
        """This source with its steps frame read from an nsys export or a step-trace JSONL."""
        path = Path(path)
        if not path.is_file():
            raise InputError(f"trace file not found: {path}")
        return self.with_steps(lambda: views.load_steps(path))

    def with_steps(self, load_steps: Callable[[], pd.DataFrame | None]) -> "DataSource":
        """This source with its steps frame from `load_steps()` (called at every reload)."""
        base = self._load
        self._load = lambda: {**(base() or {}), "steps": load_steps()}
        return self

    # --- frames and caching -------------------------------------------------------------------
    def snapshot(self) -> "_Snapshot":
        """The current data version. The first load is synchronous; in live mode a changed probe starts
        a background reload and pages keep reading the last complete version until it lands."""
        with self._lock:
            if self._snap is None:
                self._snap = self._build(self._probe() if self._probe else None, 1)
            elif self.live and not self._reloading:
                stamp = self._probe() if self._probe else None
                if stamp != self._snap.stamp:
                    self._reloading = True
                    threading.Thread(target=self._reload, args=(stamp,), daemon=True,
                                     name="stallscope-dashboard-reload").start()
            return self._snap

    def _reload(self, stamp) -> None:
        try:
            snap = self._build(stamp, self._snap.version + 1)
            with self._lock:
                self._snap = snap
        except Exception as exc:  # keep serving the last good version; say why once per attempt
            log.warning("dashboard reload of %s failed: %s", self.name, exc)
        finally:
            self._reloading = False

    def _build(self, stamp, version: int) -> "_Snapshot":
        loaded = self._load() or {}
        frames = {k: _checked(loaded.get(k), k) for k in FRAME_KINDS}
        memo = {(kind, "index"): frames[kind].groupby("metric", sort=False).indices  # rows of each metric
                for kind in ("samples", "gpu")}
        inputs = memo[("whatif_inputs",)] = loaded.get("whatif_inputs")
        memo[("findings",)] = views.findings(                            # the diagnosis is part of loading
            frames, self.thresholds, whatif_inputs=None if isinstance(inputs, str) else inputs,
            chunking=loaded.get("chunking"))
        return _Snapshot(frames, memo, stamp, version)

    @property
    def version(self) -> int:
        return self.snapshot().version

    def frames(self) -> dict:
        """All frames of the current version (empty ones for kinds the source lacks)."""
        return self.snapshot().frames

    def memo(self, key, compute: Callable[[], object]):
        """`compute()` once per data version (views are pure functions of the frames)."""
        memo = self.snapshot().memo
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    def metric_rows(self, metric: str) -> pd.DataFrame:
        """Rows of one samples metric with a `series` column, sorted by time."""
        def compute():
            s = self.frames()["samples"]
            index = self.snapshot().memo[("samples", "index")]
            rows = s.iloc[index.get(metric, np.array([], dtype=np.int64))]
            target = rows["target"].fillna("").to_numpy(dtype=object) if "target" in rows else np.full(len(rows), "", object)
            labels = rows["labels"].to_numpy(dtype=object)
            # Name each distinct (label dict object, target) once: parsers share one dict per series.
            obj_codes = np.unique(np.fromiter(map(id, labels), np.int64, len(labels)), return_inverse=True)[1]
            t_codes, t_uniques = pd.factorize(target)
            pair = obj_codes.astype(np.int64) * max(len(t_uniques), 1) + t_codes
            _, uniq_pos, codes = np.unique(pair, return_index=True, return_inverse=True)
            names = np.array([series_name(target[i], labels[i]) for i in uniq_pos] or [""], dtype=object)
            return rows.assign(series=names[codes]).sort_values("ts", kind="stable")
        return self.memo(("rows", metric), compute)

    # --- views (memoised, downsampled) --------------------------------------------------------
    def gauge(self, metric: str) -> pd.DataFrame:
        """`ts, series, value` of a gauge, downsampled."""
        return self.memo(("gauge", metric), lambda: downsample(
            self.metric_rows(metric)[["ts", "series", "value"]].reset_index(drop=True), self.max_points))

    def rate(self, metric: str) -> pd.DataFrame:
        """`ts, series, value` per-second rate of a counter (resets count from zero), downsampled."""
        return self.memo(("rate", metric), lambda: downsample(
            views.counter_rate(self.metric_rows(metric)), self.max_points))

    def quantiles(self, family: str, qs=(0.5, 0.99), window_s: float | None = None,
                  grouping: str = "model") -> pd.DataFrame:
        """`ts, series, q, value, lower, upper` for a histogram family, e.g. `vllm:inter_token_latency_seconds`,
        pooled per `grouping` (model, instance or engine)."""
        return self.memo(("quantiles", family, tuple(qs), window_s, grouping), lambda: views.quantiles(
            self.metric_rows(family + "_bucket"), qs, max_points=self.max_points, window_s=window_s,
            grouping=grouping))

    def request_views(self, grouping: str = "model", models: tuple[str, ...] = ()) -> dict:
        """The request-level views (`analyzers/request_views`) of every target pooled, per `grouping`
        (model, instance, engine), of `models` only when given (the model picker):
        {"series": {view key: frame}, "heatmaps": {...}, "summary": frame}."""
        from stallscope.analyzers.sources import request_views_of

        selector = [("model_name", "=~", "|".join(re.escape(m) for m in models))] if models else None
        return self.memo(("request_views", grouping, tuple(models)), lambda: request_views_of(
            {"all": {"samples": self.frames()["samples"]}}, grouping, selector))

    def model_names(self) -> list[str]:
        """The `model_name` values of the samples (the model picker's options)."""
        def compute():
            labels = self.frames()["samples"]["labels"].to_numpy(dtype=object)
            unique = {id(d): d for d in labels}.values()     # parsers share one dict per series
            return sorted({d["model_name"] for d in unique if isinstance(d, dict) and d.get("model_name")})
        return self.memo(("model_names",), compute)

    def gpu_metric(self, metric: str) -> pd.DataFrame:
        """`ts, series, value` of one canonical GPU metric, a series per GPU, downsampled."""
        def compute():
            g = self.frames()["gpu"]
            index = self.snapshot().memo[("gpu", "index")]
            rows = g.iloc[index.get(metric, np.array([], dtype=np.int64))]
            host_codes, hosts = pd.factorize(rows["hostname"].astype(object))
            gpu_codes, gpus = pd.factorize(rows["gpu"].astype(object))
            pair = host_codes.astype(np.int64) * max(len(gpus), 1) + gpu_codes
            names = np.array([f"{h} gpu{g}" for h in hosts for g in gpus] or [""], dtype=object)[pair]
            out = pd.DataFrame({"ts": rows["ts"].to_numpy(), "series": names, "value": rows["value"].to_numpy()})
            return downsample(out.sort_values("ts", kind="stable"), self.max_points, agg="mean")
        return self.memo(("gpu", metric), compute)

    def whatif_inputs(self):
        """A run's what-if inputs (stallscope.analyzers.budget.WhatifInputs, as `stallscope whatif --from`
        resolves them), a sentence saying why the run cannot give them, or None for other sources."""
        return self.snapshot().memo[("whatif_inputs",)]

    def findings(self) -> pd.DataFrame:
        """The findings frame: the loaded one, else what the analyzers found when the data was loaded."""
        return self.snapshot().memo[("findings",)]

    def health(self) -> pd.DataFrame:
        """Per scrape target: `target, up, last_scrape_ns, samples`."""
        return self.memo(("health",), lambda: views.health(self.frames()["samples"], self.metric_rows("up")))

    def step_targets(self) -> list[str]:
        """The arms (or sources) the steps frame holds, e.g. ["off", "on"]; [] when it has one."""
        steps = self.frames()["steps"]
        return sorted(steps["target"].dropna().unique().tolist()) if "target" in steps and len(steps) else []

    def steps(self, start_ns: int | None = None, end_ns: int | None = None, max_bars: int = 1500,
              target: str | None = None) -> pd.DataFrame:
        """Steps in a time range with `phase` and `stall`; above `max_bars`, the longest step per time bin."""
        marked = self.memo(("steps", target), lambda: views.mark_steps(self._steps_of(target)))
        if start_ns is not None:
            marked = marked[marked["end_ns"] >= start_ns]
        if end_ns is not None:
            marked = marked[marked["start_ns"] <= end_ns]
        return views.longest_per_bin(marked, max_bars)

    def _steps_of(self, target):
        steps = self.frames()["steps"]
        if target is None or "target" not in steps:
            return steps
        return steps[steps["target"] == target].reset_index(drop=True)


@dataclass
class _Snapshot:
    """One loaded data version: the frames and what has been computed from them."""
    frames: dict
    memo: dict
    stamp: object
    version: int


def _stat(p: Path):
    try:
        st = os.stat(p)
        return st.st_mtime_ns, st.st_size
    except OSError:
        return None


def _checked(frame, kind):
    if frame is None:
        out = schema.empty(kind)
        return out.assign(target=pd.Series(dtype=object)) if kind in ("samples", "gpu") else out
    schema.validate(frame, kind)
    if kind in ("samples", "gpu") and "target" not in frame:
        frame = frame.assign(target="")
    return frame
