"""The metrics' prefill cost split by the model's attention share (analyzers/chunk_cost.py): the long prompt's
length from vLLM's prompt-length histogram, the split, and the budget priced by its slowest chunk step."""

import math

import pandas as pd
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from expo_frames import T0_NS, parse, simulate_starvation
from stallscope.analyzers import chunk_cost as CC
from stallscope.analyzers.advice import chunked_prefill_recommendation
from stallscope.analyzers.diagnose import diagnose
from stallscope.analyzers.roofline import model_spec

TOKEN_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]   # vLLM's 1-2-5 buckets up to max_model_len


def test_tiny_pair_ratio_is_its_attention_flops_over_its_linear_flops():
    # tiny: 4 layers, 8 heads of 32; per layer q+k+v 256 x (8 + 2 x 2) x 32, o 8 x 32 x 256, SwiGLU 3 x 256 x 688,
    # two RMSNorm weight vectors of 256; the LM head 264 x 256
    layer = 256 * 12 * 32 + 256 * 256 + 3 * 256 * 688 + 2 * 256
    matmul = 4 * layer + 264 * 256
    assert matmul == 2_838_528
    assert CC.pair_ratio(model_spec("tiny")) == pytest.approx(4 * 4 * 8 * 32 / (2 * matmul))


def test_slowest_chunk_is_the_deepest_full_one_or_the_rest():
    c = CC.ChunkCost(linear_s=6e-5, pair_s=4e-8, prompt_tokens=1650, model="tiny")
    # budget 970 with 10 decodes: chunks of 960 (to context 960) and 690 (to 1650)
    first = 960 * 6e-5 + 4e-8 * 960 * (960 - 480)     # 57.6 ms + 18.4 ms
    rest = 690 * 6e-5 + 4e-8 * 690 * (1650 - 345)     # 41.4 ms + 36.0 ms
    s, n, end = c.slowest(970, decodes=10)
    assert (n, end) == (690, 1650) and s == pytest.approx(rest) and rest > first
    # a budget past the prompt: one whole-prompt step, 1650 x 1650 / 2 pairs
    assert c.slowest(4096, decodes=10)[0] == pytest.approx(1650 * 6e-5 + 4e-8 * 1650 * 825)
    assert c.average_s() == pytest.approx(6e-5 + 4e-8 * 825)


def test_from_average_recovers_the_split_whatever_budget_the_run_had():
    tiny = model_spec("tiny")
    r = CC.pair_ratio(tiny)
    truth = CC.ChunkCost(linear_s=5e-5, pair_s=r * 5e-5, prompt_tokens=1400, model="tiny")
    whole = truth.average_s()
    got = CC.from_average(whole, tiny, 1400)
    assert got.linear_s == pytest.approx(5e-5) and got.pair_s == pytest.approx(r * 5e-5)
    # chunks of 1,014: 1014 x 507 + 386 x (1400 - 193) = 980,000 pairs, the whole prompt's 1400 x 1400 / 2
    chunked = (truth.chunk_s(1014, 1014) + truth.chunk_s(386, 1400)) / 1400
    assert chunked == pytest.approx(whole)
    with pytest.raises(Exception, match="cannot split"):
        CC.from_average(float("nan"), tiny, 1400)


class PromptLengths:
    """vLLM's `vllm:request_prompt_tokens` histogram, observed at each request's end and scraped as text."""

    def __init__(self, model="tiny"):
        self.registry = CollectorRegistry()
        self.hist = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                              ["model_name", "engine"], buckets=TOKEN_BUCKETS,
                              registry=self.registry).labels(model_name=model, engine="0")
        self.frames, self.t = [], 0

    def interval(self, *lengths):
        for n in lengths:
            self.hist.observe(n)
        self.frames.append(parse(generate_latest(self.registry).decode(), T0_NS + self.t * 10**9))
        self.t += 1
        return self

    def samples(self) -> pd.DataFrame:
        return pd.concat(self.frames, ignore_index=True)


