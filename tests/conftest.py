"""Shared test helpers: system-tool gating (skip locally, fail under CI=true) and paths."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

settings.register_profile("ci", deadline=None, max_examples=40, print_blob=True)
settings.register_profile("dev", deadline=None, max_examples=25)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")

# The tests stop the servers they start with SIGINT, as a user's Ctrl-C does. A shell that starts the suite as a
# background job (`cmd &`, nohup) hands every child SIGINT ignored, and a Python child then never raises
# KeyboardInterrupt; restoring the default here gives the children a deliverable SIGINT again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def require(condition: bool, reason: str) -> None:
    """Skip the test with `reason` when `condition` is false, but fail instead under CI=true."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"CI=true and a required part is missing: {reason}", pytrace=False)
    pytest.skip(reason)


def require_tool(name: str, package: str) -> str:
    """Path of a system tool; skip locally (fail in CI) with the Debian package that provides it."""
    path = shutil.which(name)
    require(path is not None, f"`{name}` not installed (Debian package `{package}`; bash scripts/test.sh installs it)")
    return path


# One short `stallscope demo` run per session, shared by tests/cli/test_demo.py and the browser tests.
from demo_run import demo_run  # noqa: E402,F401


def pytest_collection_modifyitems(items):
    """Every test on the demo run is `slow` (the run takes about 30 s), so `-m "not slow"` never starts it."""
    for item in items:
        if "demo_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


def wait_until(predicate, timeout: float = 20.0, poll: float = 0.05, what: str = "condition"):
    """Poll `predicate()` until it returns a truthy value and return that value; raise after `timeout` s.

    The one synchronisation helper of the suite: tests wait on an observable condition, never a sleep.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError(f"{what} not met within {timeout} s")
