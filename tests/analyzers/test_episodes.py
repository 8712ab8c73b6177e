"""Episodes with one cause (issue 16): the configuration the explanation assumes, advice that never repeats the
budget in use, one finding per episode, the same budget alone and beside a sibling, and Nsight severity."""

import numpy as np
import pandas as pd
import pytest

from expo_frames import simulate_starvation
from nsys_cases import SAMPLE_TRACES
from stallscope.analyzers import chunking as C
from stallscope.analyzers import chunking_inference as CI
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
    assert "chunked prefill off, or on with a budget that holds most of a long prompt in one step (inferred from " \
           "metrics" in inferred[0].explanation
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
                 (2, 64, 2 * a + 64 * c), (3, 1296, 3 * a + 1296 * c), (2, 1800, 2 * a + 1800 * c)]
    fit = prefill_cost.fit(_counter_frame(intervals))
    assert fit["per_token_s"] == pytest.approx(c, rel=1e-6) and fit["per_request_s"] == pytest.approx(a, rel=1e-6)
    # a ratio of sums would blur them: (sum of seconds) / (sum of tokens) reads 6 % high here
    assert sum(i[2] for i in intervals) / sum(i[1] for i in intervals) == pytest.approx(1.057 * c, rel=0.001)
    # requests of one size cannot separate the two terms: the fit declines
    assert prefill_cost.fit(_counter_frame([(2, 3000, 0.7), (1, 1500, 0.35), (3, 4500, 1.05)])) is None
    # many short prompts per interval and a long one in some: tokens per request move by less than 2x
    # (40 to 72), yet the intervals separate the terms
    diluted = [(38, 38 * 40, 38 * a + 38 * 40 * c), (38, 38 * 40 + 1250, 38 * a + (38 * 40 + 1250) * c),
               (40, 40 * 40, 40 * a + 40 * 40 * c), (37, 37 * 40 + 1250, 37 * a + (37 * 40 + 1250) * c)]
    assert max(p / n for n, p, _ in diluted) < 2 * min(p / n for n, p, _ in diluted)
    fit = prefill_cost.fit(_counter_frame(diluted))
    assert fit["per_token_s"] == pytest.approx(c, rel=1e-6) and fit["per_request_s"] == pytest.approx(a, rel=1e-6)


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


def test_severity_is_the_p99_slo_over_its_reference_window_whatever_the_windows_show():
    """A window whose own P99 is 5x the SLO and whose streams froze is info while at most 1 % of the reference
    window's observations lie at or above the SLO; warning above 1 %; critical above 1 % at twice the SLO."""
    import numpy as np
    import pandas as pd

    from stallscope.analyzers.episodes import _severity, window_states

    def sev(cause, above, above2, count=1000.0):
        sig = pd.DataFrame({"itl_p99_lo": [0.1, 1.0, 0.1], "itl_stall_share": [0.0, 0.6, 0.0],
                            "running": [8.0] * 3, "live_mean_itl": [0.03, 2.0, 0.03], "nothing_for_s": [0, 2.0, 0],
                            "itl_ref_count": [count] * 3, "itl_ref_above": [0, above, 0],
                            "itl_ref_above2": [0, above2, 0]})
        st = window_states(sig, 0.2)
        assert st["frozen"].tolist() == [False, True, False] and st["missed"].tolist() == [False, True, False]
        return _severity(cause, st, 0, 2)
    for cause in ("prefill", "prefill_chunks", "slow_decode"):
        assert sev(cause, 10, 10) == "info"          # 1.0 %: the P99 met the SLO
        assert sev(cause, 11, 0) == "warning"         # 1.1 % at or above 200 ms
        assert sev(cause, 11, 11) == "critical"       # 1.1 % at or above 400 ms
        assert sev(cause, 11, 11, count=np.nan) == "critical"   # no reference counts: the window's own P99 (1 s)
    assert sev("stuck", 0, 0) == "critical"


def test_a_freeze_still_open_counts_one_gap_per_running_request_in_the_reference_window():
    """10 s prefills at 5 s and 105 s of a 112 s run: the first minute's points read the first full reference
    window (8 streams' 10 s gaps); a point a minute past the first freeze reads none; the last point reads the
    freeze still open, one gap per running request (8 streams + the prefilling one) at twice the SLO."""
    import numpy as np

    from stallscope.analyzers import signals
    from stallscope.core.config import load_thresholds

    samples, _ = simulate_starvation(112, long_every_s=100.0, first_long_s=5.0, long_tokens=10_000)
    th = load_thresholds()
    th["itl_slo_s"] = 0.2
    ts, _ = signals.choose_grid(samples, th)
    sig = signals.compute(samples, thresholds=th, eval_ts=ts, window_ns=10 * 10**9)
    t = (sig["ts"].to_numpy() - int(samples["ts"].min())) / 1e9
    held, above, above2 = (sig[c].to_numpy() for c in ("nothing_for_s", "itl_ref_above", "itl_ref_above2"))
    first, later = np.flatnonzero(t <= 60), np.flatnonzero((t > 80) & (t < 100))
    assert len(first) and len(later) and held[-1] > 1
    assert np.all(above[first] == 8) and np.all(above2[first] == 8)
    assert np.all(above[later] == 0) and above[-1] == 9 and above2[-1] == 9


def test_an_open_gap_lasts_from_the_streams_last_token_through_whole_prompt_steps_that_ended():
    """held-out 139's `h139-small-nochunk-1350-s2` (quick), its shape: 2 streams, then from 2 s one whole 4,000-token
    prompt after another, each step decoding nothing (the reference server's unchunked mode) and putting out only
    its prompt's first token. Each step's end moves the counters and gauges, so `nothing_for_s` resets every 4 s;
    the streams' gap still runs from their last token at about 2 s to the data's end, and the reference window
    counts that open gap, one per running request: 3 x 23 s (at scrape resolution) against the 4 s of gaps the
    streams recorded."""
    from stallscope.analyzers import signals
    from stallscope.core.config import load_thresholds

    samples, steps = simulate_starvation(26.5, streams=2, long_every_s=4.0, first_long_s=2.0, long_tokens=4000,
                                         prefill_first=True)
    assert steps["num_decode_tokens"].iloc[-1] == 0 and (steps["num_prefill_tokens"] == 4000).sum() == 7
    th = load_thresholds()
    th["itl_slo_s"] = 0.2
    sig = signals.compute(samples, thresholds=th)
    assert sig["nothing_for_s"].iloc[-1] == pytest.approx(3.0)          # the last step ended at 22.2 s
    assert sig["unserved_for_s"].iloc[-1] == pytest.approx(23.0)   # their last tokens (2.0 s), seen by the 3 s scrape
    assert sig["itl_ref_above"].iloc[-1] == 3                            # 2 streams + the prefilling request
    assert sig["itl_ref_share"].iloc[-1] == pytest.approx(3 * 23 / (3 * 23 + 4), abs=0.01)
    (f,) = _findings(samples)
    assert (f.kind, f.severity, f.evidence["ongoing"]) == ("decode_starvation", "critical", True)
    assert "no stream has had a token after its first for 23.0 s" in f.explanation


