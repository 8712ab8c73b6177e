"""/metrics against the golden listing derived from vllm==0.33.0's code (tests/fixtures/vllm_metrics/):
every always-emitted family with vLLM's type, label names and bucket bounds, and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stallscope.refserver.config import EngineConfig
from stallscope.refserver.metrics import build_1_2_5_buckets
from stallscope.refserver.server_thread import ServerThread

GOLDEN = json.loads((Path(__file__).parents[1] / "fixtures" / "vllm_metrics" / "golden_0_33_0.json").read_text())
MAX_MODEL_LEN = 700


def family_name(entry) -> str:
    """The family name prometheus_client's parser gives: a counter loses its trailing _total."""
    name = entry["name"]
    return name.removesuffix("_total") if entry["type"] == "counter" else name


@pytest.fixture(scope="module")
def families():
    with ServerThread(EngineConfig(model="tiny", max_model_len=MAX_MODEL_LEN), served_model_name="g") as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as c:
        assert c.post("/v1/completions", json={"prompt": "golden", "max_tokens": 3}).status_code == 200
        text = c.get("/metrics").text
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_golden_listing_names_vllm_0_33_0():
    assert GOLDEN["vllm_version"] == "0.33.0" and "vllm/v1/metrics/loggers.py" in GOLDEN["_source"]
    assert len(GOLDEN["always"]) == 39


@pytest.mark.parametrize("entry", GOLDEN["always"], ids=lambda e: e["name"])
def test_family_matches_vllm_0_33_0(families, entry):
    fam = families.get(family_name(entry))
    assert fam is not None, f"{entry['name']} missing from /metrics"
    assert fam.type == entry["type"]
    assert fam.samples, entry["name"]
    for s in fam.samples:
        assert sorted(set(s.labels) - {"le"}) == entry["labels"], s
    if entry["type"] == "histogram":
        bounds = entry["buckets"]
        if bounds == "build_1_2_5_buckets(max_model_len)":
            bounds = build_1_2_5_buckets(MAX_MODEL_LEN)
        les = [s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")]
        assert les == [str(float(b)) for b in bounds] + ["+Inf"]


def test_no_family_beyond_the_listing(families):
    """Text format 0.0.4 gives each counter and histogram a `_created` gauge family too (as vLLM's does)."""
    listed = {family_name(e) for e in GOLDEN["always"]}
    extra = [name for name in families if name.startswith("vllm:") and name.removesuffix("_created") not in listed]
    assert extra == []


@pytest.mark.parametrize("entry", GOLDEN["conditional"], ids=lambda e: e["name"])
def test_conditional_family_is_absent(families, entry):
    """A family vLLM emits only with an option this server lacks (the entry's `reason`) must not appear."""
    assert entry["name"] not in families and entry["name"].removesuffix("_total") not in families, entry["reason"]
