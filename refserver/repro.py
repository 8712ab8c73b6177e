"""Two-arm reproduction: the same seeded load against two configurations of the reference server.

Each arm starts `stallscope refserver` as a subprocess (its own process, so the load generator and the
server do not share a GIL; BLAS limited to one thread so the 2-core budget is split predictably),
records `/metrics` every second into `<arm>/scrapes.jsonl` (with the recorder the caller passes: refserver
sits below the collectors), has the server write its step trace to
`<arm>/steps.jsonl`, runs the load generator into `<arm>/loadgen.json`, then stops the server. The
default load runs both arms at the same time (see `run_repro`). The arms' headline figures land in
`summary.json` (layout: docs/run-directory.md).

Scenarios: `starvation` runs chunked prefill off and on with a token budget; `kv-pressure` runs a
KV pool small enough to preempt with `--kv-cache-dtype auto` and with `fp8` (half the bytes per
token, so twice the blocks).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import requests

from stallscope.core.errors import InputError, ToolkitError
from stallscope.engine.step_trace import read_records
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.loadgen import LoadSpec, run_load
from stallscope.refserver.server_thread import free_port

Recorder = Callable[[str, Path], Callable[[], object]]   # (url, scrapes.jsonl) -> stop()

SCENARIOS = {"starvation": ("off", "on"), "kv-pressure": ("auto", "fp8")}
DEFAULT_BUDGET = 64           # tokens per step: 32 decodes + a 32-token chunk, a 1,900-token prompt in 60 chunks
LONG_EVERY_TOKENS = 50        # session tokens between long prompts: stalls are ~1/51 of the `off` ITLs
LONG_PROMPT_TOKENS = 1900     # long enough that one unchunked prefill is ~100 decode steps on `tiny`
KV_PRESSURE_BLOCKS = 160      # auto: 160 blocks (2.5 MiB on tiny), fp8 320, vs ~300 blocks of peak demand
KV_PRESSURE_MAX_MODEL_LEN = 2048   # the kv load's longest request is 1,552 tokens; vLLM refuses a pool
                                   # that cannot hold one max_model_len request (small's is 4,096)


@dataclass(frozen=True)
class Arm:
    name: str
    server_args: tuple[str, ...]


def arms_for(scenario: str, model: str, budget: int, kv_cache_mb: float | None = None) -> list[Arm]:
    """The two server configurations of a scenario, in run order."""
    if scenario not in SCENARIOS:
        raise InputError(f"unknown --scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    if budget < 16:
        raise InputError(f"--budget must be at least the block size (16), got {budget}")
    common = ("--model", model, "--max-num-seqs", "256")
    if scenario == "starvation":
        return [Arm("off", common + ("--no-enable-chunked-prefill",)),
                Arm("on", common + ("--enable-chunked-prefill", "--max-num-batched-tokens", str(budget)))]
    pool = str(kv_cache_mb if kv_cache_mb is not None else kv_pressure_pool_mb(model))
    chunked = common + ("--enable-chunked-prefill", "--max-num-batched-tokens", str(budget), "--kv-cache-mb", pool,
                        "--max-model-len", str(KV_PRESSURE_MAX_MODEL_LEN))
    return [Arm("auto", chunked + ("--kv-cache-dtype", "auto")), Arm("fp8", chunked + ("--kv-cache-dtype", "fp8"))]


def kv_pressure_pool_mb(model: str) -> float:
    """The kv-pressure arms' pool: `KV_PRESSURE_BLOCKS` blocks of the model's 16-bit KV (2.5 MiB on tiny);
    InputError for an unknown model."""
    return KV_PRESSURE_BLOCKS * EngineConfig(model=model).bytes_per_block / 2**20


def default_load(scenario: str, quick: bool, seed: int = 0) -> LoadSpec:
    """The load both arms get: 32 steady sessions (32-token prompts, ~256-token outputs) plus a 1,900-token
    prompt each time every session has streamed `LONG_EVERY_TOKENS` more tokens (90 s; 180 s without
    --quick; streams still open 5 s after that are cut, which the server answers by aborting them).
    Pacing by progress rather than by seconds keeps the mix of long-prompt work and decode work the
    same in both arms however fast the shared machine is at the moment."""
    spec = LoadSpec(url="http://127.0.0.1:8000", sessions=32, duration_s=90.0 if quick else 180.0,
                    long_prompt_tokens=LONG_PROMPT_TOKENS, long_every_s=6.0, long_every_tokens=LONG_EVERY_TOKENS,
                    seed=seed, max_tokens=256, short_prompt_tokens=32, long_max_tokens=1, drain_s=5.0)
    if scenario == "kv-pressure":
        spec = replace(spec, sessions=16, long_prompt_tokens=1536, max_tokens=128, long_max_tokens=16)
    return spec


def _start_server(arm: Arm, arm_dir: Path, port: int, timeout_s: float = 120.0) -> subprocess.Popen:
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    cmd = [sys.executable, "-m", "stallscope.cli", "refserver", *arm.server_args, "--port", str(port),
           "--step-trace", str(arm_dir / "steps.jsonl")]
    if "--blas-threads" not in cmd:                     # the arms run side by side: one core each
        cmd += ["--blas-threads", "1"]
    engine = asdict(EngineConfig.from_flags(cmd[cmd.index("refserver") + 1:]))      # the config as data, read back
    (arm_dir / "server.json").write_text(json.dumps({"argv": cmd[1:], "port": port, "engine": engine}, indent=1))
    log = open(arm_dir / "server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout_s
    url = f"http://127.0.0.1:{port}/health"
    while True:
        if proc.poll() is not None:
            raise ToolkitError(f"arm {arm.name}: the server exited with {proc.returncode}: "
                               + (arm_dir / "server.log").read_text(errors="replace")[-400:])
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return proc
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            _stop_server(proc)
            raise ToolkitError(f"arm {arm.name}: the server did not answer {url} within {timeout_s:.0f} s")
        time.sleep(0.1)


def _stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # uvicorn shuts down gracefully; the engine closes its step trace
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def arm_summary(loadgen: dict, steps: list[dict]) -> dict:
    """The per-arm figures of summary.json, from the load generator's result and the step trace."""
    return {
        "itl_p50_s": loadgen["all"]["itl_s"]["p50"],
        "itl_p99_s": loadgen["all"]["itl_s"]["p99"],
        "output_tok_s": loadgen["output_tok_s"],
        "ttft_long_p99_s": loadgen["long"]["ttft_s"]["p99"],
        "ttft_short_p99_s": loadgen["short"]["ttft_s"]["p99"],
        "preemptions": int(sum(s["num_preempted"] for s in steps)),
        "waiting_peak": int(max((s["num_waiting"] for s in steps), default=0)),
    }


