"""Chunking read off the metrics over many scrapes: the long prompts' size from the token histogram's sum, and
the ITL gaps above the SLO that short prompts' prefills cause on a slow host, which bound no chunk."""

import pandas as pd
import pytest
from prometheus_client import Histogram

from expo_frames import T0_NS, VllmMetrics
from stallscope.analyzers import chunking_inference as CI
from stallscope.analyzers.signals import split_metrics

SECOND = 10**9


def _metrics(running):
    """vLLM's metrics with vLLM's request-token buckets, `running` streams, and the first scrape."""
    m = VllmMetrics()
    tokens = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", ["model_name", "engine"],
                       buckets=[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000], registry=m.registry
                       ).labels(**m.labels)
    m.running.set(running)
    return m, tokens, [m.scrape(T0_NS)]


def _scrapes(n_intervals, long_at, *, long_tokens=950, short_tokens=37, shorts=5, running=10, prefill_s=2.0,
             chunk_gaps=(1.3, 17), short_gaps=(0.21, 0), beside_s=None):
    """`n_intervals` one-second scrape intervals of vLLM's histograms (prometheus_client's own exposition):
    each finishes `shorts` prompts of `short_tokens` (0.2 s prefill) and 60 decode gaps of 70 ms per stream,
    plus `short_gaps` = (seconds, count): gaps a short prompt's prefill step held; the intervals in `long_at`
    also finish one prompt of `long_tokens`, taking `prefill_s` (or the next of a list of them), whose chunk steps
    held `chunk_gaps`, and with `beside_s` a short prompt that shared its step, taking that long."""
    m, tokens, frames = _metrics(running)
    for k in range(1, n_intervals + 1):
        for _ in range(shorts):
            tokens.observe(short_tokens)
            m.prefill_time.observe(0.2)
        for _ in range(60):
            m.itl.observe(0.07)
        for _ in range(short_gaps[1]):
            m.itl.observe(short_gaps[0])
        if k in long_at:
            tokens.observe(long_tokens)
            m.prefill_time.observe(prefill_s if isinstance(prefill_s, float) else prefill_s[sorted(long_at).index(k)])
            for _ in range(chunk_gaps[1]):
                m.itl.observe(chunk_gaps[0])
            if beside_s is not None:
                tokens.observe(short_tokens)
                m.prefill_time.observe(beside_s)
        frames.append(m.scrape(T0_NS + k * SECOND))
    return pd.concat(frames, ignore_index=True).assign(target="vllm")


def _parts(samples):
    names = [f"vllm:request_prompt_tokens{end}" for end in ("_sum", "_count", "_bucket")]
    return split_metrics(samples, names)


def test_the_long_prompts_size_comes_from_the_sum_less_the_short_prompts_seen_alone():
    """Buckets read a 950-token prompt as 750 (the middle of vLLM's (500, 1000]); the sum says 950: the
    intervals without a long prompt show the short ones are 37 tokens each."""
    run = _scrapes(12, long_at={4, 9})
    assert CI.long_prompt_mean(CI.prompt_intervals(_parts(run), "vllm:request_prompt_tokens")) == pytest.approx(950.0)
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.long_prompt_tokens == pytest.approx(950.0)
    assert "of a 950-token prompt" in inferred.detail   # the budget estimate is a share of it


def test_without_an_interval_free_of_long_prompts_the_short_prompts_buckets_stand_in():
    """Every interval finished a long prompt, so nothing shows the short prompts' size alone (scrapes as coarse
    as the long prompts' arrivals). Their buckets do: 20 prompts in (20, 50], taken at 35 tokens each, leave
    (4 x 950 + 20 x 37 - 20 x 35) / 4 = 960 for the long ones, where the long prompts' bucket alone reads 750
    (the middle of (500, 1000])."""
    run = _scrapes(4, long_at={1, 2, 3, 4})
    assert CI.long_prompt_mean(CI.prompt_intervals(_parts(run), "vllm:request_prompt_tokens")) is None
    assert CI.infer_from_histograms(run, 0.2).long_prompt_tokens == pytest.approx(960.0)
    parts = _parts(run)
    assert CI.long_prompt_mean(CI.prompt_intervals(parts, "vllm:request_prompt_tokens"), 35.0) == pytest.approx(960.0)


