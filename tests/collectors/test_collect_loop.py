"""The scrape loop against real local HTTP servers that misbehave on purpose."""

from __future__ import annotations

import socket
import threading

import pytest

from conftest import FIXTURES
from misbehaving_server import MetricsServer
from stallscope.collectors import scrape_loop, store
from stallscope.collectors.scrape_loop import Target

TEXT = (FIXTURES / "vllm_metrics" / "v0_33_0_custom_itl_buckets.txt").read_text()
GAUGE = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine="0",model_name="m"}} {v}\n'


def counter(v: float) -> str:
    return f'# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{{engine="0",model_name="m"}} {v}\n'


def run_loop(tmp_path, targets, duration=1.0, interval=0.2, stop=None):
    db = tmp_path / "s.db"
    with store.Store(db) as st:
        summary = scrape_loop.run(targets, st, interval, duration, stop=stop)
    con = store.connect_ro(db)
    try:
        return summary, store.read(con), store.scrapes(con)
    finally:
        con.close()


def ups(frames, target):
    s = frames[target]["samples"]
    return s[s.metric == "up"].sort_values("ts").value.tolist()


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def test_good_target_every_scrape_stored_with_up_and_duration(tmp_path):
    with MetricsServer(lambda n: ("ok", TEXT)) as srv:
        summary, frames, scrapes = run_loop(tmp_path, [Target("vllm", srv.url, timeout_s=1)], duration=1.0)
    assert len(scrapes) == srv.requests >= 4
    assert scrapes.ok.all() and scrapes.error.isna().all()
    assert ups(frames, "vllm") == [1.0] * len(scrapes)
    s = frames["vllm"]["samples"]
    assert len(s) == len(scrapes) * (297 + 2)
    dur = s[s.metric == "scrape_duration_seconds"].value
    assert (dur > 0).all() and (dur < 1).all()
    assert summary.status["vllm"].scrapes == len(scrapes) and summary.status["vllm"].errors == 0


def test_down_target_is_retried_stored_as_up_0_and_does_not_stop_the_good_one(tmp_path):
    with MetricsServer(lambda n: ("ok", TEXT)) as srv:
        targets = [Target("vllm", srv.url, timeout_s=1), Target("down", dead_url(), retries=2, backoff_s=0.01)]
        summary, frames, scrapes = run_loop(tmp_path, targets, duration=1.0)
    down = scrapes[scrapes.target == "down"]
    assert len(down) >= 4 and not down.ok.any()
    assert down.error.str.contains("Connection refused").all() and down.error.str.contains("after 3 attempts").all()
    assert set(ups(frames, "down")) == {0.0}
    assert set(ups(frames, "vllm")) == {1.0} and len(ups(frames, "vllm")) >= 4
    assert len(frames["down"]["samples"]) == 2 * len(down)  # up + scrape_duration_seconds only


def test_flapping_target_without_retries_alternates_and_with_retries_recovers(tmp_path):
    flap = lambda n: ("status", 503) if n % 2 else ("ok", TEXT)  # noqa: E731
    with MetricsServer(flap) as srv:
        (tmp_path / "a").mkdir()
        _, frames, scrapes = run_loop(tmp_path / "a", [Target("vllm", srv.url, retries=0)], duration=1.0)
    up = ups(frames, "vllm")
    assert up[:4] == [1.0, 0.0, 1.0, 0.0] and len(up) == srv.requests
    assert scrapes[~scrapes.ok].error.str.contains("HTTP 503").all()
    with MetricsServer(flap) as srv:
        (tmp_path / "b").mkdir()
        _, frames, scrapes = run_loop(tmp_path / "b", [Target("vllm", srv.url, retries=2, backoff_s=0.01)],
                                      duration=1.0)
    assert set(ups(frames, "vllm")) == {1.0}
    assert srv.requests > len(scrapes)  # the 503s were retried inside the slot


def test_slow_target_times_out_without_delaying_the_others(tmp_path):
    with MetricsServer(lambda n: ("ok", TEXT)) as good, MetricsServer(lambda n: ("slow", 2.0, TEXT)) as slow:
        targets = [Target("vllm", good.url, timeout_s=1), Target("slow", slow.url, timeout_s=0.3, retries=0)]
        _, frames, scrapes = run_loop(tmp_path, targets, duration=1.2)
    s = scrapes[scrapes.target == "slow"]
    assert len(s) >= 2 and not s.ok.any() and s.error.str.contains("timed out after 0.3 s").all()
    assert len(ups(frames, "vllm")) >= 5


def test_slow_body_after_headers_times_out(tmp_path):
    with MetricsServer(lambda n: ("hang_body", 1.5, TEXT)) as srv:
        _, _, scrapes = run_loop(tmp_path, [Target("vllm", srv.url, timeout_s=0.3, retries=0)], duration=0.5)
    assert len(scrapes) >= 1 and not scrapes.ok.any() and scrapes.error.str.contains("timed out").all()


@pytest.mark.parametrize("action,needle", [
    (("garbage", b"<html><body>502 Bad Gateway</body></html>"), "not valid Prometheus text exposition at line 1"),
    (("garbage", b"\x00\xff\xfe binary"), "not valid Prometheus text exposition"),
    (("truncate", TEXT), "truncated body"),
    (("status", 404), "HTTP 404"),
])
def test_bad_answers_are_stored_as_failed_scrapes_and_not_retried(tmp_path, action, needle):
    with MetricsServer(lambda n: action) as srv:
        _, frames, scrapes = run_loop(tmp_path, [Target("vllm", srv.url, retries=2, backoff_s=0.01)], duration=0.7)
    assert len(scrapes) >= 3 and not scrapes.ok.any()
    assert scrapes.error.str.contains(needle, regex=False).all(), scrapes.error.iloc[0]
    assert srv.requests == len(scrapes)  # deterministic failures are not retried
    assert set(ups(frames, "vllm")) == {0.0}


