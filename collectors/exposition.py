"""Prometheus text exposition → mapped rows, parsed by `prometheus_client`'s parser, memoised per series.

The idea: every sample line is `<series> <value>`, and from one scrape of a target to the next only the
values change. The library parser (`text_string_to_metric_families`) does all of the grammar; a
`ParseCache` remembers, for each exact series text the library has already parsed, the row a mapper
made of it. A later scrape whose series and HELP/TYPE lines were all seen before reuses those rows and
reads only the value token with `float()`; anything new, changed or unusual (a timestamp, `_` in a
value, a different comment block) goes through the library parser again. Without a cache every call
is a plain library parse.

A mapper takes the library's families and returns, for each sample in order, a row (any tuple) or
None to drop the sample; it sees all families at once so it can resolve aliases across them.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Sequence

import requests
from prometheus_client.parser import text_string_to_metric_families

from stallscope.core.errors import CollectorError

log = logging.getLogger(__name__)
Mapper = Callable[[list], list]


class ParseCache:
    """Series text → mapped row, valid for one HELP/TYPE comment block (one per scrape target)."""

    def __init__(self, max_series: int = 200_000):
        self.comments: tuple[str, ...] | None = None
        self.rows: dict[str, tuple | None] = {}
        self.max_series = max_series
        self.warned: set[str] = set()  # sample names already reported as repeated


def _split(text: str) -> tuple[tuple[str, ...], list[str]]:
    comments, samples = [], []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        (comments if line[0] == "#" else samples).append(line)
    return tuple(comments), samples


def parse_rows(text: str, mapper: Mapper, cache: ParseCache | None = None,
               what: str = "exposition") -> tuple[list[tuple], list[float]]:
    """(rows, values) for the samples of `text` that `mapper` keeps, in exposition order.

    Raises CollectorError naming the first bad line when the text is not valid exposition.
    """
    if cache is not None:
        comments, lines = _split(text)
        if comments == cache.comments:
            fast = _from_cache(lines, cache)
            if fast is not None:
                return fast
    families = _library_parse(text, what)
    samples = [s for fam in families for s in fam.samples]
    mapped = mapper(families)
    repeated = _drop_repeated(samples, mapped, what, cache)
    rows = [r for r in mapped if r is not None]
    values = [float(s.value) for s, r in zip(samples, mapped) if r is not None]
    if cache is not None:
        _remember(cache, comments, lines if not repeated else (), samples, mapped)
    return rows, values


def _drop_repeated(samples: list, mapped: list, what: str, cache: ParseCache | None) -> bool:
    """Keep the first of samples with the same name and labels (a family repeated in one scrape; Prometheus
    rejects the scrape's duplicates): the later ones become None in `mapped`, with one warning per name
    (per target, when a cache remembers what was said)."""
    seen, dup = set(), {}
    for i, smp in enumerate(samples):
        key = (smp.name, tuple(sorted(smp.labels.items())), smp.timestamp)
        if key in seen:
            mapped[i] = None
            dup[smp.name] = dup.get(smp.name, 0) + 1
        else:
            seen.add(key)
    said = cache.warned if cache is not None else set()
    for name, n in dup.items():
        if name not in said:
            said.add(name)
            log.warning("%s: %s repeated %d time%s in one scrape: kept the first (Prometheus rejects duplicates)",
                        what, name[:200], n, "s" * (n != 1))
    return bool(dup)


def _library_parse(text: str, what: str) -> list:
    try:
        return list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        bad = _first_bad_line(text)
        raise CollectorError(f"{what} is not valid Prometheus text exposition"
                             f"{f' at line {bad[0]}: {bad[1][:120]!r}' if bad else ''} ({exc or type(exc).__name__})") from None


def _first_bad_line(text: str) -> tuple[int, str] | None:
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            try:
                list(text_string_to_metric_families(line + "\n"))
            except Exception:  # noqa: BLE001 - only locating the line for the message
                return i, line
    return None


def _from_cache(lines: Sequence[str], cache: ParseCache):
    rows, values, heads = [], [], set()
    get = cache.rows.get
    for line in lines:
        head, _, tail = line.rpartition(" ")
        row = get(head, 0)
        if row == 0 or "_" in tail or head in heads:  # new, unusual, or repeated: the library path decides
            return None
        heads.add(head)
        if row is None:
            continue
        try:
            values.append(float(tail))
        except ValueError:
            return None
        rows.append(row)
    return rows, values


def _remember(cache: ParseCache, comments, lines, samples, mapped) -> None:
    if len(lines) != len(samples) or len(cache.rows) + len(lines) > cache.max_series:
        cache.comments, cache.rows = None, {}
        return
    if comments != cache.comments:
        cache.rows = {}
    for line, sample, row in zip(lines, samples, mapped):
        head, _, tail = line.rpartition(" ")
        # only series the library read as `<series> <value>` with no timestamp are reusable
        if sample.timestamp is None and "_" not in tail and _same(tail, sample.value):
            cache.rows[head] = row
    cache.comments = comments


def _same(tail: str, value) -> bool:
    try:
        got = float(tail)
    except ValueError:
        return False
    return got == float(value) or (got != got and float(value) != float(value))


MAX_BODY = 64 << 20  # bytes; a bigger /metrics body is refused, not read


class RetryableScrapeError(CollectorError):
    """A failure worth retrying: connection refused/reset, timeout, HTTP 5xx."""


def scrape(url: str, timeout: float = 5.0, session: requests.Session | None = None) -> str:
    """GET a `/metrics` endpoint and return its text; every failure is one CollectorError naming the URL.

    `timeout` bounds the connection, each read and the whole body. Connection errors, timeouts and
    HTTP 5xx raise `RetryableScrapeError`; HTTP 4xx, a truncated body or one over 64 MiB do not.

        >>> text = scrape("http://127.0.0.1:8000/metrics", timeout=2)
    """
    try:
        r = (session or requests).get(url, timeout=timeout, stream=True, headers={"Accept": "text/plain;version=0.0.4"})
        with r:
            if r.status_code >= 500:
                raise RetryableScrapeError(f"HTTP {r.status_code} from {url}")
            if r.status_code != 200:
                raise CollectorError(f"HTTP {r.status_code} from {url}")
            body = bytearray()
            deadline = time.monotonic() + timeout
            for chunk in r.iter_content(65536):
                body += chunk
                if len(body) > MAX_BODY:
                    raise CollectorError(f"body of {url} exceeds {MAX_BODY >> 20} MiB")
                if time.monotonic() > deadline:
                    raise RetryableScrapeError(f"scrape of {url} timed out after {timeout:g} s (slow body)")
            return bytes(body).decode(r.encoding or "utf-8", errors="replace")
    except requests.Timeout:
        raise RetryableScrapeError(f"scrape of {url} timed out after {timeout:g} s") from None
    except requests.exceptions.ChunkedEncodingError as exc:
        raise CollectorError(f"truncated body from {url}: {_short(exc)}") from None
    except requests.RequestException as exc:
        raise RetryableScrapeError(f"scrape of {url} failed: {_short(exc)}") from None


def _short(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "IncompleteRead", "Connection reset", "RemoteDisconnected",
                   "Connection aborted", "Read timed out"):
        if marker in text:
            return marker
    return text[:160]
