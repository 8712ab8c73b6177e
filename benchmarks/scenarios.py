"""The labelled scenario matrix (issue 16): named, seeded runs of the real server, scored against their own step trace.

Each scenario (benchmarks/scenario_sets.py) is server flags + load-generator flags + scrape interval; the
duration is --quick's or the full one. `record_run` drives the real reference server, collector and load
generator (benchmarks/accuracy.py records its arms with it too); truth comes from the run's steps.jsonl by
the rule of `analyzers/truth.py` (docs/accuracy.md);
findings come from `stallscope analyze --db store.db --format json`, run as a user would. Printed: one
row per scenario, then the summary figures beside the issue's targets with the ratio to each.

    python benchmarks/scenarios.py --quick --json runs/scenarios-quick.json     # every scenario, ~20 s of load each
    python benchmarks/scenarios.py --only tiny-nochunk-steady --quick
    python benchmarks/scenarios.py --out runs/scenarios --json runs/scenarios.json   # the full matrix (60 s each)
    python benchmarks/scenarios.py --out runs/scenarios --evaluate-only --keep-every 10   # as if scraped 10x slower
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
from bench_collect_cpu import wait_http
from scenario_sets import OFF, SCENARIOS, Scenario  # noqa: F401  (OFF: for benchmarks/prefix_cache.py)

from stallscope.analyzers.chunking import SETTLE_IT
from stallscope.refserver.config import EngineConfig
from stallscope.refserver.server_thread import free_port

SS = [sys.executable, "-m", "stallscope.cli"]
QUICK_S, FULL_S = 20.0, 60.0
# A run is flagged for a kind when analyze reports the kind at any severity (the detection); the "no warning
# on runs meeting the SLO" target counts warnings and criticals only (the severity), docs/accuracy.md.
DETECTED_AT = "info"


def record_run(out: Path, *, server: list[str], load: list[str], interval: str, load_s: float,
               collect_s: float) -> None:
    """Reference server (`server` flags) + collector (`collect_s` s) + load generator (`load` flags, `load_s` s);
    leaves store.db, steps.jsonl, loadgen.json and the processes' logs in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen(SS + ["refserver", *server, "--port", str(port), "--step-trace", str(out / "steps.jsonl")],
                            stdout=open(out / "server.log", "w"), stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 120, proc=proc, what=f"refserver did not start; see {out / 'server.log'}")
        collector = subprocess.Popen(SS + ["collect", "--target", f"vllm=http://127.0.0.1:{port}/metrics",
                                           "--interval", interval, "--db", str(out / "store.db"),
                                           "--duration", str(collect_s), "--quiet"],
                                     stdout=open(out / "collect.log", "w"), stderr=subprocess.STDOUT)
        subprocess.run(SS + ["loadgen", "--url", f"http://127.0.0.1:{port}", *load, "--duration", str(load_s),
                             "--no-progress", "--out", str(out / "loadgen.json")], check=True, timeout=load_s + 300,
                       stdout=open(out / "loadgen.log", "w"), stderr=subprocess.STDOUT)
        collector.wait(timeout=120)
    finally:
        proc.terminate()
        proc.wait(30)


def _prefix_caching_flag() -> list[str]:
    """`--no-enable-prefix-caching` when this refserver has the flag (repeated long prompts stay prefills)."""
    helptext = subprocess.run(SS + ["refserver", "--help"], capture_output=True, text=True).stdout
    return ["--no-enable-prefix-caching"] if "--no-enable-prefix-caching" in helptext else []


def record(sc: Scenario, run: Path, duration: float, extra_server: list[str]) -> None:
    extra_server = [f for f in extra_server if f != "--no-enable-prefix-caching"] if sc.prefix_caching else extra_server
    record_run(run, server=["--model", sc.model, "--seed", str(sc.seed), *sc.server, *extra_server],
               load=[*sc.loadgen_flags(duration), "--seed", str(sc.seed)], interval=sc.interval, load_s=duration,
               collect_s=sc.collect_s(duration))


class TooFewScrapes(Exception):
    """`analyze` refused the store (exit 2): it holds fewer scrapes than one window needs."""


