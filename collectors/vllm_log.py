"""What a vLLM server states in its own log, read from that log file: its scheduler configuration, and its steps when
it ran with `--enable-logging-iteration-details`.

The idea: vLLM exports no metric for `--max-num-batched-tokens` or whether chunked prefill is on
(docs/metric-traps.md), but every vLLM server writes both to its log at startup, and an operator who has
the metrics has that log too. vLLM 0.33.0 (read in the released wheel) writes:

- `Chunked prefill is enabled with max_num_batched_tokens=%d.` when chunked prefill is on
  (`vllm/config/scheduler.py`, `SchedulerConfig.__post_init__`, once per process);
- `Initializing a V1 LLM engine (v%s) with config: ...` with `enable_chunked_prefill=True|False` among the
  fields (`vllm/v1/engine/core.py`, the config's `__str__` in `vllm/config/vllm.py`), after the line above.

Either line is matched anywhere in a log line, so vLLM's text format (`(APIServer pid=1) INFO 12-04
16:15:00 [scheduler.py:311] ...`), its JSON format (the message inside a JSON object), a terminal's colour
codes and a container runtime's prefixes all read alike. A log may hold several startups (restarts): the last
one is the server that produced the metrics, so the last `Initializing` line decides whether chunking was on,
with the budget line that came before it; a budget line after the last `Initializing` line is a newer startup
whose engine had not logged yet.

The steps (`read_iterations`): each iteration line (stallscope.engine.iteration_log) gives one step's context
(prompt) and generation tokens and requests, and its elapsed time, exactly. Its time of day is the log record's
tick: the millisecond in the JSON format (`asctime` 2026-12-04 16:15:00,123), the second, without a year, in the
text format (`12-04 16:15:00`). A step ends within the tick it is logged in, after the step before it. vLLM's
elapsed time leaves out the engine's work between steps (scheduling, output processing), so a busy tick's steps
cover less than the tick: each step is placed after the previous one by its elapsed time and an equal share of
what its tick's steps leave uncovered, then held within its tick (a step after an idle spell ends at its tick's
start). Its start is its end less its elapsed time. Durations are exact; a place within a second is not, but no
gap appears at a second's edge that the engine did not have. Times are read as UTC (a container's clock) unless an offset is
given. The text format's year: for metrics over a known span (`read_iterations_for`, what `analyze` uses), the year
that puts the steps over them; else the file's modification year, less one when its last line's date is later.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from stallscope.core import schema
from stallscope.core.errors import InputError
from stallscope.engine.iteration_log import PATTERN as ITERATION

log = logging.getLogger(__name__)

BUDGET = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
ENGINE = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]*)\) with config: ")
CHUNKED = re.compile(r"\benable_chunked_prefill=(True|False)\b")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_LINE = 1 << 20   # a config line is a few KiB; a longer line is read in pieces, not held whole
TEXT_TIME = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
JSON_TIME = re.compile(r'"asctime":\s*"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d),(\d{3})"')
SECOND = 10**9


@dataclass(frozen=True)
class ServerLogConfig:
    """What the log states: `enable_chunked_prefill` None when no engine line was found, `max_num_batched_tokens`
    None when no budget line was (or chunking is off); `where` names the deciding lines (`path:line`)."""

    enable_chunked_prefill: bool | None
    max_num_batched_tokens: int | None
    vllm_version: str | None
    where: str


def read_server_config(path: str | Path) -> ServerLogConfig:
    """The scheduler configuration of the last startup in a vLLM server log.

    Raises InputError (one line, naming the file) when it cannot be read or holds neither line.
    """
    p = Path(path)
    budget = engine = None   # (line number, value)
    try:
        with p.open("r", encoding="utf-8", errors="replace") as fh:
            number, ended = 0, True
            for raw in iter(lambda: fh.readline(MAX_LINE), ""):
                number, ended = number + ended, raw.endswith("\n")   # a cut line keeps its number
                if "max_num_batched_tokens=" not in raw and "Initializing a V1 LLM engine" not in raw:
                    continue
                line = ANSI.sub("", raw)
                if (m := BUDGET.search(line)) is not None:
                    budget = (number, int(m.group(1)))
                elif (m := ENGINE.search(line)) is not None:
                    on = CHUNKED.search(line, m.end())
                    engine = (number, m.group(1), None if on is None else on.group(1) == "True", budget)
                    budget = None
    except OSError as exc:
        raise InputError(f"--server-log {p}: cannot read it ({exc.strerror or exc})") from exc
    return _decide(p, engine, budget)


def _decide(p: Path, engine, budget) -> ServerLogConfig:
    """The last startup's configuration from its engine line and the budget lines around it."""
    if engine is None and budget is None:
        raise InputError(f"--server-log {p}: no vLLM startup line in it ('Chunked prefill is enabled with "
                         "max_num_batched_tokens=N.' or 'Initializing a V1 LLM engine (v...) with config: ...')")
    line = budget if budget is not None else engine[3]   # the budget line that counts
    if line is not None and line[1] < 1:
        raise InputError(f"--server-log {p}:{line[0]}: max_num_batched_tokens={line[1]} is not a token budget")
    if budget is not None:   # a startup newer than the last engine line, or a log with no engine line
        return ServerLogConfig(True, budget[1], engine[1] if engine else None, f"{p}:{budget[0]}")
    number, version, on, before = engine
    if on is None and before is None:
        raise InputError(f"--server-log {p}:{number}: the engine line states no enable_chunked_prefill")
    if on is False:
        return ServerLogConfig(False, None, version, f"{p}:{number}")
    where = f"{p}:{before[0]},{number}" if before else f"{p}:{number}"
    return ServerLogConfig(True, before[1] if before else None, version, where)


