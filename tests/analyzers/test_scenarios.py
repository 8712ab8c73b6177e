"""The scenario matrix's instrument (issue 16): the truth rule on hand-written step traces, the scorer on
hand-written findings, and one scenario end to end at reduced length (slow)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stallscope.analyzers import truth
from stallscope.analyzers.step_cost import read_step_trace

MS = 10**6
T0 = 1_764_400_000_000_000_000
ROOT = Path(__file__).resolve().parents[2]


def step(i, start_ms, end_ms, *, prefill=0, decode=4, running=5, prefill_reqs=None, preempted=0, used=10, pool=100):
    return {"step": i, "start_ns": T0 + start_ms * MS, "end_ns": T0 + end_ms * MS, "num_prefill_tokens": prefill,
            "num_decode_tokens": decode, "num_prefill_reqs": int(prefill > 0) if prefill_reqs is None else prefill_reqs,
            "num_decode_reqs": decode, "num_running": running, "num_waiting": 0, "num_preempted": preempted,
            "kv_blocks_used": used, "num_gpu_blocks": pool, "num_scheduled_tokens": {}}


def trace(tmp_path, rows):
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return read_step_trace(path)


def decodes(n, start_ms=0, every_ms=20, first=0):
    return [step(first + k, start_ms + k * every_ms, start_ms + (k + 1) * every_ms) for k in range(n)]


def gap_trace(prompt_tokens):
    """Decode steps to 1,000 ms, a prefill-only step to 1,480 ms, decode steps again: a 0.5 s decode gap."""
    rows = decodes(50)
    rows.append(step(50, 1000, 1480, prefill=prompt_tokens, decode=0))
    rows += decodes(5, start_ms=1480, first=51)
    return rows


def test_long_prefill_in_a_gap_is_a_starvation_episode(tmp_path):
    steps = trace(tmp_path, gap_trace(600))
    assert truth.starvation_episodes(steps, 0.2) == [(T0 + 1000 * MS, T0 + 1500 * MS)]
    assert truth.episodes(steps, 0.2)["kv_pressure"] == []
    assert truth.starvation_episodes(steps, 0.5) == []          # the gap is 0.5 s: not above a 0.5 s SLO


def test_short_prompt_in_a_gap_is_not(tmp_path):
    assert truth.starvation_episodes(trace(tmp_path, gap_trace(37)), 0.2) == []


def test_trace_ending_inside_a_long_prefill_is(tmp_path):
    rows = decodes(10) + [step(10, 200, 1000, prefill=2000, decode=0, running=5, prefill_reqs=1)]
    steps = trace(tmp_path, rows)
    assert truth.starvation_episodes(steps, 0.2) == [(T0 + 200 * MS, T0 + 1000 * MS)]
    # the run (the last scrape) ends while that step still runs: the episode ends with the run
    assert truth.starvation_episodes(steps, 0.2, run_end_ns=T0 + 700 * MS) == [(T0 + 200 * MS, T0 + 700 * MS)]
    # ... but not 0.2 s or less after the last decode
    assert truth.starvation_episodes(steps, 0.2, run_end_ns=T0 + 390 * MS) == []
    # nobody waits to decode: the prefilling request is the only one running
    alone = trace(tmp_path, decodes(10) + [step(10, 200, 1000, prefill=2000, decode=0, running=1, prefill_reqs=1)])
    assert truth.starvation_episodes(alone, 0.2) == []


def test_adjacent_gaps_merge_into_one_episode(tmp_path):
    rows = decodes(5) + [step(5, 100, 400, prefill=700), step(6, 400, 700, prefill=700)] + decodes(3, 700, first=7)
    assert truth.starvation_episodes(trace(tmp_path, rows), 0.2) == [(T0 + 100 * MS, T0 + 700 * MS)]


def test_preemption_and_full_pool_are_kv_pressure(tmp_path):
    rows = decodes(10)
    rows[4] = step(4, 80, 100, preempted=1)
    rows[7] = step(7, 140, 160, used=96)
    rows[8] = step(8, 160, 180, used=95)
    rows[9] = step(9, 180, 200, used=94)
    assert truth.kv_episodes(trace(tmp_path, rows)) == [(T0 + 80 * MS, T0 + 100 * MS), (T0 + 140 * MS, T0 + 180 * MS)]
    assert truth.kv_episodes(trace(tmp_path, decodes(10))) == []


def finding(kind, start, end, target="vllm", severity="warning"):
    return {"kind": kind, "severity": severity, "start_ns": start, "end_ns": end, "target": target}


def test_run_level_precision_and_recall():
    rows = [({"decode_starvation"}, {"decode_starvation"}), ({"decode_starvation"}, set()),
            (set(), {"decode_starvation", "kv_pressure"}), ({"kv_pressure"}, {"kv_pressure"}),
            ({"decode_starvation"}, {"decode_starvation"})]
    s = truth.run_scores(rows)
    assert s["decode_starvation"] == {"precision": 2 / 3, "recall": 2 / 3, "tp": 2, "fp": 1, "fn": 1}
    assert s["kv_pressure"] == {"precision": 0.5, "recall": 1.0, "tp": 1, "fp": 1, "fn": 0}


def test_flagged_ignores_info_and_other_kinds():
    f = [finding("decode_starvation", 0, 1, severity="info"), finding("itl_high", 0, 1),
         finding("decode_starvation", 2, 3, severity="critical")]
    assert truth.flagged(f, "decode_starvation") == [f[2]]


def test_episode_overlap_counts():
    true = [(0, 100), (200, 300), (400, 500)]
    found = [finding("decode_starvation", 50, 250), finding("decode_starvation", 240, 260),
             finding("decode_starvation", 600, 700)]
    s = truth.episode_scores(true, found)
    assert (s["episodes"], s["hit"], s["findings"], s["on_truth"]) == (3, 2, 3, 2)
    assert s["overlap_s"] == pytest.approx(110e-9)       # 50..100 and 200..260 (the two findings merge first)
    assert s["true_s"] == pytest.approx(300e-9)


def test_contradictions_need_one_target_and_overlap_inside_the_episode():
    true = [(0, 100), (200, 300)]
    f = [finding("decode_starvation", 0, 60), finding("itl_high", 50, 120),          # 1 in episode 1
         finding("itl_high", 70, 90, target="other"),                               # another target
         finding("decode_starvation", 200, 230), finding("itl_high", 240, 300),      # no overlap with each other
         finding("kv_pressure", 200, 300)]                                          # not contradictory
    assert truth.contradictions(true, f) == 1
    assert truth.contradictions([(55, 100)], f) == 1
    assert truth.contradictions([(61, 100)], f) == 0   # inside it, the starvation finding has ended


def test_time_to_detect_counts_from_the_first_window_end():
    window = 40
    true = [(100, 150), (300, 320), (1000, 1010)]
    f = [finding("decode_starvation", 90, 180),     # raised at 130: 30 after the first onset
         finding("decode_starvation", 250, 400),    # raised at 290, before the second onset: 0
         finding("kv_pressure", 1060, 1100)]        # raised at its start 1060 > 1010 + 40: too late
    assert truth.times_to_detect(true, f, window) == [30e-9, 0.0, None]


@pytest.mark.slow
def test_one_scenario_end_to_end(tmp_path):
    out = tmp_path / "scores.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scenarios.py"), "--quick", "--only",
                    "tiny-nochunk-steady", "--out", str(tmp_path / "runs"), "--json", str(out)],
                   check=True, cwd=ROOT, timeout=400)
    doc = json.loads(out.read_text())
    (row,) = doc["scenarios"]
    assert row["scenario"] == "tiny-nochunk-steady"
    assert row["truth"] == ["decode_starvation"]      # whole 1,800-token prefills freeze 6 streams > 0.2 s
    assert row["decode_starvation"]["episodes"] >= 1
    recall = doc["summary"]["decode_starvation_recall"]["value"]
    assert recall == (1.0 if "decode_starvation" in row["flagged"] else 0.0)
    assert doc["summary"]["contradictions_within_episodes"]["value"] == row["contradictions"]


def test_flagged_at_info_counts_every_severity():
    f = [finding("decode_starvation", 0, 1, severity="info"), finding("kv_pressure", 0, 1, severity="warning")]
    assert truth.flagged(f, "decode_starvation", "info") == [f[0]]
    assert truth.flagged(f, "decode_starvation") == []


def test_the_analyzed_itl_p99_counts_gaps_inside_the_store_and_the_gap_still_open_at_its_end():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scenarios import analyzed_itl_p99

    # one stream: 10 ms gaps from t=0 to t=1, then nothing until t=5 (the store ends at t=3, inside that gap)
    ts = [i * 0.01 for i in range(101)] + [5.0]
    load = {"records": [{"chunk_ts": ts, "done": True}]}
    inside = analyzed_itl_p99(load, int(0.5e9), int(0.9e9))       # only the 10 ms gaps ending in (0.5, 0.9]
    assert inside == pytest.approx(0.01)
    ends_in_stall = analyzed_itl_p99(load, int(0.5e9), int(3e9))   # 50 gaps of 10 ms + the open 2 s one
    gaps = [0.01] * 50 + [2.0]
    assert ends_in_stall == pytest.approx(float(__import__("numpy").percentile(gaps, 99)))
    assert analyzed_itl_p99({"records": []}, 0, 1) is None


def test_with_config_gives_analyze_the_flags_each_server_ran():
    """`--with-config`: chunking off says so; a chunked budget goes with it; a server without those flags ran
    the refserver's defaults (chunked, 2048); the sets' names are unique."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scenario_sets import KV, OFF, SCENARIOS, Scenario, chunked
    from scenarios import known_config

    assert known_config(Scenario("a", OFF, ())) == ("--no-enable-chunked-prefill",)
    assert known_config(Scenario("b", chunked(640), ())) == ("--enable-chunked-prefill", "--max-num-batched-tokens", "640")
    assert known_config(Scenario("c", KV, ())) == ("--enable-chunked-prefill", "--max-num-batched-tokens", "64")
    assert known_config(Scenario("d", ("--max-num-seqs", "128"), ())) == ("--enable-chunked-prefill",
                                                                           "--max-num-batched-tokens", "2048")
    assert len({sc.name for sc in SCENARIOS}) == len(SCENARIOS)