def test_a_freeze_that_lasts_the_in_progress_alerts_for_is_critical_a_shorter_one_with_p99_met_is_info():
    """8 streams at 30 ms; one whole-prompt prefill at 65 s: 45 s long (still open when the data ends at 110 s,
    frozen past the VLLMDecodeStarvationInProgress alert's 30 s `for:`) is critical; 20 s long, ended, with
    8 gaps among ~10,000 in the reference minute (P99 met), is info and says so."""
    samples, _ = simulate_starvation(110, long_every_s=1000.0, first_long_s=65.0, long_tokens=45_000)
    (f,) = _findings(samples)
    assert (f.kind, f.severity, f.evidence["ongoing"]) == ("decode_starvation", "critical", True)
    samples, _ = simulate_starvation(110, long_every_s=1000.0, first_long_s=65.0, long_tokens=20_000)
    (f,) = _findings(samples)
    assert (f.kind, f.severity, f.evidence["ongoing"]) == ("decode_starvation", "info", False)
    assert f.evidence["episode"]["reference_itl_share_above_slo"] < 0.01 and "Severity info" in f.explanation


def _histogram_run(long_gaps_s, long_gaps, prefill_s=2.4, long_prompts=7, running=3, prompt_tokens=800,
                   more_gaps=(), preemptions=0):
    """Two scrapes of vLLM's histograms on the `small` model's scale: 700 decode gaps of 70 ms, 40 short
    prompts (50 tokens, 0.2 s prefill), `long_prompts` of `prompt_tokens` taking `prefill_s`, and `long_gaps`
    ITL gaps of `long_gaps_s` (the steps those prefills held), plus `more_gaps` ((seconds, count), ...)."""
    import pandas as pd
    from prometheus_client import Histogram

    from expo_frames import T0_NS, VllmMetrics

    m = VllmMetrics()
    tokens = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", ["model_name", "engine"],
                       buckets=[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000], registry=m.registry
                       ).labels(**m.labels)
    m.running.set(running)
    first = m.scrape(T0_NS)
    for _ in range(700):
        m.itl.observe(0.07)
    for _ in range(40):
        tokens.observe(50)
        m.prefill_time.observe(0.2)
    for _ in range(long_prompts):
        tokens.observe(prompt_tokens)
        m.prefill_time.observe(prefill_s)
    for gap_s, count in ((long_gaps_s, long_gaps), *more_gaps):
        for _ in range(count):
            m.itl.observe(gap_s)
    m.preemptions.inc(preemptions)
    return pd.concat([first, m.scrape(T0_NS + 60 * 10**9)], ignore_index=True).assign(target="vllm")


def test_a_gap_bucket_as_wide_as_a_whole_prefill_is_told_by_how_many_gaps_it_holds():
    """vLLM's ITL bucket (1 s, 2.5 s] holds a 1.3 s chunk step and a 2.4 s whole prefill alike. One gap per
    long prefill per running stream (7 x 3 = 21) is whole-prompt steps; two (42: 800 tokens in chunks of
    384) is chunked prefill, with a budget estimate under the long-prefill cut's 1.5 x 512."""
    off = CI.infer_from_histograms(_histogram_run(2.4, 21))
    assert off.enabled is False and off.holds_long_prefills() is True
    on = CI.infer_from_histograms(_histogram_run(1.3, 42))
    assert on.enabled is True and on.holds_long_prefills() is False
    assert "holds 2.0 gaps per long prefill per running stream" in on.detail
    assert 300 < on.budget_estimate < 768


def test_chunk_steps_that_straddle_an_itl_bucket_bound_are_all_counted_against_the_slo():
    """1,400-token prompts in chunks of 350: per long prefill per running stream three 0.9 s gaps fall in the
    (0.75 s, 1 s] bucket and one 1.2 s gap in (1 s, 2.5 s]. The top bucket alone (1 per prefill per stream)
    reads whole-prompt-sized steps (estimate about 1,000 of the prompt) from its upper bound, 396 from its lower:
    unsettled (`Chunking.wide_bucket`); the 4 gaps above the 200 ms SLO bound
    every chunk to P / 3, under the 512-token cut. P is the token sum less the 40 short prompts at their bucket's
    middle (35 of their 50 tokens each): (7 x 1,400 + 40 x 15) / 7 = 1,486, so the bound reads 495."""
    run = _histogram_run(1.2, 21, prefill_s=3.6, prompt_tokens=1400, more_gaps=((0.9, 63),))
    unbounded = CI.infer_from_histograms(run)
    assert unbounded.enabled is True and unbounded.budget_estimate >= 768 and unbounded.budget_floor < 512
    assert unbounded.holds_long_prefills() is False and unbounded.estimate_unsettled()
    bounded = CI.infer_from_histograms(run, slo=0.2)
    assert bounded.long_prompt_tokens == pytest.approx(1400 + 40 * 15 / 7)
    assert bounded.budget_bound == pytest.approx(495, rel=0.01) and bounded.holds_long_prefills() is False
    assert "4.0 gaps above the SLO per long prefill per running stream" in bounded.detail
    # whole-prompt-sized chunks: one slow gap per prefill per stream bounds nothing
    assert CI.infer_from_histograms(_histogram_run(1.3, 21, prefill_s=3.6, prompt_tokens=1800), slo=0.2).budget_bound is None


def test_a_freeze_younger_than_the_live_window_is_impaired_from_the_scrapes_alone():
    """Six streams at 1,000 tokens/s, then nothing for the last two 0.25 s scrapes: the live window (1.5 s)
    still averages 550 tokens/s in (mean gap 11 ms, not frozen by the alert rules' test), but nothing has moved
    for 0.5 s, longer than the 200 ms SLO: the window is impaired (`still`) and nothing moves in it."""
    import numpy as np
    import pandas as pd

    from stallscope.analyzers.episodes import window_states

    sig = pd.DataFrame({"running": [6.0] * 3, "live_mean_itl": [0.006, 0.008, 0.011],
                        "nothing_for_s": [0.0, 0.25, 0.5], "live_gen_rate": [1000.0, 700.0, 550.0],
                        "live_prompt_rate": [900.0, 700.0, 530.0]})
    st = window_states(sig, 0.2)
    assert not st["frozen"].any()
    assert st["still"].tolist() == [False, True, True] and st["nothing_moves"].tolist() == [False, True, True]
    assert np.isclose(st["ratio"][2], 0.5 / 0.2)


