"""One short `stallscope demo` per test session, left serving its dashboard for the tests that need it.

The demo runs as the user runs it (subprocess, `--port 0`); the fixture waits for the URL line it
prints, hands the run to the tests, and stops it with SIGINT at the end of the session (exit 0).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

DEMO_ARGS = ["--duration", "8", "--long-every", "3", "--no-progress"]   # ~30-50 s on a busy 2-core box
URL_PREFIX = "stallscope dashboard: http://127.0.0.1:"


@dataclass
class DemoRun:
    out: Path
    stdout: str          # everything printed before the dashboard URL (tables, findings)
    stderr_path: Path    # progress lines, then the server's log
    url: str             # "" when the demo exited before serving

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    err_path = out.parent / f"{out.name}-stderr.txt"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "stallscope.cli", "demo", "--out", str(out), "--port", "0",
                                 *DEMO_ARGS], stdout=subprocess.PIPE, stderr=err, text=True)
    watchdog = threading.Timer(300, proc.kill)       # bounds the wait for the URL line
    watchdog.start()
    lines, url = [], ""
    try:
        for line in proc.stdout:
            if line.startswith(URL_PREFIX):
                url = line.split()[-1]
                break
            lines.append(line)
    finally:
        watchdog.cancel()
    run = DemoRun(out, "".join(lines), err_path, url)
    yield run
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            pytest.fail("stallscope demo did not stop on SIGINT within 30 s")
    assert proc.returncode == 0, f"stallscope demo exited {proc.returncode}: {run.stderr[-2000:]}"
