"""Helpers for the real-browser dashboard tests: serve an app on loopback, drive headless Chromium."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--window-size=1400,1000"]


@contextmanager
def served(app):
    """Serve a Dash app on 127.0.0.1 and a free port in a thread; yield its base URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def chromium(chromium_path: str, driver_path: str, profile_dir):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium_path
    for flag in CHROME_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile_dir}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver, condition, timeout_s=30.0, what="condition"):
    """Poll `condition(driver)` until truthy; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition(driver)
            if last:
                return last
        except Exception as exc:  # the DOM changes under us while Dash renders
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


def severe_console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
