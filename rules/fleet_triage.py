"""Fleet triage against a Prometheus-compatible API: rank every replica server-side, then diagnose the top K.

The idea: never pull raw series for the fleet. Steps:

1. Inventory (two instant queries over the range): every replica matching the selector, grouped by the
   identity labels, with its peak running requests (the long-prefill cut) and its scrape count.
2. Path: with the fleet recording rules installed (`rules/fleet.rules.yaml`, `fleet_recorded`: their
   presence series exists), the default identity, the rules' window and vLLM's default ITL buckets, the
   window tests are read from the recorded series by name on a grid aligned to the rule evaluations;
   else they are evaluated from the raw series (`path` says which).
3. Replicas are split into groups (one regex matcher on the identity label with the most distinct values,
   sized for `--max-memory`), the range into chunks under Prometheus' point limit; each group x chunk
   runs the episode tests of `fleet.episode_exprs` and a presence count (`collectors/prometheus_fleet`).
4. `analyzers.fleet.triage` turns the answers into episodes and the ranking; the top K replicas with
   episodes get the one diagnosis (`analyzers.sources.diagnose_sources`) on raw series of their episode
   windows only, so their findings are the single-replica path's.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from stallscope.analyzers import fleet as A
from stallscope.analyzers.sources import diagnose_sources
from stallscope.collectors.prometheus_fleet import Job, Runner, group_size, time_chunks
from stallscope.collectors.prometheus_api import MAX_POINTS
from stallscope.core.config import parse_duration
from stallscope.core.errors import CollectorError, InputError, ToolkitError
from stallscope.rules import fleet as F
from stallscope.rules import fleet_recorded as FR
from stallscope.rules.fleet_signals import bucket_bounds, grid_index, live_window, replica_name

NS = 1_000_000_000
KEYS = ("impaired", "load", "kv_pressure", "presence")
GROUP_CAP = 25  # replicas per query at most: a day of 25 replicas is a few seconds of server time, well
                # inside Prometheus' default 2 min query timeout even on a loaded server
SERIES_LOADED = 90  # raw series one replica's decode-starvation test reads (ITL buckets twice, share terms, rates)
RECORDED_CAP, RECORDED_LOADED = 250, 8  # the recorded path: a handful of recorded series per replica


@dataclasses.dataclass
class Plan:
    """What triage will ask: replicas, their groups (with the long-prefill cut), the grid and the path."""

    replicas: dict
    groups: list  # [(group name, cut, [replica names], matchers)]
    by: tuple
    path: str
    itl_les: list
    scrape_s: float
    itl_families: tuple = (F.ITL, F.ITL_LEGACY)
    aligned_s: float | None = None  # the recorded path: a rule evaluation time (the grid goes through it)


def inventory(runner: Runner, by, matchers, start_s: float, end_s: float) -> tuple[dict, dict, dict]:
    """({replica: labels}, {replica: peak running}, {replica: scrapes}) over the range."""
    span = F.R.fmt_duration(max(1.0, end_s - start_s))
    peaks = runner.instant(F.inventory_expr(by, span, matchers), end_s)
    ids = ", ".join(by)
    counts = runner.instant(F.with_matchers(f"max by ({ids}) (count_over_time(vllm:num_requests_running[{span}]))",
                                            matchers), end_s)
    labels = {replica_name(lab, by): {k: lab[k] for k in by if lab.get(k)} for lab, _ in peaks}
    return labels, {replica_name(lab, by): v for lab, v in peaks}, {replica_name(lab, by): v for lab, v in counts}


def choose_path(runner: Runner, th: dict, path: str, by, matchers, start_s: float, end_s: float,
                window_s: float, step_s: float) -> str:
    """"recorded" or "raw" (see the module docstring); `path` "auto" probes the server."""
    if path not in ("auto", "raw", "recorded"):
        raise InputError(f"--fleet-path must be auto, raw or recorded, got {path!r}")
    if path == "raw":
        return "raw"
    why = FR.usable(th, by, matchers, window_s, step_s)
    if why is None:
        found = runner.instant(FR.probe(th, matchers, F.R.fmt_duration(max(1.0, end_s - start_s))), end_s)
        why = None if found and found[0][1] > 0 else f"no recorded series {FR.names(th)['presence']} for the selector"
    if why is None and path == "auto":  # the rules must cover the start where the raw series do
        at = start_s + min(300.0, (end_s - start_s) / 2)
        raw = runner.instant(F.with_matchers("count(vllm:num_requests_running)", matchers), at)
        rec = runner.instant(f"count({FR.names(th)['presence']}{{{F.matcher_text(matchers)}}})", at)
        if raw and raw[0][1] > 0 and not (rec and rec[0][1] > 0):
            why = "the recorded series begin after the range starts"
    if why is None:
        return "recorded"
    if path == "recorded":
        raise InputError(f"--fleet-path recorded: {why} (install rules/{FR.FILE}: docs/fleet.md)")
    return "raw"


def rule_time(runner: Runner, th: dict, matchers, start_s: float, end_s: float) -> float | None:
    """A time the fleet rules were evaluated at (unix s), from their latest sample near the end, the middle
    or the start of the range."""
    for at in (end_s, (start_s + end_s) / 2, start_s + 300):
        got = runner.instant(FR.last_eval(th, matchers), at)
        if got:
            return got[0][1]
    return None


def split_groups(labels: dict, cuts: dict, by, size: int, matchers) -> list:
    """[(group name, cut, names, matchers)]: replicas of one cut, `size` at a time, selected by a regex on
    the identity label with the most distinct values."""
    key = max(by, key=lambda k: (len({lab.get(k, "") for lab in labels.values()}), -by.index(k)))
    out = []
    by_cut: dict[str, list[str]] = {}
    for name in sorted(labels):
        by_cut.setdefault(cuts[name], []).append(name)
    for cut, names in sorted(by_cut.items()):
        for i in range(0, len(names), size):
            part = names[i:i + size]
            values = sorted({labels[n].get(key, "") for n in part})
            regex = "|".join(re.escape(v) for v in values)
            out.append((f"{key}=~{values[0]}..{values[-1]} ({len(part)})" if len(part) > 1 else part[0], cut, part,
                        [*matchers, (key, "=~", regex)]))
    return out


def plan(runner: Runner, th: dict, start_s: float, end_s: float, *, by, matchers, path: str, max_memory: int,
         concurrency: int, n_points: int, chunk_s: float, max_samples: int, window_s: float,
         step_s: float) -> Plan:
    by = F.label_list(by)
    chosen = choose_path(runner, th, path, by, matchers, start_s, end_s, window_s, step_s)
    labels, peaks, counts = inventory(runner, by, matchers, start_s, end_s)
    if not labels:
        sel = F.matcher_text(matchers) or "(none)"
        raise InputError(f"no vLLM replica (vllm:num_requests_running) matches selector {{{sel}}} between "
                         f"{start_s:.0f} and {end_s:.0f} (unix s)")
    les, families = bucket_bounds(runner, (F.ITL, F.ITL_LEGACY), start_s, end_s, matchers)
    aligned = None
    if chosen == "recorded":
        chosen, aligned = _recorded_checks(runner, th, path, les, matchers, start_s, end_s)
    cuts = {name: F.iteration_cut(peaks.get(name, 0.0)) for name in labels}
    scrapes = max(counts.values()) if counts else 0
    scrape_s = (end_s - start_s) / (scrapes - 1) if scrapes > 1 else 15.0
    scrape_s = float(round(scrape_s)) if scrape_s > 1 else scrape_s
    if chosen == "recorded":  # recorded samples one replica's queries load, one per window
        loaded, cap = RECORDED_LOADED * int(chunk_s / window_s + 1), RECORDED_CAP
    else:  # raw samples one replica's episode query loads
        loaded, cap = SERIES_LOADED * int(chunk_s / scrape_s + 1), GROUP_CAP
    size = group_size(min(n_points, MAX_POINTS), 6, max_memory, concurrency, loaded_per_replica=loaded,
                      max_samples=max_samples, cap=cap)
    return Plan(labels, split_groups(labels, cuts, by, size, matchers), by, chosen, les, scrape_s, families,
                aligned)


def _recorded_checks(runner: Runner, th: dict, path: str, les, matchers, start_s: float,
                     end_s: float) -> tuple[str, float | None]:
    """("recorded", a rule evaluation time) when the rules were rendered for the buckets the fleet
    exports and their evaluation time is readable; else ("raw", None), or an error for --fleet-path recorded."""
    why = None
    if sorted(map(float, les)) != sorted(map(float, F.ITL_LES)):
        why = f"the fleet's ITL buckets {les} are not the ones the rules were rendered for"
    at = rule_time(runner, th, matchers, start_s, end_s) if why is None else None
    if why is None and at is None:
        why = "the rules' evaluation time could not be read"
    if why is None:
        return "recorded", at
    if path == "recorded":
        raise InputError(f"--fleet-path recorded: {why}")
    return "raw", None


def _exprs(th, p: Plan, matchers, window: str, cut: str, step: str) -> dict[str, str]:
    if p.path == "recorded":
        return FR.exprs(th, matchers, cut, parse_duration(step))
    sig = F.signal_exprs(th, by=p.by, window=window, matchers=matchers, itl_les=p.itl_les, iteration_cut=cut,
                         itl_families=p.itl_families, live_window=live_window(window, p.scrape_s))
    return {**F.episode_exprs(th, sig, p.by, p.itl_les, window, p.itl_families),
            "presence": F.presence_expr(p.by, step, matchers)}


def _masks(answer, p: Plan, n: int, start_s: float, step_s: float) -> dict:
    """{replica: {test: values on the grid}}; the impaired test's tagged series stay apart
    (`impaired:share`, `impaired:p99`, `impaired:frozen`) until `fleet.impaired_codes` joins them."""
    masks: dict[str, dict[str, np.ndarray]] = {}
    members = {name: g for g, _, names, _ in p.groups for name in names}
    for key in KEYS:
        for lab, t, v in answer.series.get(key, []):
            name = replica_name(lab, p.by)
            if name not in members or members[name] in answer.failures:
                continue
            test = f"{key}:{lab['stallscope_test']}" if "stallscope_test" in lab else key
            arr = masks.setdefault(name, {}).setdefault(test, np.zeros(n))
            idx = grid_index(t, start_s, step_s)
            ok = (idx >= 0) & (idx < n)
            arr[idx[ok]] = v[ok]
    for m in masks.values():
        m["impaired"] = F.impaired_codes(*(m.get(f"impaired:{t}", np.zeros(n)) for t in ("share", "p99", "frozen")))
    return masks


def _points(start_s: float, end_s: float, step_s: float) -> int:
    """Grid points from start_s every step_s up to end_s (never past it: a point after the data ends would read
    every replica as absent there)."""
    return int(np.floor((end_s - start_s) / step_s + 1e-9)) + 1


def triage(url: str, th: dict, start_s: float, end_s: float, *, step_s: float | None = None,
           window: str | None = None, by=F.DEFAULT_IDENTITY, matchers=(), top: int = 5, concurrency: int = 4,
           max_memory: int = 1 << 30, headers: dict | None = None, path: str = "auto", timeout: float = 300.0,
           progress=None, drill: bool = True, retries: int = 3, backoff_s: float = 0.5,
           max_samples: int = 50_000_000, params: dict | None = None) -> A.FleetReport:
    """The ranked FleetReport of every replica matching `matchers` over start..end (unix s)."""
    w = window or F.R.fmt_duration(parse_duration(th["windows"]["short"]))
    window_s = parse_duration(w)
    step_s = step_s or window_s
    if end_s - start_s < window_s:
        raise InputError(f"the range ({end_s - start_s:.0f} s) is shorter than the window {w}")
    runner = Runner(url, timeout=timeout, headers=headers, concurrency=concurrency, retries=retries,
                    backoff_s=backoff_s, extra_params=params)
    start_s = start_s + window_s  # the first full window, as signals.choose_grid
    n = _points(start_s, end_s, step_s)
    chunks = time_chunks(start_s, end_s, step_s)
    p = plan(runner, th, start_s - window_s, end_s, by=by, matchers=matchers, path=path, max_memory=max_memory,
             concurrency=concurrency, n_points=n, chunk_s=chunks[0][1] - chunks[0][0] + window_s,
             max_samples=max_samples, window_s=window_s, step_s=step_s)
    if p.aligned_s is not None:  # the grid through the rule evaluations: each point reads its own window
        start_s += (p.aligned_s - start_s) % step_s
        n = _points(start_s, end_s, step_s)
        chunks = time_chunks(start_s, end_s, step_s)
    step = F.R.fmt_duration(step_s)
    jobs = [Job(g, kind, expr, a, b, step_s) for g, cut, _, m in p.groups
            for kind, expr in _exprs(th, p, m, w, cut, step).items() for a, b in chunks]
    answer = runner.run(jobs, progress)
    masks = _masks(answer, p, n, start_s, step_s)
    present = [np.flatnonzero(m.get("presence", np.zeros(n)) > 0) for m in masks.values()]
    first = min((int(x[0]) for x in present if len(x)), default=0)
    failed = {name for g, _, names, _ in p.groups if g in answer.failures for name in names}
    by_kind = {name: {"impaired": m["impaired"], "load": m.get("load", np.zeros(n)),
                      "kv_pressure": m.get("kv_pressure", np.zeros(n)),
                      "absent": A.absent_mask(m.get("presence", np.zeros(n)), first)}
               for name, m in masks.items()}
    for name in set(p.replicas) - set(masks) - failed:  # known to the inventory, silent over the whole grid
        by_kind[name] = {"absent": A.absent_mask(np.zeros(n), first)}
    t0 = int(round(start_s * 1000)) * 1_000_000
    ts = t0 + np.arange(n, dtype=np.int64) * int(round(step_s * NS))
    ranked = A.triage(by_kind, p.replicas, ts, int(window_s * NS), int(round(step_s * NS)))
    failures = {g: {"error": answer.failures[g], "replicas": names} for g, _, names, _ in p.groups
                if g in answer.failures}
    failures.update({f"{g} (partial response)": {"error": "; ".join(dict.fromkeys(answer.warnings[g])),
                                                 "replicas": names}
                     for g, _, names, _ in p.groups if g in answer.warnings})
    stats = {"requests": answer.requests, "retries": answer.retries, "samples": answer.samples,
             "bytes": answer.bytes, "server_s": answer.server_s, "query_wall_s": answer.wall_s,
             "groups": len(p.groups), "replicas": len(p.replicas), "scrape_s": p.scrape_s}
    report = A.FleetReport(ranked, int(ts[0]), int(ts[-1]), int(round(step_s * NS)), int(window_s * NS), p.by,
                           p.path, failures, stats, {k: v for k, v in by_kind.items()}, th)
    if drill:
        drill_down(report, url, th, top=top, headers=headers, scrape_s=p.scrape_s)
    return report


def drill_down(report: A.FleetReport, url: str, th: dict, *, top: int, headers=None, scrape_s: float = 15.0) -> None:
    """Raw series of the top `top` replicas' episode windows only, through the one diagnosis."""
    resolution = F.R.fmt_duration(max(1.0, round(scrape_s)))
    for rep in [r for r in report.replicas if r.episode_seconds > 0][:max(0, top)]:
        rep.findings = []
        for lo, hi in A.drill_windows(rep.episodes, report.window_ns, report.start_ns - report.window_ns,
                                      report.end_ns):
            rep.drilled.append((lo, hi))
            try:
                found = diagnose_sources([("prometheus", url)], lo, hi, thresholds=th, selector=rep.labels,
                                         resolution=resolution, headers=headers)
            except (CollectorError, ToolkitError) as exc:
                report.failures[f"drill-down {rep.name}"] = {"error": str(exc), "replicas": [rep.name]}
                continue
            rep.findings += [dataclasses.replace(f, target=rep.name) for f in found.findings]
