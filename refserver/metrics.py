"""vLLM V1's Prometheus metrics, fed from the engine's step records.

The engine never imports prometheus_client; this module turns each `(outputs, StepStats)` pair into
metrics with vLLM's exact names, types, labels (`model_name`, `engine`), default buckets and recording
times (vLLM 0.33.0's `vllm/v1/metrics/loggers.py`, `stats.py`, `buckets.py`; docs/metric-traps.md):

* per step (P): the gauges (`kv_cache_usage_perc` = used / (num_gpu_blocks - 1), cached free blocks
  free, as vllm/v1/core/block_pool.py `get_usage`), prefix-cache queries and hits of the requests
  admitted (never-preempted ones only), generation tokens, and for each request that produced a token
  its TTFT (first token: also its prompt tokens by source, cached ones excluded from
  `iteration_tokens_total`) or ITL (one observation per output, measured between the end times of
  the steps that produced consecutive tokens; preemption gaps included);
* `num_preemptions_total` when a preempted request next produces a token (vLLM counts the PREEMPTED
  event that output carries): a request preempted again and again that ends without another token
  is never counted;
* at finish (F): e2e, queue, prefill, decode, inference and per-output-token times, token counts,
  `request_prefill_kv_computed_tokens`, `request_success_total{finished_reason}`. A client abort
  records none of them (vllm/v1/engine/output_processor.py `abort_requests`).

Times come from the engine's wall clock (`time.time_ns()`, ns) and are observed in seconds. Each
`EngineMetrics` owns a private `CollectorRegistry`, so several servers can live in one process.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Text format 0.0.4, as vLLM serves it (prometheus_client's CONTENT_TYPE_LATEST may be newer).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
NS = 1e-9
PROMPT_TOKEN_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
# vLLM 0.33.0's CacheConfig fields (vllm/config/cache.py), in order, with their defaults; cache_config_info
# has one label per field, str(value) as CacheConfig.metrics_info gives. The server fills what it knows.
CACHE_CONFIG_DEFAULTS = {
    "block_size": None, "user_specified_block_size": False, "kv_cache_layout": None, "prefix_match_unit": None,
    "gpu_memory_utilization": 0.92, "cache_dtype": "auto", "is_attention_free": False,
    "num_gpu_blocks_override": None, "sliding_window": None, "enable_prefix_caching": True,
    "prefix_caching_hash_algo": "sha256", "prefix_cache_retention_interval": 0, "kv_cache_dtype_skip_layers": [],
    "mamba_page_size_padded": None, "skip_page_size_padded": None, "mamba_block_size": None,
    "mamba_cache_dtype": "auto", "mamba_ssm_cache_dtype": "auto", "mamba_cache_mode": "none",
    "enable_mamba_shared_prefix_checkpoint": False, "replayssm_buffer_len": 16, "use_replayssm": False,
    "use_kda_recoverssm": False, "num_gpu_blocks": None, "num_cpu_blocks": None,
    "simple_cpu_offload_num_blocks": None, "effective_attention_block_size": None, "kv_cache_size_tokens": None,
    "kv_cache_max_concurrency": None, "hash_block_size": None, "cache_hit_alignment_tokens": None,
    "kv_sharing_fast_prefill": False, "swa_bounded_replay": True, "kv_cache_memory_bytes": None,
    "kv_offloading_size": None, "kv_offloading_backend": "native", "_block_size_resolved": True,
}


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """vLLM's `request_tokens` family: 1, 2, 5, 10, 20, 50, ... up to `max_value` (inclusive).

    >>> build_1_2_5_buckets(100)
    [1, 2, 5, 10, 20, 50, 100]
    """
    buckets, exponent = [], 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


@dataclass
class _RequestTimes:
    max_tokens: int
    num_prompt_tokens: int
    arrival_ns: int
    last_token_ns: int | None = None
    first_token_ns: int | None = None
    last_output: object = None  # the latest RequestOutput seen for it
    num_cached_tokens: int = 0  # prefix-cache hit at its first admission
    num_preemptions: int = 0    # preemptions already counted in num_preemptions_total


class EngineMetrics:
    """Prometheus metrics for one engine; call `record_step` after every `LLMEngine.step()`.

    Example:
        metrics = EngineMetrics("tiny", max_model_len=512, cache_info={"block_size": 16})
        metrics.on_add("cmpl-1", max_tokens=16)
        outputs, stats = engine.step(); metrics.record_step(outputs, stats)
        text = metrics.exposition()
    """

    def __init__(self, model_name: str, *, max_model_len: int, cache_info: dict, engine: str = "0"):
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests: dict[str, _RequestTimes] = {}
        labels = ("model_name", "engine")
        self._labels = {"model_name": model_name, "engine": engine}
        reg = self.registry

        def gauge(name, doc):
            return Gauge(name, doc, labels, registry=reg).labels(**self._labels)

        def counter(name, doc):
            return Counter(name, doc, labels, registry=reg).labels(**self._labels)

        def histogram(name, doc, buckets):
            return Histogram(name, doc, labels, buckets=buckets, registry=reg).labels(**self._labels)

        def by(kind, name, doc, label, values):
            family = kind(name, doc, labels + (label,), registry=reg)
            return {v: family.labels(**self._labels, **{label: v}) for v in values}

        self.num_requests_running = gauge("vllm:num_requests_running",
                                          "Number of requests in model execution batches.")
        self.num_requests_waiting = gauge("vllm:num_requests_waiting",
                                          "Number of requests waiting to be processed.")
        self.num_requests_waiting_by_reason = by(
            Gauge, "vllm:num_requests_waiting_by_reason", "Number of waiting requests by reason. Reason labels: "
            "'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints "
            "(LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            "reason", ("capacity", "deferred"))
        by(Gauge, "vllm:engine_sleep_state", "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 "
           "means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
           "sleep_state", ("awake", "weights_offloaded", "discard_all"))["awake"].set(1)
        self.kv_cache_usage_perc = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self._add_counters(counter, by, labels)
        self.iteration_tokens = histogram("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.", ITERATION_TOKENS_BUCKETS)
        self._add_latency_and_length_histograms(histogram, max_model_len)
        info = {key: str(value) for key, value in {**CACHE_CONFIG_DEFAULTS, **cache_info}.items()}
        Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
              tuple(info) + ("engine",), registry=reg).labels(engine=engine, **info).set(1)

    def _add_counters(self, counter, by, labels) -> None:
        """The counters: prefix-cache lookups, preemptions, prompt tokens by source, generation tokens,
        finishes by reason and admission rejections (every label value created at 0, as vLLM does)."""
        reg, model_name = self.registry, self._labels["model_name"]
        self.prefix_cache_queries = counter("vllm:prefix_cache_queries",
                                            "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_cache_hits = counter("vllm:prefix_cache_hits",
                                         "Prefix cache hits, in terms of number of cached tokens.")
        # Always 0 here: no KV connector, no images, no FLOP estimate (vllm/v1/metrics/perf.py registers
        # its counters even without --enable-mfu-metrics).
        external = "External prefix cache {} from KV connector cross-instance cache sharing, in terms of number of {}."
        counter("vllm:external_prefix_cache_queries", external.format("queries", "queried tokens"))
        counter("vllm:external_prefix_cache_hits", external.format("hits", "cached tokens"))
        counter("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items.")
        counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.")
        for what, doc in (("flops", "floating point operations"), ("read_bytes", "bytes read from memory"),
                          ("write_bytes", "bytes written to memory")):
            counter(f"vllm:estimated_{what}_per_gpu_total",
                    f"Estimated number of {doc} per GPU (for Model Flops Utilization calculations).")
        self.num_preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.prompt_tokens_by_source = by(Counter, "vllm:prompt_tokens_by_source",
                                          "Number of prompt tokens by source.", "source", PROMPT_TOKEN_SOURCES)
        self.prompt_tokens_cached = counter("vllm:prompt_tokens_cached",
                                            "Number of cached prompt tokens (local + external).")
        self.prompt_tokens_cached_by_source = by(
            Counter, "vllm:prompt_tokens_cached_by_source", "Prefix-cache hit tokens by the cache tier that supplied "
            "them: device (local HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) "
            "or external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.", "source", CACHE_HIT_SOURCES)
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self._request_success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                        labels + ("finished_reason",), registry=reg)
        for reason in ("stop", "length", "abort", "error", "repetition"):
            self._request_success.labels(finished_reason=reason, **self._labels)
        self._admission_rejections = Counter(
            "vllm:admission_rejections", "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"), registry=reg)
        for reason in ADMISSION_REASONS:
            self._admission_rejections.labels(model_name=model_name, reason=reason)

    def _add_latency_and_length_histograms(self, histogram, max_model_len: int) -> None:
        """The per-request histograms: latencies (TTFT, ITL, e2e and the phases) and token counts."""
        self.time_to_first_token = histogram("vllm:time_to_first_token_seconds",
                                             "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.inter_token_latency = histogram("vllm:inter_token_latency_seconds",
                                             "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.time_per_output_token = histogram("vllm:request_time_per_output_token_seconds",
                                               "Histogram of time_per_output_token_seconds per request.",
                                               ITL_BUCKETS)
        self.e2e_latency = histogram("vllm:e2e_request_latency_seconds",
                                     "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS)
        self.queue_time = histogram("vllm:request_queue_time_seconds",
                                    "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.inference_time = histogram("vllm:request_inference_time_seconds",
                                        "Histogram of time spent in RUNNING phase for request.",
                                        REQUEST_LATENCY_BUCKETS)
        self.prefill_time = histogram("vllm:request_prefill_time_seconds",
                                      "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS)
        self.decode_time = histogram("vllm:request_decode_time_seconds",
                                     "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY_BUCKETS)
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.request_prompt_tokens = histogram("vllm:request_prompt_tokens",
                                               "Number of prefill tokens processed.", token_buckets)
        self.request_generation_tokens = histogram("vllm:request_generation_tokens",
                                                   "Number of generation tokens processed.", token_buckets)
        self.request_max_num_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.", token_buckets)
        self.request_params_max_tokens = histogram("vllm:request_params_max_tokens",
                                                   "Histogram of the max_tokens request parameter.", token_buckets)
        self.request_params_n = histogram("vllm:request_params_n", "Histogram of the n request parameter.",
                                          PARAMS_N_BUCKETS)
        self.request_num_preemptions = histogram("vllm:request_num_preemptions",
                                                 "Histogram of the number of times a request was preempted.",
                                                 NUM_PREEMPTIONS_BUCKETS)
        self.request_prefill_kv_computed_tokens = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).", token_buckets)

    def exposition(self) -> bytes:
        """The registry in Prometheus text format 0.0.4 (serve it with `CONTENT_TYPE`)."""
        return generate_latest(self.registry)

    def on_add(self, request_id: str, *, max_tokens: int, num_prompt_tokens: int, arrival_ns: int) -> None:
        """Start tracking a request the engine accepted."""
        self._requests[request_id] = _RequestTimes(max_tokens, num_prompt_tokens, arrival_ns)

    def on_abort(self, request_id: str, now_ns: int, reason: str = "abort") -> None:
        """End a request the server ended; a stop string ("stop") finishes it with every finish-time
        metric, a client abort records none (as vLLM's output processor). No-op if already finished."""
        times = self._requests.pop(request_id, None)
        if times is not None and reason != "abort":
            out = times.last_output
            self._finish(times, reason, now_ns, out.first_scheduled_ns if out else None,
                         out.num_output_tokens if out else 0, out.num_preemptions if out else 0)

    def on_rejected(self, reason: str = "max_num_queued_reqs") -> None:
        """Count an HTTP 503 admission rejection."""
        self._admission_rejections.labels(model_name=self._labels["model_name"], reason=reason).inc()

    def set_gauges(self, num_running: int, num_waiting: int, kv_blocks_used: int, num_gpu_blocks: int) -> None:
        """`kv_blocks_used / (num_gpu_blocks - 1)` is vLLM's `1 - free / (num_gpu_blocks - 1)` (null block)."""
        self.num_requests_running.set(num_running)
        self.num_requests_waiting.set(num_waiting)
        self.num_requests_waiting_by_reason["capacity"].set(num_waiting)
        self.num_requests_waiting_by_reason["deferred"].set(0)    # no LoRA budget, KV transfer or grammar here
        self.kv_cache_usage_perc.set(kv_blocks_used / (num_gpu_blocks - 1) if num_gpu_blocks > 1 else 0.0)

    def record_step(self, outputs, stats) -> None:
        """Record one engine step: `outputs` are `RequestOutput`s, `stats` its `StepStats`."""
        self.set_gauges(stats.num_running, stats.num_waiting, stats.kv_blocks_used, stats.num_gpu_blocks)
        self.prefix_cache_queries.inc(stats.prefix_cache_queries)
        self.prefix_cache_hits.inc(stats.prefix_cache_hits)
        self.prompt_tokens_cached_by_source["device"].inc(stats.prefix_cache_hits)
        for request_id, num_cached in stats.num_cached_tokens.items():
            if request_id in self._requests:
                self._requests[request_id].num_cached_tokens = max(num_cached, 0)
        computed = generated = 0
        for out in outputs:
            generated += len(out.new_token_ids)
            times = self._requests.get(out.request_id)
            if times is None:
                continue
            times.last_output = out
            if out.new_token_ids:
                computed += self._on_token(times, out, stats.end_ns)
            if out.finished:
                del self._requests[out.request_id]
                if out.finish_reason != "abort":
                    self._finish(times, out.finish_reason, stats.end_ns, out.first_scheduled_ns,
                                 out.num_output_tokens, out.num_preemptions)
        self.generation_tokens.inc(generated)
        if outputs:
            self.iteration_tokens.observe(computed + generated)

    def _on_token(self, times: _RequestTimes, out, now_ns: int) -> int:
        """TTFT or ITL, preemptions the output reports, and (first token) prompt tokens by source.
        Returns the prompt tokens the request computed (cached ones excluded) when this is its first token."""
        if out.num_preemptions > times.num_preemptions:
            self.num_preemptions.inc(out.num_preemptions - times.num_preemptions)
            times.num_preemptions = out.num_preemptions
        first = times.last_token_ns is None
        if first:
            times.first_token_ns = out.first_token_ns or now_ns
            self.time_to_first_token.observe((times.first_token_ns - out.arrival_ns) * NS)
        else:
            self.inter_token_latency.observe((now_ns - times.last_token_ns) * NS)
        times.last_token_ns = now_ns
        if not first:
            return 0
        cached = min(times.num_cached_tokens, out.num_prompt_tokens)
        self.prompt_tokens.inc(out.num_prompt_tokens)
        self.prompt_tokens_by_source["local_compute"].inc(out.num_prompt_tokens - cached)
        self.prompt_tokens_by_source["local_cache_hit"].inc(cached)
        self.prompt_tokens_cached.inc(cached)
        return out.num_prompt_tokens - cached

    def _finish(self, times: _RequestTimes, reason: str, now_ns: int, scheduled: int | None,
                num_output_tokens: int, num_preemptions: int) -> None:
        self._request_success.labels(finished_reason=reason, **self._labels).inc()
        self.e2e_latency.observe((now_ns - times.arrival_ns) * NS)
        if scheduled is not None:
            self.queue_time.observe((scheduled - times.arrival_ns) * NS)
        if scheduled is not None and times.first_token_ns is not None:
            last = times.last_token_ns
            decode_s = (last - times.first_token_ns) * NS
            self.prefill_time.observe((times.first_token_ns - scheduled) * NS)
            self.decode_time.observe(decode_s)
            self.inference_time.observe((last - scheduled) * NS)
            n = num_output_tokens
            self.time_per_output_token.observe(decode_s / (n - 1) if n > 1 else 0.0)
        self.request_prompt_tokens.observe(times.num_prompt_tokens)
        self.request_generation_tokens.observe(num_output_tokens)
        self.request_max_num_generation_tokens.observe(num_output_tokens)
        self.request_params_max_tokens.observe(times.max_tokens)
        self.request_params_n.observe(1)
        self.request_num_preemptions.observe(num_preemptions)
        self.request_prefill_kv_computed_tokens.observe(times.num_prompt_tokens - times.num_cached_tokens)
