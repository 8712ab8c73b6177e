"""A synthetic vLLM fleet in OpenMetrics for `promtool tsdb create-blocks-from openmetrics`, with known episodes.

N replicas x H hours scraped every 15 s, vLLM 0.33's metric names and ITL buckets (refserver/metrics.py), and
the identity labels namespace, pod, instance, model_name, engine (plus job="vllm"). Only the series the
triage signals read are written: the ITL histogram (buckets, sum, count), prompt and generation tokens,
preemptions, running, waiting, KV usage and the tokens per engine step (`iteration_tokens_total`). A clean replica decodes at ~30 ms per token with a light
prompt load. Injected (the `Truth`):

- `decode_starvation`: bursts where 4,096-token prompts arrive at 3,000 tokens/s, each prefilled in one
  step: every running stream gets one 0.5-0.75 s gap per prompt (long prefills holding the step);
- `kv_pressure`: KV usage 0.96 with 4 requests waiting and a preemption every 2 s;
- `dead`: the replica's series stop (absent) for the rest of the range from some point;
- `reset`: a clean replica whose counters restart from zero once (an engine restart): no episode.

Each replica draws from its own seeded generator, so a replica's series do not depend on N.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
SCRAPE_S = 15
# share of inter-token gaps per bucket (the last is +Inf) while decoding undisturbed
_CLEAN = np.array([0.0, 0.02, 0.88, 0.07, 0.02, 0.008, 0.002] + [0.0] * 13)
_MID = np.array([0.0, 0.0175, 0.0375, 0.0625, 0.0875, 0.125, 0.175, 0.25, 0.35, 0.45, 0.625, 0.875, 1.75,
                 3.75, 6.25, 8.75, 15.0, 30.0, 60.0, 80.0])  # a representative gap per bucket, for _sum
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
FAMILIES = ("vllm:inter_token_latency_seconds_bucket", "vllm:inter_token_latency_seconds_sum",
            "vllm:inter_token_latency_seconds_count", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
            "vllm:num_preemptions_total", "vllm:num_requests_running", "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc", "vllm:iteration_tokens_total_bucket")


@dataclass
class Truth:
    """The injected replicas: {pod: [(kind, start unix s, end unix s)]}, and the replicas with a reset."""

    episodes: dict = field(default_factory=dict)
    resets: dict = field(default_factory=dict)
    dead: dict = field(default_factory=dict)

    def injected(self) -> set[str]:
        return set(self.episodes) | set(self.dead)


def labels(r: int) -> str:
    return (f'engine="0",instance="10.0.{r // 250}.{r % 250}:8000",job="vllm",model_name="m",'
            f'namespace="ns{r % 4}",pod="vllm-{r:04d}"')


def plan(n: int, hours: float, t0_s: int, seed: int = 1) -> Truth:
    """Which replicas get which episode: every 8th starvation, every 8th + 3 KV pressure, replica 5 dead,
    every 8th + 6 a counter reset (when N allows); episode windows drawn per replica."""
    truth, end = Truth(), t0_s + int(hours * 3600)
    for r in range(n):
        rng = np.random.default_rng((seed, r, 7))
        pod = f"vllm-{r:04d}"
        if r % 8 == 0:
            starts = sorted(rng.uniform(t0_s + 600, end - 1800, size=2))
            truth.episodes[pod] = [("decode_starvation", int(s), int(s) + int(rng.integers(5, 16)) * 60) for s in starts]
        elif r % 8 == 3:
            s = int(rng.uniform(t0_s + 600, end - 2400))
            truth.episodes[pod] = [("kv_pressure", s, s + int(rng.integers(10, 31)) * 60)]
        elif r == 5:
            truth.dead[pod] = int(t0_s + (end - t0_s) * 0.6)
        elif r % 8 == 6:
            truth.resets[pod] = int(rng.uniform(t0_s + 600, end - 600))
    return truth


def replica_series(r: int, ts: np.ndarray, truth: Truth, seed: int = 1) -> dict[str, np.ndarray]:
    """{family: values (T,) or (T, 20) for the buckets} of replica r at scrape times ts (unix s)."""
    rng = np.random.default_rng((seed, r))
    pod, n = f"vllm-{r:04d}", len(ts)
    running = np.clip(np.rint(rng.normal(16, 2, n)), 4, 32)
    gen = running / 0.03 * SCRAPE_S * rng.uniform(0.9, 1.0, n)
    prompt = rng.uniform(100, 300, n) * SCRAPE_S
    kv, waiting, preempt = rng.uniform(0.3, 0.6, n), np.zeros(n), np.zeros(n)
    prompt_len = np.full(n, 200.0)  # one step per prompt (decodes + the whole prompt), the rest decode-only
    for kind, a, b in truth.episodes.get(pod, []):
        hot = (ts >= a) & (ts < b)
        if kind == "decode_starvation":
            prompt[hot], prompt_len[hot] = 3000.0 * SCRAPE_S, 4096.0
        else:
            kv[hot], waiting[hot], preempt[hot] = 0.96, 4.0, SCRAPE_S / 2.0
    prompts = np.rint(prompt / prompt_len)
    # an unchunked long prefill holds every running stream once: one gap of 0.5-0.75 s per stream per prompt
    slow = np.where(prompt_len > 512, prompts * running, 0.0)
    counts = rng.multinomial(np.maximum(np.rint(gen - slow), 0).astype(np.int64), _CLEAN / _CLEAN.sum())
    counts[:, ITL_BUCKETS.index(0.75)] += slow.astype(np.int64)
    bounds = np.array([*ITERATION_BUCKETS, np.inf])
    steps = np.zeros((n, len(bounds)))
    rows = np.arange(n)
    steps[rows, np.searchsorted(bounds, running)] += np.maximum(np.rint(gen / running) - prompts, 0)
    steps[rows, np.searchsorted(bounds, running + prompt_len)] += prompts
    inc = {"vllm:inter_token_latency_seconds_bucket": np.cumsum(counts, axis=1).astype(float),
           "vllm:inter_token_latency_seconds_sum": counts @ _MID, "vllm:prompt_tokens_total": np.rint(prompt),
           "vllm:generation_tokens_total": np.rint(gen), "vllm:num_preemptions_total": preempt,
           "vllm:iteration_tokens_total_bucket": np.cumsum(steps, axis=1)}
    out = {name: np.cumsum(v, axis=0) + (1e5 if v.ndim == 1 else 0) for name, v in inc.items()}
    out["vllm:inter_token_latency_seconds_count"] = out["vllm:inter_token_latency_seconds_bucket"][:, -1]
    if pod in truth.resets:  # an engine restart: every counter starts again from its increments
        k = int(np.searchsorted(ts, truth.resets[pod]))
        for name, v in out.items():
            v[k:] -= v[k - 1]
    out.update({"vllm:num_requests_running": running, "vllm:num_requests_waiting": waiting,
                "vllm:kv_cache_usage_perc": kv})
    return out


def write(path: Path, n: int, hours: float, t0_s: int, seed: int = 1) -> Truth:
    """Write the fleet's OpenMetrics text to `path` (families contiguous, `# EOF` last); returns the Truth."""
    truth = plan(n, hours, t0_s, seed)
    path = Path(path)
    parts = {f: open(path.with_suffix(f".{i}.part"), "w") for i, f in enumerate(FAMILIES)}
    try:
        for r in range(n):
            _write_replica(parts, r, t0_s, hours, truth, seed)
    finally:
        for fh in parts.values():
            fh.close()
    with open(path, "w") as out:
        for i, family in enumerate(FAMILIES):
            out.write(f"# TYPE {family} unknown\n")
            part = path.with_suffix(f".{i}.part")
            with open(part) as fh:
                shutil.copyfileobj(fh, out, 1 << 22)
            part.unlink()
        out.write("# EOF\n")
    return truth


