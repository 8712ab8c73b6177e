"""Episodes with one cause (issue 16): the configuration the explanation assumes, advice that never repeats the
budget in use, one finding per episode, the same budget alone and beside a sibling, and Nsight severity."""

import pytest

from expo_frames import simulate_starvation
from nsys_cases import SAMPLE_TRACES
from stallscope.analyzers import chunking as C
from stallscope.analyzers.advice import chunked_prefill_recommendation
from stallscope.analyzers.diagnose import diagnose
from stallscope.analyzers.nsys_report import build_report
from stallscope.collectors.nsight_sqlite import read_export


@pytest.fixture(scope="module")
def slow_chunks():
    """Chunked prefill at 128 tokens on a slow host: each chunk step is 30 ms + 128 x 2 ms = 286 ms (> 200 ms)."""
    return simulate_starvation(60, chunk=128, per_token_s=0.002)


@pytest.fixture(scope="module")
def unchunked():
    return simulate_starvation(60)


def _findings(samples, chunking=None):
    return diagnose([("", {"samples": samples, "chunking": chunking})]).findings


def test_slow_chunk_steps_with_chunking_known_on_are_one_itl_high_episode_never_starvation(slow_chunks):
    samples, _ = slow_chunks
    found = _findings(samples, C.from_flags(True, 128))
    assert {f.kind for f in found} == {"itl_high"}
    assert all(f.evidence["cause"] == "prefill_chunks" for f in found)
    assert all(f.evidence["config_source"] == "flags" and f.evidence["max_num_batched_tokens_in_use"] == 128
               for f in found)
    for f in found:
        assert "a step that computes a whole long prompt" not in f.explanation
        assert "Chunked prefill on, --max-num-batched-tokens 128 (flags)" in f.explanation
        # 30 ms + 64 x 2 ms = 158 ms fits a 200 ms SLO, so the advice is a smaller budget, never the 128 in use
        assert f.evidence["max_num_batched_tokens"] is None or f.evidence["max_num_batched_tokens"] < 128


def test_when_no_smaller_budget_fits_the_advice_names_the_levers_left():
    text, extra = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.15, prefill_s_per_token=0.002,
                                                 source="test", budget_in_use=64, running=16)
    assert extra["max_num_batched_tokens"] is None and extra["chunking_meets_slo"] is False
    assert "cannot meet the 200 ms ITL SLO" in text and "--max-num-seqs" in text
    assert "disaggregation" in text and "replicas" in text and "278 ms" in text    # 150 + 64 x 2
    # the budget in use is never the fix even when the cost model says it would fit
    text, extra = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.03, prefill_s_per_token=0.001,
                                                 source="test", budget_in_use=128, running=8)
    assert extra["max_num_batched_tokens"] is None and "already 128 tokens" in text
    text, extra = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.03, prefill_s_per_token=0.001,
                                                 source="test", budget_in_use=512, running=8)
    assert extra["max_num_batched_tokens"] == 128


def test_unchunked_run_is_starvation_with_chunking_off_in_the_explanation(unchunked):
    samples, _ = unchunked
    inferred = _findings(samples)
    assert [f.kind for f in inferred] and {f.kind for f in inferred} == {"decode_starvation"}
    assert all(f.evidence["config_source"] == "inferred from metrics" and f.evidence["chunked_prefill"] is False
               for f in inferred)
    assert "chunked prefill off (inferred from metrics" in inferred[0].explanation
    given = _findings(samples, C.from_flags(False, None))
    assert "chunked prefill off (flags)" in given[0].explanation
    # one finding per episode: each 2 s freeze is one finding, none contradicting another
    assert len(inferred) == len({(f.start_ns, f.end_ns) for f in inferred})


def test_the_budget_for_a_target_is_the_same_alone_and_beside_a_sibling(unchunked, slow_chunks):
    alone = _findings(unchunked[0])
    pair = diagnose([("off", {"samples": unchunked[0].assign(target="off")}),
                     ("on", {"samples": slow_chunks[0].assign(target="on")})]).findings
    beside = [f for f in pair if f.target == "off"]
    assert [f.recommendation for f in alone] == [f.recommendation for f in beside]
    assert [f.evidence.get("max_num_batched_tokens") for f in alone] == [
        f.evidence.get("max_num_batched_tokens") for f in beside]


