"""The step trace: one `StepStats` per line as JSON (docs/step-trace.md); a writer and a reader."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

from stallscope.core.errors import InputError

from stallscope.engine.stats import StepStats

_FIELDS = [f.name for f in fields(StepStats)]
_OPTIONAL = {"arrival_ns"}                          # added later; older traces lack it


class StepTraceWriter:
    """Example: `with StepTraceWriter("steps.jsonl") as w: w.write(stats)`. Each line is flushed."""

    def __init__(self, path: str | Path):
        try:
            self._file = open(path, "w", encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write step trace {str(path)!r}: {exc.strerror}") from None

    def write(self, stats: StepStats) -> None:
        self._file.write(json.dumps(asdict(stats), separators=(", ", ": ")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_step_trace(path: str | Path) -> list[StepStats]:
    """Parse a step trace; InputError names the file and line of the first bad record."""
    out = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read step trace {str(path)!r}: {exc.strerror}") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            out.append(StepStats(**{name: record[name] for name in _FIELDS
                                    if name not in _OPTIONAL or name in record}))
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"step trace {str(path)!r} line {lineno}: not a StepStats record ({exc})") from None
    return out
