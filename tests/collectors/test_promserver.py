"""The Prometheus test harness itself: a real server starts, scrapes itself and answers queries."""

import pytest
from promserver import PrometheusServer, free_port


@pytest.mark.slow
def test_prometheus_scrapes_itself(tmp_path):
    port = free_port()
    with PrometheusServer(tmp_path, scrape={"self": f"127.0.0.1:{port}"}, interval="1s", port=port) as prom:
        prom.wait_for_scrape("self")
        assert prom.query('up{job="self"}')[0]["value"][1] == "1"
