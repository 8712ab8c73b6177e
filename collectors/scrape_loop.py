"""The scrape loop: one thread per target fetches and parses, one writer stores, nothing kills the loop.

The idea: each target runs on its own schedule (slot k at start + k·interval; a slot missed by a slow
scrape is skipped, never queued, with one warning; with a duration, a scrape that the last one's time
says would end after it is not started, so the run ends within one timeout of the duration) in a
daemon thread that turns one scrape into a `Result` — frames on success, an error string otherwise —
and puts it on a queue. The caller's thread is the only writer: it takes results off the queue,
stores each as one committed transaction (with `up` 1/0 as Prometheus records it) and keeps the
per-target status. Connection errors, timeouts and HTTP 5xx are retried with exponential backoff
inside the slot; HTTP 4xx, garbage and truncated bodies are stored at once as failed scrapes.
Counter resets are stored as scraped (a drop), for `rate()` to handle downstream. A stop event
(SIGINT/SIGTERM in the CLI) ends the loop after the queue is flushed.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pandas as pd
import requests

from stallscope.collectors.exposition import ParseCache, RetryableScrapeError, scrape
from stallscope.collectors.loader import parse_scrape
from stallscope.collectors.store import Store
from stallscope.core.errors import CollectorError

log = logging.getLogger(__name__)


@dataclass
class Target:
    """One scrape target: an HTTP `/metrics` URL, or a `poll(ts_ns) -> (samples, gpu)` source (NVML)."""

    name: str
    url: str = ""
    timeout_s: float = 5.0
    retries: int = 2
    backoff_s: float = 0.2
    poll: Callable[[int], tuple[pd.DataFrame | None, pd.DataFrame | None]] | None = None


@dataclass
class Result:
    target: str
    ts: int  # ns, start of the scrape
    duration_s: float
    samples: pd.DataFrame | None = None
    gpu: pd.DataFrame | None = None
    error: str | None = None
    attempts: int = 1
    text: str | None = None  # the exposition as served, when fetched with parse=False


@dataclass
class TargetStatus:
    scrapes: int = 0
    errors: int = 0
    samples: int = 0
    last_ts: int | None = None
    last_ok_ts: int | None = None
    last_error: str | None = None


@dataclass
class LoopSummary:
    status: dict[str, TargetStatus] = field(default_factory=dict)

    @property
    def scrapes(self) -> int:
        return sum(s.scrapes for s in self.status.values())


def fetch(target: Target, session: requests.Session, cache: ParseCache, stop: threading.Event,
          parse: bool = True) -> Result:
    """Scrape and parse (or only scrape) one target once, with retries; never raises for a target's misbehaviour."""
    attempts, error = 0, None
    while True:
        attempts += 1
        ts, t0 = time.time_ns(), time.perf_counter()
        retryable = False
        try:
            if target.poll is not None:
                samples, gpu = target.poll(ts)
                return Result(target.name, ts, time.perf_counter() - t0, samples, gpu, attempts=attempts)
            text = scrape(target.url, target.timeout_s, session)
            if not parse:
                return Result(target.name, ts, time.perf_counter() - t0, text=text, attempts=attempts)
            kind, frame = parse_scrape(text, ts, cache)
            return Result(target.name, ts, time.perf_counter() - t0, attempts=attempts, **{kind: frame})
        except RetryableScrapeError as exc:
            error, retryable = str(exc), True
        except CollectorError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a source's bug must not kill the loop
            error = f"{type(exc).__name__}: {exc}"
            log.warning("target %s: unexpected error: %s", target.name, error)
        if not retryable or attempts > target.retries or stop.wait(target.backoff_s * 2 ** (attempts - 1)):
            duration = time.perf_counter() - t0
            suffix = f" (after {attempts} attempts)" if attempts > 1 else ""
            return Result(target.name, ts, duration, error=error + suffix, attempts=attempts)