def analyze(run: Path, slo: float, steps: bool = False, config: tuple[str, ...] = (),
            db: Path | None = None) -> list[dict]:
    """The findings of `stallscope analyze --db store.db --format json` (exit 1 is `--fail-on critical`); with
    `steps`, the run's step trace is given too (`--steps steps.jsonl`); `config`: analyze's chunked-prefill flags;
    `db`: another store than the run's (a thinned copy, `thin_store`)."""
    extra = (["--steps", str(run / "steps.jsonl")] if steps else []) + list(config)
    res = subprocess.run(SS + ["analyze", "--db", str(db or run / "store.db"), *extra, "--format", "json",
                               "--itl-slo", str(slo)],
                         capture_output=True, text=True)
    if res.returncode == 2 and "too few scrapes" in res.stderr:
        raise TooFewScrapes(res.stderr.strip().splitlines()[-1])
    if res.returncode not in (0, 1):
        raise RuntimeError(f"analyze {run} exited {res.returncode}: {res.stderr[-400:]}")
    return json.loads(res.stdout)["findings"]


def known_config(sc: Scenario) -> tuple[str, ...]:
    """The scenario server's chunked-prefill flags as `analyze` takes them (what its operator knows), read by the
    refserver's own flag parser (its defaults included)."""
    cfg = EngineConfig.from_flags(sc.server)
    if not cfg.enable_chunked_prefill:
        return ("--no-enable-chunked-prefill",)
    return ("--enable-chunked-prefill", "--max-num-batched-tokens", str(cfg.max_num_batched_tokens))


def thin_store(src: Path, dst: Path, keep_every: int) -> Path:
    """A copy of the store `src` at `dst` with every `keep_every`-th scrape of each target kept, the last one
    included: what a scraper `keep_every` times slower would have stored (the counters are cumulative, so the
    kept samples are exactly its own; only the phase of its scrapes is fixed)."""
    for leftover in (dst, dst.with_name(dst.name + "-wal"), dst.with_name(dst.name + "-shm")):
        leftover.unlink(missing_ok=True)
    with closing(sqlite3.connect(src)) as a, closing(sqlite3.connect(dst)) as b:
        a.backup(b)
    with closing(sqlite3.connect(dst)) as con, con:
        drop = [(i,) for i, n, rank in con.execute(
            "SELECT id, COUNT(*) OVER (PARTITION BY target_id), ROW_NUMBER() OVER (PARTITION BY target_id ORDER BY ts) "
            "FROM scrapes") if (n - rank) % keep_every]
        con.executemany("DELETE FROM chunks WHERE scrape_id = ?", drop)
        con.executemany("DELETE FROM scrapes WHERE id = ?", drop)
    return dst


def evaluate(sc: Scenario, run: Path, slo: float, with_config: bool = False, with_log: bool = False,
             keep_every: int = 1) -> dict:
    from stallscope.analyzers import signals, truth
    from stallscope.analyzers.step_cost import read_step_trace
    from stallscope.collectors import loader
    from stallscope.core.config import load_thresholds
    from stallscope.core.config import parse_duration

    db = run / "store.db" if keep_every == 1 else thin_store(run / "store.db", run / f"store-every{keep_every}.db",
                                                                keep_every)
    samples = next(f["samples"] for f in loader.load(db).values() if len(f["samples"]))
    run_end = int(samples["ts"].max())
    window = signals.choose_grid(samples, load_thresholds(itl_slo_s=slo))[1]
    interval = parse_duration(sc.interval) * keep_every
    true = truth.episodes(read_step_trace(run / "steps.jsonl"), slo, run_end_ns=run_end)
    stated = known_config(sc) if with_config else ("--server-log", str(run / "server.log")) if with_log else ()
    try:
        findings, refused = analyze(run, slo, config=stated, db=db), None
    except TooFewScrapes as e:   # a thinned store can hold fewer scrapes than a window needs: scored as no finding
        if keep_every == 1:
            raise
        findings, refused = [], str(e)
    load = json.loads((run / "loadgen.json").read_text())
    row = {"scenario": sc.name, "run": str(run), "itl_p99_s": analyzed_itl_p99(load, int(samples["ts"].min()), run_end),
           "itl_p99_whole_load_s": load["all"]["itl_s"].get("p99"), "window_s": window / 1e9,
           "interval_s": interval, "truth": sorted(k for k, v in true.items() if v),
           "flagged": sorted(k for k in truth.KINDS if truth.flagged(findings, k, DETECTED_AT)),
           "warned": sorted(k for k in truth.KINDS if truth.flagged(findings, k, "warning")),
           "all_findings": sorted({f["kind"] for f in findings}),
           "asks_for_config": sorted({f["kind"] for f in findings if SETTLE_IT in f.get("explanation", "")}),
           "contradictions": truth.contradictions(truth.merge(true["decode_starvation"] + true["kv_pressure"]), findings),
           "config_contradictions": config_contradictions(sc, findings), "not_diagnosed": refused}
    for kind in truth.KINDS:
        found = truth.flagged(findings, kind, DETECTED_AT)
        ttd = truth.times_to_detect(true[kind], found, window)
        row[kind] = {**truth.episode_scores(true[kind], found), "ttd_s": ttd,
                     "ttd_vs_target": [t / (2 * interval + window / 1e9) for t in ttd if t is not None]}
    return row


