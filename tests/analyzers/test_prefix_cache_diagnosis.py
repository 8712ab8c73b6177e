"""Issue 15's "Done when": a shared-prefix load with prefix caching on is not flagged as decode starvation
(its step trace has no such gap), the same load with caching off is (its trace has), and the cost per
prompt token the recommendation uses agrees with the step trace's fit within 25 % on both (slow: two
reduced-length runs of benchmarks/prefix_cache.py, recorded once for the module)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prefix-cache")
    out = tmp / "result.json"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefix_cache.py"), "--load-s", "15",
                          "--collect-tail-s", "3", "--out", str(tmp / "runs"), "--json", str(out)],
                         cwd=ROOT, timeout=300, capture_output=True, text=True)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["all_met"] == (res.returncode == 0)
    return doc


def test_caching_on_is_not_starvation_and_caching_off_is(result):
    on, off = result["arms"]["caching-on"], result["arms"]["caching-off"]
    assert on["prompt_tokens_cached"] > 0 and off["prompt_tokens_cached"] == 0
    assert on["true_starvation_episodes"] == 0 and not on["decode_starvation"], on
    assert off["true_starvation_episodes"] >= 1 and off["decode_starvation"], off
    assert on["prompt_tokens_source"] == off["prompt_tokens_source"] == "local_compute"


@pytest.mark.xfail(strict=True, reason="measured 2026-12-02 (docs/accuracy.md, 'Prefix caching'): the metrics' "
                   "prefill time per computed token reads 1.7-2.5x the fit's per-prefill-token coefficient")
def test_the_recommendations_cost_per_token_agrees_with_the_step_trace_fit(result):
    for arm in result["arms"].values():
        assert arm["recommendation_s_per_token"] == pytest.approx(arm["fit_s_per_prefill_token"], rel=0.25), arm
