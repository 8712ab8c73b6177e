"""`stallscope collect` as a real subprocess: signals, kill -9, NVML without a driver, bad input, import."""

from __future__ import annotations

import ctypes.util
import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest

from conftest import FIXTURES
from misbehaving_server import MetricsServer, wait_until
from stallscope.cli import main
from stallscope.collectors import loader, store

DCGM = FIXTURES / "dcgm_samples"  # real captures, each with its source on its first line

TEXT = (FIXTURES / "vllm_metrics" / "v0_33_0_custom_itl_buckets.txt").read_text()
CLI = [sys.executable, "-m", "stallscope.cli", "collect"]


def count_scrapes(db) -> int:
    if not os.path.exists(db):
        return 0
    try:
        con = store.connect_ro(db)
    except Exception:  # noqa: BLE001 - not created yet
        return 0
    try:
        return con.execute("SELECT count(*) FROM scrapes").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def start(db, url, *extra):
    return subprocess.Popen([*CLI, "--target", f"vllm={url}", "--interval", "0.2s", "--timeout", "5s", "--db", str(db), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_flushes_and_exits_0_and_store_is_readable_while_written(tmp_path, sig):
    db = tmp_path / "c.db"
    with MetricsServer(lambda n: ("ok", TEXT)) as srv:
        proc = start(db, srv.url)
        try:
            wait_until(lambda: count_scrapes(db) >= 3, what="3 scrapes in the store")
            seen = count_scrapes(db)
            # the loader reads the live store while the collector keeps writing
            frames = loader.load(db)
            assert len(frames["vllm"]["samples"]) >= 3 * 299
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=20)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    final = count_scrapes(db)
    assert final >= seen and final == srv.requests
    assert f"stored {final} scrapes (0 failed)" in err


def test_kill_9_leaves_a_readable_store_losing_at_most_the_scrape_in_flight(tmp_path):
    db = tmp_path / "k.db"
    with MetricsServer(lambda n: ("ok", TEXT)) as srv:
        proc = start(db, srv.url)
        try:
            wait_until(lambda: count_scrapes(db) >= 5, what="5 scrapes")
            answered_before = srv.requests
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            proc.kill()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    n = count_scrapes(db)
    assert n >= answered_before - 1
    frames = loader.load(db)
    s = frames["vllm"]["samples"]
    assert s.ts.nunique() == n and len(s) == n * 299  # every stored scrape is complete


def test_nvml_without_a_driver_is_one_line_and_exit_2(tmp_path):
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has an NVIDIA driver: the no-driver path cannot be shown here")
    r = subprocess.run([*CLI, "--nvml", "--db", str(tmp_path / "n.db"), "--duration", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["stallscope: error: NVML not available: NVML Shared Library Not Found"
                                               " (NVML comes with the NVIDIA driver; without a GPU, scrape dcgm-exporter with --target instead of --nvml)"]
    assert not (tmp_path / "n.db").exists()


@pytest.mark.parametrize("args,needle", [
    (["--target", "novalue"], "expected NAME=URL"),
    (["--target", "v=ftp://127.0.0.1/metrics"], "URL must start with http://"),
    (["--target", "v=http://127.0.0.1:1/m", "--target", "v=http://127.0.0.1:2/m"], "used twice"),
    (["--target", "v=http://127.0.0.1:1/m", "--interval", "0s"], "--interval must be positive"),
    (["--target", "v=http://127.0.0.1:1/m", "--interval", "fast"], "--interval: bad duration 'fast'"),
    (["--target", "v=http://127.0.0.1:1/m", "--retries", "-1"], "--retries must be 0 or more"),
    ([], "nothing to collect"),
    (["--target", "v=http://127.0.0.1:1/m", "--db", "/nonexistent/dir/x.db", "--duration", "1"], "cannot open store"),
    (["--import", "/nonexistent/run"], "import source /nonexistent/run does not exist"),
    (["--import", "x.jsonl", "--target", "v=http://127.0.0.1:1/m"], "cannot be combined"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, needle):
    assert main(["collect", "--db", str(tmp_path / "b.db"), *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stallscope: error: ") and needle in lines[0], lines


def test_db_that_is_not_a_store_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "notes.db"
    bad.write_text("not sqlite at all " * 100)
    assert main(["collect", "--db", str(bad), "--target", "v=http://127.0.0.1:1/m", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert "is not a stallscope store" in err and len(err.splitlines()) == 1
    assert bad.read_text().startswith("not sqlite at all")  # nothing overwritten


def write_run(root):
    """A repro-style run directory: two arms, each with a vLLM and a DCGM target, plus one bad line."""
    dcgm_text = (DCGM / "t4_under_load_ericsson_driver590.txt").read_text()
    for arm, running in (("baseline", 8), ("chunked", 3)):
        (root / arm).mkdir(parents=True)
        lines = []
        for i in range(3):
            text = TEXT.replace('vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.0',
                                f'vllm:num_requests_running{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {running + i}.0')
            lines.append(json.dumps({"ts": 1_700_000_000 + i, "target": "vllm", "text": text}))
            lines.append(json.dumps({"ts": 1_700_000_000 + i, "target": "dcgm", "text": dcgm_text}))
        lines.append("{not json")
        lines.append(json.dumps({"ts": 1_700_000_009, "target": "vllm", "text": "<html>oops</html>"}))
        (root / arm / "scrapes.jsonl").write_text("\n".join(lines) + "\n")


def test_import_run_directory_matches_loading_it_directly(tmp_path, capsys):
    run = tmp_path / "run"
    write_run(run)
    db = tmp_path / "i.db"
    assert main(["collect", "--import", str(run), "--db", str(db)]) == 0
    assert "imported 14 scrapes (2 unparseable, 2 bad lines skipped)" in capsys.readouterr().err
    stored, direct = loader.load(db), loader.load(run)
    assert sorted(stored) == sorted(direct) == ["baseline/dcgm", "baseline/vllm", "chunked/dcgm", "chunked/vllm"]
    for name in direct:
        for kind in ("samples", "gpu"):
            a = stored[name][kind]
            b = direct[name][kind]
            a = a[~a.metric.isin(["up", "scrape_duration_seconds"])].reset_index(drop=True)
            assert len(a) == len(b), (name, kind)
            assert a.value.tolist() == b.value.tolist() and a.ts.tolist() == b.ts.tolist()
    s = stored["chunked/vllm"]["samples"]
    assert s[s.metric == "vllm:num_requests_running"].value.tolist() == [3, 4, 5]
    assert s[s.metric == "up"].value.tolist() == [1, 1, 1, 0]
    g = stored["baseline/dcgm"]["gpu"]
    assert g[g.metric == "gpu_util"].value.tolist() == [0.91] * 3
    one_arm = loader.load(run / "chunked")
    assert sorted(one_arm) == ["dcgm", "vllm"]


def test_import_single_jsonl_file(tmp_path, capsys):
    run = tmp_path / "run"
    write_run(run)
    db = tmp_path / "j.db"
    assert main(["collect", "--import", str(run / "baseline" / "scrapes.jsonl"), "--db", str(db)]) == 0
    assert "imported 7 scrapes" in capsys.readouterr().err
    assert sorted(loader.load(db)) == ["dcgm", "vllm"]


def test_status_line_is_shown_on_a_terminal(tmp_path):
    import pty

    with MetricsServer(lambda n: ("ok", TEXT)) as srv:
        pid, fd = pty.fork()
        if pid == 0:  # child: stderr is the pty, as in an interactive shell
            os.execv(sys.executable, [*CLI, "--target", f"vllm={srv.url}", "--interval", "0.2s",
                                      "--timeout", "5s", "--db", str(tmp_path / "t.db"), "--duration", "2"])
        out = b""
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    assert os.WEXITSTATUS(status) == 0, text
    assert "vllm: " in text and " scrapes, last ok " in text and "s ago, 0 errors" in text
