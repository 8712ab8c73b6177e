"""The rendered rules in a real Prometheus, scraping the real reference server under the starvation load:
VLLMDecodeStarvation goes pending/firing on the chunked-off arm and never on the chunked-on arm.

The idea: the alert separates the arms when the ITL SLO lies between the two stalls the arms produce,
a budget-sized chunk step (on) and a whole long-prompt prefill step (off). Both scale with how busy the
machine is, so the test measures them first with the same engine (one BLAS thread, like the servers)
and puts the SLO between them, on an ITL bucket bound under the prefill (`itl_slo`), since a served chunk
step also carries HTTP and the load generator (the on arm's P99 sat at 0.10-0.16 s with chunk steps of
0.02-0.11 s) while the off arm's P99 can land low in the stall's bucket. Long prompts are paced by session
progress (one after every 25 streamed tokens per session), so the off arm's stalls are ~1/26 of its ITL samples
on any machine, which a P99 over 15s windows sees. Windows and `for:` are shortened through the
thresholds, exactly the path a user takes; Prometheus scrapes and evaluates every second; the arms run
one after the other so they do not share the two cores.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
import requests

from promserver import PrometheusServer, free_port
from stallscope.core.config import load_thresholds
from stallscope.refserver.metrics import ITL_BUCKETS
from stallscope.rules import render


def _load_parts_committed() -> bool:
    try:
        import stallscope.refserver.loadgen  # noqa: F401
        import stallscope.refserver.repro  # noqa: F401
    except ImportError:
        return False
    return True


pytestmark = [pytest.mark.slow,
              pytest.mark.xfail(not _load_parts_committed(), strict=True,
                                reason="stallscope.refserver.loadgen/repro (issue 3) are not in this tree yet")]

MODEL = "tiny"
SESSIONS = 16
LONG_PROMPT = 1536
LOAD_S = 20.0
PREFILL_RATE = 50.0          # prompt tokens/s that count as prefill load (shorts alone give ~100/s)
STALLS_EVERY = 25            # tokens per session between long prompts: stalls are ~1/26 of the off arm's ITLs
STARVATION = 'ALERTS{alertname="VLLMDecodeStarvation"}'
SERVER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def calibrate(budget: int, prompts: int = 3) -> dict:
    """Step times of this machine, now (s): the whole long prefill and the worst budget-sized chunk step, each the
    median over `prompts` long prompts of distinct tokens (the engine caches prefixes, so a repeated prompt
    computes nothing). One prompt once read a 0.52 s prefill, twice what the served arm then stalled for (client
    ITL P99 0.30 s): the SLO landed above every stall and the off arm never fired (a fresh clone's CI run)."""
    from threadpoolctl import threadpool_limits

    from stallscope.refserver.config import EngineConfig
    from stallscope.refserver.engine import LLMEngine
    from stallscope.engine.request import SamplingParams

    def step_times(engine, n):
        out = []
        for _ in range(n):
            t = time.perf_counter()
            engine.step()
            out.append(time.perf_counter() - t)
        return out

    with threadpool_limits(1):
        times = {}
        for chunked in (False, True):
            engine = LLMEngine(EngineConfig(model=MODEL, enable_chunked_prefill=chunked,
                                            max_num_batched_tokens=budget if chunked else 2048, max_num_seqs=256))
            for i in range(SESSIONS):
                engine.add_request(f"s{i}", [40 + i] * 32, SamplingParams(max_tokens=512))
            step_times(engine, 3)
            n = math.ceil(LONG_PROMPT / (budget - SESSIONS)) + 1 if chunked else 1
            worst = []
            for k in range(prompts):
                engine.add_request(f"long{k}", [100 + k + j % 64 for j in range(LONG_PROMPT)],
                                   SamplingParams(max_tokens=1))
                worst.append(max(step_times(engine, n)))
            times["chunk_s" if chunked else "prefill_s"] = statistics.median(worst)
            engine.close()
    return times


def itl_slo(cal: dict) -> float:
    """The SLO between the arms' stalls: the highest ITL bucket bound at most 0.9 x the whole prefill, at least
    the geometric mean of the two steps and a third of the prefill. The alert compares a bucket-interpolated P99,
    so an SLO inside a bucket fires on a few chunk steps that land in it (a fresh clone's CI run once saw the on
    arm's windowed P99 at 0.086 s against an SLO of 0.074 s, one bucket above 0.075, with its client P99 at
    0.021 s); on a bucket bound the P99 passes it only where more than 1 % of the gaps do."""
    formula = max(math.sqrt(cal["chunk_s"] * cal["prefill_s"]), cal["prefill_s"] / 3)
    return max([b for b in ITL_BUCKETS if b <= 0.9 * cal["prefill_s"]] + [formula])


def _rules(tmp_path, itl_slo_s: float):
    th = load_thresholds(windows={"short": "15s", "long": "30s"}, itl_slo_s=round(itl_slo_s, 4),
                         prefill_tokens_rate_high=PREFILL_RATE, **{"for": {a: "5s" for a in render.ALERTS}})
    paths = []
    for name, doc in render.render_files(th).items():
        path = tmp_path / name
        path.write_text(render.dump(doc))
        paths.append(path)
    return paths


class _RefServer:
    """`stallscope refserver` with an arm's flags, as a child process on a free loopback port."""

    def __init__(self, workdir, flags):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "refserver.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stallscope.cli", "refserver", *flags, "--port", str(self.port)],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **SERVER_ENV})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.close()
                raise RuntimeError(f"refserver exited {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.close()
        raise RuntimeError("refserver did not become healthy in 60 s")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def _run_arm(tmp_path, arm, rule_files, load) -> dict:
    from stallscope.refserver.loadgen import run_load

    workdir = tmp_path / arm.name
    workdir.mkdir()
    server = _RefServer(workdir, arm.server_args)
    try:
        with PrometheusServer(workdir, scrape={"vllm": f"127.0.0.1:{server.port}"}, interval="1s",
                              evaluation_interval="1s", rule_files=rule_files) as prom:
            prom.wait_for_scrape("vllm")
            result: dict = {}
            spec = replace(load, url=server.url)
            worker = threading.Thread(target=lambda: result.update(asyncio.run(run_load(spec, progress=False))))
            start = time.time()
            worker.start()
            states = set()
            while worker.is_alive():  # poll the alert while the load runs (the load bounds itself in time)
                states |= {r["metric"]["alertstate"] for r in prom.query(STARVATION)}
                worker.join(0.5)
            span = f"{int(time.time() - start) + 2}s"
            states |= {r["metric"]["alertstate"] for r in prom.query(f"last_over_time({STARVATION}[{span}])")}
            rate = prom.query(f"max_over_time(model_name_instance:vllm_prompt_tokens:rate15s[{span}])")
            p99 = prom.query('max_over_time(model_name_instance_quantile:vllm_inter_token_latency_seconds:'
                             f'histogram_quantile_rate15s{{quantile="0.99"}}[{span}])')
            generated = prom.query(f"sum(increase(vllm:generation_tokens_total[{span}]))")
            return {"states": sorted(states), "completed": result.get("requests", {}).get("completed", 0),
                    "generated_tokens": float(generated[0]["value"][1]) if generated else 0.0,
                    "max_prompt_rate": float(rate[0]["value"][1]) if rate else 0.0,
                    "max_itl_p99_s": float(p99[0]["value"][1]) if p99 else float("nan"),
                    "client_itl_p99_s": result.get("all", {}).get("itl_s", {}).get("p99")}
    finally:
        server.close()


def test_decode_starvation_alert_fires_with_chunked_prefill_off_and_never_on(tmp_path):
    from stallscope.refserver.loadgen import LoadSpec
    from stallscope.refserver.repro import DEFAULT_BUDGET, arms_for

    cal = calibrate(DEFAULT_BUDGET)
    assert cal["prefill_s"] > 4 * cal["chunk_s"], f"the engine cannot separate the arms here: {cal}"
    slo = itl_slo(cal)
    load = LoadSpec(url="http://127.0.0.1:1", sessions=SESSIONS, duration_s=LOAD_S, long_prompt_tokens=LONG_PROMPT,
                    long_every_tokens=STALLS_EVERY, seed=3, max_tokens=128, short_prompt_tokens=32, long_max_tokens=1,
                    drain_s=5.0, request_timeout_s=30.0)
    rule_files = _rules(tmp_path, slo)
    off, on = (_run_arm(tmp_path, arm, rule_files, load) for arm in arms_for("starvation", MODEL, DEFAULT_BUDGET))
    detail = json.dumps({"calibration": cal, "itl_slo_s": slo, "off": off, "on": on})
    # both arms really ran with prefill load over the threshold, so "never fires" is not vacuous
    for arm in (off, on):
        assert arm["generated_tokens"] >= 20 * SESSIONS, detail
        assert arm["max_prompt_rate"] > PREFILL_RATE, detail
    assert set(off["states"]) & {"pending", "firing"}, detail
    assert on["states"] == [], detail
    assert off["max_itl_p99_s"] > slo > on["max_itl_p99_s"], detail
    print(detail)
