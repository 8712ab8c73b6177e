"""What the chunking inference reads off each recorded run, beside what the server ran (docs/accuracy.md).

The idea: the figures docs/accuracy.md gives for the metrics-only chunking inference (the long prompts' size P
read against the scenario's, the budget estimate against the largest chunk a step computed, the steps above the
SLO that held no long prompt, the waits a full token budget explains, the scrape intervals that finished long
prompts alone, M / T from analyzers/slow_step.py, P x G / T read off the step trace itself, and the queued
steps' mean and floor from analyzers/queued_steps.py) must be rerunnable from the recordings; results of
`--keep-every K` rescoring read the thinned stores it left. Given
`benchmarks/scenarios.py --json` files, this prints one row per run, then the runs in which no interval finished
long prompts alone, then the pooled `decode_starvation` counts of those files.

    python benchmarks/chunking_estimates.py runs/h19-first.json runs/h19-full-first.json
    python benchmarks/chunking_estimates.py --pooled-only runs/h4[6-9]*-first.json   # the pooled line alone
    python benchmarks/chunking_estimates.py --step-times runs/h106-first.json   # the chunk steps' durations alone
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from scenario_sets import SCENARIOS
from scenarios import long_prompt_tokens

from stallscope.analyzers import chunking_inference as CI
from stallscope.analyzers import queued_steps as QS
from stallscope.analyzers import slow_step as S
from stallscope.analyzers.signals import split_metrics
from stallscope.analyzers.step_cost import read_step_trace
from stallscope.collectors import loader
from stallscope.refserver.config import EngineConfig

BY_NAME = {sc.name: sc for sc in SCENARIOS}


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.0f}"


def _step(seconds) -> str:
    return "-" if seconds is None else f"{seconds:.2f} s"


def long_alone(samples) -> tuple[float, str]:
    """(the long prompts finished in scrape intervals that finished no short one, M / T as `slow_step.longest_wait`
    reads it, or "-"): what sizes P and T exactly (docs/metric-traps.md)."""
    names = [f"{f}{end}" for f in (*CI.TOKEN_FAMILIES, CI.ITL_FAMILIES[0]) for end in ("_sum", "_count", "_bucket")]
    parts = split_metrics(samples, names + [f"{S.PREFILL_TIME}_sum", "vllm:num_requests_running"])
    family = next((f for f in CI.TOKEN_FAMILIES if f + "_bucket" in parts), None)
    long = S.long_prompts(parts, S.prompt_intervals(parts, family) if family else None)
    waited = S.longest_wait(parts, CI.ITL_FAMILIES[0], long)
    return (0.0 if long is None else long.count), ("-" if waited is None else f"{waited[0] / waited[1]:.2f}")


def queued(samples, prompt: float | None, chunk: int) -> str:
    """`queued_steps.QueuedSteps`' mean and floor, each over the largest chunk, and what they were read over:
    "mean / floor (mean / chunk, floor / chunk), steps in intervals / stretches", or "-" when no interval opened
    and closed with requests waiting."""
    itl = CI.ITL_FAMILIES[0]
    got = QS.queued_steps(split_metrics(samples, [*QS.NAMES, f"{itl}_sum", f"{itl}_count"]), itl, prompt or 0.0)
    if got is None or not chunk:
        return "-"
    return (f"{got.mean:.0f} / {got.floor:.0f} ({got.mean / chunk:.2f}, {got.floor / chunk:.2f}), "
            f"{got.steps:.0f} in {got.intervals} / {got.stretches}")


def row(run: Path, slo: float, keep_every: int = 1) -> tuple[str, float]:
    """One table row: the scenario's budget and P, what the inference read, and the step trace's own counts; and
    the long prompts that finished alone in a scrape interval. `keep_every` > 1 reads the thinned store
    `scenarios.py --keep-every` left beside the run's own."""
    sc = BY_NAME[run.name]
    store = run / ("store.db" if keep_every == 1 else f"store-every{keep_every}.db")
    samples = next(f["samples"] for f in loader.load(store).values() if len(f["samples"]))
    got = CI.infer_from_histograms(samples, slo)
    alone, m_t = long_alone(samples)
    cfg = EngineConfig.from_flags(sc.server)
    budget = cfg.max_num_batched_tokens if cfg.enable_chunked_prefill else None
    st = read_step_trace(run / "steps.jsonl")
    slow = (st["end_ns"] - st["start_ns"]) / 1e9 > slo
    chunk = int(st["num_prefill_tokens"].max())
    usage = float((st["kv_blocks_used"] / (st["num_gpu_blocks"] - 1)).max())
    waiting = st["num_waiting"] > 0
    full = (st["num_prefill_tokens"] + st["num_decode_tokens"]) >= cfg.max_num_batched_tokens
    ratio = f"{got.budget_estimate / chunk:.2f}" if got.budget_estimate and chunk else "-"
    per_prompt = slow_steps_per_long_prompt(st, slo)
    ideal = exact_share(st)
    s_read = got.long_prompt_tokens / got.slow_share if got.slow_share else None
    s_ratio = f"{s_read / per_prompt:.2f}" if s_read and per_prompt else "-"
    return (f"| {run.parent.name}/{run.name} | {_fmt(budget)} | {long_prompt_tokens(sc)} | {_fmt(got.long_prompt_tokens)} "
            f"| {got.enabled} | {_fmt(got.budget_estimate)} | {_step(got.slowest_step_s)} | {_fmt(got.budget_bound)} "
            f"| {got.holds_long_prefills()} "
            f"| {chunk} | {ratio} | {_fmt(got.slow_share)} | {per_prompt:.2f} | {s_ratio} "
            f"| {int((slow & (st['num_prefill_tokens'] >= 500)).sum())} "
            f"| {int((slow & (st['num_prefill_tokens'] < 500)).sum())} | {usage:.3f} | {int(waiting.sum())} "
            f"| {int((waiting & full).sum())} | {alone:.0f} | {m_t} | {'-' if ideal is None else f'{ideal:.2f}'} "
            f"| {queued(samples, got.long_prompt_tokens, chunk)} |"), alone