def test_every_scenario_server_passes_vllms_startup_check():
    """Each scenario's pool holds one request of its max_model_len (vLLM 0.33 refuses to start otherwise):
    the six pools below one 2,048-token request run with the context vLLM's error names."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scenario_sets import SCENARIOS

    from stallscope.refserver.config import EngineConfig
    from stallscope.refserver.engine import check_pool_holds_one_request

    shortened = {}
    for sc in SCENARIOS:
        cfg = EngineConfig.from_flags(["--model", sc.model, *sc.server])
        check_pool_holds_one_request(cfg)
        if cfg.max_model_len is not None:
            shortened[sc.name] = (cfg.num_gpu_blocks, cfg.max_model_len)
    assert shortened == {"ho-kv-auto-2mb": (128, 2032), "h2-kv-fp8-1mb": (128, 2032),
                         "h16-kv-auto-1.5mb-10sess": (96, 1520), "h32-kv-auto-1.8mb-14sess": (115, 1824),
                         "h87-kv-fp8-1.0mb-32sess": (128, 2032),
                         "h109-kv-auto-1.8mb-26sess": (115, 1824)}


def test_a_stated_configuration_contradicts_the_server_by_the_rule_written_once():
    """"On" for a server with chunking off; whole-prompt steps for a chunked server whose budget is at most half
    its long prompts (768 of 1,900: three steps per prompt), not for one whose step holds most of a prompt
    (1,024 of 1,850) or all of it; "held the whole prompt" beside a stated "on" on a splitting server; the
    loadgen default (1,536 tokens) when a scenario gives no long prompt size."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scenario_sets import OFF, Scenario, chunked
    from scenarios import config_contradictions, long_prompt_tokens

    def finding(on, decided="x", kind="decode_starvation"):
        return {"kind": kind, "start": "t", "evidence": {"chunked_prefill": on, "decided_by": decided, "chunking": "c"}}

    long = ("--long-prompt-tokens", "1900")
    assert long_prompt_tokens(Scenario("a", OFF, long)) == 1900 and long_prompt_tokens(Scenario("b", OFF, ())) == 1536
    assert config_contradictions(Scenario("off", OFF, long), [finding(True)]) == ["decode_starvation at t: c"]
    assert config_contradictions(Scenario("off", OFF, long), [finding(False)]) == []
    assert len(config_contradictions(Scenario("s", chunked(768), long), [finding(False), finding(True)])) == 1
    assert config_contradictions(Scenario("s", chunked(1024), ("--long-prompt-tokens", "1850")), [finding(False)]) == []
    assert config_contradictions(Scenario("s", chunked(2048), long), [finding(False, kind="itl_high")]) == []
    held = finding(True, "1.0 long prefills completed ...: one step held the whole prompt")
    assert len(config_contradictions(Scenario("s", chunked(768), long), [held])) == 1
    # other kinds, and findings that state no configuration, are not judged
    assert config_contradictions(Scenario("s", chunked(64), long), [finding(False, kind="kv_pressure"),
                                                                    finding(None)]) == []


