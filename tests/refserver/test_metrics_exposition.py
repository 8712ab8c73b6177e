"""/metrics against vLLM 0.33's reference sheet (vLLM 0.33.0's `vllm/v1/metrics/loggers.py` and `buckets.py`): names, types, labels,
buckets, and when each metric is recorded (checked with exact counts after known requests)."""

from __future__ import annotations

import json
from pathlib import Path

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


# -- vLLM 0.33 semantics, driven through EngineMetrics with the real engine or hand-made step records --

from types import SimpleNamespace  # noqa: E402

from stallscope.engine.request import SamplingParams  # noqa: E402
from stallscope.engine.stats import StepStats  # noqa: E402
from stallscope.refserver.engine import LLMEngine  # noqa: E402
from stallscope.refserver.metrics import EngineMetrics  # noqa: E402

L = {"model_name": "m", "engine": "0"}


def get(m, name, **labels):
    return m.registry.get_sample_value(name, {**L, **labels})


def drive(engine, metrics, prompts, max_tokens=3):
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        metrics.on_add(f"r{i}", max_tokens=max_tokens, num_prompt_tokens=len(p), arrival_ns=0)
        while engine.has_unfinished_requests():           # one at a time: r1 finds r0's blocks cached
            metrics.record_step(*engine.step())


def test_prefix_cache_and_prompt_token_sources_follow_vllm():
    engine = LLMEngine(EngineConfig(model="tiny", kv_cache_dtype="float32"))
    metrics = EngineMetrics("m", max_model_len=2048, cache_info={})
    shared = list(range(100, 164))                        # 4 full blocks
    drive(engine, metrics, [shared + [1, 2, 3], shared + [4, 5, 6, 7, 8]])
    assert get(metrics, "vllm:prefix_cache_queries_total") == 67 + 69
    assert get(metrics, "vllm:prefix_cache_hits_total") == 64
    assert get(metrics, "vllm:prompt_tokens_total") == 136
    assert get(metrics, "vllm:prompt_tokens_by_source_total", source="local_cache_hit") == 64
    assert get(metrics, "vllm:prompt_tokens_by_source_total", source="local_compute") == 136 - 64
    assert get(metrics, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") == 0
    assert get(metrics, "vllm:prompt_tokens_cached_total") == 64
    assert get(metrics, "vllm:prompt_tokens_cached_by_source_total", source="device") == 64
    assert get(metrics, "vllm:iteration_tokens_total_sum") == 136 - 64 + 6       # cached tokens excluded
    assert get(metrics, "vllm:request_prefill_kv_computed_tokens_sum") == 67 + 5
    assert get(metrics, "vllm:request_prefill_kv_computed_tokens_count") == 2
    assert get(metrics, "vllm:num_requests_waiting_by_reason", reason="deferred") == 0
    assert get(metrics, "vllm:engine_sleep_state", sleep_state="awake") == 1


def test_prefix_cache_off_counts_no_queries():
    engine = LLMEngine(EngineConfig(model="tiny", kv_cache_dtype="float32", enable_prefix_caching=False))
    metrics = EngineMetrics("m", max_model_len=2048, cache_info={})
    shared = list(range(100, 164))
    drive(engine, metrics, [shared + [1], shared + [2]])
    assert get(metrics, "vllm:prefix_cache_queries_total") == 0 == get(metrics, "vllm:prompt_tokens_cached_total")
    assert get(metrics, "vllm:iteration_tokens_total_sum") == 130 + 6


def stats(step, **kw):
    base = dict(step=step, start_ns=step * 10, end_ns=step * 10 + 5, num_prefill_tokens=0, num_decode_tokens=0,
                num_prefill_reqs=0, num_decode_reqs=0, num_running=1, num_waiting=0, num_preempted=0,
                kv_blocks_used=3, num_gpu_blocks=5)
    return StepStats(**{**base, **kw})


def output(rid, tokens, preemptions, finished=False, reason=None, n_out=1):
    return SimpleNamespace(request_id=rid, new_token_ids=tokens, finished=finished, finish_reason=reason,
                           num_prompt_tokens=4, num_output_tokens=n_out, arrival_ns=0, first_scheduled_ns=0,
                           first_token_ns=None, num_preemptions=preemptions)


def test_preemptions_count_when_the_request_next_produces_output_and_aborts_record_nothing():
    m = EngineMetrics("m", max_model_len=64, cache_info={})
    for rid in ("a", "b"):
        m.on_add(rid, max_tokens=8, num_prompt_tokens=4, arrival_ns=0)
    m.record_step([output("a", (7,), 0), output("b", (7,), 0)], stats(0))
    m.record_step([], stats(1, num_preempted=2))         # both preempted: nothing counted yet
    m.record_step([], stats(2, num_preempted=1))         # b again
    assert get(m, "vllm:num_preemptions_total") == 0
    m.record_step([output("a", (8,), 1)], stats(3))      # a's next token carries its preemption
    assert get(m, "vllm:num_preemptions_total") == 1
    m.on_abort("b", 50)                                  # b never produced again: its 2 are never counted
    m.record_step([output("a", (9,), 1, finished=True, reason="length", n_out=3)], stats(4))
    assert get(m, "vllm:num_preemptions_total") == 1
    assert get(m, "vllm:request_success_total", finished_reason="abort") == 0
    assert get(m, "vllm:request_success_total", finished_reason="length") == 1
    assert get(m, "vllm:e2e_request_latency_seconds_count") == 1 == get(m, "vllm:request_num_preemptions_count")
    assert get(m, "vllm:kv_cache_usage_perc") == 0.75    # 3 used / (5 blocks - the null block)


def test_a_stop_string_finish_records_the_finish_metrics():
    m = EngineMetrics("m", max_model_len=64, cache_info={})
    m.on_add("a", max_tokens=8, num_prompt_tokens=4, arrival_ns=0)
    m.record_step([output("a", (7,), 0)], stats(0))
    m.on_abort("a", 30, reason="stop")
    assert get(m, "vllm:request_success_total", finished_reason="stop") == 1
    assert get(m, "vllm:request_prefill_kv_computed_tokens_sum") == 4


def test_cache_config_info_has_every_vllm_cache_config_field():
    golden = json.loads((Path(__file__).parents[1] / "fixtures" / "vllm_metrics" / "golden_0_33_0.json").read_text())
    fields = next(e["labels"] for e in golden["always"] if e["name"] == "vllm:cache_config_info")
    m = EngineMetrics("m", max_model_len=64, cache_info={"block_size": 16, "enable_prefix_caching": False})
    [sample] = [s for f in m.registry.collect() if f.name == "vllm:cache_config_info" for s in f.samples]
    assert sorted(sample.labels) == fields
    assert (sample.labels["block_size"], sample.labels["enable_prefix_caching"]) == ("16", "False")
    assert (sample.labels["gpu_memory_utilization"], sample.labels["kv_offloading_size"]) == ("0.92", "None")
