"""`stallscope refserver` as a user runs it: bad flags are one line + exit 2; a real process serves and stops."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest
import requests

from stallscope.collectors.vllm_log import read_iterations, read_server_config
from stallscope.cli import main
from stallscope.refserver.server_thread import free_port


@pytest.mark.parametrize("argv,message", [
    (["--kv-cache-dtype", "int3"], "unknown --kv-cache-dtype 'int3'"),
    (["--model", "huge"], "unknown model 'huge'"),
    (["--max-num-batched-tokens", "8"], "--max-num-batched-tokens 8 is smaller than --block-size 16"),
    (["--port", "0"], "--port must be in 1..65535"),
    (["--max-waiting", "0"], "--max-waiting must be at least 1"),
    (["--kv-cache-mb", "0.001"], "holds fewer than 2 blocks"),
    (["--kv-cache-mb", "1.5"], "--kv-cache-mb 1.5 leaves 95 usable blocks (1520 tokens) but one request of "
                               "--max-model-len 2048 needs 128; raise --kv-cache-mb to 2.02 or set --max-model-len 1520"),
    (["--kv-cache-mb", "8", "--model", "small"], "one request of --max-model-len 4096 needs 256; raise --kv-cache-mb to 14.06"),
    (["--blas-threads", "-1"], "--blas-threads must be a positive integer, got -1"),
])
def test_bad_flags_are_one_line_exit_2(capsys, argv, message):
    assert main(["refserver", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stallscope: error:") and err.count("\n") == 1 and message in err


def test_port_in_use_is_exit_2(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["refserver", "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_serves_then_stops_on_sigint_with_step_trace(tmp_path):
    port, trace = free_port(), tmp_path / "steps.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "stallscope.cli", "refserver", "--port", str(port),
                             "--served-model-name", "ref", "--max-model-len", "256", "--step-trace", str(trace),
                             "--enable-logging-iteration-details"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "server did not come up"
            time.sleep(0.1)
        r = requests.post(f"http://127.0.0.1:{port}/v1/completions",
                          json={"model": "ref", "prompt": "hi", "max_tokens": 3, "ignore_eos": True}, timeout=30)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    finally:
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, out
    assert f"on http://127.0.0.1:{port}" in out
    log = tmp_path / "server.log"
    log.write_text(out)
    stated = read_server_config(log)   # vLLM's startup lines, as `analyze --server-log` reads them
    assert (stated.enable_chunked_prefill, stated.max_num_batched_tokens) == (True, 2048)
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(steps) == 3 and steps[0]["num_prefill_tokens"] == 2 and steps[-1]["num_decode_tokens"] == 1
    logged = read_iterations(log)   # one vLLM iteration-details line per step, as `--server-log` reads them
    assert logged["num_prefill_tokens"].tolist() == [2, 0, 0] and logged["num_decode_tokens"].tolist() == [0, 1, 1]
