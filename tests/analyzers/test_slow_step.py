"""The slowest step sized from the histograms' exact `_sum` / `_count`: a 511-token chunk step and a 639-token one
land in the same (1 s, 2.5 s] ITL bucket, but not in the same scrape-interval mean."""

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import Histogram

from expo_frames import ITL_BUCKETS, T0_NS, VllmMetrics
from stallscope.analyzers import chunking as C
from stallscope.analyzers import chunking_inference as CI
from stallscope.analyzers import slow_step as S
from stallscope.analyzers.signals import split_metrics
from stallscope.analyzers.workload import interval_increase

DECODE_S, PER_TOKEN_S, STREAMS = 0.05, 0.0019, 10   # `small` on this host: a 511-token chunk step takes ~1.02 s


def _chunks(budget: int, prompts: list[int], beside: int = 0):
    """(seconds, [(size, prefill seconds)] of the prompts whose prefill ended) per step computing `prompts` back to
    back in steps of `budget - 1` prompt tokens beside one decode: a prompt's first chunk takes what its
    predecessor's last one left, and its prefill time runs from that step's start. `beside`: a short prompt in
    the last step too."""
    out, t, queue, begun = [], 0.0, [[n, n] for n in prompts], {}
    while queue:
        room, ended = budget - 1 - beside * (len(queue) == 1), []
        took = 0
        for k, (size, left) in enumerate(queue):
            if room <= 0:
                break
            begun.setdefault(k + len(prompts) - len(queue), t)
            take = min(room, left)
            queue[k][1] -= take
            room, took = room - take, took + take
        seconds = DECODE_S + PER_TOKEN_S * (took + beside * (len(queue) == 1))
        while queue and queue[0][1] == 0:
            i = len(prompts) - len(queue)
            ended.append((queue.pop(0)[0], t + seconds - begun[i]))
        ended += [(beside, seconds)] * (beside > 0 and not queue)
        out.append((seconds, ended))
        t += seconds
    return out


def _steps(budget: int, long_tokens: int, cycles: int, beside: int = 0, back_to_back: int = 1, decodes: int = 40):
    """Per cycle: `decodes` decode steps with a 37-token prompt every tenth, then `back_to_back` long prompts
    (`_chunks`)."""
    out = []
    for _ in range(cycles):
        for k in range(decodes):
            out.append((DECODE_S + PER_TOKEN_S * 37, [(37, DECODE_S + PER_TOKEN_S * 37)]) if k % 10 == 9
                       else (DECODE_S, []))
        out += _chunks(budget, [long_tokens] * back_to_back, beside)
    return out


def _run(budget: int, long_tokens: int = 1850, scrape_s: float = 0.5, cycles: int = 6, beside: int = 0,
         back_to_back: int = 1, decodes: int = 40, pauses: int = 0) -> pd.DataFrame:
    """The run's vLLM histograms scraped every `scrape_s` (prometheus_client's own exposition): every running
    stream gets one token per step, and a prompt's size and prefill time are observed when its prefill ends.
    `pauses`: the last step before that many cycles' long prompts takes 1.8 s (the host paused in it)."""
    m = VllmMetrics()
    tokens = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", ["model_name", "engine"],
                       buckets=[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000], registry=m.registry
                       ).labels(**m.labels)
    m.running.set(STREAMS)
    frames, now, next_scrape = [m.scrape(T0_NS)], 0.0, scrape_s
    steps = _steps(budget, long_tokens, cycles, beside, back_to_back, decodes)
    per_cycle = len(steps) // cycles
    for c in range(pauses):
        steps[c * per_cycle + decodes - 1] = (1.8, steps[c * per_cycle + decodes - 1][1])
    for seconds, finished in steps:
        now += seconds
        while next_scrape <= now:
            frames.append(m.scrape(T0_NS + int(next_scrape * 1e9)))
            next_scrape += scrape_s
        for _ in range(STREAMS):
            m.itl.observe(seconds)
        for size, prefill_s in finished:
            tokens.observe(size)
            m.prefill_time.observe(prefill_s)
    frames.append(m.scrape(T0_NS + int(next_scrape * 1e9)))
    return pd.concat(frames, ignore_index=True).assign(target="vllm")


def _slowest(run: pd.DataFrame):
    fams = ("vllm:request_prompt_tokens", "vllm:inter_token_latency_seconds", S.PREFILL_TIME)
    parts = split_metrics(run, [f + end for f in fams for end in ("_sum", "_count", "_bucket")])
    intervals = S.prompt_intervals(parts, fams[0])
    return S.slowest_step(parts, fams[1], intervals, S.long_prompts(parts, intervals), STREAMS)


