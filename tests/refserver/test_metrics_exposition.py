"""/metrics against vLLM 0.33's reference sheet (vLLM 0.33.0's `vllm/v1/metrics/loggers.py` and `buckets.py`): names, types, labels,
buckets, and when each metric is recorded (checked with exact counts after known requests)."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stallscope.refserver.config import EngineConfig
from stallscope.refserver.metrics import build_1_2_5_buckets
from stallscope.refserver.server_thread import ServerThread

# Encoded from the reference sheet, section 1.2 (bucket families) and 1.3 (name, type, extra labels).
TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
        80.0, 160.0, 640.0, 2560.0]
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
           960.0, 1920.0, 7680.0]
ITERATION = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
MAX_MODEL_LEN = 600
TOKENS = [1, 2, 5, 10, 20, 50, 100, 200, 500]  # the 1-2-5 series up to max_model_len = 600
BASE = {"model_name", "engine"}

EXPECTED = {  # family (as the parser names it) -> (type, label names, buckets or None)
    "vllm:num_requests_running": ("gauge", BASE, None),
    "vllm:num_requests_waiting": ("gauge", BASE, None),
    "vllm:kv_cache_usage_perc": ("gauge", BASE, None),
    "vllm:num_preemptions": ("counter", BASE, None),
    "vllm:prompt_tokens": ("counter", BASE, None),
    "vllm:generation_tokens": ("counter", BASE, None),
    "vllm:request_success": ("counter", BASE | {"finished_reason"}, None),
    "vllm:iteration_tokens_total": ("histogram", BASE, ITERATION),
    "vllm:time_to_first_token_seconds": ("histogram", BASE, TTFT),
    "vllm:inter_token_latency_seconds": ("histogram", BASE, ITL),
    "vllm:request_time_per_output_token_seconds": ("histogram", BASE, ITL),
    "vllm:e2e_request_latency_seconds": ("histogram", BASE, LATENCY),
    "vllm:request_queue_time_seconds": ("histogram", BASE, LATENCY),
    "vllm:request_inference_time_seconds": ("histogram", BASE, LATENCY),
    "vllm:request_prefill_time_seconds": ("histogram", BASE, LATENCY),
    "vllm:request_decode_time_seconds": ("histogram", BASE, LATENCY),
    "vllm:request_prompt_tokens": ("histogram", BASE, TOKENS),
    "vllm:request_generation_tokens": ("histogram", BASE, TOKENS),
    "vllm:request_params_max_tokens": ("histogram", BASE, TOKENS),
    "vllm:request_num_preemptions": ("histogram", BASE, [1, 2, 3, 4, 5, 10, 20]),
    "vllm:request_params_n": ("histogram", BASE, [1, 2, 5, 10, 20]),
}


@pytest.fixture(scope="module")
def scrape():
    """A fresh server, two known requests (prompt 10 + 6 tokens, prompt 3 + 4 tokens), then one scrape."""
    with ServerThread(EngineConfig(model="tiny", max_model_len=MAX_MODEL_LEN), served_model_name="m") as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as c:
        for prompt, n in (("0123456789", 6), ("abc", 4)):
            r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": n, "ignore_eos": True})
            assert r.status_code == 200
        text = c.get("/metrics").text
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families, sample_name, family=None, **labels):
    fam = families[family or sample_name]
    hits = [s.value for s in fam.samples if s.name == sample_name and
            all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (sample_name, labels, hits)
    return hits[0]


def test_request_tokens_buckets_follow_1_2_5():
    assert build_1_2_5_buckets(MAX_MODEL_LEN) == TOKENS
    assert build_1_2_5_buckets(1000) == TOKENS + [1000]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_family_matches_reference_sheet(scrape, name):
    kind, labels, buckets = EXPECTED[name]
    fam = scrape[name]
    assert fam.type == kind
    for s in fam.samples:
        assert set(s.labels) - {"le"} == labels, s
        assert s.labels["model_name"] == "m" and s.labels["engine"] == "0"
    if kind == "counter":
        assert all(s.name == name + "_total" for s in fam.samples)
    if buckets is not None:
        les = [s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")]
        assert les == [str(float(b)) for b in buckets] + ["+Inf"]
        assert {s.name for s in fam.samples} == {name + "_bucket", name + "_count", name + "_sum"}


def test_cache_config_info(scrape):
    fam = scrape["vllm:cache_config_info"]
    assert fam.type == "gauge" and len(fam.samples) == 1
    s = fam.samples[0]
    assert s.value == 1.0 and s.labels["engine"] == "0"
    assert s.labels["block_size"] == "16" and s.labels["cache_dtype"] == "auto"
    assert int(s.labels["num_gpu_blocks"]) > 0


def test_recorded_values_match_the_two_requests(scrape):
    assert value(scrape, "vllm:prompt_tokens_total", "vllm:prompt_tokens") == 13
    assert value(scrape, "vllm:generation_tokens_total", "vllm:generation_tokens") == 10
    assert value(scrape, "vllm:request_success_total", "vllm:request_success", finished_reason="length") == 2
    assert value(scrape, "vllm:request_success_total", "vllm:request_success", finished_reason="abort") == 0
    # TTFT once per request; ITL once per output after the first: (6-1) + (4-1)
    assert value(scrape, "vllm:time_to_first_token_seconds_count", "vllm:time_to_first_token_seconds") == 2
    assert value(scrape, "vllm:inter_token_latency_seconds_count", "vllm:inter_token_latency_seconds") == 8
    for f in ("e2e_request_latency_seconds", "request_queue_time_seconds", "request_prefill_time_seconds",
              "request_decode_time_seconds", "request_prompt_tokens"):
        assert value(scrape, f"vllm:{f}_count", f"vllm:{f}") == 2
    assert value(scrape, "vllm:request_prompt_tokens_sum", "vllm:request_prompt_tokens") == 13
    assert value(scrape, "vllm:request_generation_tokens_sum", "vllm:request_generation_tokens") == 10
    assert value(scrape, "vllm:request_params_max_tokens_sum", "vllm:request_params_max_tokens") == 10
    # iteration tokens: prompt tokens count in the step their prefill completes, plus generated tokens
    assert value(scrape, "vllm:iteration_tokens_total_sum", "vllm:iteration_tokens_total") == 23
    assert value(scrape, "vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total") == 10
    assert value(scrape, "vllm:num_requests_running") == 0 and value(scrape, "vllm:kv_cache_usage_perc") == 0
    ttft_sum = value(scrape, "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds")
    e2e_sum = value(scrape, "vllm:e2e_request_latency_seconds_sum", "vllm:e2e_request_latency_seconds")
    assert 0 < ttft_sum < e2e_sum