def test_rebuilt_prefill_times_count_a_co_batched_step_once_per_request_as_the_metric_does(tmp_path):
    # a 1,000-token prompt alone for 300 ms, then two 40-token prompts in one 20 ms step, then decodes
    rows = [step(0, 0, 300, prefill=1000, decode=0), step(1, 300, 320, prefill=80, decode=1, prefill_reqs=2),
            step(2, 320, 330, prefill=0, decode=3)]
    rows[0].update(num_scheduled_tokens={"long": 1000}, arrival_ns={"long": T0})
    rows[1].update(num_scheduled_tokens={"long": 1, "a": 40, "b": 40}, arrival_ns={"a": T0, "b": T0})
    rows[2].update(num_scheduled_tokens={"long": 1, "a": 1, "b": 1})
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from prefill_time_inflation import rebuilt_increments, request_prefills

    reqs = request_prefills(trace(tmp_path, rows)).set_index("p")
    assert reqs.loc[1000, "t"] == pytest.approx(0.300) and not reqs.loc[1000, "co_batched"]
    assert list(reqs.loc[40, "t"]) == pytest.approx([0.020, 0.020])       # the metric: the step twice
    assert list(reqs.loc[40, "split"]) == pytest.approx([0.010, 0.010])   # counted once between them
    assert set(reqs["finish_ns"]) == {T0 + 330 * MS}                       # the server counts them there
    inc = rebuilt_increments(reqs.reset_index(), np.array([T0 - 1, T0 + 325 * MS, T0 + 400 * MS]))
    assert inc[["t", "n", "p"]].to_numpy().ravel() == pytest.approx([0.34, 3, 1080])
    once = rebuilt_increments(reqs.reset_index(), np.array([T0, T0 + 400 * MS]), "split")
    assert once[["t", "n", "p"]].to_numpy().ravel() == pytest.approx([0.32, 3, 1080])