def test_a_freeze_seen_only_between_scrapes_lasts_what_the_scrapes_measured():
    """Windows frozen because 1.3 s passed between two scrapes without progress, while the live window still
    saw tokens move, report a 1.3 s freeze, never the live window (3.4 s) added to it; without the scrapes'
    measure (a signals frame from elsewhere), a live window with no progress at all spans its own length."""
    import numpy as np
    import pandas as pd

    from stallscope.analyzers.episodes import _tally, window_states

    def nothing_moves_s(live_gen_rate, measured=True):
        sig = pd.DataFrame({"running": [3.0] * 4, "live_mean_itl": [0.05, 1.3, 1.3, 0.05],
                            "nothing_for_s": [0.0, 1.3, 0.8, 0.0], "live_gen_rate": [20.0, live_gen_rate, 20.0, 20.0],
                            "live_prompt_rate": [0.0] * 4})
        sig = sig if measured else sig.drop(columns="nothing_for_s")
        st = window_states(sig, 0.2)
        st["above_excess"] = np.zeros(4)
        return _tally(sig, st, 1, 2, 0, step_s=0.5, live_s=3.4, prefill_rate_high=1e9, window_s=0.5)["nothing_moves_s"]

    assert nothing_moves_s(5.0) == pytest.approx(1.3)
    assert nothing_moves_s(0.0, measured=False) == pytest.approx(0.5 + 3.4)


def test_a_starvation_explanation_with_an_inferred_budget_names_the_estimate_never_none():
    from types import SimpleNamespace

    from stallscope.analyzers.decode_starvation import explain

    ep = SimpleNamespace(ongoing=False, evidence={"windows_frozen": 0, "running_median": 7.0}, decided_by="test")
    ev = {"itl_stall_share_max": 0.02, "itl_p99_bucket_s": (0.3, 0.4), "itl_p99": "300 ms-400 ms",
          "prompt_tokens_source": "local_compute"}
    inferred = C.Chunking(True, None, "inferred from metrics", "a test", budget_estimate=1019.0)
    text = explain(ep, ev, "", 0.2, inferred)
    assert "a step still computes about 1019 prompt tokens" in text and "None" not in text
    assert "a step still computes up to 768 prompt tokens" in explain(ep, ev, "", 0.2, C.from_flags(True, 768))


def test_an_inferred_whole_prompt_step_says_when_the_gap_bucket_also_fits_a_chunk_under_the_cut():
    """800-token prompts taking 2.4 s, one gap per long prefill per stream in vLLM's (1 s, 2.5 s] bucket: whole
    prompts, or chunks of at least P x 1 s / T (a budget of 512 reads the same), so the finding says the metrics
    cannot decide it. P reads 886: the token sum less the 40 short prompts at their bucket's middle (35 of their
    50 tokens), 800 + 40 x 15 / 7; T, the prefill time's bucket quantile, 2.25 s: 394 tokens. 1,200-token prompts
    with 4 s gaps in (2.5 s, 5 s] leave chunks of at least 2.5 / 3.75 of the 1,286 tokens read (857), above the
    cut, and nothing is left open."""
    from types import SimpleNamespace

    from stallscope.analyzers.decode_starvation import explain

    off = CI.infer_from_histograms(_histogram_run(2.4, 21), slo=0.2)
    assert off.enabled is False and off.budget_floor == pytest.approx((800 + 40 * 15 / 7) / 2.25) and off.undecided()
    ep = SimpleNamespace(ongoing=False, evidence={"windows_frozen": 0, "running_median": 3.0}, decided_by="test")
    ev = {"itl_stall_share_max": 0.2, "itl_p99_bucket_s": (1.0, 2.5), "itl_p99": "1 s-2.5 s",
          "prompt_tokens_source": "local_compute"}
    assert "cannot rule out chunked prefill at a budget of about 394 tokens" in explain(ep, ev, "", 0.2, off)
    settled = CI.infer_from_histograms(_histogram_run(4.0, 21, prefill_s=4.0, prompt_tokens=1200), slo=0.2)
    assert settled.enabled is False and settled.budget_floor == pytest.approx((1200 + 40 * 15 / 7) * 2.5 / 3.75)
    assert not settled.undecided() and "cannot rule out" not in explain(ep, ev, "", 0.2, settled)
    assert not C.from_flags(False, None).undecided()


def test_inferred_whole_prompt_steps_name_the_budget_that_reads_the_same_and_chunk_steps_say_chunk():
    """A chunked server whose one step holds most of a prompt leaves the histograms of one with chunking off, so
    the inferred state says both: 7 prompts of 800 tokens read as about 886 tokens (the token sum less 40 short
    prompts taken at their bucket's middle, 35 of their 50 tokens).
    A step that froze the streams with chunking on held a chunk (about 784 tokens inferred, up to 768 known),
    not the whole prompt; known off, the whole prompt."""
    from stallscope.analyzers.decode_starvation import explain
    from stallscope.analyzers.episodes import _cause

    off = CI.infer_from_histograms(_histogram_run(2.4, 21), slo=0.2)
    assert off.enabled is False and off.long_prompt_tokens == pytest.approx(800 + 40 * 15 / 7)
    assert off.describe().startswith("chunked prefill off, or on with a budget that holds most of a long prompt "
                                     "(about 886 tokens) in one step (inferred from metrics: ")
    assert off.as_evidence()["long_prompt_tokens"] == pytest.approx(800 + 40 * 15 / 7)
    assert C.from_flags(False, None).describe() == "chunked prefill off (flags)"
    from types import SimpleNamespace
    ep = SimpleNamespace(ongoing=False, evidence={"windows_frozen": 0, "running_median": 3.0}, decided_by="test")
    ev = {"itl_stall_share_max": 0.2, "itl_p99_bucket_s": (1.0, 2.5), "itl_p99": "1 s-2.5 s",
          "prompt_tokens_source": "local_compute"}
    assert "With chunked prefill off, or on with a budget that holds most of a long prompt (about 886 tokens) in " \
           "one step" in explain(ep, ev, "", 0.2, off)
    frozen = {"window_s": 5.0, "windows_nothing_moves": 1, "nothing_moves_s": 2.0, "windows_quiet": 1,
              "nothing_out_s": 2.0, "itl_samples_above_slo": 40.0,
              "itl_samples_above_slo_at_prefills": 40.0, "preemptions": 0.0, "windows_frozen_computing_prompts": 1, "long_prefills": 14.0, "running_median": 13.0,
              "stalls_per_long_prefill_per_stream": 2.0}
    on = C.Chunking(True, None, "inferred from metrics", "a test", budget_estimate=784.5)
    assert _cause(frozen, on, 30.0, False) == (
        "prefill", "14.0 long prefills completed after the streams froze with nothing moving for 2.0 s: one step "
        "held a chunk of about 784 prompt tokens", None)
    assert _cause(frozen, C.from_flags(True, 768), 30.0, False)[1].endswith("one step held a chunk of up to 768 "
                                                                             "prompt tokens")
    assert _cause(frozen, off, 30.0, False)[1].endswith("one step held the whole prompt, or most of it")
    assert _cause(frozen, C.from_flags(False, None), 30.0, False)[1].endswith("one step held the whole prompt")
    one = {**frozen, "windows_nothing_moves": 0, "nothing_moves_s": 0.0, "windows_quiet": 0, "nothing_out_s": 0.0,
           "stalls_per_long_prefill_per_stream": 1.0}
    assert _cause(one, C.from_flags(True, 1024), 30.0, False)[1].endswith(
        "(one stall per prompt: its slowest step held a chunk of up to 1024 prompt tokens)")
    assert _cause(one, off, 30.0, False)[1].endswith("(one stall per prompt: its slowest step held the whole "
                                                     "prompt, or most of it)")
    # held-out 119's burst: 12.5 steps of 512+ prompt tokens, the stalls at them half the streams or more
    few = {**one, "long_prefills": 12.5, "stalls_per_long_prefill_per_stream": 0.1, "running_median": 100.0,
           "itl_samples_above_slo_at_prefills": 99.0, "itl_samples_above_slo": 99.0}
    assert _cause(few, off, 30.0, False) == ("prefill", (
        "12.5 long prefills completed, 0.1 ITL samples above the SLO per long prefill per stream: not every such "
        "step held the streams past the SLO, but the 99 samples above it at them are at least half the 100 running "
        "streams, as a step of 512+ prompt tokens past the SLO leaves"), None)