def long_prompt_steps(st) -> list[list[tuple[int, int]]]:
    """Per prompt over 500 tokens, the (step index, prompt tokens) of each step that computed part of it: a
    request scheduled more than one token in a step is prefilling."""
    steps: dict[str, list[tuple[int, int]]] = {}
    for i, sched in enumerate(st["num_scheduled_tokens"]):
        for rid, n in (sched or {}).items():
            if n > 1:
                steps.setdefault(rid, []).append((i, int(n)))
    return [chunks for chunks in steps.values() if sum(n for _, n in chunks) > 500]


def slow_steps_per_long_prompt(st, slo: float) -> float:
    """The step trace's own count: steps slower than the SLO that computed part of a prompt over 500 tokens, per
    such prompt (what S, read from the ITL histogram, estimates); 0.0 without long prompts."""
    dur = ((st["end_ns"] - st["start_ns"]) / 1e9).to_numpy()
    longs = long_prompt_steps(st)
    return sum(int(dur[i] > slo) for chunks in longs for i, _ in chunks) / len(longs) if longs else 0.0


def exact_share(st) -> float | None:
    """The median over the long prompts (over 500 tokens) of P x G / T over their largest chunk, with P, G and T
    taken from the step trace itself: the prompt's tokens, its slowest prefill step and its first step's start to
    its last one's end. What `slow_step.SlowStep.prompt_share` would read with exact scrapes: its own error, before
    any the metrics add. None without a long prompt."""
    start, end = st["start_ns"].to_numpy(), st["end_ns"].to_numpy()
    dur = (end - start) / 1e9
    ratios = []
    for chunks in long_prompt_steps(st):
        at = [i for i, _ in chunks]
        share = sum(n for _, n in chunks) * max(dur[i] for i in at) / ((end[at[-1]] - start[at[0]]) / 1e9)
        ratios.append(share / max(n for _, n in chunks))
    return float(np.median(ratios)) if ratios else None


