"""A real local HTTP server (http.server in a thread) whose /metrics answers follow a script.

    with MetricsServer(lambda n: ("ok", text)) as srv:   # n = 0, 1, 2, … per request
        srv.url  -> "http://127.0.0.1:PORT/metrics"

Actions returned by the script: ("ok", text) · ("status", code) · ("garbage", bytes) ·
("truncate", text) (Content-Length larger than the bytes sent, then close) · ("slow", seconds, text) ·
("hang_body", seconds, text) (headers at once, body after `seconds`).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import wait_until  # noqa: F401  (re-exported for the collector tests)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        srv = self.server
        with srv.lock:
            n = srv.requests
            srv.requests += 1
        action = srv.script(n)
        kind = action[0]
        if kind == "status":
            body = b"error\n"
            self.send_response(action[1])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if kind == "slow":
            time.sleep(action[1])
            action = ("ok", action[2])
        if kind == "garbage":
            body = action[1]
        elif kind == "hang_body":
            body = action[2].encode()
        else:
            body = action[1].encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        if kind == "truncate":
            self.send_header("Content-Length", str(len(body) + 1000))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if kind == "hang_body":
            self.wfile.flush()
            time.sleep(action[1])
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass


class MetricsServer:
    def __init__(self, script):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.script = script
        self.httpd.requests = 0
        self.httpd.lock = threading.Lock()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self.addr = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def requests(self) -> int:
        return self.httpd.requests

    def __enter__(self) -> "MetricsServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


