"""Live fleet check: the reference server under load, scraped by `collect`'s loop and by a real Prometheus."""

from __future__ import annotations

import bisect
import subprocess
import sys
import threading
import time

import pytest
import requests

from misbehaving_server import wait_until
from promserver import PrometheusServer, free_port
from stallscope.collectors import loader, scrape_loop, store

MONOTONIC = ("_total", "_count", "_sum", "_bucket")


def key(row) -> tuple:
    labels = tuple(sorted((k, v) for k, v in row.labels.items() if k != "instance"))
    return row.metric, labels, row["le"] if row["le"] == row["le"] else None


def by_series(df) -> dict[tuple, list[tuple[int, float]]]:
    out: dict[tuple, list] = {}
    for row in df.sort_values("ts", kind="stable").itertuples(index=False):
        labels = tuple(sorted((k, v) for k, v in row.labels.items() if k != "instance"))
        le = row.le if row.le == row.le else None
        out.setdefault((row.metric, labels, le), []).append((row.ts, row.value))
    return out


@pytest.mark.slow
def test_store_and_prometheus_agree_on_a_live_reference_server(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "refserver.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "stallscope.cli", "refserver", "--model", "tiny",
                               "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _up(url), timeout=90, poll=0.2, what="refserver /metrics")
        with PrometheusServer(tmp_path, scrape={"vllm": f"127.0.0.1:{port}"}, interval="1s") as prom:
            stop = threading.Event()
            with store.Store(tmp_path / "s.db") as st:
                t0 = time.time_ns()
                loop = threading.Thread(target=scrape_loop.run, args=(
                    [scrape_loop.Target("vllm", url + "/metrics", timeout_s=2)], st, 1.0), kwargs={"stop": stop})
                loop.start()
                prom.wait_for_scrape("vllm")
                for i in range(6):  # load while both scrape
                    r = requests.post(url + "/v1/completions", timeout=60, json={
                        "model": "tiny", "prompt": "The scheduler " * (4 + 6 * i), "max_tokens": 8,
                            "ignore_eos": True})  # sampled EOS would end a request early (seen in CI: 47 tokens)
                    assert r.status_code == 200
                    time.sleep(0.3)
                t_load_end = time.time()
                prom.wait_for(lambda: float(prom.query("timestamp(vllm:generation_tokens_total)")[0]["value"][1])
                              > t_load_end + 1.2, what="a Prometheus scrape after the load")
                wait_until(lambda: _last_scrape_ns(tmp_path / "s.db") > (t_load_end + 1.2) * 1e9,
                           what="a store scrape after the load")
                stop.set()
                loop.join(10)
            t1 = time.time_ns()
            p = loader.load(prom.url, start=t0, end=t1, step="1s")["vllm"]["samples"]
            s = loader.load(tmp_path / "s.db", start=t0, end=t1)["vllm"]["samples"]
    finally:
        server.terminate()
        server.wait(20)
        log.close()
    ps, ss = by_series(p), by_series(s)
    assert set(ps) == set(ss), set(ps) ^ set(ss)
    assert len(ps) >= 280
    gen = ("vllm:generation_tokens_total", (("engine", "0"), ("model_name", "tiny")), None)
    assert ss[gen][-1][1] == ps[gen][-1][1] == 48  # 6 requests × 8 tokens
    for k in ps:
        if k[0] == "scrape_duration_seconds":
            continue
        assert ps[k][-1][1] == ss[k][-1][1], k  # the settled state is identical
        if not k[0].endswith(MONOTONIC):
            continue
        times = [t for t, _ in ss[k]]
        for t, v in ps[k]:
            lo = bisect.bisect_right(times, t - 2_000_000_000) - 1  # last store scrape well before
            hi = bisect.bisect_left(times, t + 500_000_000)  # first store scrape after
            if lo >= 0 and hi < len(times):
                assert ss[k][lo][1] <= v <= ss[k][hi][1], (k, t, v)


def _up(url: str) -> bool:
    try:
        return requests.get(url + "/metrics", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def _last_scrape_ns(db) -> int:
    con = store.connect_ro(db)
    try:
        return con.execute("SELECT coalesce(max(ts), 0) FROM scrapes").fetchone()[0]
    finally:
        con.close()
