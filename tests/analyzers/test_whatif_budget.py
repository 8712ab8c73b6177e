"""The budget recommendation: one answer from `stallscope whatif --from`, `analyze` and the dashboard,
the candidate budgets, and the rule when no budget meets the SLO."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from expo_frames import T0_NS, simulate_starvation, write_arm
from stallscope.analyzers.budget import WhatifInputs, candidate_budgets, recommend_budget
from stallscope.analyzers.step_cost import StepCostModel
from stallscope.analyzers.whatif import recommend, simulate
from stallscope.analyzers.workload import LengthDist, Workload
from stallscope.cli import main
from stallscope.core.errors import InputError
from stallscope.engine.config import SchedulerConfig
from stallscope.refserver.config import EngineConfig

# the engine the run "measured": 10 ms per step + 0.2 ms per prompt token
COST = StepCostModel(intercept_s=0.010, coef_s={"prefill_tokens": 2e-4})
LOAD = {"sessions": 6, "duration_s": 8.0, "short_prompt_tokens": 32, "max_tokens": 64, "long_prompt_tokens": 1500,
        "long_every_s": 1.0, "long_max_tokens": 4}
ON_BUDGET = 128


def _loadgen(arm: str) -> dict:
    spec = {"url": "http://127.0.0.1:8000", **LOAD, "seed": 0, "max_requests": 100000, "drain_s": 5.0,
            "request_timeout_s": 300.0}
    return {"spec": spec, "records": [], "requests": {"sent": 0, "completed": 0}, "arm": arm}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A repro-shaped run: arms `off` (chunked prefill off) and `on` (--max-num-batched-tokens 128), each
    with scrapes (the off arm's show decode starvation), a step trace with per-request tokens, the
    loadgen result and the server's argv."""
    root = tmp_path_factory.mktemp("whatif-run")
    w = Workload(LengthDist.fixed(LOAD["short_prompt_tokens"]), LengthDist.fixed(LOAD["max_tokens"]),
                 sessions=LOAD["sessions"], long_prompt_tokens=LOAD["long_prompt_tokens"],
                 long_output_tokens=LOAD["long_max_tokens"], long_every_s=LOAD["long_every_s"],
                 duration_s=LOAD["duration_s"])
    for arm, chunk in (("off", None), ("on", ON_BUDGET)):
        texts = []
        simulate_starvation(30, chunk=chunk, texts=texts)
        res = simulate(w, COST, max_num_batched_tokens=chunk or 2048, enable_chunked_prefill=chunk is not None,
                       shape=SchedulerConfig(num_gpu_blocks=4096), noise=False, record_steps=True)
        steps = pd.DataFrame([{**s, "start_ns": s["start_ns"] + T0_NS, "end_ns": s["end_ns"] + T0_NS,
                               "num_scheduled_tokens": {f"req-{k}": v for k, v in s["num_scheduled_tokens"].items()}}
                              for s in res.steps])
        write_arm(root / arm, texts, steps)
        (root / arm / "loadgen.json").write_text(json.dumps(_loadgen(arm)))
        flags = ["--enable-chunked-prefill", "--max-num-batched-tokens", str(chunk)] if chunk else \
            ["--no-enable-chunked-prefill"]
        argv = ["-m", "stallscope.cli", "refserver", "--model", "tiny", "--max-num-seqs", "256", *flags]
        engine = asdict(EngineConfig.from_flags(argv[argv.index("refserver") + 1:]))     # as `repro` records it
        (root / arm / "server.json").write_text(json.dumps({"argv": argv, "port": 0, "engine": engine}))
    return root


