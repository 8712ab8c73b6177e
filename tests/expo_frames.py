"""Real-format metric fixtures for analyzer tests: vLLM-named exposition text -> the `samples` frame.

The text comes from a real prometheus_client registry (vLLM's names, labels and buckets); it is parsed
by `stallscope.collectors.vllm.parse` when that exists, else by a tiny prometheus_client-parser adapter.
`to_openmetrics(frame)` writes the same samples for `promtool tsdb create-blocks-from openmetrics`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0]
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0]
ITERATION_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
T0_NS = 1_764_400_000_000_000_000


def _adapter_parse(text: str, ts: int) -> pd.DataFrame:
    rows = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = dict(s.labels)
            le = labels.pop("le", None)
            rows.append({"ts": ts, "metric": s.name, "source_metric": s.name, "labels": labels,
                         "le": float(le) if le is not None else math.nan, "value": float(s.value)})
    return pd.DataFrame(rows)


def parse(text: str, ts: int) -> pd.DataFrame:
    try:
        from stallscope.collectors.vllm import parse as real_parse
    except ImportError:
        return _adapter_parse(text, ts)
    return real_parse(text, ts)


class VllmMetrics:
    """A registry with vLLM's metric names, labels and default buckets (the subset the analyzers read)."""

    def __init__(self, model: str = "m", engine: str = "0"):
        self.registry = CollectorRegistry()
        lab = ["model_name", "engine"]
        self.labels = {"model_name": model, "engine": engine}
        r = self.registry
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             lab, buckets=ITL_BUCKETS, registry=r).labels(**self.labels)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              lab, buckets=TTFT_BUCKETS, registry=r).labels(**self.labels)
        self.prefill_time = Histogram("vllm:request_prefill_time_seconds",
                                      "Histogram of time spent in PREFILL phase for request.", lab,
                                      buckets=REQUEST_LATENCY_BUCKETS, registry=r).labels(**self.labels)
        self.iteration = Histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                   lab, buckets=ITERATION_BUCKETS, registry=r).labels(**self.labels)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", lab,
                              registry=r).labels(**self.labels)
        self.generation = Counter("vllm:generation_tokens", "Number of generation tokens processed.", lab,
                                  registry=r).labels(**self.labels)
        self.preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                                   lab, registry=r).labels(**self.labels)
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", lab,
                             registry=r).labels(**self.labels)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lab,
                             registry=r).labels(**self.labels)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lab,
                        registry=r).labels(**self.labels)

    def scrape(self, ts: int) -> pd.DataFrame:
        return parse(generate_latest(self.registry).decode(), ts)


def to_openmetrics(frame: pd.DataFrame) -> str:
    """The frame's samples as OpenMetrics text (one `unknown` family per metric name), ending in `# EOF`."""
    out = []
    for metric, part in frame.groupby("metric", sort=True):
        out.append(f"# TYPE {metric} unknown")
        keys = part.apply(lambda r: (tuple(sorted(r["labels"].items())), r["le"]), axis=1)
        for _, series in part.assign(_k=keys).groupby("_k", sort=False):
            for row in series.sort_values("ts").itertuples():
                labels = dict(row.labels)
                if not math.isnan(row.le):
                    labels["le"] = "+Inf" if math.isinf(row.le) else repr(float(row.le))
                body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                ts_s = f"{row.ts // 1_000_000_000}.{(row.ts // 1_000_000) % 1000:03d}"
                out.append(f"{metric}{{{body}}} {repr(float(row.value))} {ts_s}")
    out.append("# EOF")
    return "\n".join(out) + "\n"


def random_itl_run(seed: int, *, t0_ns: int, scrapes: int = 90, interval_s: float = 5.0, engines=("0", "1"),
                   reset_at: int | None = 40, gap=(60, 64)) -> pd.DataFrame:
    """ITL histograms of two engines scraped every `interval_s`, with a restart (counter reset) and a scrape gap."""
    rng = np.random.default_rng(seed)
    frames = []
    regs = {e: VllmMetrics(engine=e) for e in engines}
    for i in range(scrapes):
        ts = t0_ns + int(i * interval_s * 1e9)
        for e in engines:
            if reset_at is not None and i == reset_at and e == engines[0]:
                regs[e] = VllmMetrics(engine=e)  # engine restart: every counter starts again from zero
            m = regs[e]
            n = int(rng.integers(5, 60))
            slow = 0.6 if 30 <= i < 50 else 0.05  # a stall episode in the middle of the run
            for x in rng.gamma(2.0, 0.02, n):
                m.itl.observe(float(x if rng.random() > slow else x + rng.uniform(0.2, 3.0)))
            if gap[0] <= i < gap[1]:
                continue
            frames.append(m.scrape(ts))
    return pd.concat(frames, ignore_index=True)
