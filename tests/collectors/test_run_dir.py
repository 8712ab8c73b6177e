"""RunDir: the one arm rule, each arm's steps parsed once, and the steps.jsonl reader it shares."""

from __future__ import annotations

import json

import pytest

from stallscope.collectors import loader
from stallscope.collectors.run_dir import RunDir, scrape_files
from stallscope.core.errors import CollectorError, InputError
from stallscope.engine import step_trace


def step(i, **extra):
    return {"step": i, "start_ns": 1000 * i, "end_ns": 1000 * i + 500, "num_prefill_tokens": 8 * i,
            "num_decode_tokens": 1, "num_running": 2, "num_scheduled_tokens": {"r1": 8 * i + 1}, **extra}


def write(path, *records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_directory_holding_an_arm_file_is_one_arm_named_empty(tmp_path):
    write(tmp_path / "steps.jsonl", step(0), step(1))
    write(tmp_path / "child" / "steps.jsonl", step(5))          # not looked at: the directory is the arm
    run = RunDir.open(tmp_path)
    assert [(a.name, a.path) for a in run.arms] == [("", tmp_path)]
    steps = run.steps()
    assert steps["step"].tolist() == [0, 1] and steps["target"].tolist() == ["", ""]
    assert steps["num_prefill_tokens"].dtype == "float64" and steps["num_running"].dtype == "float64"
    assert steps["start_ns"].dtype == "int64" and steps["num_scheduled_tokens"][1] == {"r1": 9}


def test_child_directories_holding_an_arm_file_are_the_arms_in_name_order(tmp_path):
    write(tmp_path / "on" / "steps.jsonl", step(3))
    write(tmp_path / "off" / "loadgen.json", {"output_tok_s": 12.5})
    (tmp_path / "off" / "server.json").write_text(json.dumps({"argv": ["refserver"], "port": 8000}))
    (tmp_path / "notes").mkdir()
    run = RunDir.open(tmp_path)
    off, on = run.arms
    assert (off.name, on.name) == ("off", "on")
    assert off.steps() is None and off.loadgen() == {"output_tok_s": 12.5}
    assert off.server_config() == {"argv": ["refserver"], "port": 8000} and on.server_config() is None
    assert on.loadgen() is None and off.scrapes_path is None
    steps = run.steps(prefix_ids=True)
    assert steps["target"].tolist() == ["on"] and steps["num_scheduled_tokens"][0] == {"on/r1": 25}


def test_steps_are_parsed_once_and_callers_cannot_change_the_cache(tmp_path):
    write(tmp_path / "steps.jsonl", step(0))
    arm = RunDir.open(tmp_path).arms[0]
    first = arm.steps()
    first["step"] = 99
    (tmp_path / "steps.jsonl").write_text("not json\n")       # a second parse would raise
    assert arm.steps()["step"].tolist() == [0]


def test_no_arm_and_bad_files_name_the_path(tmp_path):
    with pytest.raises(InputError, match=f"run directory not found: {tmp_path / 'nope'}"):
        RunDir.open(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty is not a run directory: no steps.jsonl, scrapes.jsonl or loadgen"):
        RunDir.open(tmp_path / "empty")
    with pytest.raises(CollectorError, match=r"empty has no scrapes.jsonl \(nor any <arm>/scrapes.jsonl\)"):
        loader.load(tmp_path / "empty")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "loadgen.json").write_text("[1]")
    with pytest.raises(InputError, match="loadgen.json: expected a JSON object, got list"):
        RunDir.open(tmp_path / "a").arms[0].loadgen()
    write(tmp_path / "b" / "steps.jsonl", step(0), {"start_ns": 1})
    with pytest.raises(InputError, match=r"steps.jsonl:2: field `end_ns` missing or not a number"):
        RunDir.open(tmp_path / "b").steps()


def test_scrape_files_prefix_the_arms(tmp_path):
    write(tmp_path / "x" / "scrapes.jsonl", {"ts": 1, "target": "vllm", "text": ""})
    write(tmp_path / "y" / "steps.jsonl", step(0))
    assert scrape_files(tmp_path) == [("x/", tmp_path / "x" / "scrapes.jsonl")]
    assert scrape_files(tmp_path / "x") == [("", tmp_path / "x" / "scrapes.jsonl")]


def test_step_trace_reader_errors_name_file_and_line(tmp_path):
    path = tmp_path / "steps.jsonl"
    full = dict.fromkeys(("num_prefill_reqs", "num_decode_reqs", "num_waiting", "num_preempted", "kv_blocks_used",
                          "kv_blocks_total"), 1)
    write(path, step(0, **full))
    assert step_trace.read_step_trace(path)[0].num_scheduled_tokens == {"r1": 1}
    with open(path, "a") as fh:
        fh.write("\n" + json.dumps({k: v for k, v in step(1, **full).items() if k != "num_running"}) + "\n")
    assert len(step_trace.read_records(path)) == 2
    with pytest.raises(InputError, match=r"steps.jsonl:3: field `num_running` missing or not a number"):
        step_trace.read_step_trace(path)
    with pytest.raises(InputError, match="step trace not found: .*none.jsonl"):
        step_trace.read_records(tmp_path / "none.jsonl")
