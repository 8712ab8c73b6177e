"""Every dashboard page in real headless Chromium: it renders with data, without console errors, and
the Overview shows the findings; a screenshot of each page is saved under the test's tmp dir."""

from __future__ import annotations

import pytest

import dashboard_frames as F
from conftest import ROOT, require_tool
from dashboard_browser import chromium, served, severe_console_errors, wait_for

# (path, element id that the page's callback fills, plotly graphs expected)
PAGES = [("/", "overview-health", 1), ("/latency", "latency-itl", 2), ("/kv-cache", "kv_cache-usage", 4),
         ("/gpu", "gpu-power", 4), ("/trace", "trace-summary", 1), ("/whatif", "whatif-body", 0),
         ("/requests", "requests-itl", 20)]


def _open_page(browser, base: str, path: str, filled_id: str, graphs: int) -> None:
    """Load `base + path` and wait until its main element is filled, its plots drawn and nothing loads."""
    browser.get(base + path)
    wait_for(browser, lambda d: d.find_element("id", filled_id).get_attribute("innerHTML").strip(),
             what=f"{filled_id} on {path}")
    if graphs:
        wait_for(browser, _plots_drawn(graphs), what=f"{graphs} plots on {path}")
    wait_for(browser, lambda d: d.execute_script(
        "return !document.querySelector('[data-dash-is-loading=\"true\"]')"), what=f"{path} loaded")


def _plots_drawn(n):
    def check(d):
        plots = d.find_elements("css selector", ".js-plotly-plot .main-svg")
        return len(plots) >= n
    return check


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium_path = require_tool("chromium", "chromium")
    driver_path = require_tool("chromedriver", "chromium-driver")
    with chromium(chromium_path, driver_path, tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


@pytest.mark.slow
def test_every_page_renders_with_data_and_no_console_errors(browser, tmp_path):
    from stallscope.dashboards.app import create_app
    from stallscope.dashboards.data import DataSource

    app = create_app(DataSource.from_frames(F.all_frames(), name="synthetic <b>frames</b>"))
    with served(app) as base:
        for path, filled_id, graphs in PAGES:
            _open_page(browser, base, path, filled_id, graphs)
            name = path.strip("/") or "overview"
            browser.save_screenshot(str(tmp_path / f"{name}.png"))
            assert (tmp_path / f"{name}.png").stat().st_size > 10_000
            assert severe_console_errors(browser) == [], path
            if path == "/":
                text = browser.find_element("id", "overview-findings").text
                assert "decode_starvation" in text and "--enable-chunked-prefill --max-num-batched-tokens 512" in text
                assert "<script>alert(1)</script>" in text          # shown as text, not run
                assert browser.find_element("id", "app-source").text == "synthetic <b>frames</b>"
            if path == "/trace":
                assert "400 steps" in browser.find_element("id", "trace-summary").text
            if path == "/whatif":
                assert "installed" in browser.find_element("id", "whatif-body").text


@pytest.mark.slow
def test_repro_findings_are_visible_on_overview(browser, demo_run, tmp_path):  # noqa: F811
    """The dashboard `stallscope demo` serves, in Chromium: every page, and the run's findings on Overview."""
    from stallscope.dashboards.data import DataSource

    out = demo_run.out
    assert demo_run.url, demo_run.stderr[-2000:]
    source = DataSource.from_db(out / "stallscope.db", live=False).with_run(out / "run")
    expected = source.findings()                      # what the demo's own server diagnosed from the same data
    assert len(expected) > 0
    base = demo_run.url.rstrip("/")
    for path, filled_id, graphs in PAGES:
        _open_page(browser, base, path, filled_id, graphs)
        browser.save_screenshot(str(tmp_path / f"repro-{path.strip('/') or 'overview'}.png"))
        assert severe_console_errors(browser) == [], path
        if path == "/":
            text = browser.find_element("id", "overview-findings").text
            shown = browser.find_elements("css selector", "#overview-findings .finding")
            assert len(shown) == min(len(expected), 50)
            for row in expected.itertuples():
                assert row.kind in text and row.target in text
            assert "off/vllm" in browser.find_element("id", "overview-health").text