def step_times(run: Path) -> str:
    """One row of the step trace's own durations: decode-only steps, steps of one short prompt (under 200 prompt
    tokens), and steps of the largest chunk (within 10 % of it), each the median; the cost per prompt token the
    short steps give over the decode steps, and the chunk that cost puts the largest chunk's duration at; last, the
    slowest of the largest chunk's steps."""
    st = read_step_trace(run / "steps.jsonl")
    dur, tok = ((st["end_ns"] - st["start_ns"]) / 1e9).to_numpy(), st["num_prefill_tokens"].to_numpy()
    chunk = int(tok.max())
    short = (tok > 0) & (tok < 200)
    decode, chunk_s = float(np.median(dur[tok == 0])), float(np.median(dur[tok >= 0.9 * chunk]))
    slowest = f"{float(dur[tok >= 0.9 * chunk].max()):.3f} s"
    if not short.any() or not chunk:
        return (f"| {run.parent.name}/{run.name} | {chunk} | {decode * 1e3:.0f} ms | - | {chunk_s:.2f} s | - | - "
                f"| {slowest} |")
    short_s, short_tok = float(np.median(dur[short])), float(np.median(tok[short]))
    per_token = (short_s - decode) / short_tok
    return (f"| {run.parent.name}/{run.name} | {chunk} | {decode * 1e3:.0f} ms | {short_s:.2f} s ({short_tok:.0f} "
            f"tokens, {int(short.sum())} steps) | {chunk_s:.2f} s | {per_token * 1e3:.2f} ms "
            f"| {(chunk_s - decode) / per_token:.0f} | {slowest} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="benchmarks/scenarios.py --json files")
    ap.add_argument("--pooled-only", action="store_true", help="print only the pooled counts (no recordings read)")
    ap.add_argument("--step-times", action="store_true",
                    help="print only the chunk steps' durations of the chunked runs (step_times)")
    args = ap.parse_args()
    loaded = [json.loads(Path(path).read_text()) for path in args.results]
    if args.step_times:
        print("| run | largest chunk | decode step | one short prompt's step | largest chunk's step "
              "| cost per prompt token (short over decode) | chunk that cost puts the largest chunk's step at "
              "| its slowest step |")
        print("|" + "---|" * 8)
        for data in loaded:
            for r in data["scenarios"]:
                if "-chunk" in Path(r["run"]).name:
                    print(step_times(Path(r["run"])))
        return 0
    if args.pooled_only:
        print(pooled(loaded))
        print(unsettled(loaded))
        return 0
    print("| run | budget | P | P read | chunking read | estimate | slowest step sized exactly | bound | holds a long prefill | largest chunk "
          "| estimate / chunk | P / S | slow steps per long prompt | S / those | steps > SLO with >= 500 prompt tokens "
          "| with fewer | max KV usage | steps leaving a request waiting | of those at the token budget "
          "| long prompts finished alone in an interval | M / T | P x G / T over the chunk, from the trace "
          "| queued steps' mean / floor (each over the chunk), steps in intervals / stretches |")
    print("|" + "---|" * 23)
    runs = without = 0
    for data in loaded:
        for r in data["scenarios"]:
            if Path(r["run"]).name not in BY_NAME:   # a scenario renamed since it was recorded
                print(f"{r['run']}: not in scenario_sets.py; left out", file=sys.stderr)
                continue
            line, alone = row(Path(r["run"]), float(data["itl_slo_s"]), int(data.get("keep_every", 1)))
            print(line)
            runs, without = runs + 1, without + (alone < 0.5)
    print(f"{without} of {runs} runs: no scrape interval finished long prompts alone (P and T from the buckets)")
    print(pooled(loaded))
    return 0


def pooled(results: list[dict]) -> str:
    """The `decode_starvation` counts of `scenarios.py --json` results summed, with precision and recall against
    the 0.95 target."""
    tp = fp = fn = runs = 0
    for data in results:
        counts = data["summary"]["decode_starvation_precision"]["counts"]
        tp, fp, fn, runs = tp + counts["tp"], fp + counts["fp"], fn + counts["fn"], runs + len(data["scenarios"])
    p = tp / (tp + fp) if tp + fp else float("nan")
    r = tp / (tp + fn) if tp + fn else float("nan")
    return (f"pooled decode_starvation over {len(results)} file(s), {runs} runs: {tp} found, {fp} false alarms, "
            f"{fn} missed; precision {p:.3f}, recall {r:.3f} (target 0.95: {p / 0.95:.2f}x, {r / 0.95:.2f}x)")


def unsettled(results: list[dict]) -> str:
    """The runs whose findings read chunk steps (`itl_high`) while asking for the budget (an estimate the metrics
    cannot settle), split by the truth: what reading that band as starvation instead would trade."""
    true = false = 0
    for data in results:
        for r in data["scenarios"]:
            if "itl_high" in r["all_findings"] and "decode_starvation" not in r["flagged"] and r["asks_for_config"]:
                true, false = true + ("decode_starvation" in r["truth"]), false + ("decode_starvation" not in r["truth"])
    return (f"read as chunk steps while asking for the budget: {true + false} runs, {true} of them true "
            f"decode_starvation (missed), {false} not")


if __name__ == "__main__":
    sys.exit(main())