def long_prompt_tokens(sc: Scenario) -> int:
    """The scenario's long prompt size, by loadgen's own parser (its default included)."""
    import argparse

    from stallscope.cli.loadgen import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return int(parser.parse_known_args(sc.loadgen_flags(FULL_S))[0].long_prompt_tokens)


def config_contradictions(sc: Scenario, findings: list[dict]) -> list[str]:
    """The starvation and ITL findings whose stated chunked-prefill configuration contradicts the server's (the
    rule, written once): "on" (`chunked_prefill` true) on a server with chunking off; whole-prompt steps
    (`chunked_prefill` false: off, or on with a budget whose one step holds most of a long prompt) on a chunked
    server whose budget is at most half its long prompts; a decided-by saying one step held the whole prompt on
    such a server."""
    cfg = EngineConfig.from_flags(sc.server)
    splits = cfg.enable_chunked_prefill and 2 * cfg.max_num_batched_tokens <= long_prompt_tokens(sc)
    out = []
    for f in findings:
        ev = f["evidence"]
        if f["kind"] not in ("decode_starvation", "itl_high") or ev.get("chunked_prefill") is None:
            continue
        said_whole = ev["chunked_prefill"] is False or "held the whole prompt" in (ev.get("decided_by") or "")
        if (ev["chunked_prefill"] is True and not cfg.enable_chunked_prefill) or (said_whole and splits):
            out.append(f"{f['kind']} at {f.get('start', '?')}: {ev.get('chunking') or ev.get('decided_by')}")
    return out


def analyzed_itl_p99(load: dict, start_ns: int, end_ns: int) -> float | None:
    """Client-side ITL P99 over the span the store covers: every gap between two chunks of a stream that ends
    inside it, and each stream's gap still open at its end (a stall the data ends inside is a gap at least
    that long; loadgen's own P99 covers its whole run and never sees the open gap)."""
    lo, hi, gaps = start_ns / 1e9, end_ns / 1e9, []
    for rec in load.get("records", []):
        ts = np.asarray(rec.get("chunk_ts") or [], dtype=float)
        if len(ts) >= 2:
            g = np.diff(ts)
            gaps.extend(g[(ts[1:] > lo) & (ts[1:] <= hi)].tolist())
        before = ts[ts <= hi]
        if len(before) and before[-1] >= lo and (len(before) < len(ts) or not rec.get("done", True)):
            gaps.append(hi - before[-1])      # the stream's next chunk came after the data ended
    return float(np.percentile(gaps, 99)) if gaps else None