def test_the_short_prompts_buckets_never_take_the_long_ones_out_of_their_own_bucket():
    """51-token short prompts sit low in (50, 100]: taken at 75 each, the 20 of them leave (4 x 1,050 + 20 x 51
    - 20 x 75) / 4 = 930 for the long ones, under the (1000, 2000] bucket every long prompt fell in: P is held
    at that bucket's lower bound, 1,000."""
    run = _scrapes(4, long_at={1, 2, 3, 4}, long_tokens=1050, short_tokens=51)
    assert CI.infer_from_histograms(run, 0.2).long_prompt_tokens == pytest.approx(1000.0)


def test_short_prompts_in_wide_buckets_leave_the_long_prompts_size_to_their_own_bucket():
    """80 short prompts of 300 tokens in (200, 500] could each be 150 tokens off their bucket's middle: 3,000 per
    long prompt at worst, where the long prompts' own bucket, (500, 1000], leaves them 250 off at most. The
    bucket decides: 750."""
    run = _scrapes(4, long_at={1, 2, 3, 4}, short_tokens=300, shorts=20)
    assert CI.infer_from_histograms(run, 0.2).long_prompt_tokens == pytest.approx(750.0)


def test_a_run_of_long_prompts_only_is_its_sum_over_its_count():
    run = _scrapes(6, long_at={2, 5}, shorts=0, long_tokens=1450)
    assert CI.long_prompt_mean(CI.prompt_intervals(_parts(run), "vllm:request_prompt_tokens")) == pytest.approx(1450.0)


def test_short_prompt_prefills_above_the_slo_on_a_slow_host_bound_no_chunk():
    """`small` on a slow host (h19-small-chunk768-s10): a step that prefills one 40-token prompt beside nine
    decodes takes 0.21 s, over the 200 ms SLO, in every interval, long prompt or not. The 1,450-token prompts
    ran in 768-token chunks (2.8 s steps, 17 gaps each in (2.5, 5]). Counted as chunk steps, those 0.21 s gaps
    made 16 slow gaps per long prefill per stream and bounded the chunk to 1,450 / 15 = 97 tokens; the
    intervals with no long prefill show them at 10 a second, which leaves 1.7 per prefill per stream: no bound."""
    run = _scrapes(30, long_at={8, 22}, long_tokens=1450, prefill_s=5.6, chunk_gaps=(2.8, 17), short_gaps=(0.21, 10))
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.enabled is True and inferred.budget_bound is None
    assert inferred.budget_estimate >= 768 and inferred.holds_long_prefills() is True


def test_gaps_above_the_slo_only_beside_long_prefills_still_bound_the_chunk():
    """The same run with no short-prompt gap above the SLO, and 60 chunk-step gaps per long prefill (6 per
    stream, 1.3 s each): 1,450 / (6 - 1) = 290 tokens at most per step, under the 512 cut."""
    run = _scrapes(30, long_at={8, 22}, long_tokens=1450, prefill_s=7.8, chunk_gaps=(1.3, 60))
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.budget_bound == pytest.approx(290.0)
    assert inferred.holds_long_prefills() is False


def test_two_slow_steps_per_long_prompt_hold_half_of_it_each_on_average():
    """`small`, budget 640, 1,300-token prompts (h22-small-chunk640-s16-scrape1s's shape): each prompt ran in two
    0.95 s chunk steps, 2 gaps per running stream (20 per prefill over 10 streams), all in (0.75 s, 1 s]. The
    estimate (P / K = 650) is under 1.5 x 512 and reads "no long prefill"; the same count against the SLO says
    the slow steps held 650 tokens each on average, over 1.2 x 512, so one of them held 512 or more."""
    run = _scrapes(30, long_at={8, 22}, long_tokens=1300, prefill_s=1.9, chunk_gaps=(0.95, 20))
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.enabled is True and inferred.budget_estimate < 768
    assert inferred.slow_share == pytest.approx(650.0)
    assert inferred.holds_long_prefills() is True and not inferred.estimate_unsettled()
    assert "(about 650 prompt tokens per such step on average)" in inferred.detail
    assert inferred.step_held() == "a chunk of about 650 prompt tokens"   # the figure that decided, not P / K
    unbounded = CI.infer_from_histograms(run)             # without an SLO there is no count: the estimate decides
    assert unbounded.slow_share is None and unbounded.holds_long_prefills() is False


