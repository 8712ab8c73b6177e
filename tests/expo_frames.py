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

    def scrape(self, ts: int, texts: list | None = None) -> pd.DataFrame:
        text = generate_latest(self.registry).decode()
        if texts is not None:
            texts.append((ts, text))
        return parse(text, ts)


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


def simulate_starvation(seconds: float = 60.0, *, streams: int = 8, long_every_s: float = 10.0,
                        long_tokens: int = 2048, chunk: int | None = None, decode_step_s: float = 0.03,
                        per_token_s: float = 0.001, scrape_s: float = 1.0, t0_ns: int = T0_NS,
                        first_long_s: float = 5.0, texts: list | None = None, model: str = "m",
                        prompt_lengths: bool = False, prefill_first: bool = False):
    """A deterministic engine in simulated time: `streams` decoding forever plus a long prompt every
    `long_every_s`, unchunked (`chunk=None`, the whole prompt in one step) or in chunks of `chunk` tokens.
    A step takes decode_step_s + prefill tokens x per_token_s. Returns (samples frame, steps frame) with
    vLLM's recording rules (ITL per output, prompt tokens and iteration tokens at prefill completion); the
    series carry `model_name=model`; with `prompt_lengths`, the prompt-length histogram too (vLLM records it
    when a request finishes: here at its prefill, the long requests generating one token). With `prefill_first`
    (the reference server's unchunked mode, vLLM V0's), a step with prefill work decodes nothing: the streams wait
    through it, and the only token it puts out is the long prompt's first."""
    m = VllmMetrics(model=model)
    lengths = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", list(m.labels),
                        buckets=[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
                        registry=m.registry).labels(**m.labels) if prompt_lengths else None
    frames, steps = [], []
    t = t0_ns
    end_ns = t0_ns + int(seconds * 1e9)
    next_scrape = t0_ns
    last_token = [None] * streams
    arrivals = [t0_ns + int((first_long_s + k * long_every_s) * 1e9)
                for k in range(int((seconds - first_long_s) // long_every_s) + 1)]
    queue, active, step = [], None, 0  # active = [arrival_ns, remaining, first_scheduled_ns]
    m.running.set(streams)
    while t < end_ns:
        while arrivals and arrivals[0] <= t:
            queue.append(arrivals.pop(0))
        if active is None and queue:
            active = [queue.pop(0), long_tokens, t]
        n_pre = 0
        if active is not None:
            n_pre = active[1] if chunk is None else min(chunk, active[1])
        dur = int((decode_step_s + n_pre * per_token_s) * 1e9)
        while next_scrape <= t + dur and next_scrape < end_ns:
            m.waiting.set(len(queue))
            m.running.set(streams + (active is not None))
            frames.append(m.scrape(next_scrape, texts))
            next_scrape += int(scrape_s * 1e9)
        t_end = t + dur
        decodes = 0 if prefill_first and n_pre else streams
        for s in range(decodes):
            if last_token[s] is not None:
                m.itl.observe((t_end - last_token[s]) / 1e9)
            last_token[s] = t_end
        m.generation.inc(decodes)
        done = False
        if active is not None:
            active[1] -= n_pre
            if active[1] == 0:
                done = True
                m.prompt.inc(long_tokens)
                m.generation.inc(1 if prefill_first else 0)
                if lengths is not None:
                    lengths.observe(long_tokens)
                m.ttft.observe((t_end - active[0]) / 1e9)
                m.prefill_time.observe((t_end - active[2]) / 1e9)
                active = None
        m.iteration.observe(decodes + (long_tokens + prefill_first if done else 0))
        steps.append({"step": step, "start_ns": t, "end_ns": t_end, "num_prefill_tokens": float(n_pre),
                      "num_decode_tokens": float(decodes), "num_running": float(streams + (n_pre > 0)),
                      "num_waiting": float(len(queue)), "num_preempted": 0.0})
        t, step = t_end, step + 1
    return pd.concat(frames, ignore_index=True), pd.DataFrame(steps)


def simulate_kv_pressure(seconds: float = 120.0, *, scrape_s: float = 1.0, t0_ns: int = T0_NS,
                         pressure=(40.0, 90.0), blocks: int = 1000, block_size: int = 16, texts: list | None = None,
                         usage: float = 0.95, preempt: bool = True, spike: tuple[float, float] | None = None,
                         cache_dtype: str = "auto"):
    """Gauges and counters of a run whose KV cache fills between `pressure` seconds: `usage` (0.95), requests
    waiting, a preemption every 2 s unless `preempt` is false; usage 0.5 and nothing waiting outside; `spike`
    (second, usage) sets one scrape's usage. Also scrapes cache_config_info (`cache_dtype`)."""
    m = VllmMetrics()
    Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
          ["block_size", "cache_dtype", "num_gpu_blocks", "engine"], registry=m.registry).labels(
        block_size=str(block_size), cache_dtype=cache_dtype, num_gpu_blocks=str(blocks), engine="0").set(1)
    frames = []
    for i in range(int(seconds / scrape_s)):
        now = i * scrape_s
        hot = pressure[0] <= now < pressure[1]
        m.kv.set(spike[1] if spike and spike[0] == now else usage if hot else 0.5)
        m.waiting.set(4 if hot else 0)
        m.running.set(24 if hot else 16)
        if preempt and hot and i % 2 == 0:
            m.preemptions.inc()
        m.generation.inc(int(24 * scrape_s / 0.03))
        for _ in range(int(scrape_s / 0.03)):
            m.itl.observe(0.03)
        frames.append(m.scrape(t0_ns + int(now * 1e9), texts))
    return pd.concat(frames, ignore_index=True)


def write_arm(arm_dir, texts: list, steps: pd.DataFrame | None = None, target: str = "vllm") -> None:
    """A repro arm directory: scrapes.jsonl ({"ts": s, "target", "text"} per line) and steps.jsonl."""
    import json
    from pathlib import Path

    arm = Path(arm_dir)
    arm.mkdir(parents=True, exist_ok=True)
    with open(arm / "scrapes.jsonl", "w") as fh:
        for ts, text in texts:
            fh.write(json.dumps({"ts": ts / 1e9, "target": target, "text": text}) + "\n")
    if steps is not None:
        with open(arm / "steps.jsonl", "w") as fh:
            for row in steps.to_dict("records"):
                fh.write(json.dumps({k: (int(v) if k in ("step", "start_ns", "end_ns") else v)
                                     for k, v in row.items()}) + "\n")


# vLLM's request_tokens buckets (1-2-5 series up to max_model_len=2048) and two scrapes 60 s apart.
LES = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, math.inf]


def exposition(prompt_cum, gen_cum):
    """vLLM's request prompt and generation token histograms, cumulative counts per `LES` bucket."""
    lines = []
    for name, cum in (("vllm:request_prompt_tokens", prompt_cum), ("vllm:request_generation_tokens", gen_cum)):
        lines += [f"# HELP {name} Number of tokens.", f"# TYPE {name} histogram"]
        for le, c in zip(LES, cum):
            le_text = "+Inf" if math.isinf(le) else f"{float(le)}"
            lines.append(f'{name}_bucket{{engine="0",le="{le_text}",model_name="tiny"}} {float(c)}')
        lines.append(f'{name}_count{{engine="0",model_name="tiny"}} {float(cum[-1])}')
        lines.append(f'{name}_sum{{engine="0",model_name="tiny"}} 0.0')
    return "\n".join(lines) + "\n"


def samples_frame(scrapes):
    """`samples` frame rows (stallscope.core.schema) from (ts_s, exposition) pairs via prometheus_client's parser."""
    rows = []
    for ts, text in scrapes:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                labels = {k: v for k, v in s.labels.items() if k != "le"}
                le = float(s.labels["le"]) if "le" in s.labels else float("nan")
                rows.append({"ts": int(ts * 1e9), "metric": s.name, "source_metric": s.name,
                             "labels": labels, "le": le, "value": float(s.value)})
    return pd.DataFrame(rows)


def iteration_log(steps: pd.DataFrame) -> str:
    """The log a vLLM server with `--enable-logging-iteration-details` writes for `steps`, in its text format
    (stallscope.engine.iteration_log), each line stamped with its step's end second (UTC)."""
    from stallscope.engine.iteration_log import message, text_line

    out = []
    for r in steps.to_dict("records"):
        pre, dec = int(r["num_prefill_tokens"]), int(r["num_decode_tokens"])
        out.append(text_line(message(int(r["step"]), int(pre > 0), pre, dec, dec, (r["end_ns"] - r["start_ns"]) / 1e6,
                                     0.1), int(r["end_ns"]) // 10**9, pid=7))
    return "\n".join(out) + "\n"