def test_preemptions_as_many_as_the_slowest_gaps_leave_the_chunking_uninferred():
    """A KV pool that preempts: a preempted request's next ITL sample spans its wait and recompute, so the top
    ITL bucket is no step's length. 21 gaps of 2.4 s read as whole-prompt steps with no preemption and with 20;
    with 21 preemptions nothing is inferred (the preemption finding says what happened)."""
    assert CI.infer_from_histograms(_histogram_run(2.4, 21), slo=0.2).enabled is False
    assert CI.infer_from_histograms(_histogram_run(2.4, 21, preemptions=20), slo=0.2).enabled is False
    assert CI.infer_from_histograms(_histogram_run(2.4, 21, preemptions=21), slo=0.2) == C.UNKNOWN


def test_a_few_stalls_beside_preemptions_are_theirs_not_a_long_prompt_step():
    """A 5.1 MiB pool preempting at budget 64 (held-out 103, `h103-kv-auto-5.1mb-31sess-scrape1s`, full pass): an
    episode of 2 preemptions and 4.2 ITL samples above the SLO, all in windows where 2.7 long prefills completed,
    with 29 streams RUNNING. Preemptions fell just under half the stalls, so the episode read as starvation, though
    a step that held a long prompt past the SLO stalls all 29 streams at once. The 2.2 stalls the preemptions
    leave are fewer than half the running streams: the cause is preemption. With as many stalls as the streams,
    or no preemption, the long prefills still decide."""
    from stallscope.analyzers.episodes import _cause

    ev = {"window_s": 6.7, "windows_nothing_moves": 0, "nothing_moves_s": 0.0, "windows_quiet": 0,
          "nothing_out_s": 0.0, "itl_samples_above_slo": 4.17,
          "itl_samples_above_slo_at_prefills": 4.17, "preemptions": 2.0, "windows_frozen_computing_prompts": 0,
          "long_prefills": 2.67, "running_median": 29.0, "stalls_per_long_prefill_per_stream": 0.054}
    cause, why, _ = _cause(ev, C.UNKNOWN, 30.0, False)
    assert cause == "preemption"
    assert why == ("2 preemptions against 4 ITL samples above the SLO; the 2 they leave are fewer than half the 29 "
                   "running streams, and a step that held a long prompt past the SLO stalls every one")
    assert _cause(ev, C.from_flags(False, None), 30.0, False)[0] == "preemption"
    # the stalls of a step that held every stream (29 of them beside the 2 preempted) are a long prompt's
    every = {**ev, "itl_samples_above_slo": 31.0, "itl_samples_above_slo_at_prefills": 31.0,
             "stalls_per_long_prefill_per_stream": 0.4}
    assert _cause(every, C.from_flags(False, None), 30.0, False)[0] == "prefill"
    edge = {**ev, "itl_samples_above_slo_at_prefills": 16.6}
    assert _cause({**edge, "itl_samples_above_slo": 16.6}, C.from_flags(False, None), 30.0, False)[0] == "prefill"
    assert _cause({**edge, "itl_samples_above_slo": 16.4}, C.from_flags(False, None), 30.0, False)[0] == "preemption"
    # no preemption: 4 stalls at the long prefills beside 29 streams are still no long prompt's step
    assert _cause({**ev, "preemptions": 0.0}, C.from_flags(False, None), 30.0, False)[0] == "prefill_chunks"


def test_a_long_prefill_that_stalled_nobody_does_not_make_slow_short_prompt_steps_starvation():
    """`small` at budget 768 with 400-token prompts (held-out 104, `h104-small-chunk768-s15`, quick pass): each
    whole prompt's step took about 1 s, and 27.5 ITL samples above the SLO fell in the episode. The one step
    `iteration_tokens_total` counted above 512 was the start's burst of 14 short prompts, before any stream ran:
    0.5 samples came at it, beside 15 running streams. With the budget given (768 holds a long prompt) and a
    1 s freeze, the episode read as a long prompt's step. The truth has no step of 512+ prompt tokens inside a
    gap: no long prompt's step held the streams, so it is chunk steps (prompt work) slower than the SLO."""
    from stallscope.analyzers.episodes import _cause

    ev = {"window_s": 2.75, "windows_nothing_moves": 1, "nothing_moves_s": 0.5, "windows_quiet": 1,
          "nothing_out_s": 0.5, "itl_samples_above_slo": 27.5,
          "itl_samples_above_slo_at_prefills": 0.55, "preemptions": 0.0, "windows_frozen_computing_prompts": 0,
          "long_prefills": 0.55, "running_median": 15.0, "stalls_per_long_prefill_per_stream": 0.067}
    for config in (C.from_flags(True, 768), C.from_flags(False, None), C.UNKNOWN):
        cause, why, _ = _cause(ev, config, 30.0, False)
        assert cause == "prefill_chunks", config
    assert why.startswith("1 of the 28 ITL samples above the SLO came at the 0.6 long prefills, under 50%")
    assert _cause(ev, C.from_flags(True, 768), 30.0, False)[1] == (
        "1 of the 28 ITL samples above the SLO came at the 0.6 long prefills, fewer than half the 15 running "
        "streams: no long prompt's step held them (such a step stalls every one); the steps with prompt work in "
        "them made the stalls")
    # a long prompt's step stalls all 15: then the freeze and the long prefill are starvation, as before
    felt = {**ev, "itl_samples_above_slo_at_prefills": 15.0, "long_prefills": 1.0}
    assert _cause(felt, C.from_flags(True, 768), 30.0, False)[0] == "prefill"
    # a freeze still open at the end of the data has left no sample yet: the long prefills are not judged by it
    assert _cause(ev, C.from_flags(True, 768), 30.0, True)[0] == "prefill"


