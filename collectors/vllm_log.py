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
(prompt) and generation tokens and requests, and its elapsed time, exactly. Its time of day is the log record's:
to the millisecond in the JSON format (`asctime` 2026-12-04 16:15:00,123), to the second and without a year in the
text format (`12-04 16:15:00`). A step ends when it is logged, and steps do not overlap, so each ends at the later
of its logged time and the previous step's end plus its own elapsed time; its start is its end less its elapsed
time. Within a second of the text format, steps so sit back to back from the second's start: their durations are
exact, their placement within that second is not. Times are read as UTC (a container's clock) unless an offset is
given; the text format's year is the file's modification year, less one when its last line's date is later than that.
"""

from __future__ import annotations

import calendar
import datetime as dt
import logging
import re
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
    docstring); earlier lines step back a year at each New Year they cross. `utc_offset_s` is the
    server clock's offset from UTC. With several engines (data parallel) the lowest-numbered one's steps are kept.
    Columns beyond the schema: `iteration` (vLLM's index), `engine`, `kv_cache_usage` (a fraction);
    `attrs["time_resolution_ns"]` says how finely the times were logged. InputError (one line, naming the file) when
    it cannot be read, or its iteration lines carry no time."""
    p = Path(path)
    rows, untimed, first_untimed = [], 0, None
    try:
        with p.open("r", encoding="utf-8", errors="replace") as fh:
            for number, raw in enumerate(iter(lambda: fh.readline(MAX_LINE), ""), 1):
                if "Iteration(" not in raw:
                    continue
                line = ANSI.sub("", raw)
                m = ITERATION.search(line)
                if m is None or m.group("dummy"):
                    continue
                when = _logged_at(line)
                if when is None:
                    untimed, first_untimed = untimed + 1, first_untimed or number
                    continue
                rows.append((*when, m))
        mtime = p.stat().st_mtime
    except OSError as exc:
        raise InputError(f"--server-log {p}: cannot read it ({exc.strerror or exc})") from exc
    if not rows:
        if untimed:
            raise InputError(f"--server-log {p}:{first_untimed}: iteration lines without a time vLLM's formats give")
        return None
    if untimed:
        log.warning("--server-log %s: %d iteration lines without a time left out (first at line %d)", p, untimed,
                    first_untimed)
    return _steps(rows, year if year is not None else _year_of(rows, mtime), utc_offset_s)


def read_iterations_for(path: str | Path, lo_ns: int, hi_ns: int, *, utc_offset_s: float = 0.0) -> pd.DataFrame | None:
    """`read_iterations` for metrics from `lo_ns` to `hi_ns`: a text log states no year, so of the years around the
    metrics' the one whose steps overlap them most is taken (the modification-time rule when none overlaps more)."""
    steps = read_iterations(path, utc_offset_s=utc_offset_s)
    if steps is None or steps.attrs["time_resolution_ns"] != SECOND:
        return steps

    def overlap(frame) -> int:
        return max(0, min(hi_ns, int(frame["end_ns"].max())) - max(lo_ns, int(frame["start_ns"].min())))

    years = range(_utc_year(lo_ns) - 1, _utc_year(hi_ns) + 2)
    best = max((read_iterations(path, year=y, utc_offset_s=utc_offset_s) for y in years), key=overlap)
    return best if overlap(best) > overlap(steps) else steps


def _utc_year(ns: int) -> int:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).year


def _logged_at(line: str):
    """(year or None, month, day, hour, minute, second, ms or None) of a log line; None without a valid time."""
    if (m := JSON_TIME.search(line)) is not None:
        parts = tuple(int(g) for g in m.groups())
    elif (m := TEXT_TIME.search(line)) is not None:
        parts = (None, *(int(g) for g in m.groups()), None)
    else:
        return None
    _, month, day, hour, minute, second, _ = parts
    ok = 1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61
    return parts if ok else None


def _year_of(rows, mtime: float) -> int:
    """The text format's year of the last line: the file's modification year, one less when the last line's date
    falls after the modification date (a log written last year)."""
    modified = dt.datetime.fromtimestamp(mtime, dt.timezone.utc)
    last = rows[-1]
    return modified.year - 1 if (last[1], last[2]) > (modified.month, modified.day) else modified.year


def _steps(rows, last_year: int, utc_offset_s: float) -> pd.DataFrame:
    """Place each step (module docstring) and build the frame of the lowest engine's steps."""
    engines = sorted({int(r[-1].group("engine")) for r in rows})
    if len(engines) > 1:
        log.warning("the log holds the steps of engines %s; engine %d's are read", engines, engines[0])
    rows = [r for r in rows if int(r[-1].group("engine")) == engines[0]]
    logged = _epoch_ns(rows, last_year, utc_offset_s)
    elapsed = np.array([round(float(r[-1].group("elapsed_ms")) * 1e6) for r in rows], dtype=np.int64)
    end = np.empty(len(rows), dtype=np.int64)
    prev = np.iinfo(np.int64).min // 2
    for i, (t, e) in enumerate(zip(logged, elapsed)):
        prev = end[i] = max(int(t), prev + int(e))
    num = {k: np.array([int(r[-1].group(k)) for r in rows], dtype=float)
           for k in ("ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens", "iteration")}
    frame = schema.steps_frame({
        "start_ns": end - elapsed, "end_ns": end, "num_prefill_tokens": num["ctx_tokens"],
        "num_decode_tokens": num["gen_tokens"], "num_prefill_reqs": num["ctx_reqs"], "num_decode_reqs": num["gen_reqs"],
        "num_running": num["ctx_reqs"] + num["gen_reqs"], "iteration": num["iteration"].astype(np.int64),
        "engine": engines[0], "kv_cache_usage": [float(r[-1].group("kv_pct")) / 100 for r in rows]})
    frame.attrs["time_resolution_ns"] = SECOND if rows[0][0] is None else SECOND // 1000
    return frame


def _epoch_ns(rows, last_year: int, utc_offset_s: float) -> np.ndarray:
    """Each row's logged time (ns since the epoch, UTC); a text log's year steps back at each New Year it crossed."""
    years, year = [], last_year
    for i in range(len(rows) - 1, -1, -1):
        given, month, day = rows[i][0], rows[i][1], rows[i][2]
        if given is None and i < len(rows) - 1 and rows[i + 1][0] is None and (month, day) > rows[i + 1][1:3]:
            year -= 1
        years.append(given if given is not None else year)
    years.reverse()
    out = np.empty(len(rows), dtype=np.int64)
    for i, (y, r) in enumerate(zip(years, rows)):
        day = min(r[2], calendar.monthrange(y, r[1])[1])
        seconds = calendar.timegm((y, r[1], day, r[3], r[4], min(r[5], 59)))
        out[i] = (seconds - round(utc_offset_s)) * SECOND + (r[6] or 0) * 10**6
    return out