@pytest.mark.parametrize("gaps,share,holds", [
    (30, 433.3, False),   # three slow steps per prompt: 433 on average, under 1.2 x 512 (the bound, 650, allows more)
    (24, 541.7, False),   # 2.4 per prompt: 542, over the cut but under the margin
    (10, None, None),     # one per prompt per stream: whole-prompt steps (inferred off); the count says nothing
])
def test_the_slow_step_share_decides_only_above_its_margin(gaps, share, holds):
    run = _scrapes(30, long_at={8, 22}, long_tokens=1300, prefill_s=1.9 * gaps / 20, chunk_gaps=(0.95, gaps))
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.slow_share == (None if share is None else pytest.approx(share, rel=1e-3))
    assert inferred.enabled is (holds is not None)
    assert inferred.holds_long_prefills() is (True if holds is None else holds)


def _gap_scrapes(gaps_at, long_at, *, prompt_tokens, prefill_s, running, n_intervals):
    """1 s scrapes of `running` streams: in interval k each stream observes the gaps `gaps_at[k]` (else 14 decode
    gaps of 70 ms), and the intervals in `long_at` finish one `prompt_tokens` prompt prefilled in `prefill_s`."""
    m, tokens, frames = _metrics(running)
    for k in range(1, n_intervals + 1):
        for gap in gaps_at.get(k, [0.07] * 14):
            for _ in range(running):
                m.itl.observe(gap)
        if k in long_at:
            tokens.observe(prompt_tokens)
            m.prefill_time.observe(prefill_s)
        frames.append(m.scrape(T0_NS + k * SECOND))
    return pd.concat(frames, ignore_index=True).assign(target="vllm")


def _two_chunk_scrapes(first_gap_s, *, prompt_tokens=700, prefill_s=1.5, running=10, n_intervals=20,
                       with_first=()):
    """1 s scrapes of `running` streams decoding at 70 ms, and two `prompt_tokens` prompts run as two chunk
    steps each (`first_gap_s`, then the rest of `prefill_s`), as `small` ran 700-token prompts at a 512 budget
    (h47-full/h47-small-chunk512-s14-scrape1s): the first prompt's two gaps end in interval 5, so each stream
    waits out the whole prefill there, as a whole-prompt step leaves it; the second's first gap alone fills
    interval 11 (its mean is that step) unless `with_first` adds gaps there, and its second gap ends in interval
    12 with the prompt."""
    gaps = {5: [first_gap_s, prefill_s - first_gap_s], 11: [first_gap_s, *with_first],
            12: [prefill_s - first_gap_s] + [0.07] * 7}
    return _gap_scrapes(gaps, (5, 12), prompt_tokens=prompt_tokens, prefill_s=prefill_s, running=running,
                        n_intervals=n_intervals)


@pytest.mark.parametrize("first_gap_s,enabled,holds", [
    (1.05, True, False),   # 511 + 189 tokens: the slowest step held 700 x 1.05 / 1.5 = 490, under 1.05 x 512
    (1.30, False, True),   # 640 + 60 at a 640 budget: 607 tokens, a long prefill either way
])
def test_two_chunks_in_one_scrape_interval_are_told_from_one_step_by_the_slowest_steps_exact_size(
        first_gap_s, enabled, holds):
    """Both prompts wait out their whole 1.5 s prefill in one interval and every slow gap sits in vLLM's (1 s,
    2.5 s] bucket, which reads as whole-prompt steps; interval 11's exact mean sizes the slowest step."""
    inferred = CI.infer_from_histograms(_two_chunk_scrapes(first_gap_s), 0.2)
    assert inferred.enabled is enabled
    assert inferred.holds_long_prefills() is holds
    if enabled:
        assert inferred.slowest_step_s == pytest.approx(first_gap_s)
        assert inferred.budget_estimate == pytest.approx(700 * first_gap_s / 1.5)
        assert "the slowest step, sized exactly, held under the whole prompt" in inferred.detail


def test_a_slow_steps_mean_mixed_with_other_gaps_does_not_size_it():
    """h54-full/h54-small-chunk832-850-s4-scrape1s: 850-token prompts at an 832 budget, 1.6 s chunk steps of 828
    tokens, and 1 s scrapes. The slowest interval held the 1.6 s gap and a 0.49 s one per stream: its mean, 1.045 s,
    passes for a step at least a scrape long, and would size it at 850 x 1.045 / 1.77 = 502 tokens. Two tokens
    per running stream there say it is a mix, so the whole-prefill reading stands."""
    run = _two_chunk_scrapes(1.6, prompt_tokens=850, prefill_s=1.77, with_first=(0.49,))
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.enabled is False and inferred.holds_long_prefills() is True


