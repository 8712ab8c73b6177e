"""Collector CPU at a 1 s interval, against the 2 %-of-one-core limit and a real Prometheus in the same run.

Both scrape the same live target, the reference server (`stallscope refserver --model tiny`), every
1 s: `stallscope collect --target vllm=… --interval 1s --db …` and `/usr/bin/prometheus` with a
1 s scrape_interval. After a warm-up, each process's CPU time (utime + stime from /proc/PID/stat) is
read at the start and end of the same window, and reported as a percentage of one core.

    python benchmarks/bench_collect_cpu.py [--window 30]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

LIMIT_PCT = 2.0
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def wait_http(url: str, timeout: float = 90, *, proc=None, what: str | None = None) -> None:
    """Until `url` answers 200; SystemExit(`what`, default: the URL's) after `timeout` s or once `proc` exits.
    (The benchmarks that start a server import it from here.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise SystemExit(what or f"{url} did not answer within {timeout} s")


def main() -> None:
    from promserver import PrometheusServer, free_port

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=30.0, help="measured seconds (after 5 s warm-up)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "stallscope.cli", "refserver", "--model", "tiny",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    collector = None
    try:
        wait_http(url + "/metrics")
        with PrometheusServer(work, scrape={"vllm": f"127.0.0.1:{port}"}, interval="1s") as prom:
            collector = subprocess.Popen([sys.executable, "-m", "stallscope.cli", "collect", "--target",
                                          f"vllm={url}/metrics", "--interval", "1s", "--db", str(work / "c.db"),
                                          "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            prom.wait_for_scrape("vllm")
            time.sleep(5)  # warm-up: imports, first (uncached) parse, Prometheus start-up compaction
            c0, p0, t0 = cpu_s(collector.pid), cpu_s(prom.proc.pid), time.monotonic()
            time.sleep(args.window)
            c1, p1, t1 = cpu_s(collector.pid), cpu_s(prom.proc.pid), time.monotonic()
            collector.terminate()
            collector.wait(20)
    finally:
        if collector and collector.poll() is None:
            collector.kill()
        server.terminate()
        server.wait(20)
    wall = t1 - t0
    ours, theirs = 100 * (c1 - c0) / wall, 100 * (p1 - p0) / wall
    print(f"window {wall:.1f} s, 1 s interval, target: refserver tiny (~290 series), load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"stallscope collect: {ours:.2f} % of one core = {ours / LIMIT_PCT:.2f} x the 2 % limit")
    print(f"peer: prometheus {theirs:.2f} % of one core (collector = {ours / theirs:.2f} x prometheus)"
          if theirs > 0 else "peer: prometheus used no measurable CPU in the window")


if __name__ == "__main__":
    main()