def test_a_511_token_chunk_step_is_sized_as_one_and_holds_no_long_prefill():
    """Budget 512 beside one decode: three 511-token chunks (1.02 s) and a 317-token one (0.65 s) per 1,850-token
    prompt, 3.72 s in all. The slowest interval mean is one chunk step: 1,850 x 1.02 / 3.72 = 508 tokens, under
    1.05 x 512. The ITL buckets put those steps in (1 s, 2.5 s] with the 639-token ones below."""
    run = _run(512)
    found = _slowest(run)
    assert found.step_s == pytest.approx(DECODE_S + PER_TOKEN_S * 511, rel=1e-6)
    assert (found.prompt_tokens, found.prefill_s) == (pytest.approx(1850.0), pytest.approx(3.715, rel=1e-4))
    assert found.chunk_tokens == pytest.approx(508.4, abs=0.5)
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.enabled is True and inferred.slowest_step_s == pytest.approx(found.step_s)
    assert inferred.budget_estimate == pytest.approx(508.4, abs=0.5)
    assert inferred.budget_floor == inferred.budget_estimate
    assert inferred.holds_long_prefills() is False and inferred.margin() == C.STEP_MARGIN
    assert "held about 508 of a 1850-token prompt prefilled in 3.71 s (exact means)" in inferred.detail


def test_a_host_pause_is_not_taken_for_the_slowest_chunk():
    """The 512 run with the host paused for 1.8 s in two of its six cycles (the step before a long prompt, which
    computed no chunk): the two largest interval means are the pauses, which would read 1,850 x 1.8 / 3.72 = 896
    tokens. The median long prompt's slowest step, the third largest mean of six prompts', is the 511-token
    chunk's 1.02 s. With pauses in half the cycles, the pauses are what the median prompt saw."""
    run = _run(512, pauses=2)
    found = _slowest(run)
    assert found.step_s == pytest.approx(DECODE_S + PER_TOKEN_S * 511, rel=1e-6)
    assert found.chunk_tokens == pytest.approx(508.4, abs=0.5)
    assert CI.infer_from_histograms(run, 0.2).holds_long_prefills() is False
    assert _slowest(_run(512, pauses=3)).step_s == pytest.approx(1.8)


def test_a_639_token_chunk_step_holds_a_long_prefill():
    """Budget 640: chunks of 639, 639 and 572 tokens (1.26 s, 1.26 s, 1.14 s), 3.67 s in all: 1,850 x 1.264 /
    3.665 = 638 tokens, over 1.05 x 512; the same (1 s, 2.5 s] bucket as the 511-token steps."""
    inferred = CI.infer_from_histograms(_run(640), 0.2)
    assert inferred.budget_estimate == pytest.approx(638.0, abs=1.0)
    assert inferred.holds_long_prefills() is True and inferred.step_held() == "a chunk of about 638 prompt tokens"


def test_scrapes_coarser_than_the_slowest_step_leave_it_to_the_buckets():
    """The 512 run scraped every 5 s: each interval's mean mixes chunk and decode steps (under 5 s), so it sizes
    no step; the bucket-bound estimate and its 1.5 x 512 margin decide, as before: P / 3 gaps per stream in the
    (1 s, 2.5 s] bucket = 617."""
    run = _run(512, scrape_s=5.0, cycles=10)
    assert _slowest(run) is None
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.slowest_step_s is None and inferred.margin() == C.ESTIMATE_MARGIN
    assert inferred.budget_estimate == pytest.approx(1850 / 3) and inferred.holds_long_prefills() is False


def test_without_an_interval_that_finished_long_prompts_alone_nothing_is_sized():
    """Every long prompt's last chunk step also finished a 37-token prompt, so no interval finished long prompts
    alone: their size and prefill time are not exact, and no step is sized."""
    run = _run(512, beside=37)
    assert _slowest(run) is None and CI.infer_from_histograms(run, 0.2).slowest_step_s is None


