"""The embedded store: one SQLite file in WAL mode, one transaction per scrape, columnar chunks.

The idea: a scrape of one target is one row in `scrapes` (ts, duration, ok/error) plus one row in
`chunks` holding two blobs, the series ids (int32) and the values (float64) of every sample of that
scrape. Series are described once in `series` (their identifying columns as JSON). Writing a scrape
is therefore two INSERTs and a COMMIT; loading a day is one range scan over `scrapes(target_id, ts)`
and `numpy.frombuffer`, never one SQL row per sample. WAL lets the analyzers and the dashboard read
while the collector writes, and a process killed between commits loses only the scrape in flight.
Every scrape also stores `up` (1/0) and `scrape_duration_seconds` samples, as Prometheus does.
Schema and column meanings: docs/store.md.

    >>> st = Store("/tmp/x.db"); st.append("vllm", ts=0, duration_s=0.01, samples=vllm.parse(text, ts=0))
    >>> frames = read(Store.connect_ro("/tmp/x.db"), start=None, end=None)  # {"vllm": {"samples":…, "gpu":…}}
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from stallscope.core import schema
from stallscope.core.errors import CollectorError

SCHEMA_VERSION = "1"
DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS targets (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, url TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS scrapes (
    id INTEGER PRIMARY KEY, target_id INTEGER NOT NULL REFERENCES targets(id),
    ts INTEGER NOT NULL, duration_s REAL NOT NULL, ok INTEGER NOT NULL, error TEXT,
    n_samples INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS scrapes_target_ts ON scrapes(target_id, ts);
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY, target_id INTEGER NOT NULL REFERENCES targets(id),
    frame TEXT NOT NULL CHECK (frame IN ('samples', 'gpu')), key TEXT NOT NULL,
    UNIQUE (target_id, frame, key));
CREATE TABLE IF NOT EXISTS chunks (
    scrape_id INTEGER PRIMARY KEY REFERENCES scrapes(id),
    series_ids BLOB NOT NULL, vals BLOB NOT NULL);
"""
INSERT_TARGET = "INSERT INTO targets(name, url) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET url=excluded.url"
SELECT_TARGETS = "SELECT id, name FROM targets"
INSERT_SERIES = "INSERT OR IGNORE INTO series(target_id, frame, key) VALUES (?, ?, ?)"
SELECT_SERIES_ID = "SELECT id FROM series WHERE target_id = ? AND frame = ? AND key = ?"
SELECT_SERIES = "SELECT id, target_id, frame, key FROM series"
INSERT_SCRAPE = "INSERT INTO scrapes(target_id, ts, duration_s, ok, error, n_samples) VALUES (?, ?, ?, ?, ?, ?)"
INSERT_CHUNK = "INSERT INTO chunks(scrape_id, series_ids, vals) VALUES (?, ?, ?)"
SELECT_CHUNKS = """
SELECT s.ts, c.series_ids, c.vals FROM scrapes AS s JOIN chunks AS c ON c.scrape_id = s.id
WHERE s.target_id = ? AND s.ts >= ? AND s.ts <= ? ORDER BY s.ts"""
SELECT_SCRAPES = """
SELECT t.name AS target, s.ts, s.duration_s, s.ok, s.error, s.n_samples
FROM scrapes AS s JOIN targets AS t ON t.id = s.target_id
WHERE s.ts >= ? AND s.ts <= ? ORDER BY s.ts"""

GPU_KEY = ("hostname", "gpu", "uuid", "model", "metric", "pod", "namespace", "container", "gpu_instance")
_MIN, _MAX = -(2 ** 63), 2 ** 63 - 1


def _connect(path: str | Path, readonly: bool) -> sqlite3.Connection:
    try:
        if readonly:
            con = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True, timeout=10)
        else:
            con = sqlite3.connect(str(path), timeout=10, check_same_thread=False)  # one writer thread at a time
        con.execute("PRAGMA busy_timeout=10000")
        return con
    except sqlite3.Error as exc:
        raise CollectorError(f"cannot open store {path}: {exc}") from None


