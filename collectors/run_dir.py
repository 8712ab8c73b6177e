"""A run directory (docs/run-directory.md) as its arms, by one rule, with each arm's files read once.

The rule: a directory holding any of steps.jsonl, scrapes.jsonl or loadgen.json is one arm (named "");
otherwise each child directory holding one is an arm, named after it.

    >>> run = RunDir.open("runs/demo")
    >>> [(arm.name, len(arm.steps())) for arm in run.arms]
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pandas as pd

from stallscope.core import schema
from stallscope.core.errors import CollectorError, InputError
from stallscope.engine.step_trace import read_records

ARM_FILES = ("steps.jsonl", "scrapes.jsonl", "loadgen.json")


class Arm:
    """One arm: `name` ("" when the run directory is the arm) and `path`, its directory."""

    def __init__(self, name: str, path: Path):
        self.name, self.path = name, path
        scrapes = path / "scrapes.jsonl"
        self.scrapes_path: Path | None = scrapes if scrapes.is_file() else None

    @functools.cached_property
    def _steps(self) -> pd.DataFrame | None:
        path = self.path / "steps.jsonl"
        rows = read_records(path) if path.is_file() else []
        return schema.steps_frame(rows) if rows else None

    def steps(self) -> pd.DataFrame | None:
        """The step trace as a steps frame, parsed on the first call; None without steps."""
        return None if self._steps is None else self._steps.copy(deep=False)

    def loadgen(self) -> dict | None:
        """loadgen.json (the load generator's result), or None without one."""
        return _json(self.path / "loadgen.json")

    def server_config(self) -> dict | None:
        """server.json (the server's argv and port), or None without one."""
        return _json(self.path / "server.json")


class RunDir:
    """The arms of one run directory, in name order."""

    def __init__(self, path: Path, arms: list[Arm]):
        self.path, self.arms = path, arms

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """InputError when `path` is not a directory or holds no arm."""
        path = Path(path)
        if not path.is_dir():
            raise InputError(f"run directory not found: {path}")
        arms = find_arms(path)
        if not arms:
            raise InputError(f"{path} is not a run directory: no steps.jsonl, scrapes.jsonl or loadgen.json "
                             "in it or in any arm under it")
        return cls(path, arms)

    def steps(self, prefix_ids: bool = False) -> pd.DataFrame | None:
        """Every arm's steps in one frame, `target` = the arm's name; None when no arm has steps.

        `prefix_ids` prefixes the request ids in `num_scheduled_tokens` with "<arm>/", so they stay distinct."""
        frames = []
        for arm in self.arms:
            steps = arm.steps()
            if steps is not None:
                if prefix_ids and arm.name and "num_scheduled_tokens" in steps:
                    steps["num_scheduled_tokens"] = steps["num_scheduled_tokens"].map(
                        lambda d, a=arm.name: {f"{a}/{k}": v for k, v in d.items()} if isinstance(d, dict) else d)
                frames.append(steps.assign(target=arm.name))
        return pd.concat(frames, ignore_index=True) if frames else None


def find_arms(path: Path) -> list[Arm]:
    """The arms of directory `path` by the rule in the module doc; [] when there is none."""
    if any((path / f).is_file() for f in ARM_FILES):
        return [Arm("", path)]
    return [Arm(p.name, p) for p in sorted(path.iterdir()) if p.is_dir() and any((p / f).is_file() for f in ARM_FILES)]


def scrape_files(path: Path) -> list[tuple[str, Path]]:
    """(target prefix: "" or "<arm>/", scrapes.jsonl) of each arm of `path` that has one; CollectorError if none."""
    files = [(f"{arm.name}/" if arm.name else "", arm.scrapes_path) for arm in find_arms(path) if arm.scrapes_path]
    if not files:
        raise CollectorError(f"run directory {path} has no scrapes.jsonl (nor any <arm>/scrapes.jsonl)")
    return files


def _json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data
