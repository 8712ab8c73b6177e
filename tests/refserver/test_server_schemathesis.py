"""Schemathesis against the reference server's own OpenAPI schema: generated requests, valid and invalid
(schemathesis 4.x positive and negative modes), sent to a live loopback server; none may get a 5xx."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, settings

from stallscope.refserver.config import EngineConfig
from stallscope.refserver.server_thread import ServerThread

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import not_a_server_error  # noqa: E402

EXAMPLES_PER_OPERATION = 200  # 6 operations: at least 1,000 requests in all
SENT = {"count": 0}
_lock = threading.Lock()


@pytest.fixture(scope="module")
def refserver():
    # a short context keeps every generated request small (n <= 64 choices of < 64 tokens)
    with ServerThread(EngineConfig(model="tiny", max_model_len=64), served_model_name="ref") as srv:
        yield srv


@pytest.fixture(scope="module")
def api_schema(refserver):
    return schemathesis.openapi.from_url(refserver.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_5xx(case):
    case.call_and_validate(checks=[not_a_server_error], timeout=30)
    with _lock:
        SENT["count"] += 1


@pytest.mark.slow
def test_at_least_1000_requests_were_sent():
    assert SENT["count"] >= 1000, SENT
