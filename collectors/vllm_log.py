"""The scheduler configuration a vLLM server states in its own log, read from that log file.

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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from stallscope.core.errors import InputError

BUDGET = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
ENGINE = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]*)\) with config: ")
CHUNKED = re.compile(r"\benable_chunked_prefill=(True|False)\b")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_LINE = 1 << 20   # a config line is a few KiB; a longer line is read in pieces, not held whole


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