class Store:
    """Writer side of a store file: `append` one scrape at a time (each is its own transaction)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.is_dir():
            raise CollectorError(f"store path {self.path} is a directory, expected a .db file")
        self.con = _connect(self.path, readonly=False)
        try:
            self.con.execute("PRAGMA journal_mode=WAL")
            self.con.execute("PRAGMA synchronous=NORMAL")
            self.con.executescript(DDL)
            self.con.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            self.con.commit()
        except sqlite3.DatabaseError as exc:
            self.con.close()
            raise CollectorError(f"{self.path} is not a stallscope store: {exc}") from None
        self.targets: dict[str, int] = {name: tid for tid, name in self.con.execute(SELECT_TARGETS)}
        self.series: dict[tuple, int] = {}
        for sid, tid, frame, key in self.con.execute(SELECT_SERIES):
            self.series[(tid, frame, _key_from_json(frame, key))] = sid

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def target_id(self, name: str, url: str = "") -> int:
        if name not in self.targets:
            self.con.execute(INSERT_TARGET, (name, url))  # another collector may have added it: by name
            self.targets[name] = self.con.execute("SELECT id FROM targets WHERE name = ?", (name,)).fetchone()[0]
        return self.targets[name]

    def _series_ids(self, tid: int, frame: str, keys: list[tuple], new: dict) -> list[int]:
        """Ids of `keys`; a key not cached is resolved against the file inside the caller's write
        transaction (insert-or-ignore, then select), since another collector may have added it since
        this one opened the file. Ids resolved here go to `new`, cached only once the scrape commits."""
        out, cache = [], self.series
        for k in keys:
            sid = cache.get((tid, frame, k)) or new.get((tid, frame, k))
            if sid is None:  # labels may come in any order: the canonical key has them sorted
                canon = (k[0], k[1], tuple(sorted(k[2])), k[3]) if frame == "samples" else k
                sid = cache.get((tid, frame, canon)) or new.get((tid, frame, canon))
                if sid is None:
                    row = (tid, frame, _key_to_json(frame, canon))
                    self.con.execute(INSERT_SERIES, row)
                    sid = new[(tid, frame, canon)] = self.con.execute(SELECT_SERIES_ID, row).fetchone()[0]
                new[(tid, frame, k)] = sid
            out.append(sid)
        return out

    def append(self, target: str, ts: int, duration_s: float, *, samples: pd.DataFrame | None = None,
               gpu: pd.DataFrame | None = None, error: str | None = None, url: str = "") -> int:
        """Store one scrape of `target` at `ts` (ns): its frames (None when it failed) and `up`.

        One write transaction (BEGIN IMMEDIATE) holds the target, the new series and the scrape, so
        several collectors may write one file. Returns the number of samples stored (including `up`
        and `scrape_duration_seconds`); a SQLite failure is a CollectorError naming the file.
        """
        new: dict[tuple, int] = {}
        try:
            self.con.execute("BEGIN IMMEDIATE")
            try:
                n = self._append(target, ts, duration_s, samples, gpu, error, url, new)
                self.con.commit()
            except BaseException:
                self.con.rollback()
                self.targets.pop(target, None)  # its id may have come from the rolled-back insert
                raise
        except sqlite3.Error as exc:
            raise CollectorError(f"cannot write scrape of {target} to {self.path}: {exc}") from None
        self.series.update(new)
        return n

    def _append(self, target, ts, duration_s, samples, gpu, error, url, new) -> int:
        tid = self.target_id(target, url)
        ids: list[int] = []
        vals: list[np.ndarray] = []
        ok = error is None
        meta_keys = [("up", "up", (), None), ("scrape_duration_seconds", "scrape_duration_seconds", (), None)]
        ids += self._series_ids(tid, "samples", meta_keys, new)
        vals.append(np.array([1.0 if ok else 0.0, float(duration_s)]))
        if samples is not None and len(samples):
            keys = [(m, s, tuple(lab.items()), None if le != le else le) for m, s, lab, le in zip(
                samples["metric"].tolist(), samples["source_metric"].tolist(), samples["labels"].tolist(),
                samples["le"].tolist())]
            ids += self._series_ids(tid, "samples", keys, new)
            vals.append(samples["value"].to_numpy(np.float64))
        if gpu is not None and len(gpu):
            cols = [gpu[c].tolist() if c in gpu.columns else [""] * len(gpu) for c in GPU_KEY]
            ids += self._series_ids(tid, "gpu", list(zip(*cols)), new)
            vals.append(gpu["value"].to_numpy(np.float64))
        values = np.concatenate(vals)
        cur = self.con.execute(INSERT_SCRAPE, (tid, int(ts), float(duration_s), int(ok), error, len(ids)))
        self.con.execute(INSERT_CHUNK, (cur.lastrowid, np.asarray(ids, dtype="<i4").tobytes(),
                                        values.astype("<f8").tobytes()))
        return len(ids)


def _key_to_json(frame: str, key: tuple) -> str:
    if frame == "samples":
        metric, source, labels, le = key
        return json.dumps([metric, source, dict(labels), le], separators=(",", ":"))
    return json.dumps(dict(zip(GPU_KEY, key)), separators=(",", ":"))


def _key_from_json(frame: str, text: str) -> tuple:
    obj = json.loads(text)
    if frame == "samples":
        metric, source, labels, le = obj
        return metric, source, tuple(sorted(labels.items())), le
    return tuple(obj.get(c, "") for c in GPU_KEY)


def connect_ro(path: str | Path) -> sqlite3.Connection:
    """A read-only connection to a store (safe while a collector writes to it)."""
    if not Path(path).is_file():
        raise CollectorError(f"store {path} does not exist")
    con = _connect(path, readonly=True)
    try:
        version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError as exc:
        con.close()
        raise CollectorError(f"{path} is not a stallscope store: {exc}") from None
    if not version or version[0] != SCHEMA_VERSION:
        con.close()
        raise CollectorError(f"{path} has store schema {version and version[0]!r}, expected {SCHEMA_VERSION!r}")
    return con


def read(con: sqlite3.Connection, start: int | None = None, end: int | None = None,
         targets: list[str] | None = None) -> dict[str, dict[str, pd.DataFrame]]:
    """Frames per target for scrapes with start <= ts <= end (ns; None = open): {name: {"samples", "gpu"}}."""
    lo, hi = _MIN if start is None else int(start), _MAX if end is None else int(end)
    names = dict(con.execute(SELECT_TARGETS))
    series_rows = con.execute(SELECT_SERIES).fetchall()
    out = {}
    for tid, name in sorted(names.items(), key=lambda kv: kv[1]):
        if targets is not None and name not in targets:
            continue
        chunks = con.execute(SELECT_CHUNKS, (tid, lo, hi)).fetchall()
        ts_all = np.repeat(np.array([c[0] for c in chunks], dtype=np.int64),
                           [len(c[1]) // 4 for c in chunks]) if chunks else np.empty(0, np.int64)
        id_all = np.frombuffer(b"".join(c[1] for c in chunks), dtype="<i4")
        val_all = np.frombuffer(b"".join(c[2] for c in chunks), dtype="<f8")
        del chunks
        mine = [(sid, frame, json.loads(key)) for sid, t, frame, key in series_rows if t == tid]
        out[name] = {"samples": _samples_frame(name, mine, ts_all, id_all, val_all),
                     "gpu": _gpu_frame(name, mine, ts_all, id_all, val_all)}
    return out


def _lookup(mine, frame: str, id_all: np.ndarray):
    """(position of each row in this frame's series list, row mask, series list)."""
    rows = [(sid, key) for sid, f, key in mine if f == frame]
    size = max([sid for sid, _, _ in mine], default=0) + 1
    pos = np.full(size, -1, dtype=np.int64)
    for i, (sid, _) in enumerate(rows):
        pos[sid] = i
    idx = pos[id_all] if len(id_all) else np.empty(0, np.int64)
    mask = idx >= 0
    return idx[mask], mask, [k for _, k in rows]


def _objects(values: list) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _categorical(per_series: list[str], idx: np.ndarray) -> pd.Categorical:
    """A string column as a Categorical: one code per row, no per-row Python object (fast, small)."""
    cats, inverse = np.unique(np.array(per_series, dtype=object), return_inverse=True)
    codes = inverse.astype(np.int32)[idx] if len(per_series) else np.empty(0, np.int32)
    return pd.Categorical.from_codes(codes, categories=list(cats))


def _constant(value: str, n: int) -> pd.Categorical:
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[value])


