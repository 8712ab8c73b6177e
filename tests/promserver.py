"""A real Prometheus server for integration tests: started on 127.0.0.1 with a temporary config.

Usage:
    with PrometheusServer(tmp_path, scrape={"vllm": "127.0.0.1:8000"}, interval="1s",
                          rule_files=[path]) as prom:
        prom.wait_for_scrape("vllm")
        prom.query("up")                      # -> list of result dicts (instant vector)
        prom.query_range(expr, start, end, step)

`FakePrometheus(answer)` is a loopback stand-in answering every /api/v1/* GET with `answer(path)`
(status, body bytes), for answers a real Prometheus never gives; `matrix(*series)` is a success body.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
import yaml

from conftest import require_tool, wait_until


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    def __init__(self, workdir: Path, scrape: dict[str, str] | None = None, interval: str = "1s",
                 rule_files: list[Path] | None = None, evaluation_interval: str | None = None,
                 storage: Path | None = None, extra_args: list[str] | None = None,
                 port: int | None = None):
        self.binary = require_tool("prometheus", "prometheus")
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.storage = Path(storage) if storage else self.workdir / "prom-data"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": evaluation_interval or interval},
            "scrape_configs": [
                {"job_name": name, "static_configs": [{"targets": [addr]}]} for name, addr in (scrape or {}).items()
            ],
        }
        if rule_files:
            config["rule_files"] = [str(Path(p).resolve()) for p in rule_files]
        self.config_path = self.workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / "prometheus.log"

    def __enter__(self) -> "PrometheusServer":
        self.storage.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.config_path}", f"--storage.tsdb.path={self.storage}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
             *self.extra_args],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                if requests.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.__exit__(None, None, None)
        raise RuntimeError("prometheus did not become ready in 30 s")

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if getattr(self, "_log", None):
            self._log.close()

    def api(self, path: str, **params) -> dict:
        r = requests.get(self.url + "/api/v1/" + path, params=params, timeout=10)
        r.raise_for_status()
        body = r.json()
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path} failed: {body}")
        return body["data"]

    def query(self, expr: str, time_s: float | None = None) -> list[dict]:
        params = {"query": expr}
        if time_s is not None:
            params["time"] = time_s
        return self.api("query", **params)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def wait_for(self, predicate, timeout: float = 30.0, poll: float = 0.2, what: str = "condition"):
        """Poll `predicate()` until it returns a truthy value; return it, or raise after `timeout`."""
        return wait_until(predicate, timeout, poll, what=f"prometheus: {what}")

    def wait_for_scrape(self, job: str, timeout: float = 30.0) -> None:
        self.wait_for(lambda: [r for r in self.query(f'up{{job="{job}"}}') if r["value"][1] == "1"],
                      timeout, what=f"target {job} up")


def promtool() -> str:
    return require_tool("promtool", "prometheus")


def backfill_openmetrics(text: str, storage: Path, workdir: Path) -> None:
    """Write OpenMetrics text (must end with `# EOF`) into a TSDB block dir with promtool."""
    src = Path(workdir) / "backfill.om"
    src.write_text(text)
    subprocess.run([promtool(), "tsdb", "create-blocks-from", "openmetrics", str(src), str(storage)],
                   check=True, capture_output=True)


__all__ = ["PrometheusServer", "free_port", "promtool", "backfill_openmetrics", "shutil"]


class FakePrometheus:
    """A loopback HTTP server answering every /api/v1/* GET (and form POST, as `path?form`) with
    `answer(path)` -> (status, body bytes); with `content_type="text/plain; version=0.0.4"` it is a static
    scrape target (e.g. a recorded /metrics body)."""

    def __init__(self, answer, content_type: str = "application/json"):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._reply(answer(self.path))

            def do_POST(self):  # a form-encoded query (the fleet path): answered as the same GET
                length = int(self.headers.get("Content-Length") or 0)
                form = self.rfile.read(length).decode()
                self._reply(answer(f"{self.path}?{form}"))

            def _reply(self, got):
                code, body = got
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "FakePrometheus":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def matrix(*series) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": list(series)}}).encode()
