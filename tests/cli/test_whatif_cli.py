"""`stallscope whatif`: JSON and text output, run-directory inputs, and one-line exit-2 errors."""

from __future__ import annotations

import json

import pytest

from stallscope.cli import main
from step_traces import synthetic_trace

FLAGS = ["--sessions", "4", "--prompt-tokens", "32", "--output-tokens", "48", "--long-prompt-tokens", "1200",
         "--long-every", "1.5", "--duration", "6"]


def loadgen_result(sessions=4, duration=6.0):
    """A loadgen result in refserver/loadgen.py's shape (spec + per-request records)."""
    spec = {"url": "http://127.0.0.1:8000", "sessions": sessions, "duration_s": duration, "long_prompt_tokens": 1200,
            "long_every_s": 1.5, "seed": 0, "max_tokens": 48, "short_prompt_tokens": 32, "long_max_tokens": 8,
            "max_requests": 100000, "drain_s": 60.0, "request_timeout_s": 300.0}
    # sent just before the synthetic trace's steps (which start at 1.7e9 s)
    records = [{"kind": "short", "prompt_tokens": 32, "max_tokens": m, "start_ts": 1.7e9 + 0.5 * i, "chunk_ts": [],
                "output_tokens": m, "status": 200, "error": None, "done": True}
               for i, m in enumerate((24, 48, 72, 48))]
    return {"spec": spec, "records": records, "requests": {"sent": 4, "completed": 4},
            "short": {"ttft_s": {"p50": 0.25}}}


@pytest.fixture
def trace(tmp_path):
    return synthetic_trace(tmp_path / "steps.jsonl", noise=0.05)


