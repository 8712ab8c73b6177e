"""Fleet source against a real Prometheus: same series as the store path, selectors, aliases, DCGM."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import FIXTURES
from misbehaving_server import MetricsServer
from promserver import FakePrometheus, PrometheusServer, matrix
from stallscope.collectors import dcgm, loader, prometheus_api, scrape_loop, store
from stallscope.cli import main
from stallscope.core.errors import CollectorError

DCGM = FIXTURES / "dcgm_samples"  # real captures, each with its source on its first line

V = FIXTURES / "vllm_metrics"
POD = "vllm-agg-0-vllmdecodeworker-s65j5"


def key(row) -> tuple:
    labels = {k: v for k, v in row.labels.items() if k != "instance"}
    return row.metric, tuple(sorted(labels.items())), row["le"] if row["le"] == row["le"] else None


def series_values(df) -> dict[tuple, list[float]]:
    out: dict[tuple, list[float]] = {}
    for _, row in df.sort_values("ts", kind="stable").iterrows():
        out.setdefault(key(row), []).append(row.value)
    return out


@pytest.mark.slow
def test_store_and_prometheus_give_the_same_series_for_static_targets(tmp_path):
    texts = {"old": (V / "v0_8_5_v1.txt").read_text(), "new": (V / "v0_10_2.txt").read_text(),
             "dcgm": (DCGM / "h100_sxm_8gpu_k8s_pod_uid_sampled_aicr_2026-03.txt").read_text()}
    servers = {name: MetricsServer(lambda n, t=text: ("ok", t)) for name, text in texts.items()}
    for s in servers.values():
        s.__enter__()
    try:
        with PrometheusServer(tmp_path, scrape={n: s.addr for n, s in servers.items()}, interval="1s") as prom:
            stop = threading.Event()
            db = tmp_path / "s.db"
            with store.Store(db) as st:
                t0 = time.time_ns()
                loop = threading.Thread(target=scrape_loop.run, args=(
                    [scrape_loop.Target(n, s.url) for n, s in servers.items()], st, 1.0), kwargs={"stop": stop})
                loop.start()
                for job in servers:
                    prom.wait_for_scrape(job)
                prom.wait_for(lambda: len(prom.query_range("up", t0 / 1e9, time.time(), 1)) == 3 and
                              min(len(r["values"]) for r in prom.query_range("up", t0 / 1e9, time.time(), 1)) >= 3,
                              what="3 points per job")
                stop.set()
                loop.join(10)
            t1 = time.time_ns()
            via_prom = loader.load(prom.url, start=t0, end=t1, step="1s")
            via_store = loader.load(db, start=t0, end=t1)
            assert sorted(via_prom) == sorted(via_store) == ["dcgm", "new", "old"]
            for job in ("old", "new"):
                p, s = series_values(via_prom[job]["samples"]), series_values(via_store[job]["samples"])
                assert set(p) == set(s), (job, set(p) ^ set(s))
                for k in p:
                    if k[0] != "scrape_duration_seconds":
                        assert set(p[k]) == set(s[k]), (job, k)
            old = via_prom["old"]["samples"]
            q = old[old.metric == "vllm:prefix_cache_queries_total"].iloc[0]
            assert q.labels["unit"] == "blocks" and q.value == 1920  # HELP read through /api/v1/metadata
            assert q.labels["instance"] == servers["old"].addr and q.source_metric == "vllm:gpu_prefix_cache_queries_total"
            new = via_prom["new"]["samples"]
            assert not new.metric.str.endswith("_created").any()
            assert set(new[new.metric == "vllm:kv_cache_usage_perc"].source_metric) == {"vllm:kv_cache_usage_perc"}
            gp, gs = via_prom["dcgm"]["gpu"], via_store["dcgm"]["gpu"]
            assert sorted(gp.gpu.unique()) == [str(i) for i in range(8)]
            cols = ["gpu", "uuid", "model", "hostname", "metric", "value", "pod", "namespace", "container"]
            assert set(map(tuple, gp[cols].values)) == set(map(tuple, gs[cols].values))
            # selectors: pod narrows DCGM to one GPU and drops vLLM (no pod label); model_name skips DCGM
            by_pod = loader.load(prom.url, start=t0, end=t1, step="1s", selector={"pod": POD})
            assert list(by_pod) == ["dcgm"] and set(by_pod["dcgm"]["gpu"].gpu) == {"0"}
            assert set(by_pod["dcgm"]["gpu"].metric) == {"gpu_temp_c", "power_w", "gpu_util", "mem_copy_util"}
            by_model = loader.load(prom.url, start=t0, end=t1, step="1s",
                                   selector={"model_name": "meta-llama/Llama-3.1-8B-Instruct",
                                             "instance": servers["new"].addr})
            assert sorted(by_model) == ["new"]
            by_job = loader.load(prom.url, start=t0, end=t1, step="1s", targets=["old"])
            assert list(by_job) == ["old"]
            with pytest.raises(CollectorError, match="not a valid Prometheus label name"):
                loader.load(prom.url, start=t0, end=t1, selector={"bad-label": "x"})
            with pytest.raises(CollectorError, match="rejected query_range"):
                prometheus_api.Client(prom.url).query_range("rate(", t0 / 1e9, t1 / 1e9, 1)
    finally:
        for s in servers.values():
            s.__exit__(None, None, None)


def test_unreachable_prometheus_is_one_collector_error():
    with pytest.raises(CollectorError, match="unreachable"):
        loader.load("http://127.0.0.1:9/", start=0, end=10**9)


def test_long_windows_are_split_under_the_point_limit():
    calls = []

    class Fake(prometheus_api.Client):
        def _get(self, path, params):
            calls.append((float(params["start"]), float(params["end"])))
            return {"resultType": "matrix", "result": [{"metric": {"__name__": "up", "job": "j"},
                                "values": [[float(params["start"]), "1"]]}]}

    out = Fake("http://x").query_range("up", 0, 25_000, 1)
    assert len(calls) == 3 and all((e - s) / 1 + 1 <= 10_000 for s, e in calls)
    assert calls[0][0] == 0 and calls[-1][1] == 25_000 and len(out[0]["values"]) == 3


def test_dcgm_through_prometheus_agrees_with_the_scraped_text_on_counters(monkeypatch):
    """A counter in the int32 "blank" range (energy in mJ passes it after ~600 Wh) is a value, and a
    `_total`-suffixed counter name maps as the text parser's does: the two DCGM paths give the same rows."""
    labels = {"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA L4", "Hostname": "h"}
    text = "".join(f"# TYPE {n} {t}\n{n}{{gpu=\"0\",UUID=\"GPU-1\",modelName=\"NVIDIA L4\",Hostname=\"h\"}} {v}\n"
                   for n, t, v in (("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", 2147483640),
                                   ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", 4),
                                   ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", 2147483640)))
    series = [{"metric": {"__name__": n, "job": "dcgm", **labels}, "values": [[100.0, str(v)]]}
              for n, v in (("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 2147483640),
                           ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total", 4), ("DCGM_FI_DEV_MEMORY_TEMP", 2147483640))]
    monkeypatch.setattr(prometheus_api.Client, "query_range",
                        lambda self, expr, *a: series if "DCGM" in expr else [])
    via_prom = prometheus_api.load("http://x", 0, 200 * 10**9, selector={})["dcgm"]["gpu"]
    via_text = dcgm.parse(text, ts=100 * 10**9)
    rows = sorted(zip(via_prom.metric, via_prom.value))
    assert rows == sorted(zip(via_text.metric, via_text.value))
    assert rows == [("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 4.0), ("energy_j", 2147483.64)]


@pytest.mark.parametrize("code,body,needle", [
    (200, b"[1,2,3]", "answered JSON [1, 2, 3] instead of an object"),
    (200, b"null", "answered JSON null instead of an object"),
    (200, b'{"status":"success","data":{}}', "answered resultType None with no `result` list"),
    (200, b'{"status":"success"}', "answered no `data` object"),
    (200, matrix({"values": [[1, "1"]]}), "answered series 0 without a `metric` object of string labels"),
    (200, matrix({"metric": {"job": "j"}, "values": []}), "answered series 0 without `__name__`"),
    (200, matrix({"metric": {"__name__": "vllm:x"}, "values": [[1, "abc"]]}),
     "answered a sample of vllm:x that is not [time, number]: [1, 'abc']"),
    (200, matrix({"metric": {"__name__": "vllm:x"}, "values": [[1e308, "1"]]}),
     "answered a sample of vllm:x at time 1e+308, not a unix time in seconds"),
    (200, matrix({"metric": {"__name__": "vllm:x"}, "values": "1"}), "answered series vllm:x without a `values` list"),
    (200, matrix({"metric": {"__name__": "vllm:x_bucket", "le": "many"}, "values": [[1, "1"]]}),
     "answered series vllm:x_bucket with a bucket bound le='many', not a number"),
    (200, b'{"status":"error","errorType":"bad_data","error":"parse error"}', "rejected query_range: bad_data: parse error"),
    (400, b'{"status":"error","errorType":"bad_data","error":"x"}', "rejected query_range: bad_data: x"),
])
def test_a_wrong_shaped_answer_is_one_line_naming_the_url_and_exit_2(capsys, code, body, needle):
    with FakePrometheus(lambda path: (code, body)) as prom:
        assert main(["analyze", "--prometheus", prom.url]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stallscope: error: ") and needle in lines[0], lines
    assert prom.url in lines[0]