@pytest.mark.parametrize("gap_s,whole", [(0.39, True), (0.29, False)])
def test_a_whole_step_just_under_a_bucket_bound_below_the_prefill_time_reads_as_whole(gap_s, whole):
    """h55-full/h55-tiny-nochunk-1900-s6: chunking off, 1,900-token prompts whose 0.39 s steps fell in (0.3 s,
    0.4 s] while their median prefill time read 0.433 s (one of four queued behind another, 0.6 s), so the bucket
    bound said the gap was shorter than the prefill. The share of the prompt that leaves, 1,900 x 0.4 / 0.433 =
    1,754 tokens (92 %), is a whole prompt's step, stated as off or a budget that holds most of it; steps in
    (0.2 s, 0.3 s] leave 1,315 (69 %): chunks."""
    run = _scrapes(30, long_at={5, 9, 13, 17}, long_tokens=1900, prefill_s=[0.42, 0.42, 0.42, 0.6],
                   chunk_gaps=(gap_s, 10))
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.whole_prompts_inferred() is whole
    assert inferred.holds_long_prefills() is True
    if whole:
        assert inferred.describe().startswith("chunked prefill off, or on with a budget that holds most of a long "
                                              "prompt (about 1900 tokens)")
        assert "that is 92% of the prompt" in inferred.detail
    else:
        assert inferred.enabled is True and inferred.budget_estimate == pytest.approx(1900 * 0.3 / 0.4333, rel=1e-3)


@pytest.mark.parametrize("freezes,prefill_s,off", [
    ([(0.0, True), (10.0, False)], 8.75, True),   # ended: the next step was another whole prompt (held-out 139)
    ([(3.0, True)], 3.75, True),                  # still frozen at the end: the histogram cannot hold it yet
    ([(2.0, True), (2.5, False)], 3.75, False),   # both under 3/4 of the 3.75 s prefill: chunk steps
    ([(0.0, True), (6.5, False)], 8.75, False),   # 6.5 s is under 3/4 of 8.75 s
])
def test_a_freeze_of_three_quarters_of_a_prefill_overrules_chunking_open_or_ended(freezes, prefill_s, off):
    """held-out 139's `h139-small-nochunk-1350-s2` (quick): the histograms read chunking on (the longest ITL gap
    under 0.2 s against an 8.75 s median prefill of 1,350-token prompts), but one whole-prompt step after another
    held the streams, nothing moving for 10.0 s in one of them, and the data ended before any stream had its next
    token. A freeze that ended counts as one still open: no step ended inside it (no counter, no gauge moved)."""
    from stallscope.analyzers.chunking import Chunking

    on = Chunking(True, None, "inferred from metrics", "x", budget_estimate=12.0, long_prefill_s=prefill_s,
                  long_prompt_tokens=1350.0)
    got = CI.frozen_through_prefill(on, freezes)
    assert got.enabled is (not off)
    if off:
        longest = max(s for s, _ in freezes)
        assert got.detail.startswith(f"the streams froze for {longest:.1f} s with nothing moving")
        assert got.long_prompt_tokens == 1350.0


def test_a_freeze_that_ended_is_told_from_the_one_still_open_by_the_scrapes_not_the_episode():
    """held-out 68's freeze ended 11 s before the data did, inside an episode that ran to the end: the
    scrapes' `nothing_for_s` says which freeze is open at the last scrape (2 s here) and which ended (3 s).
    Rows outside every episode (an engine asleep for 9 s) are not freezes of its streams."""
    from stallscope.analyzers.episodes import Episode
    from stallscope.analyzers.stream_stalls import _freezes

    still = [9.0, 0, 0, 1, 2, 3, 0, 0, 1, 2]
    sig = pd.DataFrame({"ts": [T0_NS + k * 10**9 for k in range(len(still))], "nothing_for_s": still})
    episode = Episode("", 2, 9, 0, 0, "prefill", "warning", "", {"nothing_moves_s": 3.0}, [], True)
    assert _freezes(sig, [episode]) == [(2.0, True), (3.0, False)]
    assert _freezes(sig.drop(columns="nothing_for_s"), [episode]) == [(3.0, True)]


