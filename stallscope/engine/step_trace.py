"""The step trace: one `StepStats` per line as JSON (docs/step-trace.md); one writer, one reader."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

from stallscope.core.errors import InputError

from stallscope.engine.stats import StepStats

_FIELDS = [f.name for f in fields(StepStats)]
_NUMBERS = [f.name for f in fields(StepStats) if f.type == "int"]    # the dicts have defaults: older traces lack one
REQUIRED = ("start_ns", "end_ns", "num_prefill_tokens", "num_decode_tokens")


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


def read_records(path: str | Path, *, required=REQUIRED) -> list[dict]:
    """The JSON object of each non-blank line; InputError names the file and line of the first bad one
    (not JSON, not an object, a `required` field missing or not a number)."""
    path = Path(path)
    try:
        fh = path.open(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"step trace not found: {path}") from None
    except OSError as exc:
        raise InputError(f"cannot read step trace {str(path)!r}: {exc.strerror}") from None
    rows = []
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            if "kv_blocks_total" in row:                 # the pool size's name in traces before num_gpu_blocks
                row["num_gpu_blocks"] = row.pop("kv_blocks_total")
            for key in required:
                if not isinstance(row.get(key), (int, float)):
                    raise InputError(f"{path}:{lineno}: field `{key}` missing or not a number")
            rows.append(row)
    return rows


def read_step_trace(path: str | Path) -> list[StepStats]:
    """Parse a step trace into `StepStats`; InputError names the file and line of the first bad record."""
    return [StepStats(**{name: r[name] for name in _FIELDS if name in r})
            for r in read_records(path, required=_NUMBERS)]