def read_iterations(path: str | Path, *, year: int | None = None, utc_offset_s: float = 0.0) -> pd.DataFrame | None:
    """The steps a vLLM log's iteration-details lines give, as a steps frame (stallscope.core.schema), or None when it
    has none. `year` is the text format's year of the last line (default: from the file's modification time, module
    docstring); earlier lines step back a year at each New Year they cross. `utc_offset_s` is the server clock's
    offset from UTC. With several engines (data parallel) the lowest-numbered one's steps are kept. Columns beyond
    the schema: `iteration` (vLLM's index), `engine`, `kv_cache_usage` (a fraction); `attrs["time_resolution_ns"]`
    says how finely the times were logged. InputError (one line, naming the file) when it cannot be read, or its
    iteration lines carry no time."""
    lines = _Lines.read(Path(path))
    return None if lines is None else lines.steps(year, utc_offset_s)


def has_iterations(path: str | Path) -> bool:
    """Whether a vLLM log holds an iteration-details line of a real step, read only up to the first one (a rotated
    log can hold steps without the startup lines). InputError (one line) when it cannot be read."""
    p = Path(path)
    try:
        with p.open("r", encoding="utf-8", errors="replace") as fh:
            if any(_real_step(raw) for raw in iter(lambda: fh.readline(MAX_LINE), "")):
                return True
    except OSError as exc:
        raise InputError(f"--server-log {p}: cannot read it ({exc.strerror or exc})") from exc
    return False


def _real_step(raw: str):
    """(the line without colour codes, its match) when `raw` is an iteration-details line of a real step (not a
    data-parallel dummy step), else None."""
    if "Iteration(" not in raw or (m := ITERATION.search(line := ANSI.sub("", raw))) is None or m.group("dummy"):
        return None
    return line, m


