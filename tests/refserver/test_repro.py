"""`stallscope repro`: arm definitions, the A/B table, and a short two-arm run's directory (real servers)."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stallscope.cli import main
from stallscope.cli.repro import ab_table
from stallscope.core.errors import InputError
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.engine import LLMEngine
from stallscope.refserver.loadgen import LoadSpec
from stallscope.collectors.scrape_loop import record_jsonl
from stallscope.refserver.repro import arm_summary, arms_for, run_repro

SUMMARY_KEYS = {"itl_p50_s", "itl_p99_s", "output_tok_s", "ttft_long_p99_s", "ttft_short_p99_s", "preemptions",
                "waiting_peak"}


def test_arms_for_each_scenario():
    off, on = arms_for("starvation", "tiny", 96)
    assert (off.name, on.name) == ("off", "on")
    assert "--no-enable-chunked-prefill" in off.server_args
    assert on.server_args[-2:] == ("--max-num-batched-tokens", "96")
    auto, fp8 = arms_for("kv-pressure", "tiny", 128, kv_cache_mb=3.0)
    assert auto.server_args[-1] == "auto" and fp8.server_args[-1] == "fp8"
    assert auto.server_args[auto.server_args.index("--kv-cache-mb") + 1] == "3.0"
    # the default pool is 160 blocks of 16-bit KV on either model, with a context vLLM's startup check accepts
    for model, mb in (("tiny", "2.5"), ("small", "8.75")):
        args = arms_for("kv-pressure", model, 64)[1].server_args
        assert args[args.index("--kv-cache-mb") + 1] == mb and args[args.index("--max-model-len") + 1] == "2048"
        cfg = EngineConfig.from_flags(args)
        assert (cfg.num_gpu_blocks, cfg.resolved_max_model_len) == (320, 2048)    # fp8: twice the blocks
    assert LLMEngine(cfg).kv_cache_manager.num_gpu_blocks == 320        # small's engine passes the same check
    with pytest.raises(InputError, match="unknown --scenario 'thrash'"):
        arms_for("thrash", "tiny", 96)
    with pytest.raises(InputError, match="--budget"):
        arms_for("starvation", "tiny", 8)


def test_cli_bad_input(tmp_path, capsys):
    assert main(["repro", "--scenario", "nope", "--out", str(tmp_path / "r")]) == 2
    (tmp_path / "file").write_text("x")
    assert main(["repro", "--out", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "'nope'" in err[0] and "not a directory" in err[1]


def test_arm_summary_from_loadgen_and_steps():
    q = {"p50": 0.05, "p90": 0.1, "p99": 2.0}
    loadgen = {"all": {"itl_s": q}, "output_tok_s": 120.0, "long": {"ttft_s": {"p99": 3.0}},
               "short": {"ttft_s": {"p99": 1.0}}}
    steps = [{"num_preempted": 1, "num_waiting": 4}, {"num_preempted": 2, "num_waiting": 7}]
    assert arm_summary(loadgen, steps) == {"itl_p50_s": 0.05, "itl_p99_s": 2.0, "output_tok_s": 120.0,
                                           "ttft_long_p99_s": 3.0, "ttft_short_p99_s": 1.0, "preemptions": 3,
                                           "waiting_peak": 7}


def test_ab_table_changes():
    from rich.console import Console

    arm = dict.fromkeys(SUMMARY_KEYS, 1.0)
    summary = {"scenario": "kv-pressure", "arm_order": ["auto", "fp8"],
               "arms": {"auto": {**arm, "itl_p99_s": 2.0, "preemptions": 40}, "fp8": {**arm, "itl_p99_s": 0.1,
                                                                                      "preemptions": 10}}}
    console = Console(width=120, record=True)
    console.print(ab_table(summary))
    text = console.export_text()
    assert "-95.0%" in text and "-75.0%" in text and "waiting peak" in text


@pytest.mark.slow
def test_two_arm_run_writes_the_run_directory(tmp_path):
    load = LoadSpec(url="http://127.0.0.1:8000", sessions=2, duration_s=4.0, long_prompt_tokens=400,
                    long_every_tokens=6, max_tokens=8, short_prompt_tokens=16, long_max_tokens=2, drain_s=30)
    summary = run_repro("starvation", tmp_path, load=load, budget=64, progress=False, recorder=record_jsonl)  # paced: arms at once
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert set(summary) == {"scenario", "arms", "arm_order"} and summary["arm_order"] == ["off", "on"]
    spans = {}
    for name in ("off", "on"):
        arm = summary["arms"][name]
        assert set(arm) == SUMMARY_KEYS and arm["itl_p99_s"] > 0 and arm["preemptions"] == 0
        scrapes = [json.loads(line) for line in (tmp_path / name / "scrapes.jsonl").read_text().splitlines()]
        assert len(scrapes) >= 3 and all(set(s) == {"ts", "target", "text"} and s["target"] == "vllm"
                                         for s in scrapes)
        assert scrapes[0]["ts"] < scrapes[-1]["ts"]
        families = {f.name for f in text_string_to_metric_families(scrapes[-1]["text"])}
        assert "vllm:inter_token_latency_seconds" in families
        steps = [json.loads(line) for line in (tmp_path / name / "steps.jsonl").read_text().splitlines()]
        biggest = max(s["num_prefill_tokens"] for s in steps)
        # off prefills each 400-token prompt whole; on never schedules more than the 64-token budget
        assert biggest >= 400 if name == "off" else biggest <= 64
        loadgen = json.loads((tmp_path / name / "loadgen.json").read_text())
        assert loadgen["requests"]["failed"] == 0 and loadgen["long"]["count"] >= 1
        spans[name] = (steps[0]["start_ns"], steps[-1]["end_ns"])
    assert max(s for s, _ in spans.values()) < min(e for _, e in spans.values())  # the arms overlapped
