"""Fleet triage at scale: N vLLM replicas x H hours in a real Prometheus, ranked with PromQL push-down.

The fleet is tests/fleet_data.py's (the series the triage signals need, vLLM's names and ITL buckets, 15 s
scrapes, injected starvation / KV-pressure / dead / reset replicas), backfilled with promtool. Figures:
  1. generation and backfill time (the setup, not the product);
  2. `stallscope analyze --prometheus URL --fleet --format json` as a child process: wall time and peak RSS,
     against the targets 60 s and 1 GB;
  3. Prometheus' own time answering the same queries (the sum of `stats.timings.execTotalTime` over every
     query_range, from `stats=all`) beside stallscope's wall: the ratio shows our overhead to the engine's work;
  4. bytes received by the triage, and what the raw-pull path (`analyze --prometheus` without --fleet:
     every `vllm:` series at its 5 s step) would transfer for the same range, from one replica-hour pulled
     for real and scaled; also at 300 series per replica, a real vLLM's count;
  5. recall: every injected replica in the top K (K = the number injected);
  6. with `--path recorded`: the fleet recording rules (rules/fleet.rules.yaml) are backfilled first with
     `promtool tsdb create-blocks-from rules` (setup, timed apart with Prometheus' CPU during it, as a fleet
     that runs the rules pays it continuously), Prometheus is restarted and left to compact, and the triage
     runs with `--fleet-path recorded`.

`--reuse-tsdb DIR` copies a TSDB written earlier (DIR holds meta.json and tsdb/) instead of generating one,
and checks a few replicas' samples against the current generator (tests/fleet_data.py), naming the
families that differ.

    python benchmarks/bench_fleet.py [--replicas 1000] [--hours 24] [--concurrency 4] [--keep DIR]
        [--reuse-tsdb DIR] [--path raw|recorded]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

WALL_LIMIT_S, RSS_LIMIT = 60.0, 1 << 30
NS = 10**9


def child(cmd: list[str]) -> tuple[int, float, int, str, float]:
    """(exit code, wall s, peak RSS bytes, stdout, CPU s) of a child process (its own rusage alone)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if code not in (0, 1):
            sys.exit(f"triage failed ({code}): {err.read()[-2000:]}")
        return code, wall, usage.ru_maxrss * 1024, out.read(), usage.ru_utime + usage.ru_stime


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_pull_bytes(url: str, t0: int, series_per_replica: int, replicas: int, hours: float) -> tuple[float, float]:
    """(bytes the raw path would transfer for the fleet, bytes per point) from one replica-hour pulled with
    the raw path's own query at its default 5 s step."""
    import requests

    r = requests.get(f"{url}/api/v1/query_range", params={
        "query": '{__name__=~"vllm:.+",pod="vllm-0001"}', "start": t0 + 3600, "end": t0 + 7200, "step": "5"},
        timeout=120)
    r.raise_for_status()
    points = sum(len(s["values"]) for s in r.json()["data"]["result"])
    per_point = len(r.content) / points
    return series_per_replica * replicas * hours * 720 * per_point, per_point


