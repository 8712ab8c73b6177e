"""The slowest step sized from the histograms' exact `_sum` / `_count`: a 511-token chunk step and a 639-token one
land in the same (1 s, 2.5 s] ITL bucket, but not in the same scrape-interval mean."""

import pandas as pd
import pytest
from prometheus_client import Histogram

from expo_frames import T0_NS, VllmMetrics
from stallscope.analyzers import chunking as C
from stallscope.analyzers import slow_step as S
from stallscope.analyzers.signals import split_metrics

DECODE_S, PER_TOKEN_S, STREAMS = 0.05, 0.0019, 10   # `small` on this host: a 511-token chunk step takes ~1.02 s


def _steps(budget: int, long_tokens: int, cycles: int, short_beside_last: bool):
    """(seconds, prompt sizes whose prefill ended) per engine step: 40 decode steps with a 37-token prompt every
    tenth, then one long prompt in chunks of `budget - 1` tokens beside one decode (its last chunk beside a 37-token
    prompt too when `short_beside_last`), per cycle."""
    out = []
    for _ in range(cycles):
        for k in range(40):
            out.append((DECODE_S + PER_TOKEN_S * 37, [37]) if k % 10 == 9 else (DECODE_S, []))
        left = long_tokens
        while left > 0:
            chunk = min(budget - 1 - 37 * short_beside_last, left)
            left -= chunk
            last = [long_tokens] + [37] * short_beside_last
            out.append((DECODE_S + PER_TOKEN_S * (chunk + 37 * (short_beside_last and not left)), [] if left else last))
    return out


def _run(budget: int, long_tokens: int = 1850, scrape_s: float = 0.5, cycles: int = 6,
         short_beside_last: bool = False) -> pd.DataFrame:
    """The run's vLLM histograms scraped every `scrape_s` (prometheus_client's own exposition): every running
    stream gets one token per step, and a prompt's size and prefill time are observed when its prefill ends."""
    m = VllmMetrics()
    tokens = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", ["model_name", "engine"],
                       buckets=[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000], registry=m.registry
                       ).labels(**m.labels)
    m.running.set(STREAMS)
    frames, now, next_scrape, started = [m.scrape(T0_NS)], 0.0, scrape_s, None
    for seconds, finished in _steps(budget, long_tokens, cycles, short_beside_last):
        now += seconds
        while next_scrape <= now:
            frames.append(m.scrape(T0_NS + int(next_scrape * 1e9)))
            next_scrape += scrape_s
        for _ in range(STREAMS):
            m.itl.observe(seconds)
        started = (now - seconds) if started is None and seconds > 0.5 else started
        for size in finished:
            tokens.observe(size)
            m.prefill_time.observe(now - started if size > 500 else seconds)
        started = None if finished and finished[0] > 500 else started
    frames.append(m.scrape(T0_NS + int(next_scrape * 1e9)))
    return pd.concat(frames, ignore_index=True).assign(target="vllm")


def _slowest(run: pd.DataFrame):
    fams = ("vllm:request_prompt_tokens", "vllm:inter_token_latency_seconds", S.PREFILL_TIME)
    parts = split_metrics(run, [f + end for f in fams for end in ("_sum", "_count", "_bucket")])
    return S.slowest_step(parts, fams[1], S.prompt_intervals(parts, fams[0]), STREAMS)


def test_a_511_token_chunk_step_is_sized_as_one_and_holds_no_long_prefill():
    """Budget 512 beside one decode: three 511-token chunks (1.02 s) and a 317-token one (0.65 s) per 1,850-token
    prompt, 3.72 s in all. The slowest interval mean is one chunk step: 1,850 x 1.02 / 3.72 = 508 tokens, under
    1.05 x 512. The ITL buckets put those steps in (1 s, 2.5 s] with the 639-token ones below."""
    run = _run(512)
    found = _slowest(run)
    assert found.step_s == pytest.approx(DECODE_S + PER_TOKEN_S * 511, rel=1e-6)
    assert (found.prompt_tokens, found.prefill_s) == (pytest.approx(1850.0), pytest.approx(3.715, rel=1e-4))
    assert found.chunk_tokens == pytest.approx(508.4, abs=0.5)
    inferred = C.infer_from_histograms(run, 0.2)
    assert inferred.enabled is True and inferred.slowest_step_s == pytest.approx(found.step_s)
    assert inferred.budget_estimate == pytest.approx(508.4, abs=0.5) and inferred.budget_floor == inferred.budget_estimate
    assert inferred.holds_long_prefills() is False and inferred.margin() == C.STEP_MARGIN
    assert "held about 508 of a 1850-token prompt prefilled in 3.71 s (exact means)" in inferred.detail


def test_a_639_token_chunk_step_holds_a_long_prefill():
    """Budget 640: chunks of 639, 639 and 572 tokens (1.26 s, 1.26 s, 1.14 s), 3.67 s in all: 1,850 x 1.264 /
    3.665 = 638 tokens, over 1.05 x 512; the same (1 s, 2.5 s] bucket as the 511-token steps."""
    inferred = C.infer_from_histograms(_run(640), 0.2)
    assert inferred.budget_estimate == pytest.approx(638.0, abs=1.0)
    assert inferred.holds_long_prefills() is True and inferred.step_held() == "a chunk of about 638 prompt tokens"


def test_scrapes_coarser_than_the_slowest_step_leave_it_to_the_buckets():
    """The 512 run scraped every 5 s: each interval's mean mixes chunk and decode steps (under 5 s), so it sizes
    no step; the bucket-bound estimate and its 1.5 x 512 margin decide, as before: P / 3 gaps per stream in the
    (1 s, 2.5 s] bucket = 617."""
    run = _run(512, scrape_s=5.0, cycles=10)
    assert _slowest(run) is None
    inferred = C.infer_from_histograms(run, 0.2)
    assert inferred.slowest_step_s is None and inferred.margin() == C.ESTIMATE_MARGIN
    assert inferred.budget_estimate == pytest.approx(1850 / 3) and inferred.holds_long_prefills() is False


def test_without_an_interval_that_finished_long_prompts_alone_nothing_is_sized():
    """Every long prompt's last chunk step also finished a 37-token prompt, so no interval finished long prompts
    alone: their size and prefill time are not exact, and no step is sized."""
    run = _run(512, short_beside_last=True)
    assert _slowest(run) is None and C.infer_from_histograms(run, 0.2).slowest_step_s is None