def _write_replica(parts: dict, r: int, t0_s: int, hours: float, truth: Truth, seed: int) -> None:
    ts = t0_s + SCRAPE_S * np.arange(int(hours * 3600 // SCRAPE_S), dtype=np.int64)
    series = replica_series(r, ts, truth, seed)
    pod = f"vllm-{r:04d}"
    if pod in truth.dead:
        keep = ts < truth.dead[pod]
        ts, series = ts[keep], {k: v[keep] for k, v in series.items()}
    lab, stamps = labels(r), [f" {t}\n" for t in ts.tolist()]
    for family, values in series.items():
        fh = parts[family]
        if values.ndim == 2:
            bounds = ITL_BUCKETS if family.startswith("vllm:inter_token") else ITERATION_BUCKETS
            for j, le in enumerate([*(repr(float(b)) for b in bounds), "+Inf"]):
                head = f'{family}{{{lab},le="{le}"}} '
                fh.write("".join(head + v + s for v, s in zip(_fmt(values[:, j]), stamps)))
        else:
            head = f"{family}{{{lab}}} "
            fh.write("".join(head + v + s for v, s in zip(_fmt(values), stamps)))


def _fmt(values: np.ndarray) -> list[str]:
    if np.all(values == np.rint(values)):
        return [str(v) for v in values.astype(np.int64).tolist()]
    return [repr(v) for v in values.tolist()]


def backfill(openmetrics: Path, storage: Path, promtool: str = "promtool") -> None:
    """`promtool tsdb create-blocks-from openmetrics` into `storage` (blocks of up to 24 h)."""
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
                    str(openmetrics), str(storage)], check=True, capture_output=True)