def _few_long_prompts(beside: int):
    """h86/h86-tiny-nochunk-1700-s2 (chunking off, 1,700-token prompts as one 0.26 s step each, the median
    prefill 0.29 s): 1 s scrapes of one stream decoding at 30 ms and 20-token prompts; intervals 6 and 14 also
    finish a long prompt, whose step held two streams (two 0.26 s gaps each), and the running gauge shows
    `beside` at the scrapes that close them, 1 at every other."""
    m, tokens, frames = _metrics(1)
    for k in range(1, 21):
        for _ in range(30):
            m.itl.observe(0.03)
        tokens.observe(20)
        m.prefill_time.observe(0.02)
        if k in (6, 14):
            tokens.observe(1700)
            m.prefill_time.observe(0.29)
            for _ in range(2):
                m.itl.observe(0.26)
        m.running.set(beside if k in (6, 14) else 1)
        frames.append(m.scrape(T0_NS + k * SECOND))
    return pd.concat(frames, ignore_index=True).assign(target="vllm")


@pytest.mark.parametrize("beside,enabled", [(3, False), (1, True)])
def test_gaps_per_stream_count_the_streams_the_gauge_showed_beside_the_long_prefills(beside, enabled):
    """4 gaps in the top bucket from 2 long prompts, with a median of 1 running stream, read 2.0 per long prefill
    per stream: more than a whole-prompt step leaves. With 3 running at the scrapes around each prefill the
    gaps are at most 2 x 3, so the steps were whole prompts (held-out 86 read chunking on there); had one
    stream run throughout, 4 gaps would be chunk steps."""
    inferred = CI.infer_from_histograms(_few_long_prompts(beside), 0.2)
    assert inferred.enabled is enabled
    assert inferred.holds_long_prefills() is True
    assert ("holds 2.0 gaps per long prefill per running stream" in inferred.detail) is enabled


def test_stalls_on_under_half_the_streams_per_long_prefill_say_nothing_of_chunking():
    """The fallback without long prompts in the histograms: about one ITL sample above the SLO per long prefill
    per stream reads whole-prompt steps, more reads chunk steps, and under half (held-out 103's 0.1 on a chunked
    server) reads neither: a whole prompt's step past the SLO stalls every running stream, and none was."""
    few = CI.infer(0.1, 2.7)
    assert few.enabled is None and few.source == "unknown"
    assert "0.1 ITL samples above the SLO per long prefill" in few.describe()
    assert "cannot tell chunking on from off" in few.describe()
    assert CI.infer(0.5, 2.7).enabled is False and CI.infer(1.0, 2.7).enabled is False
    assert CI.infer(1.6, 2.7).enabled is True
    assert CI.infer(0.1, 0.0).enabled is None and CI.infer(0.1, 0.0).detail == ""


def test_a_count_of_slow_gaps_just_under_the_cut_is_unsettled():
    """Held-out 106's `small` at budget 640 beside 16 streams: 1,600-token prompts ran as 624 + 624 + 352-token chunk
    steps, all three slow enough for vLLM's (1 s, 2.5 s] ITL bucket, so P / K counted the short last one too and
    read 511, under the cut, for chunks of 624. Here 32 such gaps per prompt over 10 streams read 1,600 / 3.2 = 500
    (P x G / T reads 1,067 off the bucket's upper bound): the count reads low as the exact sizing does, so 500 is
    unsettled, not "no step computes 512+". At 3.8 gaps (421, under 0.85 x 512) the plain verdict stands."""
    run = _scrapes(30, long_at={8, 22}, long_tokens=1600, prefill_s=3.9, chunk_gaps=(1.3, 32))
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.counted and inferred.budget_estimate == pytest.approx(500.0)
    assert inferred.holds_long_prefills() is False and inferred.estimate_unsettled()
    assert inferred.unsettled_reading().endswith("about 500 prompt tokens per slow step, falls between 435 and 768")
    more = CI.infer_from_histograms(_scrapes(30, long_at={8, 22}, long_tokens=1600, prefill_s=3.9,
                                             chunk_gaps=(1.3, 38)), 0.2)
    assert more.counted and more.budget_estimate == pytest.approx(1600 / 3.8)
    assert more.holds_long_prefills() is False and not more.estimate_unsettled()