def read_iterations_for(path: str | Path, lo_ns: int, hi_ns: int, *, utc_offset_s: float = 0.0) -> pd.DataFrame | None:
    """`read_iterations` for metrics from `lo_ns` to `hi_ns`: a text log states no year, so of the years around the
    metrics' the one whose steps overlap them most is taken (the modification-time rule when none overlaps more)."""
    lines = _Lines.read(Path(path))
    if lines is None or not lines.text:
        return None if lines is None else lines.steps(None, utc_offset_s)

    def overlap(year) -> int:     # the logged times' span over the metrics' (steps are placed once, below)
        first, last = lines.span(year, utc_offset_s)
        return max(0, min(hi_ns, last) - max(lo_ns, first))

    best = max(range(_utc(lo_ns).year - 1, _utc(hi_ns).year + 2), key=overlap)
    return lines.steps(best if overlap(best) > overlap(None) else None, utc_offset_s)


COLUMNS = ("year", "stamp", "ms", "engine", "iteration", "ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens")


@dataclass
class _Lines:
    """The timed iteration lines of one log, parsed once into columns: `stamp` is month, day, hour, minute and
    second as the digits MMDDhhmmss; `year` and `ms` are -1 in the text format, which lacks them."""

    cols: dict
    elapsed_ms: np.ndarray
    kv_pct: np.ndarray
    text: bool
    mtime: float
    path: Path

    @classmethod
    def read(cls, p: Path) -> _Lines | None:
        ints, floats, untimed, first = {c: array("q") for c in COLUMNS}, (array("d"), array("d")), 0, None
        try:
            with p.open("r", encoding="utf-8", errors="replace") as fh:
                for number, raw in enumerate(iter(lambda: fh.readline(MAX_LINE), ""), 1):
                    if (hit := _real_step(raw)) is None:
                        continue
                    line, m = hit
                    if (when := _logged_at(line)) is None:
                        untimed, first = untimed + 1, first or number
                        continue
                    for c, v in zip(COLUMNS, (*when, *(int(m.group(k)) for k in COLUMNS[3:]))):
                        ints[c].append(v)
                    floats[0].append(float(m.group("elapsed_ms")))
                    floats[1].append(float(m.group("kv_pct")))
            mtime = p.stat().st_mtime
        except (OSError, OverflowError) as exc:
            raise InputError(f"--server-log {p}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from exc
        if untimed and not len(floats[0]):
            raise InputError(f"--server-log {p}:{first}: iteration lines without a time vLLM's formats give")
        if untimed:
            log.warning("--server-log %s: %d iteration lines without a time left out (first at line %d)", p, untimed,
                        first)
        if not len(floats[0]):
            return None
        cols = {c: np.frombuffer(a, dtype=np.int64) for c, a in ints.items()}
        return cls(cols, np.frombuffer(floats[0]), np.frombuffer(floats[1]), bool((cols["year"] < 0).all()), mtime, p)

    def span(self, year: int | None, utc_offset_s: float) -> tuple[int, int]:
        """(first, last) logged time of the lowest engine's lines, ns."""
        keep = self.cols["engine"] == self.cols["engine"].min()
        ns, _ = self._logged_ns({k: v[keep] for k, v in self.cols.items()}, year, utc_offset_s)
        return int(ns.min()), int(ns.max())

    def steps(self, year: int | None, utc_offset_s: float) -> pd.DataFrame:
        """The lowest engine's steps, placed by the module docstring's rule."""
        c = self.cols
        engines = np.unique(c["engine"])
        if len(engines) > 1:
            log.warning("%s holds the steps of engines %s; engine %d's are read", self.path, engines.tolist(), engines[0])
        keep = c["engine"] == engines[0]
        logged, valid = self._logged_ns({k: v[keep] for k, v in c.items()}, year, utc_offset_s)
        keep[keep] = valid                                         # a date no calendar has (02-30) is left out
        col = {k: v[keep] for k, v in c.items()}
        elapsed = np.round(self.elapsed_ms[keep] * 1e6).astype(np.int64)
        resolution = SECOND if self.text else SECOND // 1000
        end = _place(logged, elapsed, resolution)
        frame = schema.steps_frame({
            "start_ns": end - elapsed, "end_ns": end, "num_prefill_tokens": col["ctx_tokens"].astype(float),
            "num_decode_tokens": col["gen_tokens"].astype(float), "num_prefill_reqs": col["ctx_reqs"].astype(float),
            "num_decode_reqs": col["gen_reqs"].astype(float), "num_running": (col["ctx_reqs"] + col["gen_reqs"]) * 1.0,
            "iteration": col["iteration"], "engine": int(engines[0]), "kv_cache_usage": self.kv_pct[keep] / 100})
        frame.attrs["time_resolution_ns"] = resolution
        return frame

    def _logged_ns(self, col: dict, year: int | None, utc_offset_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(logged time of each line with a valid date, ns since the epoch (UTC); which lines have one); a text line's
        year steps back at each New Year."""
        stamp, years = col["stamp"], col["year"].copy()
        text = years < 0
        if text.any():
            last = year if year is not None else _year_of(int(stamp[text][-1]), self.mtime)
            md = stamp[text] // 10**6                            # MMDD
            crossed = np.concatenate([md[:-1] > md[1:], [False]])   # the next text line is in the next year
            years[text] = last - np.cumsum(crossed[::-1])[::-1]
        when = pd.to_datetime(pd.DataFrame({
            "year": years, "month": stamp // 10**8, "day": stamp // 10**6 % 100, "hour": stamp // 10**4 % 100,
            "minute": stamp // 100 % 100, "second": np.minimum(stamp % 100, 59)}), errors="coerce", utc=True)
        valid = when.notna().to_numpy()
        if not valid.any():
            raise InputError(f"--server-log {self.path}: no iteration line carries a valid date")
        ns = when[valid].to_numpy(dtype="datetime64[ns]").astype(np.int64)
        return ns - round(utc_offset_s * SECOND) + np.maximum(col["ms"][valid], 0) * 10**6, valid


def _place(tick: np.ndarray, elapsed: np.ndarray, resolution: int) -> np.ndarray:
    """Each step's end (module docstring): after the previous end, by its elapsed time and an equal share of the
    time its tick's steps leave uncovered, held within the tick it was logged in."""
    if not len(tick):
        return tick.copy()
    starts = np.flatnonzero(np.r_[True, tick[1:] != tick[:-1]])      # runs of lines logged in one tick
    count = np.diff(np.r_[starts, len(tick)])
    share = np.repeat(np.maximum(resolution - np.add.reduceat(elapsed, starts), 0) // count, count)
    end = np.empty(len(tick), dtype=np.int64)
    prev = int(tick[0])
    for i, (t, e, g) in enumerate(zip(tick.tolist(), elapsed.tolist(), share.tolist())):
        prev = end[i] = min(max(prev + g + e, t), t + resolution)
    return end


def _logged_at(line: str) -> tuple | None:
    """(year or -1, MMDDhhmmss, ms or -1) of a log line; None without a time in vLLM's text or JSON format."""
    if (m := JSON_TIME.search(line)) is not None:
        y, mo, d, h, mi, sec, ms = (int(g) for g in m.groups())
    elif (m := TEXT_TIME.search(line)) is not None:
        (mo, d, h, mi, sec), y, ms = (int(g) for g in m.groups()), -1, -1
    else:
        return None
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and sec < 61):
        return None
    return y, (((mo * 100 + d) * 100 + h) * 100 + mi) * 100 + sec, ms


def _year_of(last_stamp: int, mtime: float) -> int:
    """The text format's year of the last line: the file's modification year, one less when the last line's date
    falls after the modification date (a log written last year)."""
    modified = _utc(int(mtime * SECOND))
    return modified.year - 1 if last_stamp // 10**6 > modified.month * 100 + modified.day else modified.year


def _utc(ns: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc)