def test_prompts_back_to_back_are_sized_by_the_prompt_token_rate():
    """Budget 576, ten 1,250-token prompts back to back per cycle (h42-small-chunk576-s15's shape): every step
    computes 575 prompt tokens (1.14 s), and each prompt's first chunk rides in its predecessor's last step, so
    its prefill spans steps it shared (3.51 s) and P x G / T reads 406. The run computed 492 prompt tokens a
    second: x 1.14 s = 562, over 1.05 x 512, and under the 575 the steps held."""
    run = _run(576, 1250, cycles=3, back_to_back=10, decodes=10)
    found = _slowest(run)
    assert found.prompt_share == pytest.approx(406.5, abs=0.5)
    assert found.prompt_rate == pytest.approx(491.6, abs=0.5) and found.chunk_tokens == pytest.approx(561.7, abs=0.5)
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.holds_long_prefills() is True
    assert "held about 562 prompt tokens at the run's 492 a second" in inferred.detail


def _waited(run: pd.DataFrame):
    fams = ("vllm:request_prompt_tokens", "vllm:inter_token_latency_seconds", S.PREFILL_TIME)
    parts = split_metrics(run, [f + end for f in fams for end in ("_sum", "_count", "_bucket")]
                          + ["vllm:num_requests_running"])
    return S.longest_wait(parts, fams[1], S.long_prompts(parts, S.prompt_intervals(parts, fams[0])))


def test_a_whole_prompts_step_puts_its_whole_prefill_in_one_interval_per_stream():
    """Chunking off (one 3.57 s step per 1,850-token prompt): the interval that step ended in holds 3.57 s of ITL
    per running stream, all of T. In 511-token chunks, no interval holds more than a chunk step and the scrape
    interval's decodes: under 0.9 x T, so the buckets' "off" would not stand."""
    whole_m, whole_t = _waited(_run(4096))
    assert whole_t == pytest.approx(DECODE_S + PER_TOKEN_S * 1850) and whole_m >= whole_t
    chunk_m, chunk_t = _waited(_run(512))
    assert chunk_t == pytest.approx(3.715, rel=1e-4) and chunk_m < CI.WHOLE_WAIT_SHARE * chunk_t
    assert chunk_m == pytest.approx(DECODE_S + PER_TOKEN_S * 511, rel=0.5)
    assert CI.infer_from_histograms(_run(4096), 0.2).enabled is False


def test_streams_that_finish_inside_an_interval_still_waited_in_it():
    """The chunked run again, its sessions finishing in the last scrape interval (the gauge reads 1 at its end,
    10 at its start): that interval's ITL sum is ten streams' waits, so it reads per stream at 10, and chunk
    steps still stay under 0.9 x T. Read at the end alone, it would pass for one stream's whole-prompt wait."""
    run = _run(512)
    last = (run["metric"] == "vllm:num_requests_running") & (run["ts"] == run["ts"].max())
    run.loc[last, "value"] = 1.0
    m, t = _waited(run)
    assert m < CI.WHOLE_WAIT_SHARE * t
    assert m == pytest.approx(_waited(_run(512))[0])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(0.005, 30.0), min_size=1, max_size=12), min_size=1, max_size=5))
def test_the_top_buckets_floor_lies_between_the_intervals_mean_and_its_slowest_gap(intervals):
    """Whatever gaps a scrape interval's ITL histogram observed (vLLM's buckets, prometheus_client's exposition),
    the floor `top_bucket_floor` puts under its top bucket's samples is at least their bucket's lower bound and
    never above the slowest gap: the faster samples are taken at their buckets' upper bounds, never lower."""
    m = VllmMetrics()
    frames = [m.scrape(T0_NS)]
    for k, gaps in enumerate(intervals, start=1):
        for gap in gaps:
            m.itl.observe(gap)
        frames.append(m.scrape(T0_NS + k * 10**9))
    parts = split_metrics(pd.concat(frames, ignore_index=True).assign(target="vllm"),
                          [f"vllm:inter_token_latency_seconds{end}" for end in ("_sum", "_bucket")])
    sums = interval_increase(parts["vllm:inter_token_latency_seconds_sum"])
    got = S.top_bucket_floor(parts["vllm:inter_token_latency_seconds_bucket"], sums)
    for (ts, row), gaps in zip(got.iterrows(), intervals):
        assert row["floor"] <= max(gaps) + 1e-9
        assert row["floor"] >= sum(gaps) / len(gaps) - 1e-9 or row["n"] < len(gaps)
        top = min(b for b in ITL_BUCKETS if b >= max(gaps)) if max(gaps) <= ITL_BUCKETS[-1] else float("inf")
        lower = max(b for b in [0.0, *ITL_BUCKETS] if b < top)
        assert row["n"] == sum(1 for g in gaps if g > lower)
        assert row["floor"] >= lower
