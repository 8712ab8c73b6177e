"""A uvicorn server in a background thread on a loopback port, for tests and in-process harnesses.

Example:
    with ServerThread(EngineConfig(model="tiny")) as server:
        requests.get(server.url + "/health")
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from stallscope.core.errors import ToolkitError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerThread:
    """Serve `build_app(config, **app_kwargs)` on `host:port` (a free port by default) until `stop()`."""

    def __init__(self, config, *, host: str = "127.0.0.1", port: int | None = None, **app_kwargs):
        from stallscope.refserver.server import build_app

        self.app, self.runner = build_app(config, **app_kwargs)
        self.engine = self.runner.engine
        self.host, self.port = host, port or free_port(host)
        self.url = f"http://{self.host}:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning",
                                                     access_log=False, lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, name="refserver-http", daemon=True)

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ToolkitError(f"reference server did not start on {self.url} within {timeout:.0f} s")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