def _whatif_cli(capsys, *args):
    assert main(["whatif", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_whatif_analyze_and_dashboard_recommend_the_same_budget(run_dir, capsys):
    from stallscope.dashboards import data
    from stallscope.dashboards.app import create_app, page_module
    from stallscope.dashboards.data import DataSource

    cli = _whatif_cli(capsys, "--from", str(run_dir))
    # candidates: the defaults, the `on` arm's own 128, and 704: a chunk of B tokens costs
    # 10 ms + 0.2 ms x B, so 704 (~150 ms) is the largest multiple of 64 whose slowest long-prompt step fits
    # 160 ms (the SLO less 20 %); 1024 (~215 ms) is over the SLO
    assert [p["max_num_batched_tokens"] for p in cli["predictions"]] == [128, 256, 512, 704, 1024, 2048, 4096]
    rec = cli["recommendation"]
    assert rec["max_num_batched_tokens"] == 704 and rec["meets_slo"] and rec["itl_slo_s"] == 0.2
    assert rec["predicted_slowest_step_s"] == pytest.approx(0.1496, abs=0.002) and rec["step_bound_s"] == pytest.approx(0.16)
    assert cli["step_cost"]["mape"] < 1e-3 and cli["workload"]["source"].endswith("off/loadgen.json")

    # one whole-prompt freeze at the end among thousands of 30 ms gaps: the P99 met the SLO, so info (exit 0)
    assert main(["analyze", str(run_dir), "--format", "json"]) == 0
    found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "decode_starvation"]
    assert found and {f["target"] for f in found} == {"off/vllm"}
    for f in found:
        assert f["severity"] == "info"
        assert f["evidence"]["max_num_batched_tokens"] == 704
        assert f["evidence"]["budget_source"] == f"what-if simulation of the run {run_dir}"
        assert f["evidence"]["whatif_budgets"] == [128, 256, 512, 704, 1024, 2048, 4096]
        assert f["evidence"]["whatif_predicted_itl_p99_s"] == pytest.approx(rec["predicted_itl_p99_s"])
        assert "--max-num-batched-tokens 704`" in f["recommendation"]

    src = DataSource.from_run(run_dir)
    create_app(src)
    data.use(src)
    page = page_module("whatif")
    assert "steps" in src.frames() and "num_scheduled_tokens" in src.frames()["steps"]
    res = page.result(src)
    assert res["recommendation"]["max_num_batched_tokens"] == 704 and res["budgets"] == [128, 256, 512, 704, 1024, 2048, 4096]
    assert res["recommendation"]["predicted_itl_p99_s"] == pytest.approx(rec["predicted_itl_p99_s"])
    assert "--max-num-batched-tokens 704" in page.update(0).children
    assert page.slider(0, None) == (6, {i: str(b) for i, b in enumerate(res["budgets"])}, 3)   # starts on 704
    assert page.curves(None, 0)[1].startswith("--max-num-batched-tokens 704: ITL P99")
    overview = src.findings()
    starving = overview[overview["kind"] == "decode_starvation"]
    assert len(starving) and all(e["max_num_batched_tokens"] == 704 for e in starving["evidence"])


def test_when_no_budget_meets_the_slo_all_three_pick_the_lowest_itl(run_dir, capsys):
    """A 20 ms SLO that even the run's own 128-token chunks (~36 ms steps) miss: every caller names 128,
    the budget with the lowest predicted ITL P99, and says the SLO is missed."""
    from stallscope.core.config import load_thresholds
    from stallscope.dashboards import data
    from stallscope.dashboards.app import create_app, page_module
    from stallscope.dashboards.data import DataSource

    rec = _whatif_cli(capsys, "--from", str(run_dir), "--itl-slo", "0.02")["recommendation"]
    assert rec["max_num_batched_tokens"] == ON_BUDGET and not rec["meets_slo"]
    assert rec["reason"].startswith("no simulated budget meets the ITL SLO 0.02 s; 128 predicts the lowest ITL P99")
    assert "long-prompt TTFT P99 of" in rec["reason"]

    main(["analyze", str(run_dir), "--itl-slo", "0.02", "--format", "json"])
    found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "decode_starvation"]
    assert found and {f["evidence"]["max_num_batched_tokens"] for f in found} == {ON_BUDGET}
    assert not any(f["evidence"]["whatif_meets_slo"] for f in found)
    assert "which is the lowest simulated but misses the 20 ms SLO" in found[0]["recommendation"]

    src = DataSource.from_run(run_dir, thresholds=load_thresholds(itl_slo_s=0.02))
    create_app(src)
    data.use(src)
    res = page_module("whatif").result(src)
    assert res["recommendation"]["max_num_batched_tokens"] == ON_BUDGET and not res["recommendation"]["meets_slo"]


