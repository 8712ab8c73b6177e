"""Bounded fleet queries: many `query_range` requests against one Prometheus-compatible API, in parallel.

The idea: a fleet query is split so that no answer is too large, then run with bounded concurrency.

1. Time: a range is cut into chunks of at most `MAX_POINTS` steps (Prometheus refuses more than 11,000
   points per series).
2. Replicas: the caller passes one job per replica group (an expression whose selector names the group);
   `group_size` sizes the groups so that the worst-case answer of one job, held by every worker at
   once, stays within the memory budget (`BYTES_PER_POINT` per parsed point).
3. Each request goes through `prometheus_api.Client` (timeouts, headers, one-line errors; parameters
   POSTed, as group selectors make long queries) with `stats=all`, so the server's own evaluation time is
   summed beside ours. Unreachable, 429 and 5xx answers are retried with exponential backoff; any other
   failure, or one that persists, is kept per group in `Answer.failures`, never dropped. Only when every
   job failed is the first failure raised. An answer that succeeded with `warnings` (Thanos or Mimir
   answering from part of their stores) is kept, and its warnings are listed per group too.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

import numpy as np

from stallscope.collectors.prometheus_api import MAX_POINTS, Client
from stallscope.core.errors import CollectorError

BYTES_PER_POINT = 240  # a parsed [time, "value"] pair as Python objects, plus its numpy copy


@dataclass(frozen=True)
class Job:
    """One group's expression over one time range; `group` names it in progress and failures."""

    group: str
    key: str
    expr: str
    start_s: float
    end_s: float
    step_s: float


@dataclass
class Answer:
    """Series per job key: [(labels, times s, values)], failures per group, and the cost of getting them."""

    series: dict = field(default_factory=dict)
    failures: dict = field(default_factory=dict)
    warnings: dict = field(default_factory=dict)
    samples: int = 0
    requests: int = 0
    retries: int = 0
    bytes: int = 0
    server_s: float = 0.0
    wall_s: float = 0.0


def time_chunks(start_s: float, end_s: float, step_s: float, max_points: int = MAX_POINTS) -> list[tuple]:
    """[(start, end)] covering start..end on the step grid, each at most `max_points` points."""
    out, t = [], start_s
    while t <= end_s + 1e-9:
        stop = min(end_s, t + step_s * (max_points - 1))
        out.append((t, stop))
        t = stop + step_s
    return out


def group_size(points_per_series: int, series_per_replica: int, max_memory: int, concurrency: int,
               cap: int = 250, loaded_per_replica: int = 0, max_samples: int = 0) -> int:
    """Replicas per group so that `concurrency` worst-case answers fit `max_memory`, and one query loads at
    most half the server's `max_samples` (`loaded_per_replica` raw samples each); at most `cap`, which
    bounds the length of a group's selector."""
    per_replica = max(1, points_per_series) * max(1, series_per_replica) * BYTES_PER_POINT
    n = int(max_memory // (per_replica * max(1, concurrency)))
    if n < 1:
        raise CollectorError(f"--max-memory {max_memory} bytes cannot hold one replica's answer "
                             f"({per_replica * concurrency} bytes at concurrency {concurrency}); raise it, "
                             "lower --concurrency or use a coarser --resolution")
    if loaded_per_replica and max_samples:
        n = min(n, max(1, int(max_samples // 2 // loaded_per_replica)))
    return min(n, cap)


def _series(data: dict) -> list[tuple[dict, np.ndarray, np.ndarray]]:
    result = data.get("result")
    if data.get("resultType") != "matrix" or not isinstance(result, list):
        raise CollectorError(f"query_range answered resultType {data.get('resultType')!r}, not a matrix")
    out = []
    for s in result:
        try:
            values = np.array(s["values"], dtype=float).reshape(-1, 2)
            out.append((dict(s["metric"]), values[:, 0], values[:, 1]))
        except (KeyError, TypeError, ValueError):
            raise CollectorError(f"query_range answered a series that is not labels and [time, number] "
                                 f"pairs: {str(s)[:120]}") from None
    return out


def _retryable(exc: CollectorError) -> bool:
    status = getattr(exc, "status", None)
    return status is None or status == 429 or status >= 500


class Runner:
    """Runs Jobs on `concurrency` threads, one Client each (same URL, timeout and headers)."""

    def __init__(self, url: str, *, timeout: float = 60.0, headers: dict | None = None, concurrency: int = 4,
                 retries: int = 3, backoff_s: float = 0.5, extra_params: dict | None = None):
        if concurrency < 1:
            raise CollectorError(f"--concurrency must be >= 1, got {concurrency}")
        self.url, self.timeout, self.headers = url, timeout, dict(headers or {})
        self.concurrency, self.retries, self.backoff_s = concurrency, retries, backoff_s
        self.extra = dict(extra_params or {})
        self._local = threading.local()
        self._clients: list[Client] = []
        self._lock = threading.Lock()

    def client(self) -> Client:
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = Client(self.url, self.timeout, self.headers)
            with self._lock:
                self._clients.append(c)
        return c

    def instant(self, expr: str, at_s: float) -> list[tuple[dict, float]]:
        """[(labels, value)] of an instant query (no retries: the caller's first look at the server)."""
        data = self.client()._get("query", {"query": expr, "time": f"{at_s:.3f}", **self.extra}, post=True)
        if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise CollectorError(f"query answered resultType {data.get('resultType')!r}, not a vector")
        return [(dict(r["metric"]), float(r["value"][1])) for r in data["result"]]

    def _one(self, job: Job, answer: Answer) -> list:
        params = {"query": job.expr, "start": f"{job.start_s:.3f}", "end": f"{job.end_s:.3f}",
                  "step": f"{job.step_s:g}", "stats": "all", **self.extra}
        for attempt in range(self.retries + 1):
            try:
                client = self.client()
                seen = len(client.warnings)
                data = client._get("query_range", params, post=True)
                if len(client.warnings) > seen:
                    with self._lock:
                        answer.warnings.setdefault(job.group, []).extend(client.warnings[seen:])
                timings = (data.get("stats") or {}).get("timings") or {}
                with self._lock:
                    answer.requests += 1
                    answer.server_s += float(timings.get("execTotalTime", 0.0) or 0.0)
                return _series(data)
            except CollectorError as exc:
                if attempt == self.retries or not _retryable(exc):
                    raise
                with self._lock:
                    answer.retries += 1
                time.sleep(self.backoff_s * 2 ** attempt)
        return []  # pragma: no cover

    def run(self, jobs: list[Job], progress=None) -> Answer:
        """The Answer of every job; `progress(groups_done, groups_total, samples)` after each job."""
        answer, t0 = Answer(), time.perf_counter()
        bytes0 = sum(c.bytes_received for c in self._clients)
        groups = {j.group for j in jobs}
        left = {g: sum(j.group == g for j in jobs) for g in groups}
        done = 0
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(self._one, job, answer): job for job in jobs}
            for fut in as_completed(futures):
                job = futures[fut]
                try:
                    got = fut.result()
                    answer.series.setdefault(job.key, []).extend(got)
                    answer.samples += sum(len(t) for _, t, _ in got)
                except CollectorError as exc:
                    answer.failures.setdefault(job.group, str(exc))
                left[job.group] -= 1
                if not left[job.group]:
                    done += 1
                if progress:
                    progress(done, len(groups), answer.samples)
        answer.bytes = sum(c.bytes_received for c in self._clients) - bytes0
        answer.wall_s = time.perf_counter() - t0
        if jobs and len(answer.failures) == len(groups):
            raise CollectorError(next(iter(answer.failures.values())))
        return answer
