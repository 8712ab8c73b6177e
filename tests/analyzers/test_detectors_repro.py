"""Detectors on real `stallscope repro` arms (reference server, load generator, 1 s scrapes, step trace).

The ITL SLO is calibrated from the two arms' own step traces, between the chunked arm's longest gap
between two tokens of a request (what its streams can see) and the unchunked arm's whole-prompt step, as the rules
integration test does: how fast a shared 2-core machine runs a step changes from run to run, the
separation between the two regimes does not.
"""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from stallscope.analyzers import step_stalls
from stallscope.analyzers.diagnose import diagnose
from stallscope.analyzers.step_cost import read_step_trace, trace_itl
from stallscope.collectors import loader
from stallscope.core.config import load_thresholds
from stallscope.refserver.loadgen import LoadSpec
from stallscope.collectors.scrape_loop import record_jsonl
from stallscope.refserver.repro import default_load, run_repro

pytestmark = pytest.mark.slow


def _arm(run, name, th):
    frames = loader.load(run / name)
    samples = next(f["samples"] for f in frames.values() if len(f["samples"]))
    steps = read_step_trace(run / name / "steps.jsonl")
    rep = diagnose([("", {"samples": samples, "steps": steps})], thresholds=th)
    sig, found = rep.signals, rep.findings_frame()
    return samples, steps, sig, found


@pytest.fixture(scope="module")
def starvation(tmp_path_factory):
    run = tmp_path_factory.mktemp("repro_starvation")
    # Long prompts paced by session progress (every 25 streamed tokens per session), as repro does by
    # default: the share of stalled ITL samples then stays near 4% however fast the machine runs, so the
    # off arm's P99 lands on a stall on a quiet machine too.
    load = LoadSpec(url="http://127.0.0.1:8000", sessions=4, duration_s=12.0, long_prompt_tokens=1900,
                    long_every_tokens=25, max_tokens=64, short_prompt_tokens=16, long_max_tokens=1, drain_s=30)
    run_repro("starvation", run, load=load, budget=32, progress=False, recorder=record_jsonl)
    return run


def test_off_arm_is_starvation_and_on_arm_is_not(starvation):
    off_steps = read_step_trace(starvation / "off" / "steps.jsonl")
    on_steps = read_step_trace(starvation / "on" / "steps.jsonl")
    dur = (off_steps["end_ns"] - off_steps["start_ns"]).to_numpy() / 1e9
    whole = dur[off_steps["num_prefill_tokens"].to_numpy() >= 1200].min()
    # the on arm's longest gap between two tokens of one request: no ITL sample of it can exceed this
    # (a gap between decode steps can be longer when no request was decoding, e.g. all four sessions
    # between requests while the long prompt's chunks run)
    on_gap = trace_itl(on_steps).max()
    assert whole > 1.5 * on_gap, f"the arms did not separate: whole prompt {whole:.3f} s vs on gaps {on_gap:.3f} s"
    slo = math.sqrt(whole * on_gap)
    th = load_thresholds(itl_slo_s=round(slo, 4))
    _, steps, sig, found = _arm(starvation, "off", th)
    assert "decode_starvation" in set(found["kind"]), found[["kind", "severity"]]
    f = found[found["kind"] == "decode_starvation"].iloc[0]
    truth = step_stalls.find_stalls(steps, min_gap_s=slo, k=0.0, cause="prefill")
    assert len(truth) >= 2
    assert f["evidence"]["offending_steps"][0]["num_prefill_tokens"] >= 1200
    _, _, _, found_on = _arm(starvation, "on", th)
    assert "decode_starvation" not in set(found_on["kind"]), found_on[["kind", "evidence"]].to_dict("records")
    summary = json.loads((starvation / "summary.json").read_text())
    assert summary["arms"]["off"]["itl_p99_s"] > summary["arms"]["on"]["itl_p99_s"]


def test_kv_pressure_auto_arm_is_flagged(tmp_path):
    # repro's own kv-pressure load (16 sessions and a 1,536-token prompt, paced by session progress, in a
    # 160-block pool), cut to 14 s: the pool runs out whenever a long prompt is in flight, however fast
    # the machine is
    load = replace(default_load("kv-pressure", quick=True), duration_s=14.0, drain_s=30)
    run_repro("kv-pressure", tmp_path, load=load, budget=96, progress=False, recorder=record_jsonl)
    th = load_thresholds()
    samples, steps, sig, found = _arm(tmp_path, "auto", th)
    assert steps["num_preempted"].sum() > 0 or steps["num_waiting"].max() > 0
    assert "kv_pressure" in set(found["kind"]), sig[["kv_usage", "waiting", "preempt_rate"]].describe()
    f = found[found["kind"] == "kv_pressure"].iloc[0]
    ev = f["evidence"]
    assert ev["kv_usage_max"] >= th["kv_usage_high"] or ev["preemptions_per_s_max"] >= th["preemptions_rate_high"]
    assert "--kv-cache-dtype fp8" in f["recommendation"]
