"""Issue 15's "Done when": a shared-prefix load with prefix caching on is not flagged as decode starvation
(its step trace has no such gap), the same load with caching off is (its trace has), and the cost per
prompt token the recommendation uses is near the step trace's fit (slow: two reduced-length runs of
benchmarks/prefix_cache.py, recorded once for the module)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=[None, 2048], ids=["prefill-first", "v1-chunked-2048"])
def result(request, tmp_path_factory):
    """Both arms under the legacy prefill-first policy (chunked prefill off), and the way vLLM V1 schedules
    (chunked prefill on, a budget above the prompt: a cold prompt is one step beside the decodes)."""
    tmp = tmp_path_factory.mktemp("prefix-cache")
    out = tmp / "result.json"
    budget = [] if request.param is None else ["--chunked-budget", str(request.param)]
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefix_cache.py"), "--load-s", "15",
                          "--collect-tail-s", "3", "--out", str(tmp / "runs"), "--json", str(out), *budget],
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


def test_the_recommendations_cost_per_token_is_near_the_step_trace_fit(result):
    """The metrics' cost per computed token (prefill time less one decode step per request) is within a factor
    of 2 of the fit's whole prefill cost per computed token with caching off under both policies, and within
    2.5 with caching on where the decodes share the prefill's step (V1). Counting cached tokens as computed would
    read it several times low, which the lower bound catches. With caching on and the 1,500-token prefix it read
    high: many requests with cached prompts share each long prompt's step, and `request_prefill_time_seconds`
    counts that step once per request (docs/accuracy.md, "What `request_prefill_time_seconds` counts"); since
    the fit declines only on collinear intervals (02513eb) it read 1.37-2.24 on 15 s of load (2026-12-04), and
    0.90-0.95 with the 1,900-token prefix (three runs of `benchmarks/prefix_cache.py --load-s 15
    --collect-tail-s 3 --chunked-budget 2048`, 2026-12-05). Under prefill-first, caching on read 0.68 at 40 s
    with the old prefix and 0.86-0.93 at 15 s with the new one (a prefill-only step holds no decode work for
    the decode step taken out)."""
    off, on = result["arms"]["caching-off"], result["arms"]["caching-on"]
    assert 0.5 < off["ratio_with_attention"] < 2.0, off
    if "--enable-chunked-prefill" in result["server"]:
        assert 0.5 < on["ratio_with_attention"] < 2.5, on
    assert result["met"]["cost_within_25pct_both"] == (result["arms"]["caching-on"]["within_25pct"] and off["within_25pct"])