def test_long_prompt_length_from_the_intervals_that_finished_short_prompts_alone():
    h = PromptLengths().interval()
    for _ in range(8):
        h.interval(*[38, 44] * 6).interval(*[38, 44] * 4, 1450)
    # the short prompts' mean (41) comes from the short-only intervals, not the (20, 50] bucket's midpoint 35
    assert CC.long_prompt_tokens(h.samples()) == 1450


def test_bucket_midpoints_would_have_missed_by_hundreds():
    h = PromptLengths().interval().interval(*[48] * 100).interval(*[48] * 100, 1450)
    # read at the (20, 50] bucket's midpoint 35, the 200 short prompts would have moved it by 200 x 13 = 2,600
    assert CC.long_prompt_tokens(h.samples()) == 1450


def test_no_length_without_a_long_prompt_or_without_a_short_only_interval():
    assert CC.long_prompt_tokens(PromptLengths().interval().interval(40, 40).interval(40).samples()) is None
    assert CC.long_prompt_tokens(PromptLengths().interval().interval(40, 1450).interval(40, 1450).samples()) is None
    # long prompts only: no short mean is needed
    assert CC.long_prompt_tokens(PromptLengths().interval().interval(1450).interval(1650).samples()) == 1550


def test_model_of_reads_the_one_model_name_or_the_flag():
    tiny = PromptLengths("tiny").interval(40).samples()
    assert CC.model_of(tiny).name == "tiny"
    assert CC.model_of(PromptLengths("m").interval(40).samples()) is None                 # not in the table
    two = pd.concat([tiny, PromptLengths("small").interval(40).samples()], ignore_index=True)
    assert CC.model_of(two) is None
    assert CC.model_of(two, "small").name == "small"
    assert CC.model_of(None, "no-such-model") is None


def test_recommendation_prices_the_budget_by_its_slowest_chunk():
    tiny = model_spec("tiny")
    cost = CC.from_average(2.1e-4, tiny, 1450)          # 1,450-token prompts prefilled whole at 0.21 ms a token
    text, ev = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.007, prefill_s_per_token=2.1e-4,
                                              source="the metrics", running=2, chunk_cost=cost)
    n = ev["max_num_batched_tokens"]
    # linear 0.21 / (1 + 7.215e-4 x 725) = 0.1379 ms a token, 9.95e-8 s a pair. Priced by its slowest chunk within
    # 160 ms (the SLO less the what-if's 20 % headroom) it is 640 (chunks of 638: the second, to context 1,276,
    # 88.0 + 60.7 ms + the 7 ms decode step = 156 ms); at 704 the second 702-token chunk, to context 1,404, is
    # 96.8 + 73.5 + 7 = 177 ms. The flat average, within the same headroom, says (0.16 - 0.007) / 0.21 ms = 728 -> 704.
    assert n == 640
    slow, tokens, end = cost.slowest(n, 2)
    assert ev["expected_step_s"] == pytest.approx(0.007 + slow) and ev["expected_step_s"] <= 0.16
    assert 0.007 + cost.slowest(n + 64, 2)[0] > 0.16                     # the next budget up does not fit
    assert "with the 20% of it kept free" in text
    assert ev["expected_step"].startswith("the slowest step of a 1450-token prompt")
    assert f"--max-num-batched-tokens {n}`" in text and f"({tokens} tokens reaching context {end})" in text
    assert ev["chunk_cost"]["model"] == "tiny"
    # never the budget in use: at that budget or below, the levers
    text, ev = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.007, prefill_s_per_token=2.1e-4,
                                              source="the metrics", running=2, chunk_cost=cost, budget_in_use=n)
    assert ev["max_num_batched_tokens"] is None and "Levers that remain" in text