def test_an_info_episode_at_steps_of_512_plus_says_neither_that_none_ran_nor_that_they_missed_the_slo():
    """Held-out 112's `h112-tiny-chunk768-s3` (full pass): budget 768, 3 streams, a 765-token chunk step took
    0.203 s once against a 200 ms SLO, and 1 ITL sample above the SLO came at the long prefills (fewer than half
    the 3 streams), with the ITL P99 about 23 ms (`info`). The finding said "no step computed a long prompt" beside
    a budget that computes 765-token chunks, and "the chunk steps themselves are slower than the SLO (... chunk
    steps up to about 23 ms)" against 200 ms. Each is now said as the evidence has it; an episode whose ITL P99
    bucket lies above the SLO keeps its text."""
    from stallscope.analyzers import itl_high
    from stallscope.analyzers.episodes import Episode

    def text(chunking, severity, above, bucket):
        ep = Episode("", 0, 3, 0, 1, "prefill_chunks", severity, "the count", reading=None,
                     evidence={"windows_prefill_free": 0, "windows": 4, "running_median": 3.0,
                               "itl_samples_above_slo": above})
        ev = {"itl_p99": "10 ms-25 ms", "itl_p99_s": 0.023, "itl_p99_bucket_s": bucket, "itl_stall_share_max": 0.034}
        cost = {"decode_step_s": 0.005, "decode_step_from": "itl_p50", "prefill_s_per_token": 2e-4, "source": "metrics"}
        return itl_high.texts("prefill_chunks", ep, ev, "", 0.2, cost, chunking, lambda *a: ("advice", {}))[0]

    at_768 = text(C.from_flags(True, 768), "info", 1.0, [0.01, 0.025])
    assert "no step computed a long prompt" not in at_768 and "slower than the SLO" not in at_768
    assert ("steps of 512+ prompt tokens ran, but fewer than half the running streams stalled past the SLO at them "
            "(a step past the SLO stalls every one), so they are not taken as decode starvation") in at_768
    assert ("the steps with prompt work in them left 1 ITL sample above the SLO (the median gap between tokens is "
            "about 5 ms, the ITL P99 about 23 ms)") in at_768
    # a budget of 64 computes no long prompt: that verdict stands; a warning's chunk steps missed the SLO
    at_64 = text(C.from_flags(True, 64), "warning", 40.0, [0.2, 0.3])
    assert "no step computed a long prompt, so this is not decode starvation" in at_64
    assert "the chunk steps themselves are slower than the SLO here" in at_64


def test_a_stall_in_the_data_s_last_scrape_interval_is_counted_whole():
    """Held-out 119's `h119-end-in-stall-tiny-1600-scrape1s` (both passes): the data end 0.7 s after a whole
    1,600-token prefill (0.27 s) stalled the 4 decoding streams. Their 4 ITL samples above the SLO land in the last
    scrape interval, which the episode's tally counted as 1: it summed each window's rate times the grid step, and
    an event there lies in one window, not window / step of them. 1 sample beside 4 streams read as no long prompt's
    step (`unfelt`), and the finding was itl_high. Counted whole it is decode starvation, `info` (ITL P99 met the
    SLO), with one stall per stream per long prefill."""
    samples, _ = simulate_starvation(11.01, streams=4, long_tokens=1600, decode_step_s=0.005, per_token_s=0.00017,
                                     first_long_s=10.3, long_every_s=100.0)
    found = _findings(samples)
    assert [(f.kind, f.severity) for f in found] == [("decode_starvation", "info")]
    assert found[0].evidence["decided_by"].startswith(
        "1.0 long prefills completed, 1.0 ITL samples above the SLO per long prefill per stream")


def test_an_itl_high_episode_read_as_chunking_off_quotes_no_budget_in_use():
    """Held-out 116's `h116-neg-short-127sess` (quick pass): 127 short prompts arrived at once, a 2,002-token step of
    75 of them stalled the streams already decoding, and the metrics read that as whole-prompt steps ("chunked
    prefill off, or on with a budget that holds most of a long prompt"). The recommendation went on to say "the
    budget in use, 192 tokens" (the slowest gap less a decode step over the cost per token): a budget beside
    "off". Read as off, no budget in use is quoted and the advice is asked for one with none in use."""
    from stallscope.analyzers import itl_high
    from stallscope.analyzers.episodes import Episode

    asked = []

    def advise(budget, floor):
        asked.append(budget)
        return "advice", {}

    def in_use(chunking):
        ep = Episode("", 0, 3, 0, 1, "prefill_chunks", "info", "the count", reading=None,
                     evidence={"windows_prefill_free": 0, "windows": 1, "running_median": 115.0,
                               "itl_samples_above_slo": 9.0})
        ev = {"itl_p99": "100 ms-150 ms", "itl_p99_s": 0.14, "itl_p99_bucket_s": [0.1, 0.15], "itl_stall_share_max": 0.029}
        cost = {"decode_step_s": 0.04, "decode_step_from": "itl_p50", "prefill_s_per_token": 5.22e-4, "source": "metrics"}
        itl_high.texts("prefill_chunks", ep, ev, "", 0.2, cost, chunking, advise)
        return asked[-1], ev.get("max_num_batched_tokens_in_use_estimated")

    off = C.Chunking(False, None, "inferred from metrics", "test", long_prompt_tokens=27.0)
    assert in_use(off) == (None, None)
    assert in_use(C.Chunking(True, None, "inferred from metrics", "test")) == (192, 192)


# an episode's evidence: 5 long prefills, 40 ITL samples above the SLO all at them, 8 streams running
CHUNK_STEPS_EV = {"window_s": 5.0, "windows_nothing_moves": 0, "nothing_moves_s": 0.0, "windows_quiet": 0,
                  "nothing_out_s": 0.0, "itl_samples_above_slo": 40.0,
                  "itl_samples_above_slo_at_prefills": 40.0, "preemptions": 0.0, "windows_frozen_computing_prompts": 0,
                  "long_prefills": 5.0, "running_median": 8.0, "stalls_per_long_prefill_per_stream": 1.0}

def test_a_budget_of_512_computes_no_long_prompt_beside_running_decodes():
    """vLLM V1 schedules the running decodes first, one token each; a chunk gets what is left. At
    `--max-num-batched-tokens 512` with 8 requests RUNNING (7 decoding beside the prefilling one) a step holds at
    most 505 prompt tokens, under the 512-token cut: the episode is `prefill_chunks`, not starvation. At 520 a
    chunk of 513 fits, and so does a whole-prompt step with nobody else running."""
    from stallscope.analyzers.episodes import _cause

    ev = CHUNK_STEPS_EV
    cause, why, reading = _cause(ev, C.from_flags(True, 512), 60.0, False)
    assert cause == "prefill_chunks" and "no step computes 512+ prompt tokens beside 7 running decodes" in why
    assert why == f"{C.from_flags(True, 512).describe()}: {reading}"   # the configuration decided
    assert _cause(ev, C.from_flags(True, 520), 60.0, False)[0] == "prefill"
    assert C.from_flags(True, 512).holds_long_prefills() is True
    assert C.from_flags(True, 512).holds_long_prefills(decodes=1) is False
    # a running gauge that overflowed to inf (the fuzzed exposition did) counts the one stream it implies
    assert _cause({**ev, "running_median": float("inf")}, C.from_flags(True, 512), 60.0, False)[0] == "prefill_chunks"