def _worker(target: Target, interval_s: float, results: queue.Queue, stop: threading.Event,
            deadline: float | None, parse: bool = True) -> None:
    session, cache = requests.Session(), ParseCache()
    start = time.monotonic()
    k, last_s, warned = 0, 0.0, False
    while not stop.is_set():
        slot = start + k * interval_s
        if deadline is not None and slot + last_s > deadline:
            break  # the last scrape took last_s: this one would not be done before the duration ends
        if stop.wait(max(0.0, slot - time.monotonic())):
            break
        res = fetch(target, session, cache, stop, parse)
        results.put(res)
        last_s = res.duration_s
        if last_s > interval_s and not warned:
            warned = True
            log.warning("target %s: a scrape took %.1f s, longer than the %g s interval: the slots it "
                        "overran are skipped (said once)", target.name, last_s, interval_s)
        k = max(k + 1, int((time.monotonic() - start) // interval_s) + 1)  # skip missed slots
    session.close()


def run(targets: list[Target], store: Store, interval_s: float, duration_s: float | None = None,
        stop: threading.Event | None = None, on_status: Callable[[LoopSummary], None] | None = None,
        status_every_s: float = 0.5) -> LoopSummary:
    """Scrape `targets` every `interval_s` into `store` until `stop` is set or `duration_s` passes."""
    stop = stop or threading.Event()
    results: queue.Queue = queue.Queue()
    deadline = None if duration_s is None else time.monotonic() + duration_s
    summary = LoopSummary({t.name: TargetStatus() for t in targets})
    urls = {t.name: t.url or "nvml" for t in targets}
    threads = [threading.Thread(target=_worker, args=(t, interval_s, results, stop, deadline),
                                name=f"scrape-{t.name}", daemon=True) for t in targets]
    for th in threads:
        th.start()
    last_status = 0.0
    while not stop.is_set():
        if deadline is not None and time.monotonic() >= deadline:
            break
        if results.empty() and not any(th.is_alive() for th in threads):
            break  # every worker is done (no scrape fits before the deadline)
        try:
            _store(store, results.get(timeout=0.1), summary, urls)
        except queue.Empty:
            pass
        if on_status and time.monotonic() - last_status >= status_every_s:
            on_status(summary)
            last_status = time.monotonic()
    stop.set()
    # scrapes already in flight get one timeout to land (a fetch cannot take longer; a parse may): then
    # flush the queue; what is still in flight is not stored
    join_deadline = time.monotonic() + min(max(t.timeout_s for t in targets), 5.0)
    for th in threads:
        th.join(max(0.0, join_deadline - time.monotonic()))
        if th.is_alive():
            log.warning("%s: a scrape still in flight at the end is not stored", th.name)
    while True:
        try:
            _store(store, results.get_nowait(), summary, urls)
        except queue.Empty:
            break
    if on_status:
        on_status(summary)
    return summary


def _store(store: Store, res: Result, summary: LoopSummary, urls: dict[str, str]) -> None:
    st = summary.status[res.target]
    try:
        n = store.append(res.target, res.ts, res.duration_s, samples=res.samples, gpu=res.gpu,
                         error=res.error, url=urls.get(res.target, ""))
    except Exception as exc:  # noqa: BLE001 - a full disk or a locked file must not end the loop
        log.error("%s", exc)
        st.errors += 1
        st.last_error = str(exc)
        return
    st.scrapes += 1
    st.samples += n
    st.last_ts = res.ts
    if res.error is None:
        st.last_ok_ts = res.ts
    else:
        st.errors += 1
        st.last_error = res.error


def record_jsonl(url: str, path: Path, interval_s: float = 1.0, name: str = "vllm") -> Callable[[], int]:
    """Append a GET of `url` every `interval_s` to `path` as scrapes.jsonl lines (docs/run-directory.md),
    from a daemon thread; failed scrapes are skipped. Returns `stop()`: it scrapes once more (the final
    state), waits for the thread and returns the number of lines written."""
    target, stop, fh, written = Target(name, url, retries=0), threading.Event(), open(path, "a"), []

    def write(res: Result) -> None:
        if res.error is None:
            fh.write(json.dumps({"ts": time.time(), "target": name, "text": res.text}) + "\n")
            fh.flush()
            written.append(res.ts)

    thread = threading.Thread(target=_worker, args=(target, interval_s, SimpleNamespace(put=write), stop, None, False),
                              name=f"record-{name}", daemon=True)
    thread.start()

    def finish() -> int:
        stop.set()
        thread.join(10)
        with requests.Session() as session:
            write(fetch(target, session, ParseCache(), threading.Event(), parse=False))
        fh.close()
        return len(written)
    return finish


def status_line(summary: LoopSummary, now_ns: int | None = None) -> str:
    """One line: per target, scrapes, age of the last good scrape, errors (and the last one)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    parts = []
    for name, st in summary.status.items():
        age = "never" if st.last_ok_ts is None else f"{(now_ns - st.last_ok_ts) / 1e9:.1f}s ago"
        err = f", {st.errors} errors (last: {st.last_error[:60]})" if st.errors else ", 0 errors"
        parts.append(f"{name}: {st.scrapes} scrapes, last ok {age}{err}")
    return " | ".join(parts)
