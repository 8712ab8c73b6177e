"""vLLM exposition → samples frame, one fixture per vLLM generation (tests/fixtures/vllm_metrics)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import FIXTURES
from stallscope.core import schema
from stallscope.collectors import vllm
from stallscope.collectors.exposition import ParseCache
from stallscope.core.errors import CollectorError

D = FIXTURES / "vllm_metrics"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def load(name: str, ts: int = 7) -> pd.DataFrame:
    return vllm.parse((D / name).read_text(), ts=ts)


def one(df: pd.DataFrame, metric: str, **labels) -> pd.Series:
    rows = df[(df.metric == metric) & df.labels.map(lambda d: all(d.get(k) == v for k, v in labels.items()))]
    assert len(rows) == 1, (metric, labels, len(rows))
    return rows.iloc[0]


@pytest.mark.parametrize("name", sorted(p.name for p in D.glob("*.txt")))
def test_every_fixture_validates_and_has_no_created_or_le_label(name):
    df = load(name)
    schema.validate(df, "samples")
    assert (df.ts == 7).all() and df.ts.dtype == "int64"
    assert not df.metric.str.endswith("_created").any()
    assert not df.labels.map(lambda d: "le" in d).any()
    buckets = df[df.metric.str.endswith("_bucket")]
    assert len(buckets) > 0 and buckets["le"].notna().all()
    assert df[~df.metric.str.endswith("_bucket")]["le"].isna().all()


def test_v0_legacy_names_are_mapped_and_labels_have_no_engine():
    df = load("v0_6_6.txt")
    assert one(df, "vllm:kv_cache_usage_perc").source_metric == "vllm:gpu_cache_usage_perc"
    assert one(df, "vllm:kv_cache_usage_perc").value == 0.8125
    assert one(df, "vllm:kv_cache_usage_perc").labels == {"model_name": MODEL}
    # TPOT histogram (V0 buckets 0.01 … 2.5) becomes ITL, bucket bounds read from the scrape
    itl = df[df.metric == "vllm:inter_token_latency_seconds_bucket"]
    assert itl["le"].tolist()[:3] == [0.01, 0.025, 0.05] and itl["le"].tolist()[-2:] == [2.5, math.inf]
    assert (itl.source_metric == "vllm:time_per_output_token_seconds_bucket").all()
    assert one(df, "vllm:inter_token_latency_seconds_count").value == 19715
    assert one(df, "vllm:prefix_cache_hit_rate").value == 0.25
    # V0-only gauges are kept under their own names
    assert one(df, "vllm:num_requests_swapped").value == 0
    assert one(df, "vllm:request_success_total", finished_reason="length").value == 21
    assert not df.labels.map(lambda d: "engine" in d).any()
    # V0 iteration_tokens buckets end at 8096, not 16384
    assert df[df.metric == "vllm:iteration_tokens_total_bucket"]["le"].max() == math.inf
    assert sorted(df[df.metric == "vllm:iteration_tokens_total_bucket"]["le"])[-2] == 8096


def test_v1_0_8_prefix_cache_in_blocks_is_flagged():
    df = load("v0_8_5_v1.txt")
    q = one(df, "vllm:prefix_cache_queries_total", engine="0")
    assert q.source_metric == "vllm:gpu_prefix_cache_queries_total"
    assert q.labels == {"engine": "0", "model_name": MODEL, "unit": "blocks"} and q.value == 1920
    assert one(df, "vllm:prefix_cache_hits_total").value == 640
    assert one(df, "vllm:kv_cache_usage_perc", engine="0").value == 0.8125
    assert "vllm:inter_token_latency_seconds_sum" in set(df.metric)


def test_0_10_side_by_side_names_keep_only_the_new_ones():
    df = load("v0_10_2.txt")
    kv = df[df.metric == "vllm:kv_cache_usage_perc"]
    assert kv.source_metric.tolist() == ["vllm:kv_cache_usage_perc"]
    q = one(df, "vllm:prefix_cache_queries_total")
    assert q.source_metric == "vllm:prefix_cache_queries_total" and "unit" not in q.labels and q.value == 30720
    itl = df[df.metric == "vllm:inter_token_latency_seconds_count"]
    assert itl.source_metric.tolist() == ["vllm:inter_token_latency_seconds_count"]
    assert not df.source_metric.str.startswith("vllm:gpu_").any()
    assert not df.source_metric.str.startswith("vllm:time_per_output_token").any()


def test_multiprocess_two_engines_sum_before_bucket_and_no_created():
    text = (D / "v0_10_2_multiprocess_2engines.txt").read_text()
    assert "_created" not in text
    first_ttft = [ln for ln in text.splitlines() if ln.startswith("vllm:time_to_first_token_seconds")][0]
    assert first_ttft.startswith("vllm:time_to_first_token_seconds_sum")  # the multiprocess order
    df = vllm.parse(text, ts=1)
    assert sorted({d["engine"] for d in df.labels if "engine" in d}) == ["0", "1"]
    assert one(df, "vllm:num_requests_running", engine="1").value == 12
    assert one(df, "vllm:kv_cache_usage_perc", engine="1").value == 0.5625
    assert one(df, "vllm:prompt_tokens_total", engine="1").value == 96426
    b = df[(df.metric == "vllm:time_to_first_token_seconds_bucket") & (df.labels.map(lambda d: d["engine"]) == "0")]
    assert b["le"].is_monotonic_increasing and b.value.is_monotonic_increasing and b.value.iloc[-1] == 163


def test_single_process_created_families_dropped_but_counted_values_kept():
    text = (D / "v0_33_0_custom_itl_buckets.txt").read_text()
    assert "vllm:prompt_tokens_created" in text
    df = vllm.parse(text, ts=1)
    assert one(df, "vllm:prompt_tokens_total").value == 48213


def test_0_33_custom_buckets_new_families_and_unknown_metrics():
    df = load("v0_33_0_custom_itl_buckets.txt")
    assert len(df) == 297  # the benchmark's ~300-series scrape
    itl = df[df.metric == "vllm:inter_token_latency_seconds_bucket"]
    assert itl["le"].tolist() == [0.005, 0.02, 0.05, 0.2, 1.0, math.inf]
    assert one(df, "vllm:num_requests_waiting_by_reason", reason="deferred").value == 1
    assert one(df, "vllm:prompt_tokens_by_source_total", source="local_cache_hit").value == 12213
    rej = one(df, "vllm:admission_rejections_total")
    assert rej.labels == {"model_name": MODEL, "reason": "max_num_queued_reqs"} and rej.value == 4
    assert one(df, "vllm:kv_offload_cpu_cache_usage_perc").value == 0.125  # unknown family kept as is
    assert one(df, "http_requests_total").labels["handler"] == "/v1/completions"


def test_cache_gives_identical_frames_and_falls_back_on_new_series():
    text = (D / "v0_33_0_custom_itl_buckets.txt").read_text()
    cache = ParseCache()
    cold = vllm.parse(text, ts=3, cache=cache)
    warm = vllm.parse(text, ts=3, cache=cache)
    pd.testing.assert_frame_equal(cold, warm)
    changed = text.replace('vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.0',
                           'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 9.0')
    assert changed != text
    assert one(vllm.parse(changed, ts=3, cache=cache), "vllm:num_requests_running").value == 9
    added = text + 'vllm:num_requests_running{engine="1",model_name="m"} 4.0\n'
    assert one(vllm.parse(added, ts=3, cache=cache), "vllm:num_requests_running", engine="1").value == 4
    stamped = 'vllm:num_requests_running{engine="0",model_name="m"} 5.0 1700000000000\n'
    c2 = ParseCache()
    for _ in range(2):  # a sample with a timestamp is never taken from the cache as its value
        assert vllm.parse(stamped, ts=1, cache=c2).value.tolist() == [5.0]


@pytest.mark.parametrize("bad", [
    "vllm:x{engine=\"0\" 1.0\n",            # unterminated label set
    "vllm:x{engine=\"0\"} one\n",            # not a number
    "<html><body>502 Bad Gateway</body></html>\n",
])
def test_garbage_raises_one_collector_error_naming_the_line(bad):
    with pytest.raises(CollectorError, match="not valid Prometheus text exposition at line 1"):
        vllm.parse(bad, ts=0)


def test_truncated_scrape_keeps_what_was_complete():
    text = (D / "v0_6_6.txt").read_text()
    cut = text[: text.index("vllm:avg_generation_throughput_toks_per_s{") + 30]  # ends mid-line
    with pytest.raises(CollectorError):
        vllm.parse(cut, ts=0)
    whole_lines = text[: text.index("vllm:avg_generation_throughput_toks_per_s{")]
    df = vllm.parse(whole_lines, ts=0)
    assert one(df, "vllm:kv_cache_usage_perc").value == 0.8125
    assert "vllm:avg_generation_throughput_toks_per_s" not in set(df.metric)


def test_empty_text_is_an_empty_valid_frame():
    df = vllm.parse("", ts=0)
    assert len(df) == 0 and list(df.columns) == ["ts", "metric", "source_metric", "labels", "le", "value"]


def test_reference_server_output_parses_with_the_v1_vocabulary():
    df = load("refserver_tiny.txt")
    assert one(df, "vllm:prompt_tokens_total").value == 104
    assert one(df, "vllm:generation_tokens_total").value == 44
    assert one(df, "vllm:request_success_total", finished_reason="length").value == 4
    assert one(df, "vllm:inter_token_latency_seconds_count").value == 40
    assert one(df, "vllm:kv_cache_usage_perc").labels == {"engine": "0", "model_name": "tiny"}
    assert (df.metric == df.source_metric).all()  # the reference server already speaks 0.33's names


label_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6).map(float))


@given(labels=st.lists(st.tuples(label_text, label_text), min_size=1, max_size=6, unique=True),
       first=st.lists(values, min_size=6, max_size=6), second=st.lists(values, min_size=6, max_size=6))
def test_cached_parse_equals_library_parse_for_any_label_text_and_value(labels, first, second):
    """Quotes, backslashes, spaces, braces and newlines in label values; NaN/Inf values: the memo
    must give exactly what the library parser gives, scrape after scrape."""
    import prometheus_client as pc

    cache = ParseCache()
    for vals in (first, second, first):
        reg = pc.CollectorRegistry()
        g = pc.Gauge("vllm:num_requests_running", "h", ["engine", "model_name"], registry=reg)
        for (e, m), v in zip(labels, vals):
            g.labels(e, m).set(v)
        text = pc.generate_latest(reg).decode()
        cold, warm = vllm.parse(text, ts=1), vllm.parse(text, ts=1, cache=cache)
        assert cold.labels.tolist() == warm.labels.tolist()
        assert [repr(v) for v in cold.value] == [repr(v) for v in warm.value]


def test_a_family_repeated_in_one_scrape_keeps_the_first_with_one_warning_per_target(caplog):
    once = ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 3\n'
            '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine="0"} 1\n')
    twice = once + '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 9\n'
    bare = 'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_waiting 1\nvllm:num_requests_running{engine="0"} 9\n'
    cache = ParseCache()
    with caplog.at_level("WARNING"):
        for text in (once, twice, twice, once, bare, bare):  # the cache must not bring the duplicate back
            df = vllm.parse(text, ts=0, cache=cache)
            assert df.metric.tolist() == ["vllm:num_requests_running", "vllm:num_requests_waiting"]
            assert df.value.tolist() == [3.0, 1.0]
    assert [r.getMessage() for r in caplog.records] == [
        "vLLM /metrics scrape: vllm:num_requests_running repeated 1 time in one scrape: kept the first "
        "(Prometheus rejects duplicates)"]
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert vllm.parse(bare, ts=0).value.tolist() == [3.0, 1.0]  # without a cache: said on every parse
    assert len(caplog.records) == 1