def test_one_arm_of_the_run_agrees_too(run_dir, capsys):
    from stallscope.dashboards import data
    from stallscope.dashboards.app import create_app, page_module
    from stallscope.dashboards.data import DataSource

    cli = _whatif_cli(capsys, "--from", str(run_dir / "off"))
    # one arm: its own steps and loadgen, no chunked budget of its own, so the defaults and the step bound
    assert [p["max_num_batched_tokens"] for p in cli["predictions"]] == [256, 512, 704, 1024, 2048, 4096]
    main(["analyze", str(run_dir / "off"), "--format", "json"])
    found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "decode_starvation"]
    assert found and {f["evidence"]["max_num_batched_tokens"] for f in found} == \
        {cli["recommendation"]["max_num_batched_tokens"]}
    src = DataSource.from_run(run_dir / "off")
    create_app(src)
    data.use(src)
    res = page_module("whatif").result(src)
    assert res["recommendation"]["max_num_batched_tokens"] == cli["recommendation"]["max_num_batched_tokens"]
    assert res["budgets"] == [256, 512, 704, 1024, 2048, 4096]


def test_candidate_budgets_add_the_run_budget_and_respect_the_block_size():
    assert candidate_budgets() == [256, 512, 1024, 2048, 4096]
    assert candidate_budgets((80, 512)) == [80, 256, 512, 1024, 2048, 4096]
    assert candidate_budgets((8,), block_size=16) == [256, 512, 1024, 2048, 4096]
    assert candidate_budgets((300,), block_size=512) == [512, 1024, 2048, 4096]
    w = Workload(LengthDist.fixed(16), LengthDist.fixed(8), sessions=1, duration_s=0.5)
    inputs = WhatifInputs(StepCostModel(intercept_s=0.01), w, SchedulerConfig(block_size=32))
    with pytest.raises(InputError, match="budget 16 is below --block-size 32"):
        recommend_budget(inputs, 0.2, budgets=[16, 256])


def test_no_budget_meets_the_slo_picks_the_lowest_itl_and_states_the_ttft_cost():
    # a measured, non-monotone curve (a run on a busy CPU): the smallest budget is not the best one
    p = pd.DataFrame({"max_num_batched_tokens": [80, 256, 512, 1024, 2048, 4096], "enable_chunked_prefill": [True] * 6,
                      "itl_p99_s": [0.97, 1.45, 2.26, 4.25, 0.566, 0.566],
                      "ttft_long_p99_s": [39.6, 8.7, 10.0, 11.2, 16.8, 16.8]})
    rec = recommend(p, 0.2)
    assert rec["max_num_batched_tokens"] == 4096 and not rec["meets_slo"]     # the tie goes to the larger budget
    assert rec["predicted_itl_p99_s"] == 0.566 and rec["predicted_ttft_long_p99_s"] == 16.8
    assert rec["reason"] == ("no simulated budget meets the ITL SLO 0.2 s; 4096 predicts the lowest ITL P99, "
                             "0.566 s, at a long-prompt TTFT P99 of 16.80 s")
    # budgets whose simulation completed nothing (NaN) are never chosen over one that did
    p.loc[4:, "itl_p99_s"] = np.nan
    assert recommend(p, 0.2)["max_num_batched_tokens"] == 80
    # the SLO met by 80 only: the largest budget meeting it, however long its TTFT
    p["itl_p99_s"] = [0.15, 0.3, 0.3, 0.3, 0.3, 0.3]
    met = recommend(p, 0.2)
    assert met["max_num_batched_tokens"] == 80 and met["meets_slo"] and "TTFT P99 of 39.60 s" in met["reason"]