def test_levers_say_an_itl_p50_only_bounds_the_decode_step_when_prefill_fills_most_steps():
    # an overloaded slow host: every gap holds a prefill, so the metrics' median gap (3.75 s) is no decode step
    text, extra = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=3.75, prefill_s_per_token=0.0024,
                                                 source="the metrics", running=12, decode_from="itl_p50")
    assert extra["max_num_batched_tokens"] is None
    assert "median gap between tokens (ITL P50) is about 3750 ms at 12 running requests" in text
    assert "a decode step alone is at most that" in text and "`--steps`" in text
    assert "a decode step alone takes" not in text and "e.g." not in text     # no figure resting on it
    assert text.startswith("The metrics cannot show chunked prefill alone meeting the 200 ms ITL SLO")
    # the flat decision priced 64 prompt tokens (decodes aside), and so does its figure; the step itself, whose
    # decode part the metrics only bound, is neither stated nor put in evidence
    assert "a 64-token chunk adds about 154 ms to a step" in text
    assert extra["expected_step_s"] is None and extra["smallest_budget_chunk_s"] == pytest.approx(64 * 0.0024)
    assert "`--max-num-seqs`, if it brings the decode step (at most the ITL P50) under 46 ms" in text   # 200 - 154
    # under the SLO the median gap is the decode step's figure, and the --max-num-seqs figure stays
    text, _ = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.15, prefill_s_per_token=0.002,
                                             source="the metrics", budget_in_use=64, running=16, decode_from="itl_p50")
    assert "(ITL P50) is about 150 ms at 16 running requests" in text and "`--steps`" not in text
    assert "at most 7 instead of the 16 running now" in text
    text, _ = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.15, prefill_s_per_token=0.002,
                                             source="a trace", budget_in_use=64, running=16, decode_from="trace")
    assert "a decode step alone takes about 150 ms at 16 running requests" in text


def test_stalls_that_do_not_cluster_at_long_prefills_are_the_steady_steps_not_starvation():
    """`small` at budget 64 (h17-small-chunk64-s5-scrape1s, full pass): 889 ITL samples above the SLO, 2 of them in
    the windows of the 3 steps `iteration_tokens_total` counted above 512 (a chunk completing a 500-token prompt
    beside short ones). With the budget unknown the cause is what made most stalls: the chunk steps. Once long
    prefills explain half the stalls, or the configuration says a step holds a long prompt, it is starvation."""
    from stallscope.analyzers.episodes import PREFILL_SHARE_MIN, _cause

    ev = {"window_s": 6.7, "windows_nothing_moves": 0, "nothing_moves_s": 0.0, "windows_quiet": 0,
          "nothing_out_s": 0.0, "itl_samples_above_slo": 889.0,
          "itl_samples_above_slo_at_prefills": 1.5, "preemptions": 0.0, "windows_frozen_computing_prompts": 0,
          "long_prefills": 3.0, "running_median": 5.0, "stalls_per_long_prefill_per_stream": 0.1}
    on = CI.infer(59.3, 3.0)
    assert on.enabled is True and on.holds_long_prefills() is None
    cause, why, _ = _cause(ev, on, 120.0, False)
    assert cause == "prefill_chunks"
    assert why == ("2 of the 889 ITL samples above the SLO came at the 3.0 long prefills, under 50%: the steady "
                   "steps, with prompt work in them, made most stalls, not a long prompt's step")
    half = {**ev, "itl_samples_above_slo_at_prefills": PREFILL_SHARE_MIN * 889.0}
    assert _cause(half, on, 120.0, False)[0] == "prefill"
    # known off, the 3 long prefills still left 1.5 stalls beside 5 streams: no step of theirs held the streams
    # past the SLO (such a step stalls every one); with stalls on half the streams at them, it is starvation
    assert _cause(ev, C.from_flags(False, None), 120.0, False)[0] == "prefill_chunks"
    felt = {**ev, "itl_samples_above_slo_at_prefills": 2.5}
    assert _cause(felt, C.from_flags(False, None), 120.0, False)[0] == "prefill"
    assert _cause(ev, C.from_flags(True, 64), 120.0, False)[0] == "prefill_chunks"   # known budget: as before
    # no ITL sample above the SLO yet (a freeze still open): nothing to share out, the freeze decides
    still = {**ev, "itl_samples_above_slo": 0.0, "itl_samples_above_slo_at_prefills": 0.0, "windows_nothing_moves": 2,
             "nothing_moves_s": 20.0, "windows_quiet": 2, "nothing_out_s": 20.0}
    assert _cause(still, on, 120.0, False)[0] == "prefill"


def test_an_estimate_between_the_cut_and_the_margin_is_said_to_be_unsettled(slow_chunks):
    """From the metrics a step is taken to hold a long prefill only from 1.5 x 512 = 768 estimated tokens (the
    estimate read 0.73-1.64 x the chunk on held-out 22 and 23). An estimate of 600 is still called chunk steps,
    but the finding must not say no step computed a long prompt: it says the metrics cannot settle it and how
    to. At 400 the plain verdict stands."""
    from stallscope.analyzers.episodes import _cause

    samples, _ = slow_chunks
    inferred = {est: C.Chunking(True, None, "inferred from metrics", "test", budget_estimate=est)
                for est in (400.0, 600.0)}
    assert inferred[600.0].estimate_unsettled() and not inferred[400.0].estimate_unsettled()
    assert not C.Chunking(True, 600, "flags", budget_estimate=600.0).estimate_unsettled()
    # a bound under the cut (S slow gaps per prompt) settles it: no step held more than 450
    assert not C.Chunking(True, None, "inferred from metrics", budget_estimate=600.0,
                          budget_bound=450.0).estimate_unsettled()
    unsettled = _findings(samples, inferred[600.0])
    plain = _findings(samples, inferred[400.0])
    assert {f.kind for f in unsettled} == {f.kind for f in plain} == {"itl_high"}
    for f in unsettled:
        assert "no step computed a long prompt" not in f.explanation
        assert "about 600 prompt tokens per slow step, falls between 512 and 768, where the metrics" in f.explanation
        assert "Pass `--enable-chunked-prefill --max-num-batched-tokens N`, the server's log (`--server-log`) or a run directory" in f.explanation
    assert all("no step computed a long prompt, so this is not decode starvation" in f.explanation for f in plain)
    ev = CHUNK_STEPS_EV
    cause, why, _ = _cause(ev, inferred[600.0], 60.0, False)
    assert cause == "prefill_chunks" and why.endswith("the estimate, about 600 prompt tokens per slow step, falls "
                                                      "between 512 and 768, a band the metrics cannot settle")
    assert "no step computes 512+ prompt tokens" in _cause(ev, inferred[400.0], 60.0, False)[1]


