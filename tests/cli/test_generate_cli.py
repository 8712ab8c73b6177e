"""`stallscope generate` through the installed console script: output, determinism, and bad input."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from stallscope.refserver.config import PRESETS
from stallscope.refserver.weights import init_weights, save_npz

PROMPT_300 = ("Decode starvation: one long prompt's prefill holds the accelerator while every running "
              "request waits. Chunked prefill splits that prompt across steps so decodes keep flowing. ") * 2
PROMPT_300 = PROMPT_300[:300]


def stallscope(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("stallscope")
    assert exe, "the stallscope console script is not installed (pip install -e .)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


def test_generate_prints_text():
    r = stallscope("generate", "--model", "tiny", "--prompt", "hello", "--max-tokens", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("\n") and len(r.stdout) >= 2 and r.stderr == ""


@pytest.mark.slow
def test_greedy_token_ids_identical_across_budgets_and_chunking(tmp_path):
    assert len(PROMPT_300.encode()) == 300
    seen = {}
    for budget in ("16", "64", "4096"):
        for chunking in ([], ["--no-enable-chunked-prefill"]):
            trace = tmp_path / f"steps-{budget}-{bool(chunking)}.jsonl"
            r = stallscope("generate", "--model", "tiny", "--prompt", PROMPT_300, "--max-tokens", "12",
                           "--kv-cache-dtype", "float32", "--max-num-batched-tokens", budget, "--json",
                           "--step-trace", str(trace), *chunking)
            assert r.returncode == 0, r.stderr
            result = json.loads(r.stdout)
            steps = [json.loads(line) for line in trace.read_text().splitlines()]
            assert len(steps) == result["steps"]
            assert max(s["num_prefill_tokens"] for s in steps) == (min(int(budget), 300) if not chunking else 300)
            seen[(budget, bool(chunking))] = result["token_ids"]
    first = next(iter(seen.values()))
    assert len(first) == 12
    assert all(ids == first for ids in seen.values()), seen


def test_temperature_sampling_is_seeded():
    args = ("generate", "--prompt", "abc", "--max-tokens", "16", "--temperature", "1.0", "--top-p", "0.9",
            "--ignore-eos", "--json")
    a, b = stallscope(*args, "--seed", "1"), stallscope(*args, "--seed", "1")
    assert a.returncode == 0 and json.loads(a.stdout)["token_ids"] == json.loads(b.stdout)["token_ids"]


@pytest.fixture(scope="module")
def wrong_npz(tmp_path_factory):
    w = init_weights(PRESETS["tiny"])
    w["embed_tokens"] = np.zeros((10, 3), dtype=np.float32)
    path = tmp_path_factory.mktemp("w") / "wrong.npz"
    save_npz(path, w)
    return str(path)


@pytest.mark.parametrize("args,message", [
    (["--prompt", ""], "empty prompt"),
    (["--prompt", "x" * 40, "--max-model-len", "32"], "40 tokens; --max-model-len 32"),
    (["--prompt", "hi", "--max-tokens", "0"], "max_tokens must be a positive integer, got 0"),
    (["--prompt", "hi", "--max-num-batched-tokens", "8", "--block-size", "16"],
     "--max-num-batched-tokens 8 is smaller than --block-size 16"),
    (["--prompt", "hi", "--weights", "WRONG"], "'embed_tokens' has shape (10, 3), model 'tiny' needs (264, 256)"),
    (["--prompt", "hi", "--weights", "/nonexistent.npz"], "does not exist"),
    (["--prompt", "hi", "--kv-cache-dtype", "int3"], "unknown --kv-cache-dtype 'int3'"),
    (["--prompt", "hi", "--step-trace", "/nonexistent-dir/steps.jsonl"], "cannot write step trace"),
    (["--prompt", "hi", "--top-p", "1.5"], "top_p must be in (0, 1], got 1.5"),
    (["--prompt", "hi", "--blas-threads", "0"], "--blas-threads must be a positive integer, got 0"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, wrong_npz):
    args = [wrong_npz if a == "WRONG" else a for a in args]
    r = stallscope("generate", "--model", "tiny", *args)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("stallscope: error: ") and message in lines[0], r.stderr
