"""What-if against a short real reference-server run (tiny model, loopback, ~15 s): the trace's token
times match the client's stream exactly, and the calibrated simulation reproduces the run it was fitted on.

The bounds are wide on purpose: this is one 10 s run on a shared 2-core CPU whose step times drift
by 2x between runs (docs/whatif.md); the held-out, multi-budget figures are in the validation script.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from stallscope.analyzers.step_cost import fit_step_cost, read_step_trace, trace_itl
from stallscope.analyzers.whatif import predict
from stallscope.analyzers.workload import workload_from_loadgen
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.loadgen import LoadSpec, run_load
from stallscope.refserver.server_thread import ServerThread

pytestmark = pytest.mark.slow


def test_simulation_reproduces_a_real_run(tmp_path):
    trace = tmp_path / "steps.jsonl"
    cfg = EngineConfig(model="tiny", max_num_batched_tokens=256, step_trace=str(trace))
    with ServerThread(cfg) as server:
        spec = LoadSpec(url=server.url, sessions=4, duration_s=10.0, long_prompt_tokens=600, long_every_s=2.5,
                        max_tokens=32, short_prompt_tokens=16, long_max_tokens=4, drain_s=30.0)
        result = asyncio.run(run_load(spec, progress=False))
    assert result["requests"]["failed"] == 0 and result["requests"]["completed"] >= 8
    steps = read_step_trace(trace)
    # engine-side token times rebuilt from the trace: one gap per client-side chunk gap, no more, no less
    measured_itl = trace_itl(steps)
    assert len(measured_itl) == result["all"]["itl_s"]["count"]
    cost = fit_step_cost(steps, source="run")
    # R² swings from 0.5 to 0.95 with the machine's load (0.08 once, with four test suites sharing the
    # two cores), so it is reported, not bounded; the prefill terms are always there and cost time
    prefill_terms = {k: v for k, v in cost.coef_s.items() if k in ("prefill_tokens", "prefill_attn_pairs")}
    assert prefill_terms and max(prefill_terms.values()) > 0, cost.coef_s
    workload = workload_from_loadgen(result, "loadgen")
    assert workload.sessions == 4 and workload.long_prompt_tokens == 600
    pred = predict(workload, cost, [256], shape=cfg.scheduler_config, seeds=3).iloc[0]
    ratios = {
        "itl_p50": pred["itl_p50_s"] / np.percentile(measured_itl, 50),
        "itl_p99": pred["itl_p99_s"] / np.percentile(measured_itl, 99),
        "output_tok_s": pred["output_tok_s"] / result["output_tok_s"],
        "long_prompts": pred["num_long"] / result["long"]["count"],
    }
    for name, ratio in ratios.items():
        assert 0.5 < ratio < 2.0, (name, ratios)