def test_counter_reset_is_stored_as_scraped(tmp_path):
    values = [10, 20, 3, 8, 9, 9, 9, 9, 9, 9, 9, 9]
    with MetricsServer(lambda n: ("ok", counter(values[min(n, len(values) - 1)]))) as srv:
        _, frames, _ = run_loop(tmp_path, [Target("vllm", srv.url)], duration=1.0)
    s = frames["vllm"]["samples"]
    got = s[s.metric == "vllm:prompt_tokens_total"].sort_values("ts").value.tolist()
    assert got[:4] == [10, 20, 3, 8]


def test_a_mix_of_good_and_garbage_answers_keeps_every_good_sample(tmp_path):
    script = lambda n: ("garbage", b"oops {") if n % 3 == 1 else ("ok", GAUGE.format(v=n))  # noqa: E731
    with MetricsServer(script) as srv:
        _, frames, scrapes = run_loop(tmp_path, [Target("vllm", srv.url, retries=0)], duration=1.2)
    s = frames["vllm"]["samples"]
    got = s[s.metric == "vllm:num_requests_running"].value.tolist()
    assert got == [float(n) for n in range(srv.requests) if n % 3 != 1]
    assert (~scrapes.ok).sum() == len([n for n in range(srv.requests) if n % 3 == 1])


def test_stop_event_ends_the_loop_and_flushes(tmp_path):
    stop = threading.Event()
    with MetricsServer(lambda n: ("ok", TEXT)) as srv:
        threading.Timer(0.5, stop.set).start()
        summary, frames, scrapes = run_loop(tmp_path, [Target("vllm", srv.url)], duration=30, stop=stop)
    assert 2 <= len(scrapes) <= 5 and summary.scrapes == len(scrapes)


def test_status_line_names_targets_age_and_errors():
    summary = scrape_loop.LoopSummary({"vllm": scrape_loop.TargetStatus(scrapes=5, last_ok_ts=9_000_000_000),
                                       "dcgm": scrape_loop.TargetStatus(scrapes=3, errors=3, last_error="HTTP 503")})
    line = scrape_loop.status_line(summary, now_ns=10_500_000_000)
    assert line == ("vllm: 5 scrapes, last ok 1.5s ago, 0 errors | "
                    "dcgm: 3 scrapes, last ok never, 3 errors (last: HTTP 503)")


def test_a_source_that_raises_is_stored_as_failed_and_the_loop_goes_on(tmp_path):
    calls = []

    def flaky_poll(ts):
        calls.append(ts)
        if len(calls) % 2 == 0:
            raise RuntimeError("driver hiccup")
        return None, None

    _, frames, scrapes = run_loop(tmp_path, [Target("nvml", poll=flaky_poll, retries=0)], duration=0.9)
    assert len(scrapes) == len(calls) >= 4
    assert scrapes.ok.tolist()[:4] == [True, False, True, False]
    assert scrapes[~scrapes.ok].error.eq("RuntimeError: driver hiccup").all()


def test_scrape_returns_text_and_names_the_url_in_every_failure():
    from stallscope.collectors import dcgm, vllm
    from stallscope.collectors.exposition import RetryableScrapeError
    from stallscope.core.errors import CollectorError

    assert vllm.scrape is dcgm.scrape
    with MetricsServer(lambda n: ("ok", TEXT)) as srv:
        assert vllm.scrape(srv.url, timeout=5) == TEXT
    with MetricsServer(lambda n: ("status", 404)) as srv:
        with pytest.raises(CollectorError, match=f"HTTP 404 from {srv.url}") as info:
            vllm.scrape(srv.url)
        assert not isinstance(info.value, RetryableScrapeError)
    with MetricsServer(lambda n: ("status", 502)) as srv:
        with pytest.raises(RetryableScrapeError, match="HTTP 502"):
            vllm.scrape(srv.url)
    with MetricsServer(lambda n: ("slow", 1.0, TEXT)) as srv:
        with pytest.raises(RetryableScrapeError, match="timed out after 0.2 s"):
            vllm.scrape(srv.url, timeout=0.2)
    url = dead_url()
    with pytest.raises(RetryableScrapeError, match=f"scrape of {url} failed: Connection refused"):
        vllm.scrape(url)


def test_record_jsonl_writes_the_run_directory_format_skips_failures_and_scrapes_once_more(tmp_path):
    import json

    three = threading.Event()

    def script(n):
        if n >= 3:
            three.set()
        return ("status", 500) if n == 1 else ("ok", GAUGE.format(v=n))

    path = tmp_path / "scrapes.jsonl"
    with MetricsServer(script) as srv:
        stop = scrape_loop.record_jsonl(srv.url, path, interval_s=0.05)
        assert three.wait(10)
        written = stop()
        requests = srv.requests
    lines = path.read_text().splitlines(keepends=True)
    records = [json.loads(line) for line in lines]
    assert written == len(lines) == requests - 1 >= 3               # the HTTP 500 left no line
    assert [json.dumps(r) + "\n" for r in records] == lines and all(r["target"] == "vllm" for r in records)
    assert [r["text"] for r in records[:2]] == [GAUGE.format(v=0), GAUGE.format(v=2)]
    assert records[-1]["text"] == GAUGE.format(v=requests - 1) and records[0]["ts"] <= records[-1]["ts"]