def backfill_rules(rules: Path, url: str, start: int, end: int, storage: Path, work: Path,
                   promtool: str = "promtool") -> Path:
    """`promtool tsdb create-blocks-from rules` of the one-group `rules` file over start..end (unix s) into
    `storage`, evaluated against the Prometheus at `url`; returns the rule file's path promtool was given.

    promtool 2.42 asks each 2 h block up to the block's end truncated to whole seconds, so a group whose
    evaluation offset (a hash of its name and file path) lies in the last second of its interval loses one
    evaluation per block. A trial over two intervals reads the offset (`promtool tsdb dump`); while it lies
    in that second, a copy under another name is tried."""
    import yaml

    from stallscope.core.config import parse_duration

    group = yaml.safe_load(Path(rules).read_text())["groups"][0]
    interval_ms = int(round(1000 * parse_duration(group.get("interval", "1m"))))
    work = Path(work)
    for i in range(20):
        path = Path(rules) if i == 0 else work / f"{Path(rules).stem}-{i}.yaml"
        if i:
            shutil.copyfile(rules, path)
        trial = work / f"trial-{i}"
        subprocess.run([promtool, "tsdb", "create-blocks-from", "rules", f"--start={start}",
                        f"--end={start + 2 * interval_ms // 1000}", f"--url={url}", "--output-dir", str(trial),
                        str(path)], check=True, capture_output=True)
        (trial / "wal").mkdir(parents=True, exist_ok=True)  # `tsdb dump` opens the directory as a database
        dump = subprocess.run([promtool, "tsdb", "dump", str(trial)], check=True, capture_output=True, text=True)
        shutil.rmtree(trial)
        stamps = [int(line.rsplit(" ", 1)[1]) for line in dump.stdout.splitlines() if line.strip()]
        if stamps and stamps[0] % interval_ms < interval_ms - 1000:
            break
    out = work / "recorded"
    subprocess.run([promtool, "tsdb", "create-blocks-from", "rules", f"--start={start}", f"--end={end}",
                    f"--url={url}", "--output-dir", str(out), str(path)], check=True, capture_output=True)
    for block in out.iterdir():
        if (block / "meta.json").exists():  # the blocks, not the writer's empty chunks_head
            shutil.move(str(block), str(Path(storage) / block.name))
    return path