def summarize(rows: list[dict], slo: float) -> dict:
    """The issue's figures with their targets and ratios (value / target; for 0-targets, met or not)."""
    from stallscope.analyzers import truth

    runs = truth.run_scores([(set(r["truth"]), set(r["flagged"])) for r in rows])
    false_met = [r["scenario"] + (" (true starvation)" if "decode_starvation" in r["truth"] else "") for r in rows
                 if r["itl_p99_s"] is not None and r["itl_p99_s"] <= slo and "decode_starvation" in r["warned"]]
    ttd = [x for r in rows for x in r["decode_starvation"]["ttd_vs_target"]]  # live stalls: starvation episodes
    missed = sum(r["decode_starvation"]["ttd_s"].count(None) for r in rows)
    out = {f"{k}_{m}": {"value": runs[k][m], "target": 0.95, "ratio": runs[k][m] / 0.95, "counts": runs[k]}
           for k in truth.KINDS for m in ("precision", "recall")}
    # beside it, for the record: the recall a warnings-only detection would have (info interference not counted)
    warned = truth.run_scores([(set(r["truth"]), set(r["warned"])) for r in rows])["decode_starvation"]
    out["decode_starvation_recall_counting_warnings_only"] = {"value": warned["recall"], "target": "-",
                                                             "ratio": float("nan"), "counts": warned}
    out["starvation_warnings_on_runs_meeting_slo"] = {"value": len(false_met), "target": 0, "met": not false_met,
                                                      "runs": false_met}
    fixed = [r for r in false_met if not r.endswith("(true starvation)")]   # the fixed state: no true episode
    out["starvation_warnings_on_runs_meeting_slo_without_true_starvation"] = {
        "value": len(fixed), "target": 0, "met": not fixed, "runs": fixed}
    # the other side of the severity: a true starvation run whose P99 missed the SLO is warned about
    unwarned = [r["scenario"] for r in rows if r["itl_p99_s"] is not None and r["itl_p99_s"] > slo
                and "decode_starvation" in r["truth"] and "decode_starvation" not in r["warned"]]
    out["starvation_runs_missing_slo_without_warning"] = {"value": len(unwarned), "target": 0, "met": not unwarned,
                                                          "runs": unwarned}
    contra = sum(r["contradictions"] for r in rows)
    out["contradictions_within_episodes"] = {"value": contra, "target": 0, "met": contra == 0}
    stated = [f"{r['scenario']}: {c}" for r in rows for c in r.get("config_contradictions", [])]
    out["stated_configuration_contradicting_the_server"] = {"value": len(stated), "target": 0, "met": not stated,
                                                            "findings": stated}
    med = float(np.median(ttd)) if ttd else float("nan")
    out["median_time_to_detect_starvation"] = {"value": med, "unit": "x (2 scrapes + 1 window)", "target": 1.0, "ratio": med,
                                    "detected": len(ttd), "never_detected": missed}
    refused = [r["scenario"] for r in rows if r.get("not_diagnosed")]   # --keep-every: too few scrapes left
    out["runs_not_diagnosed"] = {"value": len(refused), "target": 0, "met": not refused, "runs": refused}
    return out


def _fmt_ep(e: dict) -> str:
    return f"{e['hit']}/{e['episodes']} ({e['overlap_s']:.1f}/{e['true_s']:.1f} s)" if e["episodes"] else "-"


def _fmt_ttd(r: dict) -> str:
    ttd = [t for t in r["decode_starvation"]["ttd_s"] if t is not None]
    if not ttd:
        return "-"
    m = float(np.median(ttd))
    return f"{m:.1f} s = {m / r['interval_s']:.1f} scr / {m / r['window_s']:.2f} win"