def test_an_exactly_sized_step_just_under_the_cut_is_said_to_be_unsettled(slow_chunks):
    """A slowest step sized exactly reads down to 0.85 x its chunk (held-out 61: 445 tokens for a 510-token
    chunk), so an estimate of 470 could be a 512+ chunk: the finding says the metrics cannot settle it. At 420
    (a chunk of at most about 494) the plain verdict stands, and over 538 the step holds a long prefill."""
    from stallscope.analyzers.episodes import _cause

    samples, _ = slow_chunks
    exact = {est: C.Chunking(True, None, "inferred from metrics", "test", budget_estimate=est, slowest_step_s=1.2)
             for est in (420.0, 470.0, 540.0)}
    assert [exact[e].estimate_unsettled() for e in (420.0, 470.0, 540.0)] == [False, True, False]
    assert exact[540.0].holds_long_prefills() is True
    ev = CHUNK_STEPS_EV
    cause, why, _ = _cause(ev, exact[470.0], 60.0, False)
    assert cause == "prefill_chunks" and why.endswith("the estimate, about 470 prompt tokens per slow step, falls "
                                                      "between 435 and 538, a band the metrics cannot settle")
    assert "no step computes 512+ prompt tokens" in _cause(ev, exact[420.0], 60.0, False)[1]
    found = _findings(samples, exact[470.0])
    assert {f.kind for f in found} == {"itl_high"}
    for f in found:
        assert "falls between 435 and 538, where the metrics cannot tell a step of 512+ prompt tokens" in f.explanation


def test_a_bucket_estimate_whose_bucket_reaches_under_the_cut_is_unsettled(slow_chunks):
    """Held-out 66's 384-budget quick run: one 1,350-token prompt in 3.75 s (the prefill-time bucket's reading) and
    its slowest gaps in vLLM's (1 s, 2.5 s] ITL bucket, so P x G / T reads 900 from the upper bound and 360 from the
    lower. 900 is past the 1.5 x 512 margin, but the same bucket holds a 384-token chunk step: unsettled, and the
    finding says how low the estimate could be. With the bucket's lower bound over 512 it still holds."""
    from stallscope.analyzers.episodes import _cause

    samples, _ = slow_chunks
    wide = C.Chunking(True, None, "inferred from metrics", "test", budget_estimate=900.0, budget_floor=360.0)
    narrow = C.Chunking(True, None, "inferred from metrics", "test", budget_estimate=900.0, budget_floor=600.0)
    assert (wide.holds_long_prefills(), wide.estimate_unsettled()) == (False, True)
    assert (narrow.holds_long_prefills(), narrow.estimate_unsettled()) == (True, False)
    cause, why, _ = _cause(CHUNK_STEPS_EV, wide, 60.0, False)
    assert cause == "prefill_chunks" and why.endswith("the estimate, about 900 prompt tokens per slow step, could be as "
                                                      "low as 360 (the ITL bucket of the slowest gaps is that wide), a "
                                                      "band the metrics cannot settle")
    found = _findings(samples, wide)
    assert found and {f.kind for f in found} == {"itl_high"}
    assert all("could be as low as 360" in f.explanation and C.SETTLE_IT in f.explanation for f in found)
    # the configuration and the reading are stated once; "Decided by" points back at them
    assert all(f.explanation.count("could be as low as 360") == 1 and f.explanation.lower().count(wide.describe()) == 1
               and "Decided by: the configuration and the reading above." in f.explanation for f in found)


def test_the_budget_in_use_quoted_from_the_metrics_is_the_inference_s_chunk_else_the_slowest_gap(slow_chunks):
    """A metrics-only itl_high finding quotes the budget in use. Where the inference sized a chunk it quotes that
    chunk (at most its bound), not (ITL P99 - decode step) / cost per token: that subtraction's decode step is the
    ITL P50, which chunk steps inflate in an overloaded run (held-out 68: 44 tokens quoted for a 320 budget the
    inference read as 311). With no chunk sized, the subtraction: (298 - 39 ms) / 2.2 ms = 117 for 128 chunks."""
    samples, _ = slow_chunks

    def quoted(**inferred):
        found = _findings(samples, C.Chunking(True, None, "inferred from metrics", "test", **inferred))
        assert found and {f.kind for f in found} == {"itl_high"}
        return {f.evidence["max_num_batched_tokens_in_use_estimated"] for f in found}

    assert quoted(budget_estimate=200.0) == {200}
    assert quoted(budget_estimate=200.0, budget_bound=150.0) == {150}
    assert quoted() == {117}
    known = _findings(samples, C.from_flags(True, 128))
    assert all("max_num_batched_tokens_in_use_estimated" not in f.evidence for f in known)


def test_a_budget_in_use_read_off_a_wide_bucket_is_quoted_as_its_range_and_only_a_budget_under_it_is_advised(
        slow_chunks):
    """Held-out 66, 68 and 72 (384-token budgets): the slowest gaps sat in vLLM's (1 s, 2.5 s] ITL bucket, so the
    quoted budget in use read 525-841 from its upper bound and 333-413 from its lower. The quote now carries the
    floor, and the advice treats the whole range as possibly in use: 640 fits the SLO by the cost figures and lies
    inside 360-841, so it is named only for a server running more; under the floor, or with no floor, it is advised."""
    samples, _ = slow_chunks
    wide = _findings(samples, C.Chunking(True, None, "inferred from metrics", "test", budget_estimate=900.0,
                                         budget_floor=360.0))
    assert {(f.evidence["max_num_batched_tokens_in_use_estimated"], f.evidence["max_num_batched_tokens_in_use_floor"])
            for f in wide} == {(900, 360)}
    narrow = _findings(samples, C.Chunking(True, None, "inferred from metrics", "test", budget_estimate=900.0,
                                           budget_floor=600.0))
    assert narrow and all("max_num_batched_tokens_in_use_floor" not in f.evidence for f in narrow)

    ask = dict(slo_s=0.2, decode_step_s=0.03, prefill_s_per_token=0.0002, source="the metrics", running=8,
               budget_in_use=841, budget_estimated=True)
    text, extra = chunked_prefill_recommendation(**ask, in_use_floor=360)
    assert extra["max_num_batched_tokens"] is None and extra["chunking_meets_slo"] is None
    assert extra["max_num_batched_tokens_if_more_in_use"] == 640
    assert "the budget in use is about 360-841 tokens" in text and "If the server runs more than 640" in text
    for floor in (None, 720):
        assert chunked_prefill_recommendation(**ask, in_use_floor=floor)[1]["max_num_batched_tokens"] == 640
    text, extra = chunked_prefill_recommendation(**{**ask, "prefill_s_per_token": 0.004}, in_use_floor=360)
    assert extra["chunking_meets_slo"] is False and "the budget in use is about 360-841 tokens" in text