def test_a_thinned_store_keeps_every_kth_scrape_of_each_target_ending_with_the_last(tmp_path):
    """`--keep-every 3`: 7 scrapes of `vllm` keep the 1st, 4th and 7th; 4 of `engine-2` keep the 1st and 4th; the
    counters read what they read at those scrapes, and the original store is untouched."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scenarios import thin_store

    from stallscope.collectors import loader, store, vllm

    text = (ROOT / "tests" / "fixtures" / "vllm_metrics" / "v0_10_2_multiprocess_2engines.txt").read_text()
    with store.Store(tmp_path / "s.db") as st:
        for i in range(7):
            st.append("vllm", (100 + i) * 10**9, 0.01, samples=vllm.parse(text, (100 + i) * 10**9))
        for i in range(4):
            st.append("engine-2", (100 + i) * 10**9, 0.01, samples=vllm.parse(text, (100 + i) * 10**9))
    thin = thin_store(tmp_path / "s.db", tmp_path / "thin.db", 3)
    kept = {t: sorted(set(f["samples"]["ts"] // 10**9)) for t, f in loader.load(thin).items()}
    assert kept == {"vllm": [100, 103, 106], "engine-2": [100, 103]}
    assert sorted(set(loader.load(tmp_path / "s.db")["vllm"]["samples"]["ts"] // 10**9)) == list(range(100, 107))


def test_rescore_diff_lists_the_runs_that_turned_and_both_scores(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import rescore_diff

    def scored(folder, flagged):
        folder.mkdir()
        rows = [{"run": f"runs/h1/r{i}", "scenario": name, "truth": t, "flagged": f, "itl_p99_s": p99,
                 "asks_for_config": f, "config_contradictions": ["decode_starvation at 0: on"] * (i == 1) * len(f)}
                for i, (name, t, f, p99) in enumerate(zip(["h1-end-in-stall-tiny", "h1-a", "h1-b"],
                                                          [["decode_starvation"], ["decode_starvation"], []],
                                                          flagged, [0.9, 0.5, 0.05]))]
        missing = {"value": float(not flagged[1])}   # r1, true and unflagged, missed its SLO without a warning
        summary = {"starvation_runs_missing_slo_without_warning": missing,
                   "contradictions_within_episodes": {"value": None}}
        (folder / "h1-first.json").write_text(json.dumps({"itl_slo_s": 0.2, "scenarios": rows, "summary": summary}))
        return folder

    ds = ["decode_starvation"]
    before = rescore_diff.verdicts(scored(tmp_path / "a", [ds, [], ds]), "decode_starvation")
    after = rescore_diff.verdicts(scored(tmp_path / "b", [ds, ds, []]), "decode_starvation")
    assert before == {"h1-first/r0": "found", "h1-first/r1": "missed", "h1-first/r2": "false alarm"}
    assert after["h1-first/r1"] == "found" and after["h1-first/r2"] == "clear"
    assert rescore_diff.scores(rescore_diff.rows(tmp_path / "a"), "decode_starvation") == \
        "3 runs: precision 0.500 (1/2), recall 0.500 (1/2)"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rescore_diff.py"), str(tmp_path / "a"),
                          str(tmp_path / "b")], capture_output=True, text=True, check=True)
    assert res.stdout.splitlines()[:5] == ["h1-first/r1: missed -> found", "h1-first/r2: false alarm -> clear",
                                           "2 of 3 runs turned (decode_starvation)",
                                           "  ITL P99 under the SLO: false alarm -> clear: 1",
                                           "  other: missed -> found: 1 (1 ask for the budget)"]
    assert "after:  3 runs: precision 1.000 (2/2), recall 1.000 (2/2)" in res.stdout
    assert "after, asking for the budget: 2 runs: 2 found, 0 missed, 0 false alarm, 0 clear" in res.stdout
    assert "true starvation runs missing the SLO without a warning: 1 -> 0" in res.stdout
    assert "warnings on runs meeting the SLO: 0 -> 0" in res.stdout
    assert res.stdout.splitlines()[-2:] == ["h1-first/r1: 0 -> 1",
                                            "stated configurations contradicting the server: 0 -> 1"]
    assert rescore_diff.asking(rescore_diff.rows(tmp_path / "a"), "decode_starvation") == \
        "asking for the budget: 2 runs: 1 found, 0 missed, 1 false alarm, 0 clear"


@pytest.mark.parametrize("n,seed,argv,first_seed", [(12, 202612033, ["--kv", "8"], 121),
                                                    (54, 202612075, ["--band", "8"], 541), (55, 202612076, [], 551)])
def test_a_drawn_set_printed_as_code_is_the_committed_set(n, seed, argv, first_seed):
    """`draw_scenarios.py --held-out N` prints what was committed for held-out N: the seed alone decides it."""
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "draw_scenarios.py"), "--seed", str(seed),
                          *argv, "--held-out", str(n), "--first-seed", str(first_seed)],
                         capture_output=True, text=True, check=True)
    source = (ROOT / "benchmarks" / "scenario_sets.py").read_text()
    start = source.index(f"HELD_OUT_{n} = [")
    committed = source[start:source.index("\n]\n", start) + 2]
    assert " ".join(res.stdout.split()) == " ".join(committed.split())


def test_long_steps_first_windows_show_the_gauge_before_a_burst_and_the_grids_first_window():
    """A cold start: the first scrape reads the 2 streams decoding before a burst admitted 7 more; the grid's first
    window (4 scrape intervals) ends 2 s in and reads the gauge there, not the 2."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import long_steps

    ts = (np.arange(12) * 0.5e9).astype("int64") + 10**18
    s = pd.DataFrame({"ts": ts, "metric": "vllm:num_requests_running", "source_metric": "vllm:num_requests_running",
                      "labels": [{} for _ in ts], "le": np.nan,
                      "value": np.array([2, 9, 8, 8, 7, 8, 8, 8, 8, 8, 8, 8], float), "target": "vllm"})
    rows = long_steps.first_windows(s, 0.2, 2)
    assert rows[:2] == ["| scrape | 0.00 s | running 2 |", "| scrape | 0.50 s | running 9 |"]
    assert rows[2].startswith("| window | 2.00 s | running 7, itl_stall_share nan") and len(rows) == 4
    later = long_steps.first_windows(s, 0.2, 1, at_s=2.5)   # from 2.5 s: the scrape and the window there
    assert later[0] == "| scrape | 2.50 s | running 8 |" and later[1].startswith("| window | 2.50 s | running 8,")


