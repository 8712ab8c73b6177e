"""A session-wide short `stallscope demo --no-dashboard` run, shared by the demo and browser tests."""

from __future__ import annotations

import subprocess
import sys

import pytest

DEMO_ARGS = ["--duration", "8", "--long-every", "3", "--no-progress"]   # ~50 s on a busy 2-core box


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    proc = subprocess.run([sys.executable, "-m", "stallscope.cli", "demo", "--no-dashboard", "--out", str(out),
                           *DEMO_ARGS], capture_output=True, text=True, timeout=300)
    return out, proc
