"""`stallscope analyze` on run directories, stores and a real Prometheus: output shape, exit codes, bad input."""

import json
import time

import pytest

from conftest import FIXTURES
from expo_frames import iteration_log, simulate_kv_pressure, simulate_starvation, to_openmetrics, write_arm
from stallscope.cli import main

NS = 10**9


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    for arm, chunk in (("off", None), ("on", 128)):
        texts = []
        _, steps = simulate_starvation(40, chunk=chunk, texts=texts)
        write_arm(root / "starvation" / arm, texts, steps)
    texts = []
    simulate_kv_pressure(120, texts=texts)
    write_arm(root / "kv" / "auto", texts)
    return root


def _json(capsys, argv):
    code = main(argv + ["--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_off_arm_is_flagged_and_on_arm_is_not(run_dir, capsys):
    code, out = _json(capsys, ["analyze", str(run_dir / "starvation")])
    assert code == 0  # the finding is info (the P99 met the SLO), under the default --fail-on critical
    assert set(out) >= {"findings", "quantiles", "sources"}
    assert set(out["sources"]) == {"off/vllm", "on/vllm"} and out["sources"]["off/vllm"]["steps"] > 1000
    kinds = {(f["target"], f["kind"]) for f in out["findings"]}
    assert kinds == {("off/vllm", "decode_starvation")}
    f = out["findings"][0]
    assert set(f) >= {"kind", "severity", "start", "end", "target", "evidence", "explanation", "recommendation"}
    assert f["start"].endswith("Z") and f["evidence"]["offending_steps"][0]["num_prefill_tokens"] == 2048
    assert f["severity"] == "info" and "Severity info: the ITL P99 over the SLO's reference window met" in f["explanation"]
    assert f["evidence"]["episode"]["reference_itl_share_above_slo"] <= 0.01
    assert f["evidence"]["episode"]["reference_stream_time_above_slo"] > 0.05
    assert "--max-num-batched-tokens 128" in f["recommendation"]
    q = out["quantiles"]["on/vllm"]["itl_p99"]
    assert q["bucket_s"] == [0.15, 0.2] and q["text"] == "150 ms-200 ms"
    # the whole-run P99 of the off arm hides its stalls (one ITL sample per output); the time share does not
    assert out["quantiles"]["off/vllm"]["itl_p99"]["bucket_s"][1] <= 0.05
    assert out["quantiles"]["off/vllm"]["itl_time_above_slo"]["share"] > 0.05
    assert out["quantiles"]["on/vllm"]["itl_time_above_slo"]["share"] == 0.0
    code, out = _json(capsys, ["analyze", str(run_dir / "starvation" / "on")])
    assert code == 0 and out["findings"] == []


def test_kv_pressure_arm_and_fail_on(run_dir, capsys):
    code, out = _json(capsys, ["analyze", str(run_dir / "kv" / "auto")])
    assert code == 1 and [f["kind"] for f in out["findings"]] == ["kv_pressure"]
    assert out["findings"][0]["evidence"]["kv_capacity_tokens_fp8"] == 32000
    samples_only = ["analyze", str(run_dir / "starvation" / "off"), "--itl-slo", "10"]
    assert main(samples_only + ["--format", "json"]) == 0  # nothing stalls 10 s
    capsys.readouterr()


def test_text_output_and_several_sources_on_one_timeline(run_dir, tmp_path, capsys):
    db = tmp_path / "s.db"
    assert main(["collect", "--db", str(db), "--import", str(run_dir / "kv" / "auto"), "--quiet"]) == 0
    capsys.readouterr()
    code = main(["analyze", str(run_dir / "starvation" / "off"), "--db", str(db), "--fail-on", "info"])
    text = capsys.readouterr().out
    assert code == 1
    assert "off/vllm" in text and "s.db/" in text
    assert "decode_starvation" in text and "kv_pressure" in text


@pytest.mark.parametrize("argv,message", [
    (["/nonexistent/run"], "does not exist"),
    (["--db", "/nonexistent.db"], "does not exist"),
    (["--prometheus", "localhost:9090"], "not an http"),
    (["RUN", "--since", "2025-11-29T10:00:00", "--until", "2025-11-29T09:00:00"], "before --since"),
    (["RUN", "--window", "0s"], "--window must be positive"),
    (["RUN", "--itl-slo", "-1"], "--itl-slo must be positive"),
    (["RUN", "--html", "/nonexistent/dir/r.html"], "cannot write --html"),
    (["RUN", "--gpu", "Z80"], "unknown GPU 'Z80'"),
    (["RUN", "--steps", "/nonexistent/steps.jsonl"], "step trace not found"),
    (["RUN", "--since", "yesterday"], "is not a time"),
    (["--prometheus", "http://127.0.0.1:9", "--selector", 'pod=~"a.*"'], "only equality matchers"),
])
def test_bad_input_is_one_line_and_exit_2(run_dir, capsys, argv, message):
    argv = [str(run_dir / "starvation" / "on") if a == "RUN" else a for a in argv]
    assert main(["analyze", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stallscope: error:") and message in err and err.count("\n") == 1


def test_a_server_log_states_the_configuration_and_flags_win_over_it(run_dir, capsys):
    log = str(FIXTURES / "vllm_logs" / "v0_33_0_nochunk.log")
    off = str(run_dir / "starvation" / "off")
    code, out = _json(capsys, ["analyze", off, "--server-log", log])
    f = next(f for f in out["findings"] if f["kind"] == "decode_starvation")
    assert f["evidence"]["config_source"] == "server log" and f["evidence"]["chunked_prefill"] is False
    assert f"chunked prefill off (server log: {log}:6)" in f["explanation"]
    code, out = _json(capsys, ["analyze", off, "--server-log", log, "--no-enable-chunked-prefill"])
    assert {f["evidence"]["config_source"] for f in out["findings"]} == {"flags"}


@pytest.mark.parametrize("name,message", [("vllm_logs/absent.log", "cannot read it"),
                                          ("vllm_metrics/v0_10_2.txt", "no vLLM startup line")])
def test_a_bad_server_log_is_one_line_and_exit_2(run_dir, capsys, name, message):
    assert main(["analyze", str(run_dir / "starvation" / "off"), "--server-log",
                 str(FIXTURES / name)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stallscope: error: --server-log") and message in err and err.count("\n") == 1


def test_unknown_threshold_key_is_named(run_dir, tmp_path, capsys):
    bad = tmp_path / "t.yaml"
    bad.write_text("itl_slo_seconds: 0.1\n")
    assert main(["analyze", str(run_dir / "starvation" / "on"), "--thresholds", str(bad)]) == 2
    assert "unknown threshold 'itl_slo_seconds'" in capsys.readouterr().err


@pytest.mark.slow
def test_prometheus_source_gives_the_same_diagnosis(tmp_path, capsys):
    from promserver import PrometheusServer, backfill_openmetrics

    t0 = (int(time.time()) // 3600 - 2) * 3600 * NS
    samples, _ = simulate_starvation(40, t0_ns=t0)
    storage = tmp_path / "tsdb"
    backfill_openmetrics(to_openmetrics(samples), storage, tmp_path)
    with PrometheusServer(tmp_path, storage=storage) as prom:
        code, out = _json(capsys, ["analyze", "--prometheus", prom.url, "--since", str(t0),
                                   "--until", str(t0 + 40 * NS), "--resolution", "1s",
                                   "--selector", 'model_name="m"', "--fail-on", "info"])
    assert code == 1
    assert {f["kind"] for f in out["findings"]} == {"decode_starvation"}
    # long prompts at 5, 15, 25, 35 s: every stall is inside a flagged window
    starts = [f["start"] for f in out["findings"]]
    assert len(starts) in (1, 2, 3, 4) and sum(f["evidence"]["episode"]["long_prefills"] > 0 for f in out["findings"])
    assert out["sources"] and all(v["kind"] == "prometheus" for v in out["sources"].values())


def _dcgm_texts(t0_ns: int, seconds: int, dram: float, tensor: float) -> list:
    """dcgm-exporter expositions (its metric names and labels) of one H100, one per second."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    reg = CollectorRegistry()
    labels = ["gpu", "UUID", "device", "modelName", "Hostname"]
    values = dict(gpu="0", UUID="GPU-22dbdd79", device="nvidia0", modelName="NVIDIA H100 80GB HBM3", Hostname="h1")
    d = Gauge("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active.", labels,
              registry=reg).labels(**values)
    t = Gauge("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", labels,
              registry=reg).labels(**values)
    out = []
    for i in range(seconds):
        d.set(dram)
        t.set(tensor)
        out.append((t0_ns + i * NS, generate_latest(reg).decode()))
    return out


def test_gpu_data_gives_memory_bound_decode_and_the_roofline(tmp_path, capsys):
    import json as _json

    from expo_frames import T0_NS

    texts = []
    simulate_starvation(20, long_tokens=100, texts=texts)  # decode-dominated: short prompts only
    arm = tmp_path / "run" / "decode"
    write_arm(arm, texts)
    with open(arm / "scrapes.jsonl", "a") as fh:
        for ts, text in _dcgm_texts(T0_NS, 20, dram=0.85, tensor=0.08):
            fh.write(_json.dumps({"ts": ts / 1e9, "target": "dcgm", "text": text}) + "\n")
    html = tmp_path / "r.html"
    code = main(["analyze", str(arm), "--format", "json", "--html", str(html)])
    out = _json.loads(capsys.readouterr().out)
    assert code == 0  # info only: below the default --fail-on critical
    mb = [f for f in out["findings"] if f["kind"] == "memory_bound_decode"]
    assert len(mb) == 1 and mb[0]["severity"] == "info" and mb[0]["target"] == "h1/gpu0"
    assert mb[0]["evidence"]["dram_active_mean"] == pytest.approx(0.85)
    assert "Roofline: H100-SXM" in html.read_text()
    assert main(["analyze", str(arm), "--format", "json", "--fail-on", "info"]) == 1
    capsys.readouterr()


def test_a_scrapes_file_or_a_store_says_nothing_about_the_what_if(run_dir, tmp_path, capsys, caplog):
    """Nothing was asked of the what-if, so neither a scrapes.jsonl nor a store warns that it has no run directory."""
    jsonl = run_dir / "kv" / "auto" / "scrapes.jsonl"
    db = tmp_path / "w.db"
    assert main(["collect", "--db", str(db), "--import", str(jsonl), "--quiet"]) == 0
    capsys.readouterr()
    for argv in ([str(jsonl)], ["--db", str(db)]):
        caplog.clear()
        assert main(["analyze", *argv, "--format", "json"]) in (0, 1)   # 1: the critical kv_pressure finding
        assert "kv_pressure" in capsys.readouterr().out
        assert [r.getMessage() for r in caplog.records if "what-if" in r.getMessage()] == []


def test_a_store_with_too_few_scrapes_for_a_window_says_how_many_it_needs(run_dir, tmp_path, capsys):
    lines = (run_dir / "kv" / "auto" / "scrapes.jsonl").read_text().splitlines()
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines[:3]) + "\n")               # 3 scrapes, 1 s apart
    db = tmp_path / "short.db"
    assert main(["collect", "--db", str(db), "--import", str(short), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["analyze", "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("stallscope: error: too few scrapes to diagnose: ")
    assert "has 3 scrapes, a window needs 5 (collect for longer, or scrape more often)" in err[-1]
    assert main(["analyze", "--db", str(db), "--window", "2s"]) in (0, 1)  # a 2 s window fits 3 scrapes


def test_a_server_logs_iteration_lines_are_its_steps(tmp_path, capsys):
    """A store without a step trace, with the server's `--enable-logging-iteration-details` log: the offending step
    and the step cost come from the log's lines (text format, times to the second; durations exact)."""
    texts = []
    _, steps = simulate_starvation(40, chunk=None, texts=texts)
    write_arm(tmp_path / "off", texts)                                   # metrics only
    log = tmp_path / "vllm.log"
    log.write_text(iteration_log(steps))
    code, out = _json(capsys, ["analyze", str(tmp_path / "off"), "--server-log", str(log),
                               "--no-enable-chunked-prefill"])
    assert out["sources"]["vllm"]["steps"] == len(steps)
    f = next(f for f in out["findings"] if f["kind"] == "decode_starvation")
    assert f["evidence"]["offending_steps"][0]["num_prefill_tokens"] == 2048
    assert f["evidence"]["prefill_s_per_token"] == pytest.approx(0.001, rel=1e-4)   # the simulation's own cost
    assert f["evidence"]["decode_step_s"] == pytest.approx(0.03, rel=1e-3)


def test_a_rotated_log_without_startup_lines_gives_its_steps_and_the_configuration_is_inferred(tmp_path, capsys,
                                                                                              caplog):
    """A log rotated past vLLM's startup lines still holds the steps: they are used, the configuration is inferred
    (with a warning); a log whose only iteration line is a dummy step is still one line and exit 2."""
    texts = []
    _, steps = simulate_starvation(40, chunk=None, texts=texts)
    write_arm(tmp_path / "off", texts)
    log = tmp_path / "rotated.log"
    log.write_text(iteration_log(steps))
    code, out = _json(capsys, ["analyze", str(tmp_path / "off"), "--server-log", str(log)])
    assert out["sources"]["vllm"]["steps"] == len(steps)
    f = next(f for f in out["findings"] if f["kind"] == "decode_starvation")
    assert f["evidence"]["config_source"] != "server log" and f["evidence"]["offending_steps"]
    assert "chunked prefill is inferred from the metrics, the log's steps are used" in caplog.text
    dummy = tmp_path / "dummy.log"
    dummy.write_text(iteration_log(steps).splitlines()[0].replace(" ms,", " ms (dummy),", 1) + "\n")
    assert main(["analyze", str(tmp_path / "off"), "--server-log", str(dummy)]) == 2
    err = capsys.readouterr().err
    assert "no vLLM startup line" in err and err.count("\n") == 1