def test_long_steps_slowest_lists_any_step_with_the_median_and_the_time_to_the_last_scrape(tmp_path):
    """The 2 slowest of 4 steps whatever they computed (a 64-token chunk among them), in start order, each with its
    start to the last scrape, then the median step; without `slowest`, only the 512+ prompt-token step."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import long_steps

    rows = [(0, 0.10, 64), (1, 0.30, 0), (2, 0.25, 600), (3, 0.20, 0)]
    t, lines = 10**18, []
    for step, dur, prompt in rows:
        lines.append(json.dumps({"step": step, "start_ns": t, "end_ns": t + int(dur * 1e9),
                                 "num_prefill_tokens": prompt, "num_decode_tokens": 2,
                                 "num_prefill_reqs": int(prompt > 0), "num_decode_reqs": 2, "num_running": 3,
                                 "num_waiting": 0, "num_preempted": 0}))
        t += int(dur * 1e9)
    (tmp_path / "steps.jsonl").write_text("\n".join(lines) + "\n")
    last = 10**18 + int(1.0e9)
    out = long_steps.long_steps(tmp_path, last, slowest=2)
    assert out[0] == "| 1 | 0.100 s | 0.300 s | 0 | 0 | 2 | 0.900 s |"
    assert out[1] == "| 2 | 0.400 s | 0.250 s | 600 | 1 | 2 | 0.600 s |"
    assert out[2] == "\nmedian step: 0.225 s over 4 steps" and len(out) == 3
    assert long_steps.long_steps(tmp_path, last) == [out[1]]


def test_chunking_estimates_pools_the_files_counts():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import chunking_estimates

    def scored(tp, fp, fn, runs):
        return {"scenarios": [{}] * runs, "summary": {"decode_starvation_precision": {
            "counts": {"tp": tp, "fp": fp, "fn": fn}}}}

    line = chunking_estimates.pooled([scored(3, 1, 0, 8), scored(5, 0, 2, 10)])
    assert line == ("pooled decode_starvation over 2 file(s), 18 runs: 8 found, 1 false alarms, 2 missed; "
                    "precision 0.889, recall 0.800 (target 0.95: 0.94x, 0.84x)")


def test_chunking_estimates_counts_the_runs_read_as_chunk_steps_while_asking_for_the_budget_by_truth():
    """Only a run whose findings read chunk steps (`itl_high`, no starvation flagged) and ask for the budget
    counts; a found run that also asks for it, and one that asks nothing, do not."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import chunking_estimates

    def run(truth, flagged, findings, asks):
        return {"truth": truth, "flagged": flagged, "all_findings": findings, "asks_for_config": asks}

    true, none = ["decode_starvation"], []
    scenarios = [run(true, none, ["itl_high"], ["itl_high"]), run(none, none, ["itl_high"], ["itl_high"]),
                 run(none, none, ["itl_high"], ["itl_high"]), run(true, true, ["decode_starvation"], ["decode_starvation"]),
                 run(true, none, ["itl_high"], [])]
    assert chunking_estimates.unsettled([{"scenarios": scenarios}]) == (
        "read as chunk steps while asking for the budget: 3 runs, 1 of them true decode_starvation (missed), 2 not")