def print_report(rows: list[dict], summary: dict) -> None:
    print("| scenario | truth | flagged | starvation episodes hit (overlap) | kv episodes hit (overlap) | "
          "median time to detect starvation | contradictions | ITL P99 | other findings |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        other = sorted(set(r["all_findings"]) - set(r["flagged"]))
        p99 = f"{r['itl_p99_s']:.2f} s" if r["itl_p99_s"] is not None else "-"
        print(f"| {r['scenario']} | {', '.join(r['truth']) or '-'} | {', '.join(r['flagged']) or '-'} | "
              f"{_fmt_ep(r['decode_starvation'])} | {_fmt_ep(r['kv_pressure'])} | {_fmt_ttd(r)} | "
              f"{r['contradictions']} | {p99} | {', '.join(other) or '-'} |")
    print("\n| figure | value | target | ratio / met |\n|---|---|---|---|")
    for name, s in summary.items():
        shown = s.get("ratio", s.get("met"))
        val = s["value"]
        print(f"| {name} | {val:.3f} | {s['target']} | {shown:.3f} |" if isinstance(val, float) and "ratio" in s
              else f"| {name} | {val} | {s['target']} | {shown} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_S:.0f} s of load per scenario (CI); else {FULL_S:.0f} s")
    ap.add_argument("--only", help="comma-separated scenario names (default: all)")
    ap.add_argument("--set", choices=["all", "tuned", "held-out"] + [f"held-out-{k}" for k in range(2, 1 + max(sc.held_out for sc in SCENARIOS))], default="all",
                    help="the tuned scenarios, a held-out set, or all (default)")
    ap.add_argument("--out", default=None, help="run directories go here (default runs/scenarios[-quick])")
    ap.add_argument("--json", dest="json_out", help="write the rows and the summary here")
    ap.add_argument("--itl-slo", type=float, default=None, help="ITL SLO for truth and analyze (default itl_slo_s)")
    ap.add_argument("--evaluate-only", action="store_true", help="score recorded runs; record none")
    ap.add_argument("--list", action="store_true", help="print the scenarios and exit")
    ap.add_argument("--keep-every", type=int, default=1, metavar="K",
                    help="with --evaluate-only: score each run from every K-th scrape only (a K times coarser "
                         "scrape interval; the store is copied to store-everyK.db)")
    ap.add_argument("--with-config", action="store_true",
                    help="give analyze each server's chunked-prefill flags (as its operator would); default: inferred")
    ap.add_argument("--with-server-log", action="store_true",
                    help="give analyze each run's server.log (vLLM's startup lines state the configuration)")
    ap.add_argument("--iteration-log", action="store_true",
                    help="record with the server's --enable-logging-iteration-details (its server.log then holds "
                         "every step, as vLLM's does with that flag)")
    args = ap.parse_args()
    from stallscope.core.config import load_thresholds

    if args.keep_every < 1 or (args.keep_every > 1 and not args.evaluate_only):
        raise SystemExit(f"--keep-every {args.keep_every}: give a whole number >= 1, with --evaluate-only")
    if args.with_config and args.with_server_log:
        raise SystemExit("--with-config and --with-server-log each state the configuration; give one")

    if args.list:
        for sc in SCENARIOS:
            print(f"{sc.name}: {sc.exercises}\n  refserver --model {sc.model} --seed {sc.seed} {' '.join(sc.server)}\n"
                  f"  loadgen {' '.join(sc.loadgen_flags(FULL_S))}; scrape {sc.interval}")
        return 0
    wanted = {"all": None, "tuned": 0, "held-out": 1}.get(args.set, args.set.rpartition("-")[2])
    wanted = None if wanted is None else int(wanted)
    chosen = [sc for sc in SCENARIOS if wanted is None or sc.held_out == wanted]
    names = args.only.split(",") if args.only else [sc.name for sc in chosen]
    unknown = sorted(set(names) - {sc.name for sc in SCENARIOS})
    if unknown:
        raise SystemExit(f"unknown scenario(s) {', '.join(unknown)}; see --list")
    slo = args.itl_slo if args.itl_slo is not None else float(load_thresholds()["itl_slo_s"])
    out = Path(args.out or ("runs/scenarios-quick" if args.quick else "runs/scenarios"))
    duration = QUICK_S if args.quick else FULL_S
    extra = [] if args.evaluate_only else _prefix_caching_flag()
    extra += ["--enable-logging-iteration-details"] if args.iteration_log else []
    rows = []
    for sc in (s for s in SCENARIOS if s.name in names):
        run = out / sc.name
        if not (run / "store.db").exists() and not args.evaluate_only:
            record(sc, run, duration, extra)
        rows.append(evaluate(sc, run, slo, args.with_config, args.with_server_log, args.keep_every))
        print(f"{sc.name}: truth {rows[-1]['truth']} flagged {rows[-1]['flagged']}", file=sys.stderr)
    summary = summarize(rows, slo)
    print_report(rows, summary)
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps({"itl_slo_s": slo, "quick": args.quick, "keep_every": args.keep_every,
                                                   "scenarios": rows, "summary": summary}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