def check_data(prom, truth, t0: int, hours: float, replicas=(0, 1, 3, 6)) -> dict[str, str]:
    """{family: "equal" | "differs (...)" | "absent"} of the stored fleet against the current generator,
    at eight scrape times of each replica (two inside replica 0's first episode)."""
    import fleet_data
    import numpy as np

    ts = t0 + fleet_data.SCRAPE_S * np.arange(int(hours * 3600 // fleet_data.SCRAPE_S), dtype=np.int64)
    first = truth.episodes["vllm-0000"][0][1]
    picks = sorted({int(np.searchsorted(ts, first)) + 4, int(np.searchsorted(ts, first)) + 8,
                    *np.linspace(40, len(ts) - 40, 6).astype(int).tolist()})
    out: dict[str, str] = {}
    differ: dict[str, list] = {}
    for r in replicas:
        want = fleet_data.replica_series(r, ts, truth)
        for i in picks:
            got = {}
            for item in prom.query(f'{{__name__=~"vllm:.+",pod="vllm-{r:04d}"}}', int(ts[i])):
                m = item["metric"]
                got.setdefault(m["__name__"], {})[m.get("le", "")] = float(item["value"][1])
            for family, values in want.items():
                if family not in got:
                    out[family] = "absent"
                    continue
                have = got[family]
                expect = ([float(v) for v in values[i]] if values.ndim == 2 else [float(values[i])])
                stored = [have[k] for k in sorted(have, key=lambda le: float(le) if le else 0.0)]
                if len(stored) != len(expect) or not np.allclose(stored, expect, rtol=1e-12, atol=1e-9):
                    differ.setdefault(family, []).append(f"vllm-{r:04d}")
    checked = len(replicas) * len(picks)
    for family in want:
        if out.get(family) != "absent":
            pods = differ.get(family, [])
            out[family] = (f"differs at {len(pods)} of {checked} replica-times ({', '.join(sorted(set(pods)))})"
                           if pods else f"equal at {checked} replica-times")
    return out


def settle(prom, quiet_cpu_s: float = 1.0, period_s: float = 20.0, limit_s: float = 900.0) -> float:
    """Wait until Prometheus uses under `quiet_cpu_s` of CPU in `period_s` (compaction of the backfilled
    blocks done) but at least 70 s (one compaction cycle); returns the seconds waited."""
    t = time.perf_counter()
    time.sleep(70)
    while time.perf_counter() - t < limit_s:
        c = cpu_s(prom.proc.pid)
        time.sleep(period_s)
        if cpu_s(prom.proc.pid) - c < quiet_cpu_s:
            break
    return time.perf_counter() - t


PROM_ARGS = ["--query.timeout=30m"]  # the rule backfill asks a whole 2 h block of the fleet per query


def fleet_setup(args, work: Path) -> dict:
    """meta.json of the work directory: a copied TSDB (--reuse-tsdb), the one kept there, or a new fleet
    generated and backfilled (t0, gen_s, fill_s, om_bytes)."""
    import fleet_data
    from promserver import promtool

    meta = work / "meta.json"
    if args.reuse_tsdb and not meta.exists():
        t = time.perf_counter()
        shutil.copytree(args.reuse_tsdb / "tsdb", work / "tsdb", ignore=shutil.ignore_patterns("queries.active"))
        shutil.copy(args.reuse_tsdb / "meta.json", meta)
        print(f"  copied {args.reuse_tsdb}/tsdb in {time.perf_counter() - t:.1f} s")
    if not meta.exists():
        t0 = (int(time.time()) // 3600) * 3600 - int(args.hours * 3600) - 3600
        t = time.perf_counter()
        fleet_data.write(work / "fleet.om", args.replicas, args.hours, t0)
        gen_s, om_bytes = time.perf_counter() - t, (work / "fleet.om").stat().st_size
        t = time.perf_counter()
        fleet_data.backfill(work / "fleet.om", work / "tsdb", promtool())
        fill_s = time.perf_counter() - t
        (work / "fleet.om").unlink()
        meta.write_text(json.dumps({"t0": t0, "gen_s": gen_s, "fill_s": fill_s, "om_bytes": om_bytes}))
    return json.loads(meta.read_text())


def recorded_setup(args, work: Path, info: dict, truth, end: int) -> None:
    """Backfill rules/fleet.rules.yaml (timed, with Prometheus' CPU), restart and wait for compaction;
    the figures go into meta.json, so a later run triages again without repeating it."""
    import fleet_data
    from promserver import PrometheusServer, promtool

    t0 = info["t0"]
    with PrometheusServer(work, storage=work / "tsdb", extra_args=PROM_ARGS) as prom:
        if args.reuse_tsdb:
            info["data_check"] = check_data(prom, truth, t0, args.hours)
        cpu0, t = cpu_s(prom.proc.pid), time.perf_counter()
        rules = fleet_data.backfill_rules(ROOT / "rules" / "fleet.rules.yaml", prom.url, t0, end, work / "tsdb",
                                          work, promtool())
        info.update(rules_fill_s=time.perf_counter() - t, rules_fill_cpu_s=cpu_s(prom.proc.pid) - cpu0,
                    rules_file=rules.name)
    with PrometheusServer(work, storage=work / "tsdb", extra_args=PROM_ARGS) as prom:
        cpu0 = cpu_s(prom.proc.pid)
        info["compact_s"] = settle(prom)
        info["compact_cpu_s"] = cpu_s(prom.proc.pid) - cpu0
    (work / "meta.json").write_text(json.dumps(info))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=1000)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-memory", default="1GB")
    ap.add_argument("--keep", type=Path, help="work directory to keep (the TSDB is reused when present)")
    ap.add_argument("--selector", help='triage only these replicas, e.g. namespace="ns0" (a quarter of the fleet)')
    ap.add_argument("--reuse-tsdb", type=Path, metavar="DIR", help="copy DIR/tsdb and DIR/meta.json (an earlier --keep)")
    ap.add_argument("--path", choices=["raw", "recorded"], default="raw",
                    help="the triage's --fleet-path; recorded backfills rules/fleet.rules.yaml first")
    args = ap.parse_args()
    import fleet_data
    from promserver import PrometheusServer

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_fleet_"))
    work.mkdir(parents=True, exist_ok=True)
    info = fleet_setup(args, work)
    t0, end = info["t0"], info["t0"] + int(args.hours * 3600)
    truth = fleet_data.plan(args.replicas, args.hours, t0)
    if args.path == "recorded" and "rules_fill_s" not in info:
        recorded_setup(args, work, info, truth, end)
    with PrometheusServer(work, storage=work / "tsdb", extra_args=PROM_ARGS) as prom:
        series = int(float(prom.query('count({__name__=~"vllm:.+"})', end)[0]["value"][1]))
        print(f"fleet: {args.replicas} replicas x {args.hours:g} h at 15 s, {series} series "
              f"({info['om_bytes'] / 1e9:.2f} GB OpenMetrics); {len(truth.injected())} injected replicas")
        print(f"  setup: generate {info['gen_s']:.1f} s, promtool backfill {info['fill_s']:.1f} s")
        if args.reuse_tsdb and "data_check" not in info:
            info["data_check"] = check_data(prom, truth, t0, args.hours)
            (work / "meta.json").write_text(json.dumps(info))
        for family, verdict in sorted(info.get("data_check", {}).items()):
            print(f"  data vs the current generator: {family:42s} {verdict}")
        if args.path == "recorded":
            print(f"  setup: rule backfill ({info['rules_file']}) {info['rules_fill_s']:.1f} s wall, Prometheus CPU "
                  f"{info['rules_fill_cpu_s']:.1f} s; restart and compaction {info['compact_s']:.1f} s "
                  f"(Prometheus CPU {info['compact_cpu_s']:.1f} s)")
        time.sleep(5)
        cmd = [sys.executable, "-m", "stallscope.cli", "analyze", "--prometheus", prom.url, "--fleet", "--since",
               str(t0 * NS), "--until", str(end * NS), "--format", "json", "--top", "5", "--concurrency",
               str(args.concurrency), "--max-memory", args.max_memory, "--fleet-path", args.path,
               *(["--selector", args.selector] if args.selector else [])]
        cpu0 = cpu_s(prom.proc.pid)
        code, wall, rss, out, own_cpu = child(cmd)
        prom_cpu = cpu_s(prom.proc.pid) - cpu0
        raw_bytes, per_point = raw_pull_bytes(prom.url, t0, series / args.replicas, args.replicas, args.hours)
    report(args, json.loads(out), truth.injected(), code, wall, rss, own_cpu, prom_cpu, raw_bytes, per_point, series)


def report(args, doc: dict, injected: set, code: int, wall: float, rss: int, own_cpu: float, prom_cpu: float,
           raw_bytes: float, per_point: float, series: int) -> None:
    """Each figure beside its ratio to the target or to the engine's work."""
    s = doc["fleet"]["stats"]
    pods = [r["labels"].get("pod") for r in doc["ranking"]]
    injected &= set(pods)  # the selected replicas only
    found = len(set(pods[:len(injected)]) & injected)
    print(f"  path               {doc['fleet']['path']} (asked: --fleet-path {args.path}); load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    print(f"  triaged            {len(pods)} replicas ({args.selector or 'all'}), "
          f"{len(doc['fleet']['failures'])} failed groups, {s['retries']} retries")
    print(f"  triage wall        {wall:8.1f} s    {wall / WALL_LIMIT_S:5.2f} x the 60 s target")
    print(f"  triage peak RSS    {rss / 2**20:8.0f} MiB  {rss / RSS_LIMIT:5.2f} x the 1 GiB target")
    print(f"  Prometheus exec    {s['server_s']:8.1f} s    (sum over {s['requests']} query_range in "
          f"{s['groups']} groups, concurrency {args.concurrency}); stallscope wall / server time "
          f"{wall / max(s['server_s'], 1e-9):.2f}")
    print(f"  Prometheus CPU     {prom_cpu:8.1f} s    (its process, during the triage); stallscope CPU "
          f"{own_cpu:.1f} s ({own_cpu / max(prom_cpu, 1e-9):.2f} x the engine's)")
    print(f"  query phase wall   {s['query_wall_s']:8.1f} s    (the rest: inventory, drill-down of the top 5, start-up)")
    print(f"  received           {s['bytes'] / 1e6:8.1f} MB   {s['samples']} points")
    print(f"  raw pull would be  {raw_bytes / 1e9:8.1f} GB   ({series / args.replicas:.0f} series per replica at 5 s, "
          f"{per_point:.1f} B per point; {raw_bytes / max(s['bytes'], 1):.0f} x the triage); at 300 series per "
          f"replica {300 * args.replicas * args.hours * 720 * per_point / 1e9:.1f} GB")
    print(f"  recall             {found}/{len(injected)} injected replicas in the top {len(injected)}; "
          f"exit {code}")


if __name__ == "__main__":
    main()
