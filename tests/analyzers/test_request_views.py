"""The request-level views: one definition gives the PromQL and the frame numbers, pooled per model by default."""

import subprocess

import numpy as np
import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from expo_frames import REQUEST_LATENCY_BUCKETS
from stallscope.analyzers import request_views as RV
from stallscope.collectors import vllm

NS = 10**9
T0 = 1_764_400_000 * NS


def _engine(engine: str, e2e: float, n: int, reason: str):
    reg = CollectorRegistry()
    lab = {"model_name": "m", "engine": engine}
    h = Histogram("vllm:e2e_request_latency_seconds", "e2e", list(lab), buckets=REQUEST_LATENCY_BUCKETS,
                  registry=reg).labels(**lab)
    ok = Counter("vllm:request_success", "ok", ["model_name", "engine", "finished_reason"], registry=reg)
    hits = Counter("vllm:prefix_cache_hits", "hits", list(lab), registry=reg).labels(**lab)
    queries = Counter("vllm:prefix_cache_queries", "queries", list(lab), registry=reg).labels(**lab)
    ok.labels(finished_reason=reason, **lab)  # vLLM creates every finished_reason child at start
    texts = [generate_latest(reg).decode()]
    for _ in range(n):
        h.observe(e2e)
        ok.labels(finished_reason=reason, **lab).inc()
    hits.inc(25 if engine == "0" else 0)
    queries.inc(100)
    texts.append(generate_latest(reg).decode())
    return texts


@pytest.fixture(scope="module")
def samples():
    import pandas as pd

    frames = []
    for target, (engine, e2e, reason) in {"a": ("0", 0.4, "stop"), "b": ("1", 3.0, "length")}.items():
        for i, text in enumerate(_engine(engine, e2e, 10, reason)):
            frames.append(vllm.parse(text, T0 + i * 15 * NS).assign(target=target))
    return pd.concat(frames, ignore_index=True)


def _at_end(samples, key, grouping="model"):
    r = RV.evaluate(samples, RV.BY_KEY[key], np.array([T0 + 15 * NS]), 30 * NS, grouping=grouping)
    return {(g, s): v for g, s, v in zip(r["group"], r["series"], r["value"])}


def test_pooled_per_model_quantiles_and_mean(samples):
    got = _at_end(samples, "e2e")
    assert got[("model_name=m", "P50")] == pytest.approx(0.5)      # 10 in (0.3, 0.5], 10 in (2.5, 5]: rank 10
    assert got[("model_name=m", "P90")] == pytest.approx(2.5 + 2.5 * 8 / 10)
    assert got[("model_name=m", "mean")] == pytest.approx((10 * 0.4 + 10 * 3.0) / 20)
    by_engine = _at_end(samples, "e2e", "engine")                   # drill-down: instance (the target) and engine
    assert by_engine[("engine=0,model_name=m,target=a", "P50")] == pytest.approx(0.3 + 0.2 * 5 / 10)
    assert by_engine[("engine=1,model_name=m,target=b", "P50")] == pytest.approx(2.5 + 2.5 * 5 / 10)


def test_finish_reasons_request_rate_and_prefix_hit_rate(samples):
    finish = _at_end(samples, "finish")
    # PromQL's increase: no extrapolation past a counter's zero point, so exactly what was added in the window
    assert finish[("model_name=m", "stop")] == pytest.approx(10) and finish[("model_name=m", "length")] == 10
    assert _at_end(samples, "request_rate")[("model_name=m", "requests/s")] == pytest.approx(20 / 30)
    assert _at_end(samples, "prefix_hit")[("model_name=m", "ratio")] == pytest.approx(25 / 200)


def test_summary_and_heatmap(samples):
    s = RV.summary(samples)
    e2e = s[(s["view"] == "e2e") & (s["series"] == "P99")].iloc[0]
    assert (e2e["bucket_lo"], e2e["bucket_hi"], e2e["text"]) == (2.5, 5.0, "2.5 s-5 s")
    hm = RV.heatmap(samples, RV.BY_KEY["e2e"], np.array([T0 + 15 * NS]), 30 * NS)
    per = dict(zip(hm["le"], hm["value"]))
    assert per[0.5] == pytest.approx(10) and per[5.0] == pytest.approx(10) and per[0.3] == 0 and sum(per.values()) == 20


def test_every_view_is_promql_promtool_accepts(tmp_path):
    from conftest import require_tool

    promtool = require_tool("promtool", "prometheus")
    rules = []
    for v in RV.VIEWS:
        for grouping in RV.GROUPINGS:
            exprs = [e for _, e in RV.promql(v, grouping=grouping)] + ([RV.heatmap_promql(v)] if v.heatmap else [])
            for i, e in enumerate(exprs):
                e = e.replace("$__rate_interval", "1m").replace('"$model_name"', '".*"').replace(
                    '"$instance"', '".*"').replace('"$engine"', '".*"')
                rules.append({"record": f"test:{v.key}_{grouping}_{i}", "expr": e})
    f = tmp_path / "r.yaml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "views", "rules": rules}]}))
    out = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(rules) == sum(len(RV.promql(v)) + v.heatmap for v in RV.VIEWS) * 3 > 60