@pytest.mark.parametrize("per_token_s,seqs,needed_ms", [(0.002, 7, 72), (0.003, 1, 8), (0.004, None, 0)])
def test_the_max_num_seqs_lever_leaves_the_chunk_and_says_so_with_the_decode_step_it_needs(per_token_s, seqs,
                                                                                         needed_ms):
    """A smaller batch shortens only a step's decode part. At 2 ms per prompt token a 64-token chunk takes 128 ms,
    so a 200 ms SLO needs the decode step (150 ms at 16 running) under 72 ms: 7 sequences at most, even if it
    shrank in proportion to the batch (the old figure, 10, came from halving the SLO over the decode step and
    could not get there under its own assumption). At 3 ms per token (a 192 ms chunk) only one sequence at a time
    keeps the decode steps clear of chunks. At 4 ms per token the chunk alone takes 256 ms: no
    `--max-num-seqs` meets the SLO, and the advice says so instead of naming it as a lever."""
    text, extra = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.15, prefill_s_per_token=per_token_s,
                                                 source="test", budget_in_use=64, running=16)
    assert extra["max_num_seqs"] == seqs
    assert extra["decode_step_needed_s"] * 1e3 == pytest.approx(needed_ms)
    levers = text.split("Levers that remain: ")[1]
    if seqs == 1:
        assert levers.startswith("`--max-num-seqs 1`, one request at a time, so that no stream waits beside another's "
                                 "chunk (every other request queues): at 2 or more the decode step would have to "
                                 "fall from about 150 ms to under 8 ms beside a 64-token chunk (192 ms)")
    elif seqs:
        assert levers.startswith("a smaller `--max-num-seqs`: at most 7 instead of the 16 running now, and only if "
                                 "the decode step falls with the batch from about 150 ms to under 72 ms")
    else:
        assert "--max-num-seqs" not in levers.split(". ")[0]
        assert text.endswith("A smaller `--max-num-seqs` cannot meet it either: it shortens only a step's decode "
                             "part, and a 64-token chunk takes about 256 ms by itself.")


@pytest.mark.parametrize("running", [float("nan"), float("inf")])
def test_the_levers_name_no_max_num_seqs_figure_for_a_running_gauge_read_nan_or_overflowed(running):
    """The running gauge of a fuzzed exposition reads NaN or overflows to inf: there is no batch to shrink, so no
    `--max-num-seqs` lever (this raised converting NaN to an integer), and the other levers stand."""
    text, extra = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.15, prefill_s_per_token=0.002,
                                                 source="test", budget_in_use=64, running=running)
    assert extra["max_num_seqs"] is None and "--max-num-seqs" not in text
    assert "Levers that remain: prefill/decode disaggregation" in text


def _lone_prefill_scrapes(kv_moves: bool):
    """1 s scrapes of a server with three streams decoding for 3 s, then one RUNNING request alone for 4 s with no
    token out and no prompt completed, then its prefill completing. With `kv_moves` the KV usage rises every
    scrape (a prompt prefilled in chunks: each step allocates its chunk's blocks and vLLM sends the scheduler's
    stats after it); without, every gauge stands still (one step holding everything)."""
    from expo_frames import T0_NS, VllmMetrics

    m, frames, kv = VllmMetrics(), [], 0.10
    for k in range(9):
        if k < 3:
            m.running.set(3)
            m.generation.inc(90)
            kv += 0.01
        elif k < 7:
            m.running.set(1)
            kv += 0.02 if kv_moves else 0.0
        else:
            m.prompt.inc(1250)
            m.generation.inc(1)
        m.kv.set(kv)
        frames.append(m.scrape(T0_NS + k * 10**9))
    return pd.concat(frames, ignore_index=True)


def test_a_lone_prompt_prefilled_in_chunks_is_no_step_holding_everything():
    """No token and no prompt token came out for 4 s either way (scrapes 3-6). Where the KV usage rose at every
    scrape, steps kept ending (vLLM sends the scheduler's gauges after every step), so `nothing_for_s` stays 0 and
    no window is read as one step holding everything; where every gauge stood still after the running gauge fell
    to 1, it counts 1, 2, 3 s."""
    from stallscope.analyzers import signals
    from stallscope.analyzers.episodes import window_states
    from stallscope.core.config import load_thresholds

    th = {**load_thresholds(), "itl_slo_s": 0.2}
    held = {}
    for kv_moves in (True, False):
        samples = _lone_prefill_scrapes(kv_moves)
        ts = np.unique(samples["ts"].to_numpy(dtype=np.int64))[1:]
        sig = signals.compute(samples, thresholds=th, eval_ts=ts, window_ns=2 * 10**9)
        held[kv_moves] = (sig["nothing_for_s"].tolist(), window_states(sig, 0.2)["nothing_moves"].tolist())
    assert held[True][0] == [0.0] * 8 and not any(held[True][1][:6])
    assert held[False][0] == [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0]
    assert held[False][1][3:6] == [True, True, True]


def test_a_livelock_whose_steps_move_the_gauges_is_still_stuck():
    """Quiet live windows (RUNNING, nothing out) where every scrape saw a step end: no step held everything
    (`nothing_moves_s` 0), but nothing came out for the quiet run plus the live window, and past the stuck bound
    the cause is `stuck`, as the VLLMSchedulerStalled rule (no output over the live window) says."""
    from stallscope.analyzers.episodes import _cause, _tally, window_states

    n = 200
    sig = pd.DataFrame({"running": [4.0] * n, "live_mean_itl": [np.inf] * n, "nothing_for_s": [0.0] * n,
                        "live_gen_rate": [0.0] * n, "live_prompt_rate": [0.0] * n})
    st = window_states(sig, 0.2)
    st["above_excess"] = np.zeros(n)
    assert st["quiet_live_window"].all() and not st["nothing_moves"].any()
    ev = _tally(sig, st, 0, n - 1, 0, step_s=1.0, live_s=4.0, prefill_rate_high=1e9, window_s=8.0)
    assert ev["nothing_moves_s"] == 0.0 and ev["windows_quiet"] == n and ev["nothing_out_s"] == pytest.approx(204.0)
    cause, decided, _ = _cause(ev, C.Chunking(None, None, "inferred from metrics"), 120.0, False)
    assert cause == "stuck" and "204 s" in decided


def test_the_chunking_episodes_imply_counts_only_the_stalls_at_their_long_prefills():
    """h128-small-nochunk-500-s3 (full pass, chunking off on `small`): seven steps of one whole 500-token prompt
    (`iteration_tokens_total`'s `le="512"` bucket, no long prefill) and one of 540 tokens each froze the 3 running
    streams for about 1.2 s. Of the episode's 83.4 ITL samples above the SLO, 2.1 came at the one long prefill over
    the rate elsewhere: 0.7 per long prefill per running stream, one step per prompt. Every stall counted read
    26.8, slow chunk steps ("on")."""
    from types import SimpleNamespace

    from stallscope.analyzers.stream_stalls import _inferred

    ev = {"long_prefills": 1.04, "running_median": 3.0, "itl_samples_above_slo": 83.4,
          "itl_samples_above_slo_at_prefills": 2.08}
    off = _inferred([SimpleNamespace(evidence=ev, cause="prefill")])
    assert off.enabled is False and off.detail.startswith("0.7 ITL samples above the SLO per long prefill")
    chunks = _inferred([SimpleNamespace(evidence={**ev, "itl_samples_above_slo_at_prefills": 8.0}, cause="prefill")])
    assert chunks.enabled is True and chunks.detail.startswith("2.6 ITL samples")
    assert _inferred([SimpleNamespace(evidence=ev, cause="preemption")]).enabled is None
