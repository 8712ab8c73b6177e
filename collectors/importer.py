"""Offline import: the scrapes a `stallscope repro` run wrote (scrapes.jsonl) → the embedded store.

The idea: replay each recorded scrape through the same parse-and-append path as a live scrape, so a
store built from a run directory is indistinguishable from one the collector filled. A record whose
text does not parse is stored as a failed scrape (`up` 0, with the parser's message), a line that is
not a record at all is skipped with a warning; nothing already stored is lost.
"""

from __future__ import annotations

from pathlib import Path

from stallscope.collectors.exposition import ParseCache
from stallscope.collectors.loader import iter_jsonl, parse_scrape
from stallscope.collectors.run_dir import scrape_files
from stallscope.collectors.store import Store
from stallscope.core.errors import CollectorError


def import_run(path: Path, db: str | Path) -> tuple[int, int, int]:
    """Import every record of a scrapes.jsonl, an arm or a run directory into store `db`; returns
    (scrapes, unparseable, skipped lines)."""
    path = Path(path)
    if not path.exists():
        raise CollectorError(f"import source {path} does not exist")
    files = [("", path)] if path.is_file() else scrape_files(path)
    n = failed = 0
    skipped: list[int] = []
    caches: dict[str, ParseCache] = {}
    with Store(db) as store:
        for prefix, f in files:
            for _, ts, target, text in iter_jsonl(f, on_skip=lambda line, _why: skipped.append(line)):
                name = prefix + target
                cache = caches.setdefault(name, ParseCache())
                try:
                    frames = dict([parse_scrape(text, ts, cache)])
                except CollectorError as exc:
                    store.append(name, ts, 0.0, error=str(exc), url=str(f))
                    failed += 1
                else:
                    store.append(name, ts, 0.0, url=str(f), **frames)
                n += 1
    return n, failed, len(skipped)
