"""Configuration: the shared alert/analyzer thresholds, loaded from one YAML file.

`rules/thresholds.yaml` (installed as `stallscope.rules`) is the single source of truth; the rule
renderer and the analyzers both call `load_thresholds()`. Overrides come from a user file
(`--thresholds FILE`) or keyword arguments, and unknown keys are an error that names the key.
"""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path

import yaml

from stallscope.core.errors import ConfigError


def _default_text() -> str:
    return resources.files("stallscope.rules").joinpath("thresholds.yaml").read_text()


def parse_duration(text: str | int | float) -> float:
    """Prometheus duration (`90s`, `5m`, `1h30m`, `0m`) or a number of seconds, to seconds.

    >>> parse_duration("1m30s")
    90.0
    """
    if isinstance(text, (int, float)):
        return float(text)
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    s, total, num = str(text).strip(), 0.0, ""
    i = 0
    if not s:
        raise ConfigError("empty duration")
    while i < len(s):
        ch = s[i]
        if ch.isdigit() or ch == ".":
            num += ch
            i += 1
            continue
        unit = "ms" if s.startswith("ms", i) else ch
        if unit not in units or not num:
            raise ConfigError(f"bad duration {text!r}: expected e.g. 30s, 5m, 1h")
        total += float(num) * units[unit]
        num = ""
        i += len(unit)
    if num:
        try:
            return total + float(num)
        except ValueError:
            raise ConfigError(f"bad duration {text!r}") from None
    return total


def load_thresholds(path: str | Path | None = None, **overrides) -> dict:
    """The thresholds dict, from the packaged defaults, a user file and keyword overrides.

    >>> load_thresholds(itl_slo_s=0.1)["itl_slo_s"]
    0.1
    """
    base = yaml.safe_load(_default_text())
    if path is not None:
        try:
            user = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"thresholds file not found: {path}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"thresholds file {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(user, dict):
            raise ConfigError(f"thresholds file {path} must hold a mapping, got {type(user).__name__}")
        base = _merge(base, user, str(path))
    return _merge(base, {k: v for k, v in overrides.items() if v is not None}, "overrides")


def _merge(base: dict, extra: dict, where: str) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if key not in out:
            raise ConfigError(f"unknown threshold {key!r} in {where}; known: {', '.join(sorted(out))}")
        if isinstance(out[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"threshold {key!r} in {where} must be a mapping")
            out[key] = _merge(out[key], value, f"{where}:{key}")
        else:
            out[key] = value
    return out
