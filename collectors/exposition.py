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

from typing import Callable, Sequence

from prometheus_client.parser import text_string_to_metric_families

from stallscope.errors import CollectorError

Mapper = Callable[[list], list]


class ParseCache:
    """Series text → mapped row, valid for one HELP/TYPE comment block (one per scrape target)."""

    def __init__(self, max_series: int = 200_000):
        self.comments: tuple[str, ...] | None = None
        self.rows: dict[str, tuple | None] = {}
        self.max_series = max_series


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
    rows = [r for r in mapped if r is not None]
    values = [float(s.value) for s, r in zip(samples, mapped) if r is not None]
    if cache is not None:
        _remember(cache, comments, lines, samples, mapped)
    return rows, values


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
    rows, values = [], []
    get = cache.rows.get
    for line in lines:
        head, _, tail = line.rpartition(" ")
        row = get(head, 0)
        if row == 0 or "_" in tail:
            return None
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