def test_a_budget_in_use_that_fits_is_raised_only_when_the_steps_priced_it():
    cost = CC.from_average(2.1e-4, model_spec("tiny"), 1450)      # 640 fits 160 ms (the test above)
    ask = dict(slo_s=0.2, decode_step_s=0.007, prefill_s_per_token=2.1e-4, source="s", running=2, chunk_cost=cost,
               budget_in_use=512)
    # figures alone (the metrics): 512 already fits them, yet streams stalled, so no budget, and the text says so
    text, ev = chunked_prefill_recommendation(**ask)
    assert ev["max_num_batched_tokens"] is None
    assert text.startswith("No smaller budget is the fix: by these cost figures the budget in use, 512 tokens, "
                           "already keeps a step within the 200 ms ITL SLO")
    # the split scaled to the steps the server ran at 512: they show it within the SLO, so it may rise to 640
    text, ev = chunked_prefill_recommendation(**ask, measured_in_use=True)
    at_512 = 0.007 + cost.slowest(512, 2)[0]                      # 510-token chunks, the third to context 1,450
    assert ev["max_num_batched_tokens"] == 640
    assert text.startswith(f"The budget in use, 512, already keeps a long prompt's slowest chunk step within the SLO "
                           f"as its steps show (about {at_512 * 1e3:.0f} ms)")
    # never the budget in use itself
    _, ev = chunked_prefill_recommendation(**{**ask, "budget_in_use": 640}, measured_in_use=True)
    assert ev["max_num_batched_tokens"] is None


def test_levers_price_a_64_token_budget_s_chunk_beside_the_decodes_at_the_prompts_deepest_context():
    """At a 64-token budget the 4 running decodes take their tokens first, so a chunk holds 60 prompt tokens."""
    cost = CC.ChunkCost(linear_s=6e-5, pair_s=2e-7, prompt_tokens=2000, model="tiny")
    text, ev = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.19, prefill_s_per_token=4e-4,
                                              source="the metrics", running=4, chunk_cost=cost)
    last = 20 * 6e-5 + 2e-7 * 20 * (2000 - 10)            # 2000 = 33 x 60 + 20: the deepest 60-token chunk ends at 1980
    deepest = 60 * 6e-5 + 2e-7 * 60 * (1980 - 30)
    assert ev["max_num_batched_tokens"] is None
    assert ev["expected_step_s"] == pytest.approx(0.19 + max(last, deepest))
    assert ev["smallest_budget_chunk_s"] == pytest.approx(deepest) and math.isclose(max(last, deepest), deepest)
    assert f"a step with a 60-token chunk (what a 64-token budget leaves beside 4 decodes) at the long prompt's " \
           f"deepest context about {(0.19 + deepest) * 1e3:.0f} ms" in text


def _starvation_finding(**kw):
    samples, _ = simulate_starvation(60, streams=6, long_every_s=6.0, long_tokens=1600, decode_step_s=0.008,
                                     per_token_s=2e-4, **kw)
    samples = samples.assign(target="vllm")    # as the loaders give it: the target is the unit judged
    found = [f for f in diagnose([("", {"samples": samples})]).findings if f.kind == "decode_starvation"]
    assert found
    return found[0]


def test_analyze_splits_the_metrics_cost_for_a_served_model_it_knows():
    """Through the one diagnosis, on scraped text: `model_name="tiny"` and the prompt-length histogram give the
    split (1,600-token prompts, read from the histogram), and the budget is priced by its slowest chunk."""
    f = _starvation_finding(model="tiny", prompt_lengths=True)
    ev = f.evidence
    assert ev["chunk_cost"]["model"] == "tiny" and ev["chunk_cost"]["long_prompt_tokens"] == 1600
    cost = CC.from_average(ev["prefill_s_per_token"], model_spec("tiny"), 1600)
    assert ev["chunk_cost"]["linear_s_per_token"] == pytest.approx(cost.linear_s)
    n = ev["max_num_batched_tokens"]
    decode = ev["expected_step_s"] - cost.slowest(n, 6)[0]
    assert 0.004 < decode < 0.008                                   # ITL P50: the 8 ms step's bucket, interpolated
    assert n == CC.largest_budget(cost, 0.16, decode, 6)
    assert ev["expected_step"].startswith("the slowest step of a 1600-token prompt")
    assert "split by tiny's attention share" in f.recommendation