def test_nsight_stalls_under_the_slo_are_info_and_above_it_are_not():
    trace = read_export(str(SAMPLE_TRACES / "chunked.sqlite"))
    under = build_report(trace, stall_factor=1.5)["findings"]      # ~77 ms chunk steps, 2.4x the decode step
    assert under and {f.severity for f in under} == {"info"}
    assert all(f.evidence["duration_ns"] < 200e6 and "within the 200.0 ms ITL SLO" in f.explanation for f in under)
    over = build_report(trace, stall_factor=1.5, itl_slo_ns=30_000_000)["findings"]
    assert {f.severity for f in over} == {"critical"}                # >= 2 x a 30 ms SLO


def _counter_frame(intervals):
    """Cumulative request prefill counters per 1 s scrape from (requests, tokens, seconds) increments."""
    import pandas as pd

    rows, t, n, p = [], 0.0, 0.0, 0.0
    for k, (dn, dp, dt) in enumerate([(0, 0, 0.0), *intervals]):
        n, p, t = n + dn, p + dp, t + dt
        for metric, v in (("vllm:request_prefill_time_seconds_sum", t), ("vllm:request_prefill_time_seconds_count", n),
                          ("vllm:request_prefill_kv_computed_tokens_sum", p)):
            rows.append({"ts": k * 10**9, "metric": metric, "value": v, "target": "", "labels": {}, "le": None})
    return pd.DataFrame(rows)


def test_prefill_cost_separates_the_per_request_part_from_the_per_token_cost():
    from stallscope.analyzers import prefill_cost

    a, c = 0.004, 2.3e-4      # 4 ms per request besides its tokens, 0.23 ms per computed token
    intervals = [(3, 96, 3 * a + 96 * c), (4, 128, 4 * a + 128 * c), (1, 1200, a + 1200 * c),
                 (2, 64, 2 * a + 64 * c), (3, 1296, 3 * a + 1296 * c)]
    fit = prefill_cost.fit(_counter_frame(intervals))
    assert fit["per_token_s"] == pytest.approx(c, rel=1e-6) and fit["per_request_s"] == pytest.approx(a, rel=1e-6)
    # a ratio of sums would blur them: (sum of seconds) / (sum of tokens) reads 8 % high here
    assert sum(i[2] for i in intervals) / sum(i[1] for i in intervals) == pytest.approx(1.081 * c, rel=0.001)
    # requests of one size cannot separate the two terms: the fit declines
    assert prefill_cost.fit(_counter_frame([(2, 3000, 0.7), (1, 1500, 0.35), (3, 4500, 1.05)])) is None


def test_the_live_dashboard_shows_a_stall_still_going_on():
    """The dashboard's findings are the same diagnosis: a store whose streams froze at its end shows the
    ongoing starvation on the Overview as soon as the frozen scrapes are loaded."""
    import pandas as pd

    from expo_frames import T0_NS, VllmMetrics
    from stallscope.core.config import load_thresholds
    from stallscope.dashboards import views

    m, frames = VllmMetrics(), []
    for i in range(40):
        m.running.set(6)
        if i < 30:
            m.generation.inc(100)
        frames.append(m.scrape(T0_NS + i * 10**9))
    samples = pd.concat(frames, ignore_index=True).assign(target="vllm")
    out = views.findings({"samples": samples}, load_thresholds())
    assert list(out["kind"]) == ["decode_starvation"]
    ev = out.iloc[0]["evidence"]
    assert ev["ongoing"] and ev["episode"]["nothing_moves_s"] >= 8 and out.iloc[0]["end_ns"] == T0_NS + 39 * 10**9


def test_prefill_interference_within_the_slo_is_info_and_a_missed_or_frozen_window_is_not():
    import numpy as np

    from stallscope.analyzers.episodes import _severity

    def st(missed_ref=(0, 0, 0), frozen=(0, 0, 0), ratio=(0.3, 0.4, 0.3)):
        z = np.zeros(3, dtype=bool)
        return {"missed": z, "interference": np.ones(3, dtype=bool), "missed_ref": np.array(missed_ref, dtype=bool),
                "frozen": np.array(frozen, dtype=bool), "ratio": np.array(ratio, dtype=float)}
    for cause in ("prefill", "prefill_chunks", "slow_decode"):
        assert _severity(cause, st(), 0, 2) == "info"                       # a few gaps above it, P99 met
        assert _severity(cause, st(missed_ref=(0, 1, 0)), 0, 2) == "warning"
        assert _severity(cause, st(frozen=(0, 0, 1), ratio=(0.3, 0.4, 2.5)), 0, 2) == "critical"
    assert _severity("stuck", st(), 0, 2) == "critical"