def run_arms(arms: list[Arm], dirs: list[Path], load: LoadSpec, progress: bool = True, *,
             recorder: Recorder) -> list[dict]:
    """Serve the given arms at once and drive each with the same load, concurrently: background load on
    the shared machine then hits them alike (two arms get about half the CPU each). `recorder` records
    each server's /metrics into its scrapes.jsonl. Returns the loadgen results in arm order."""
    procs, urls, stops = [], [], []
    try:
        for arm, arm_dir in zip(arms, dirs):
            arm_dir.mkdir(parents=True, exist_ok=True)
            for name in ("scrapes.jsonl", "steps.jsonl"):
                (arm_dir / name).unlink(missing_ok=True)
            port = free_port()
            procs.append(_start_server(arm, arm_dir, port))
            urls.append(f"http://127.0.0.1:{port}")
        for url, arm_dir in zip(urls, dirs):
            stops.append(recorder(url + "/metrics", arm_dir / "scrapes.jsonl"))

        async def drive():
            return await asyncio.gather(*(run_load(replace(load, url=url), progress=progress and i == 0)
                                          for i, url in enumerate(urls)))
        results = asyncio.run(drive())
    finally:
        for stop in stops:
            stop()
        for proc in procs:
            _stop_server(proc)
    for arm_dir, result in zip(dirs, results):
        (arm_dir / "loadgen.json").write_text(json.dumps(result))
    return results


def run_repro(scenario: str, out_dir: Path, *, quick: bool = False, model: str = "tiny",
              budget: int = DEFAULT_BUDGET, load: LoadSpec | None = None, kv_cache_mb: float | None = None,
              progress: bool = True, on_arm=None, concurrent: bool | None = None, recorder: Recorder) -> dict:
    """Run both arms of `scenario` and write `summary.json`; returns the summary.

    `recorder(url, path)` starts recording `url` into scrapes.jsonl `path` and returns a `stop()` that
    takes a last scrape (collectors.scrape_loop.record_jsonl). `concurrent=None` runs the arms at once when the load is paced by session progress (the default
    load: both arms then share the machine's noise and the work mix stays fixed) and one after the
    other when it is paced by seconds (each arm then has the whole machine for its periods).

    Example:
        summary = run_repro("starvation", Path("runs/r1"), quick=True, recorder=scrape_loop.record_jsonl)
        summary["arms"]["on"]["itl_p99_s"]
    """
    arms = arms_for(scenario, model, budget, kv_cache_mb)
    load = load or default_load(scenario, quick)
    load.validate()
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {"scenario": scenario, "arms": {}, "arm_order": [a.name for a in arms]}
    if concurrent is None:
        concurrent = load.long_every_tokens is not None
    dirs = [out_dir / arm.name for arm in arms]
    groups = [list(zip(arms, dirs))] if concurrent else [[pair] for pair in zip(arms, dirs)]
    for group in groups:
        if on_arm:
            for arm, _ in group:
                on_arm(arm)
        results = run_arms([a for a, _ in group], [d for _, d in group], load, progress, recorder=recorder)
        for (arm, arm_dir), result in zip(group, results):
            summary["arms"][arm.name] = arm_summary(result, read_records(arm_dir / "steps.jsonl"))
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