def _samples_frame(target, mine, ts_all, id_all, val_all) -> pd.DataFrame:
    idx, mask, keys = _lookup(mine, "samples", id_all)
    labels = _objects([k[2] for k in keys])  # one dict per series, shared by its rows: do not mutate
    le = np.array([math.nan if k[3] is None else float(k[3]) for k in keys], dtype=np.float64)
    return schema.samples_frame(ts_all[mask], _categorical([k[0] for k in keys], idx),
                                _categorical([k[1] for k in keys], idx), labels[idx],
                                le[idx] if len(keys) else np.empty(0), val_all[mask], _constant(target, len(idx)))


def _gpu_frame(target, mine, ts_all, id_all, val_all) -> pd.DataFrame:
    idx, mask, keys = _lookup(mine, "gpu", id_all)
    return schema.gpu_frame(ts_all[mask], value=val_all[mask], target=_constant(target, len(idx)),
                            **{c: _categorical([k.get(c, "") for k in keys], idx) for c in GPU_KEY})


def scrapes(con: sqlite3.Connection, start: int | None = None, end: int | None = None) -> pd.DataFrame:
    """One row per stored scrape: target, ts (ns), duration_s, ok, error, n_samples."""
    lo, hi = _MIN if start is None else int(start), _MAX if end is None else int(end)
    df = pd.read_sql_query(SELECT_SCRAPES, con, params=(lo, hi))
    df["ok"] = df["ok"].astype(bool)
    return df