def run_json(args, capsys):
    rc = main(["whatif", *args, "--format", "json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_json_has_one_prediction_per_budget_and_a_recommendation(trace, capsys):
    data = run_json(["--steps", str(trace), *FLAGS, "--budgets", "256,512,1024", "--include-unchunked",
                     "--itl-slo", "0.05"], capsys)
    preds = data["predictions"]
    assert [(p["max_num_batched_tokens"], p["enable_chunked_prefill"]) for p in preds] == \
        [(256, True), (512, True), (1024, True), (2048, False)]
    for p in preds:
        assert {"ttft_p50_s", "ttft_p99_s", "ttft_long_p50_s", "ttft_long_p99_s", "ttft_short_p50_s", "ttft_short_p99_s", "itl_p50_s",
                "itl_p99_s", "output_tok_s"} <= set(p)
        assert p["num_long"] == 3 and p["itl_p50_s"] > 0
    rec = data["recommendation"]
    meeting = [p["max_num_batched_tokens"] for p in preds if p["enable_chunked_prefill"] and p["itl_p99_s"] <= 0.05]
    assert rec["max_num_batched_tokens"] == (max(meeting) if meeting else 256)
    assert rec["meets_slo"] == bool(meeting) and rec["itl_slo_s"] == 0.05
    assert data["step_cost"]["n_steps"] == 300 and data["step_cost"]["mape"] < 0.1 and data["step_cost"]["r2"] > 0.9
    assert data["workload"]["sessions"] == 4 and data["workload"]["source"] == "flags"


def test_text_output_is_a_table_with_the_recommendation(trace, capsys):
    assert main(["whatif", "--steps", str(trace), *FLAGS, "--budgets", "256,1024"]) == 0
    out = capsys.readouterr().out
    assert "predicted per --max-num-batched-tokens" in out and "MAPE" in out and "R²" in out
    assert "--max-num-batched-tokens" in out.split("recommend")[-1]


def test_run_directory_supplies_steps_workload_and_pool(tmp_path, capsys):
    run = tmp_path / "run"
    for arm in ("off", "on"):
        (run / arm).mkdir(parents=True)
        synthetic_trace(run / arm / "steps.jsonl", seed=1 if arm == "on" else 2)
        (run / arm / "loadgen.json").write_text(json.dumps(loadgen_result()))
    data = run_json(["--from", str(run), "--budgets", "256,512"], capsys)
    assert data["step_cost"]["n_steps"] == 600                 # both arms' steps feed one fit
    assert data["workload"]["sessions"] == 4 and data["workload"]["long_threshold_tokens"] == 1200
    assert data["workload"]["output_tokens_mean"] == pytest.approx(48.0)
    assert data["server_shape"]["num_gpu_blocks"] == 512       # num_gpu_blocks of the trace
    # the loadgen's send times against the trace's first scheduled steps: the measured intake delays
    over = data["request_overhead_s"]
    assert over["measured_requests"] == 4 and 0 <= over["p50_s"] <= over["p99_s"] < 66.0   # the off arm's 4
    # with the server's configuration (as `repro` records it) the shape follows the run
    engine = {"model": "tiny", "max_num_batched_tokens": 256, "kv_cache_mb": 4, "max_num_seqs": 64, "block_size": 32}
    (run / "off" / "server.json").write_text(json.dumps({"argv": ["refserver"], "port": 1234, "engine": engine}))
    data = run_json(["--from", str(run), "--budgets", "256,512"], capsys)
    assert data["server_shape"] == {"max_num_seqs": 64, "block_size": 32, "num_gpu_blocks": 128, "max_model_len": 2048}
    assert [p["max_num_batched_tokens"] for p in data["predictions"]] == [256, 512]
    # a run recorded before server.json held `engine`: the argv's engine flags give the same
    argv = ["-m", "stallscope.cli", "refserver", "--model", "tiny", "--max-num-batched-tokens", "256",
            "--kv-cache-mb", "4", "--max-num-seqs", "64", "--port", "1234"]
    (run / "off" / "server.json").write_text(json.dumps({"argv": argv, "port": 1234}))
    data = run_json(["--from", str(run), "--budgets", "256,512"], capsys)
    assert data["server_shape"] == {"max_num_seqs": 64, "block_size": 16, "num_gpu_blocks": 256, "max_model_len": 2048}
    assert run_json(["--from", str(run), "--budgets", "256", "--request-overhead", "0.01"],
                    capsys)["request_overhead_s"] == 0.01
    # explicit flags override the measured workload
    data = run_json(["--from", str(run / "on"), "--budgets", "256", "--sessions", "2"], capsys)
    assert data["workload"]["sessions"] == 2 and data["step_cost"]["n_steps"] == 300


@pytest.mark.parametrize("args,message", [
    (["--steps", "/nonexistent/steps.jsonl", *FLAGS], "step trace not found: /nonexistent/steps.jsonl"),
    (["--from", "/nonexistent/run"], "run directory not found: /nonexistent/run"),
    (["--steps", "{trace}"], "no workload source"),
    ([*FLAGS], "no step-cost source"),
    (["--steps", "{trace}", *FLAGS, "--budgets", "0,256"], "--budgets must be positive integers, got '0,256'"),
    (["--steps", "{trace}", *FLAGS, "--budgets", "big"], "--budgets must be comma-separated integers"),
    (["--steps", "{trace}", *FLAGS, "--itl-slo", "-1"], "argument --itl-slo: must be > 0, got '-1'"),
    (["--steps", "{trace}", *FLAGS, "--request-overhead", "-0.1"], "--request-overhead: must be >= 0"),
    (["--steps", "{trace}", *FLAGS, "--headroom", "1"], "argument --headroom: must be in [0, 1), got '1'"),
    (["--steps", "{trace}", *FLAGS, "--headroom", "lots"], "argument --headroom: expected a fraction, got 'lots'"),
    (["--gpu", "H100-SXM", *FLAGS], "needs both --gpu and --roofline-model"),
    (["--nsys", "/nonexistent/x.sqlite", *FLAGS], "nsys export not found: /nonexistent/x.sqlite"),
    (["--steps", "{trace}", "--db", "/nonexistent/store.db"], "/nonexistent/store.db"),
    (["--steps", "{trace}", "--db", "/nonexistent/store.db", "--since", "soon"], "--since 'soon' is neither a duration"),
    (["--steps", "{trace}", "--sessions", "-2", "--prompt-tokens", "8", "--output-tokens", "8"], "must be >= 0"),
])
def test_bad_inputs_are_one_line_exit_2(trace, capsys, args, message):
    args = [a.replace("{trace}", str(trace)) for a in args]
    try:
        rc = main(["whatif", *args])
    except SystemExit as exc:      # argparse-level errors exit from the parser
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("stallscope: error:") and err.count("\n") == 1
    assert message in err


def test_bad_run_directory_contents(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["whatif", "--from", str(tmp_path / "empty")]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    arm = tmp_path / "arm"
    arm.mkdir()
    (arm / "steps.jsonl").write_text('{"start_ns": 1}\n')
    assert main(["whatif", "--from", str(arm)]) == 2
    assert "steps.jsonl:1: field `end_ns` missing" in capsys.readouterr().err
    synthetic_trace(arm / "steps.jsonl")
    (arm / "loadgen.json").write_text('{"requests": {}}')
    assert main(["whatif", "--from", str(arm)]) == 2
    assert "not a loadgen result (no `spec` object)" in capsys.readouterr().err
    (arm / "loadgen.json").write_text("{oops")
    assert main(["whatif", "--from", str(arm)]) == 2
    assert "loadgen.json: not JSON" in capsys.readouterr().err


def test_store_source_gives_an_open_loop_workload_from_the_histograms(trace, tmp_path, capsys):
    from expo_frames import exposition

    scrapes = tmp_path / "scrapes.jsonl"
    before = exposition([0] * 12, [0] * 12)
    after = exposition([0, 0, 0, 0, 0, 30, 30, 30, 30, 30, 40, 40], [0, 0, 0, 0, 0, 0, 0, 40, 40, 40, 40, 40])
    scrapes.write_text("".join(json.dumps({"ts": 1_700_000_000.0 + 60 * i, "target": t, "text": text}) + "\n"
                               for t in ("a", "b") for i, text in enumerate((before, after))))
    db = tmp_path / "store.db"
    assert main(["collect", "--import", str(scrapes), "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["whatif", "--db", str(db), "--steps", str(trace)]) == 2
    assert "several targets (a, b); pick one with --target" in capsys.readouterr().err
    data = run_json(["--db", str(db), "--target", "b", "--steps", str(trace), "--budgets", "256", "--duration", "20"],
                    capsys)
    w = data["workload"]
    assert w["rate_hz"] == pytest.approx(40 / 60) and w["sessions"] == 0 and w["duration_s"] == 20
    assert w["prompt_tokens_mean"] == pytest.approx(0.75 * 35.5 + 0.25 * 1500.5)
    assert "(target b)" in w["source"] and data["predictions"][0]["num_requests"] > 0


@pytest.mark.slow
def test_prometheus_source(trace, tmp_path, capsys):
    """A real Prometheus (backfilled with two scrapes of the length histograms) feeds the workload."""
    import time

    from expo_frames import to_openmetrics
    from promserver import PrometheusServer, backfill_openmetrics
    from expo_frames import exposition, samples_frame

    t0 = (int(time.time()) // 3600 - 2) * 3600
    after = exposition([0, 0, 0, 0, 0, 30, 30, 30, 30, 30, 40, 40], [0, 0, 0, 0, 0, 0, 0, 40, 40, 40, 40, 40])
    frame = samples_frame([(t0, exposition([0] * 12, [0] * 12)), (t0 + 60, after)])
    storage = tmp_path / "tsdb"
    backfill_openmetrics(to_openmetrics(frame), storage, tmp_path)
    with PrometheusServer(tmp_path, storage=storage) as prom:
        data = run_json(["--prometheus", prom.url, "--since", str(t0 * 10**9), "--until", str((t0 + 60) * 10**9),
                         "--steps", str(trace), "--budgets", "256", "--duration", "10"], capsys)
    w = data["workload"]
    assert w["rate_hz"] == pytest.approx(40 / 60) and w["sessions"] == 0
    assert w["prompt_tokens_mean"] == pytest.approx(0.75 * 35.5 + 0.25 * 1500.5)
    assert data["predictions"][0]["num_requests"] > 0


def test_nsys_steps_fit_the_step_cost(capsys):
    from conftest import ROOT
    from nsys_cases import nsys_sample

    export = ROOT / "sample_traces" / "starvation.sqlite"
    data = run_json(["--nsys", str(export), *FLAGS, "--budgets", "256,1024"], capsys)
    cost = data["step_cost"]
    assert cost["source"] == str(export) and cost["n_steps"] >= 8 and cost["coef_s"].get("prefill_tokens", 0) > 0
    assert "kv_tokens_read" not in cost["coef_s"]   # nsys steps carry no per-request detail
    plain = nsys_sample("torch_tiny_rtx3080_nsys2026.1.1.sqlite")
    assert main(["whatif", "--nsys", str(plain), *FLAGS]) == 2
    assert "carry no token counts" in capsys.readouterr().err


def test_intake_delays_measure_send_to_first_schedule(tmp_path):
    """A simulated run with a 50 ms intake: its trace and its sends give delays of 50 ms plus at most the
    remainder of the step in flight (10 ms steps)."""
    import numpy as np

    from stallscope.analyzers.step_cost import StepCostModel
    from stallscope.analyzers.whatif import simulate
    from stallscope.analyzers.workload import LengthDist, Workload
    from stallscope.analyzers.workload import intake_delays
    from stallscope.collectors.run_dir import RunDir

    w = Workload(LengthDist.fixed(16), LengthDist.fixed(4), sessions=2, duration_s=1.0)
    res = simulate(w, StepCostModel(intercept_s=0.010), max_num_batched_tokens=64, record_steps=True,
                   request_overhead_s=0.05)
    t0 = 1_700_000_000
    steps = [{**s, "start_ns": s["start_ns"] + t0 * 10**9, "end_ns": s["end_ns"] + t0 * 10**9,
              "arrival_ns": {rid: ns + t0 * 10**9 for rid, ns in s["arrival_ns"].items()}} for s in res.steps]
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps({k: v for k, v in s.items() if k != "arrival_ns"}) + "\n"
                                                  for s in steps))
    spec = {**loadgen_result()["spec"], "long_prompt_tokens": 1000, "duration_s": 1.0}
    records = [{"kind": "short", "start_ts": t0 + r.arrival_s, "max_tokens": 4} for r in res.requests]
    (tmp_path / "loadgen.json").write_text(json.dumps({"spec": spec, "records": records}))
    d = intake_delays((arm := RunDir.open(tmp_path).arms[0]).steps(), arm.loadgen())
    assert len(d) == len(res.requests) and np.all(d >= 0.05 - 1e-6) and np.all(d <= 0.06 + 1e-6)
    # with the engine's receipt times in the trace (`arrival_ns`, which the simulation records as the send
    # + the 50 ms intake), the step in flight is not counted
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    d = intake_delays(RunDir.open(tmp_path).arms[0].steps(), arm.loadgen())
    assert len(d) == len(res.requests) and np.allclose(d, 0.05, atol=1e-6)