def test_a_freeze_that_ended_overrules_the_histograms_whatever_gap_they_hold():
    """held-out 139's `h139-small-nochunk-1350-s2` (quick), its shape: 1,350-token prompts of an 8.75 s prefill and
    no ITL gap past 0.2 s read chunking on, because the streams were still waiting when the data ended; one
    whole-prompt step had held everything for 10 s before another began. 84f507e let that ended freeze count only
    where the histogram held a gap as long, and kept the "on" (a budget of about 12 tokens, for an unchunked
    server)."""
    run = _scrapes(30, long_at={5, 9, 13, 17, 21}, long_tokens=1350, prefill_s=8.75, running=2, chunk_gaps=(0.15, 2),
                   short_gaps=(0.21, 0))
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.enabled is True and inferred.long_prefill_s == pytest.approx(7.5)   # (7.5 s, 10 s] bucket
    got = CI.frozen_through_prefill(inferred, [(0.0, True), (10.0, False)])
    assert got.enabled is False and got.detail.startswith("the streams froze for 10.0 s with nothing moving")


@pytest.mark.parametrize("gap_s,prefill_s,whole", [(0.35, 0.32, True), (0.24, 0.32, False), (0.17, 0.25, True)])
def test_a_gap_and_a_prefill_time_whose_buckets_straddle_read_as_one_step_holding_most_of_the_prompt(gap_s, prefill_s,
                                                                                                     whole):
    """h143-full/h143-end-in-stall-tiny-1750-scrape1s: chunking off, one 1,750-token prompt whose 0.32 s step left
    its streams' gaps in (0.3 s, 0.4 s] and its prefill time in (0.3 s, 0.5 s], read 0.45 s (the 40-token prompt
    that shared its step is in that bucket too). The bucket bounds give the step 89 % of the prompt, under the 0.9 margin, and it was stated "on". Those buckets leave a
    whole step possible and rule out one of half the prompt or less: off, or a budget that holds most of it.
    Gaps in (0.2 s, 0.3 s] leave half or less possible: chunks. Gaps above 0.15 s against a prefill time of at most
    0.3 s (held-out 130's 1,200-token whole steps) are more than half of it."""
    run = _scrapes(30, long_at={20}, long_tokens=1750, running=4, prefill_s=prefill_s, chunk_gaps=(gap_s, 3),
                   beside_s=prefill_s)
    inferred = CI.infer_from_histograms(run, 0.2)
    assert inferred.whole_prompts_inferred() is whole
    if whole:
        assert "leave one step anything from half the prompt" in inferred.detail
        assert inferred.describe().startswith("chunked prefill off, or on with a budget that holds most of a long "
                                              "prompt (about 1750 tokens)")
    else:
        assert inferred.enabled is True and inferred.budget_estimate < 0.9 * 1750


def _mixed_chunk_scrapes(gaps, prefill_s):
    """1 s scrapes of 10 streams decoding at 70 ms, and two 950-token prompts whose chunk steps' `gaps` all end
    in one interval (6 and 13) after an interval in which no step ended (5 and 12), as held-out 144's
    `h144-small-chunk768-s10-scrape1s` ran 950-token prompts at a 768 budget: a 2.12 s step of 758 tokens and a
    0.66 s one of 192."""
    return _gap_scrapes({5: [], 6: gaps, 12: [], 13: gaps}, (6, 13), prompt_tokens=950, prefill_s=prefill_s,
                        running=10, n_intervals=20)


@pytest.mark.parametrize("gaps,prefill_s,step_s,holds", [
    ((2.12, 0.66), 2.78, 2.78 - 0.75, True),    # 758 + 192 at a 768 budget: the interval's mean, 1.39 s, sizes 475
    ((1.45, 1.30), 2.75, 1.375, False),         # 503 + 447 at a 512 budget: both in (1 s, 2.5 s], a mean of both
])
def test_a_slow_step_mixed_with_a_faster_one_is_sized_by_its_bucket_not_the_mean(gaps, prefill_s, step_s, holds):
    """The interval's faster gap sits in a lower ITL bucket, so it is at most that bucket's upper bound (0.75 s),
    and the top bucket's gap is at least the interval's sum less that: 2.03 s, 950 x 2.03 / 2.78 = 694 tokens, a
    long prefill (the mean, 1.39 s, read 475, which the metrics cannot settle). Where both gaps share the top
    bucket nothing separates them, and the mean stands, in the band."""
    inferred = CI.infer_from_histograms(_mixed_chunk_scrapes(gaps, prefill_s), 0.2)
    assert inferred.enabled is True
    assert inferred.slowest_step_s == pytest.approx(step_s)
    assert inferred.budget_estimate == pytest.approx(950 * step_s / prefill_s)
    assert inferred.holds_long_prefills() is holds
    assert inferred.estimate_unsettled() is (not holds)
