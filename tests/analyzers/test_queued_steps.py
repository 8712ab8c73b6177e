"""The prompt tokens per step while requests queued: a floor under the largest chunk that 5 s scrapes can read,
from an overloaded V1 engine's own counters (prometheus_client's exposition, vLLM's names and buckets)."""

import pandas as pd
import pytest
from prometheus_client import Histogram

from expo_frames import T0_NS, VllmMetrics
from stallscope.analyzers import chunking_inference as CI
from stallscope.analyzers import queued_steps as QS
from stallscope.analyzers.signals import split_metrics

DECODE_S, PER_TOKEN_S, DECODES = 0.05, 0.0019, 10   # `small` on this host: a 630-token chunk step takes ~1.25 s


def _overloaded(budget: int, prompt: int = 1450, prompts: int = 40, scrape_s: float = 5.0,
                stalled_every: int = 0, queued: bool = True) -> pd.DataFrame:
    """`prompts` prompts queued from the start and prefilled back to back in chunks of `budget - DECODES` beside
    `DECODES` running decodes, scraped every `scrape_s`. vLLM's timing: a prompt's tokens, size and prefill time
    are counted when its prefill completes; one `iteration_tokens_total` observation per step; one ITL sample
    per decode. `stalled_every`: every so many steps one decode's sample also spans 3 s it waited preempted.
    `queued` False: the waiting gauge reads 0 throughout."""
    m = VllmMetrics()
    tokens = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", ["model_name", "engine"],
                       buckets=[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000], registry=m.registry
                       ).labels(**m.labels)
    m.running.set(DECODES + 1)
    frames, now, next_scrape, step = [m.scrape(T0_NS)], 0.0, scrape_s, 0
    left, begun, done = prompt, None, 0
    while done < prompts:
        m.waiting.set(prompts - done - 1 if queued else 0)
        room, finished = budget - DECODES, []
        begun = now if begun is None else begun
        while room:
            take = min(room, left)
            room, left = room - take, left - take
            if left == 0:
                finished.append(begun)
                done, left, begun = done + 1, prompt, now
                if done == prompts:
                    break
        seconds = DECODE_S + PER_TOKEN_S * (budget - DECODES - room)
        now, step = now + seconds, step + 1
        while next_scrape <= now:
            frames.append(m.scrape(T0_NS + int(next_scrape * 1e9)))
            next_scrape += scrape_s
        for k in range(DECODES):
            m.itl.observe(seconds + (3.0 if stalled_every and k == 0 and step % stalled_every == 0 else 0.0))
        for start in finished:
            tokens.observe(prompt)
            m.prefill_time.observe(now - start)
            m.prompt.inc(prompt)
        m.iteration.observe(prompt * len(finished) + DECODES)
    frames.append(m.scrape(T0_NS + int(next_scrape * 1e9)))
    return pd.concat(frames, ignore_index=True).assign(target="vllm")


def _queued(run: pd.DataFrame, prompt: float = 1450.0):
    itl = "vllm:inter_token_latency_seconds"
    return QS.queued_steps(split_metrics(run, [*QS.NAMES, f"{itl}_sum", f"{itl}_count"]), itl, prompt)


def test_a_640_budgets_queued_steps_read_its_630_token_chunks_and_a_floor_under_them():
    """Budget 640 beside 10 decodes: every step computes 630 prompt tokens. Over 5 s scrapes the mean reads 637:
    the first queued interval counts a prompt begun before it opened. The floor takes a whole 1,450-token prompt
    off for that: 620, under the 630 and over 512."""
    found = _queued(_overloaded(640))
    assert (found.stretches, found.intervals, found.tokens) == (1, 21, 37 * 1450.0)
    assert found.mean == pytest.approx(637.2, abs=0.1) and found.floor == pytest.approx(619.9, abs=0.1)
    assert found.floor == pytest.approx((found.tokens - 1450.0) / found.steps)


def test_a_512_budgets_floor_stays_under_the_cut():
    """Budget 512 beside 10 decodes: 502-token chunks; the mean reads 497 and the floor 483."""
    found = _queued(_overloaded(512))
    assert found.mean == pytest.approx(497.1, abs=0.1) and found.floor == pytest.approx(483.3, abs=0.1)


def test_the_mean_alone_reads_a_512_budgets_chunks_over_the_cut_so_only_the_floor_decides():
    """Budget 512 beside 10 decodes computes 502-token chunks, never 512. Over the 14 queued intervals of 2,600-token
    prompts the mean reads 520: the stretch counts the prompt in progress at its start, and its end leaves less
    uncounted. The floor reads 483, and the inference holds no long prefill."""
    run = _overloaded(512, prompt=2600, prompts=16)
    found = _queued(run, 2600.0)
    assert (found.intervals, found.stretches) == (14, 1)
    assert found.mean == pytest.approx(520.0, abs=0.1) and found.floor == pytest.approx(482.9, abs=0.1)
    assert CI.infer_from_histograms(run, 0.2).holds_long_prefills() is False


def test_a_preempted_decodes_long_gap_does_not_lift_the_mean():
    """Every fifth step one decode's ITL sample also spans 3 s it waited: the mean ITL reads high, so the steps it
    counts read low (80.3, the mean 668); the `iteration_tokens_total` count, one per step, is kept: 84 steps,
    the mean 639."""
    run = _overloaded(640, stalled_every=5)
    found = _queued(run)
    assert found.steps == 84.0 and found.mean == pytest.approx(638.7, abs=0.1)
    by_itl_alone = _queued(run[run["metric"] != QS.ITERATIONS])
    assert by_itl_alone.steps == pytest.approx(80.3, abs=0.1) and by_itl_alone.mean == pytest.approx(668.2, abs=0.1)


def test_nothing_queued_reads_nothing():
    assert _queued(_overloaded(640, queued=False)) is None


@pytest.mark.parametrize("metric,value", [("vllm:inter_token_latency_seconds_sum", 0.0),
                                          ("vllm:prompt_tokens_total", float("inf"))])
def test_counters_that_size_nothing_read_nothing(metric, value):
    """An ITL `_sum` that never moved (no division by it) or a prompt counter that overflowed to inf."""
    run = _overloaded(640)
    run.loc[run["metric"] == metric, "value"] = value
    assert _queued(run) is None


def test_five_second_scrapes_infer_a_long_prefill_from_the_floor():
    """The same 640 run as the metrics alone show it: the 5 s scrapes size no step, and the ITL buckets put a
    1.25 s chunk step with a whole prompt's, but the queued steps' floor says some step held over 512."""
    inferred = CI.infer_from_histograms(_overloaded(640), 0.2)
    assert inferred.enabled is True and inferred.slowest_step_s is None
    assert inferred.queued_floor >= 512 and inferred.holds_long_prefills() is True
    assert "while requests waited" in inferred.detail
    assert inferred.chunk_estimate() >= inferred.queued_floor