def test_chunking_estimates_exact_share_reads_a_two_chunk_prompt_low():
    """P x G / T from the trace: a 750-token prompt as 562 + 188-token steps of 1.0 s and 0.5 s reads
    750 x 1.0 / 1.5 = 500 tokens, 0.89 of its 562-token chunk; a 40-token prompt is not a long one."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import chunking_estimates
    import pandas as pd

    s = 1_000_000_000
    st = pd.DataFrame({"start_ns": [0, s, 2 * s], "end_ns": [s // 10, 2 * s, int(2.5 * s)],
                       "num_scheduled_tokens": [{"short": 40}, {"long": 562, "short": 1}, {"long": 188, "short": 1}]})
    assert chunking_estimates.exact_share(st) == pytest.approx(500 / 562)
    assert chunking_estimates.exact_share(st.iloc[:1]) is None


def test_held_out_table_prints_a_sets_rows_and_the_pool_from_its_json_files(tmp_path):
    """Two passes of set 7, the metrics alone and the flags (no log file): one miss in the full pass's first
    way, found with the flags; the pool sums both passes per way."""
    def scored(name, flagged, ttd):
        rows = [{"truth": t, "flagged": f} for t, f in zip(
            [["decode_starvation"], ["decode_starvation"], ["kv_pressure"], []], flagged)]
        summary = {"starvation_warnings_on_runs_meeting_slo": {"value": 0}, "contradictions_within_episodes":
                   {"value": 0}, "stated_configuration_contradicting_the_server": {"value": 1 if "flags" in name else 0},
                   "median_time_to_detect_starvation": {"value": ttd}}
        (tmp_path / name).write_text(json.dumps({"scenarios": rows, "summary": summary}))

    ds, kv = ["decode_starvation"], ["kv_pressure"]
    scored("h7-first.json", [ds, ds, kv, []], 0.1)
    scored("h7-flags.json", [ds, ds, kv, []], 0.1)
    scored("h7-full-first.json", [ds, [], [], kv], float("nan"))
    scored("h7-full-flags.json", [ds, ds, kv, []], 0.0)
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "held_out_table.py"), "7", "--runs", str(tmp_path)],
                         capture_output=True, text=True, check=True)
    lines = res.stdout.splitlines()
    assert lines[2] == ("| 7 quick | 4 | 1.000 / 1.000 (2) | 1.000 / 1.000 (2) | not scored | 1.000 / 1.000 (1) | 0 | 0 "
                        "| 1 | 0.10 |")
    assert lines[3] == ("| 7 full | 4 | 1.000 / 0.500 (1) | 1.000 / 1.000 (2) | not scored | 0.000 / 0.000 (0) | 0 | 0 "
                        "| 1 | - |")
    assert lines[5] == ("decode_starvation, both passes of 7: first 1.000 / 0.750 (3); flags 1.000 / 1.000 (4) "
                        "(found; false alarms / misses: first 0 / 1; flags 0 / 0)")
    assert lines[6].startswith("kv_pressure, both passes of 7: first 0.500 / 0.500 (1); flags 1.000 / 1.000 (2)")
