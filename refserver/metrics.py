"""vLLM V1's Prometheus metrics, fed from the engine's step records.

The engine never imports prometheus_client; this module turns each `(outputs, StepStats)` pair into
metrics with vLLM's exact names, types, labels (`model_name`, `engine`), default buckets and recording
times (vLLM 0.33.0's `vllm/v1/metrics/loggers.py`, `stats.py`, `buckets.py`; docs/metric-traps.md):

* per step (P): the gauges, preemptions, generation tokens, `iteration_tokens_total`, and for each
  request that produced a token its TTFT (first token) or ITL (one observation per output, measured
  between the end times of the steps that produced consecutive tokens; preemption gaps included);
* at finish (F): e2e, queue, prefill, decode, inference and per-output-token times, token counts,
  `request_success_total{finished_reason}`.

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

        self.num_requests_running = gauge("vllm:num_requests_running",
                                          "Number of requests in model execution batches.")
        self.num_requests_waiting = gauge("vllm:num_requests_waiting",
                                          "Number of requests waiting to be processed.")
        self.kv_cache_usage_perc = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.num_preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self._request_success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                        labels + ("finished_reason",), registry=reg)
        for reason in ("stop", "length", "abort", "error", "repetition"):
            self._request_success.labels(finished_reason=reason, **self._labels)
        self._admission_rejections = Counter(
            "vllm:admission_rejections", "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"), registry=reg)
        self.iteration_tokens = histogram("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.", ITERATION_TOKENS_BUCKETS)
        self._add_latency_and_length_histograms(histogram, max_model_len)
        info = {key: str(value) for key, value in cache_info.items()}
        Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
              tuple(info) + ("engine",), registry=reg).labels(engine=engine, **info).set(1)

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

    def exposition(self) -> bytes:
        """The registry in Prometheus text format 0.0.4 (serve it with `CONTENT_TYPE`)."""
        return generate_latest(self.registry)

    def on_add(self, request_id: str, *, max_tokens: int, num_prompt_tokens: int, arrival_ns: int) -> None:
        """Start tracking a request the engine accepted."""
        self._requests[request_id] = _RequestTimes(max_tokens, num_prompt_tokens, arrival_ns)

    def on_abort(self, request_id: str, now_ns: int, reason: str = "abort") -> None:
        """Finish a request the server ended (client gone; a stop string: "stop"); no-op if already finished."""
        times = self._requests.pop(request_id, None)
        if times is not None:
            out = times.last_output
            self._finish(times, reason, now_ns, out.first_scheduled_ns if out else None,
                         out.num_output_tokens if out else 0, out.num_preemptions if out else 0)

    def on_rejected(self, reason: str = "max_num_queued_reqs") -> None:
        """Count an HTTP 503 admission rejection."""
        self._admission_rejections.labels(model_name=self._labels["model_name"], reason=reason).inc()

    def set_gauges(self, num_running: int, num_waiting: int, kv_blocks_used: int, num_gpu_blocks: int) -> None:
        self.num_requests_running.set(num_running)
        self.num_requests_waiting.set(num_waiting)
        self.kv_cache_usage_perc.set(kv_blocks_used / num_gpu_blocks if num_gpu_blocks else 0.0)

    def record_step(self, outputs, stats) -> None:
        """Record one engine step: `outputs` are `RequestOutput`s, `stats` its `StepStats`."""
        self.set_gauges(stats.num_running, stats.num_waiting, stats.kv_blocks_used, stats.num_gpu_blocks)
        if stats.num_preempted:
            self.num_preemptions.inc(stats.num_preempted)
        now_ns = stats.end_ns
        prompt_done = generated = 0
        for out in outputs:
            n_new = len(out.new_token_ids)
            generated += n_new
            times = self._requests.get(out.request_id)
            if times is not None:
                times.last_output = out
            if times is not None and n_new:
                if times.last_token_ns is None:
                    times.first_token_ns = out.first_token_ns or now_ns
                    self.time_to_first_token.observe((times.first_token_ns - out.arrival_ns) * NS)
                    prompt_done += out.num_prompt_tokens
                else:
                    self.inter_token_latency.observe((now_ns - times.last_token_ns) * NS)
                times.last_token_ns = now_ns
            if out.finished and times is not None:
                del self._requests[out.request_id]
                self._finish(times, out.finish_reason or "abort", now_ns, out.first_scheduled_ns,
                             out.num_output_tokens, out.num_preemptions)
        if generated:
            self.generation_tokens.inc(generated)
        if prompt_done:
            self.prompt_tokens.inc(prompt_done)
        if outputs:
            self.iteration_tokens.observe(prompt_done + generated)

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