def test_analyze_keeps_the_flat_average_for_a_model_it_does_not_know():
    for kw in ({"model": "m", "prompt_lengths": True}, {"model": "tiny", "prompt_lengths": False}):
        f = _starvation_finding(**kw)
        assert "chunk_cost" not in f.evidence and "attention share" not in f.recommendation
        assert f.evidence["expected_step"] == (f"a step of {f.evidence['max_num_batched_tokens']} prompt tokens "
                                               "beside the decodes, at the average cost per prompt token")


def _chunked_steps(cost, budget, decodes, prompts, decode_s, scale):
    """A chunked server's steps, named by nothing but their sizes, as a vLLM iteration-details log gives them: each
    prompt in chunks of `budget - decodes` beside the decodes, costing `scale` x what `cost` says, then decode steps."""
    size, rows, t = budget - decodes, [], 0
    for _ in range(prompts):
        done = 0
        while done < cost.prompt_tokens:
            n = min(size, cost.prompt_tokens - done)
            done += n
            rows.append((n, decodes, decode_s + scale * cost.chunk_s(n, done)))
        rows += [(0, decodes, decode_s)] * 5
    frame = pd.DataFrame(rows, columns=["num_prefill_tokens", "num_decode_tokens", "d"])
    end = (frame["d"].cumsum() * 1e9).round().astype("int64")
    return frame.assign(start_ns=end - (frame["d"] * 1e9).round().astype("int64"), end_ns=end)


def test_calibration_scales_the_split_to_the_deepest_full_chunks_the_steps_show():
    cost = CC.ChunkCost(linear_s=6e-5, pair_s=4e-8, prompt_tokens=1650, model="tiny")
    # budget 560 beside 10 decodes: chunks of 550 to 550, 1100, 1650 (three full ones per prompt); the server's
    # chunks cost 1.3x the split's; the deepest full chunk: 550 x 60 us + 4e-8 x 550 x (1650 - 275) = 63.25 ms
    steps = _chunked_steps(cost, 560, 10, prompts=4, decode_s=0.004, scale=1.3)
    got, ev = CC.calibrated(cost, steps, 560, decode_step_s=0.004)
    assert ev["chunk_tokens"] == 550 and ev["full_chunk_steps"] == 12
    assert ev["predicted_deepest_chunk_s"] == pytest.approx(0.06325)
    assert ev["observed_deepest_chunk_s"] == pytest.approx(1.3 * 0.06325)   # the 1 - 1/6 quantile: a deepest one
    assert ev["scale"] == pytest.approx(1.3)
    assert (got.linear_s, got.pair_s) == (pytest.approx(1.3 * 6e-5), pytest.approx(1.3 * 4e-8))
    assert CC.calibrated(cost, steps.iloc[:2], 560, 0.004) is None              # fewer than 3 full chunks


def test_the_flat_average_keeps_the_same_headroom_as_the_split():
    """Without a known model the budget is priced at the average cost per token, within the SLO less the what-if's
    20 % headroom when that fits (0.16 s: (0.16 - 0.007) / 0.21 ms = 728 -> 704), else within the SLO itself."""
    text, ev = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.007, prefill_s_per_token=2.1e-4,
                                              source="the metrics", running=2)
    assert ev["max_num_batched_tokens"] == 704 and ev["expected_step_s"] == pytest.approx(0.007 + 704 * 2.1e-4)
    assert "with the 20% of it kept free" in text
    # a 150 ms decode step leaves no 64-token step within 160 ms; within the bare 200 ms SLO 192 tokens fit
    text, ev = chunked_prefill_recommendation(slo_s=0.2, decode_step_s=0.15, prefill_s_per_token=2.1e-4,
                                              source="the metrics", running=2)
    assert ev["max_num_batched_tokens"] == 192 and "kept free" not in text
