"""The fleet triage's window tests as recording rules, and the queries that read them back by name.

The idea: the raw path makes Prometheus evaluate the episode tests over every raw bucket for every replica
and window at query time (660 s of its CPU for 1,000 replicas x 24 h, docs/performance.md). A Prometheus
that runs these rules pays that once per window as the data arrives, and the triage then reads a handful
of recorded series per replica. One definition: every rule's `expr` is `rules/fleet.py`'s own expression
(`presence_expr`, `episode_exprs` over `signal_exprs`), rendered with

- the replica's identity `DEFAULT_IDENTITY` (`namespace, pod, instance, model_name, engine`), the
  short window of `rules/thresholds.yaml` as both the window and the group's evaluation `interval` (one
  recorded sample per window), the live window `windows.live`, and vLLM's default ITL buckets;
- the long-prefill test once per possible cut (the iteration-token bucket bounds from 512 up, label
  `cut`), because the cut depends on a replica's peak running requests over the triaged range
  (`fleet.iteration_cut`), which a rule cannot know: the triage reads the series of each replica's cut.

The tests answer only where a window fails (as on the raw path); `presence` answers every window with
samples. The triage reads each with `last_over_time(name[step - 1 ms])` on a grid aligned to the rule
evaluations, so the sample of the window ending at each grid point is read and nothing else (a backfill
by `promtool tsdb create-blocks-from rules` writes no staleness markers, so a plain selector would
carry a failing window five minutes on).
"""

from __future__ import annotations

from stallscope.core.config import parse_duration
from stallscope.rules import fleet as F
from stallscope.rules import render as R

FILE = "fleet.rules.yaml"
GROUP = "stallscope-fleet"
IDENTITY = F.DEFAULT_IDENTITY
LEVEL = "_".join(IDENTITY)
CUTS = tuple(le for le in F.ITERATION_LES if le != "+Inf" and float(le) >= 512)  # iteration_cut's range
TESTS = ("impaired", "load", "kv_pressure", "presence")


def window(th: dict) -> str:
    return R.fmt_duration(parse_duration(th["windows"]["short"]))


def names(th: dict) -> dict[str, str]:
    """{test: recorded series name}."""
    w = window(th)
    return {"presence": f"{LEVEL}:vllm_num_requests_running:count_over_time{w}",
            "impaired": f"{LEVEL}:vllm_streams_impaired:window{w}",
            "load": f"{LEVEL}:vllm_prefill_load:window{w}",
            "long_prefill": f"{LEVEL}:vllm_long_prefill:rate{w}",
            "kv_pressure": f"{LEVEL}:vllm_kv_pressure:window{w}"}


def group(th: dict) -> dict:
    """The `stallscope-fleet` rule group (rendered into rules/fleet.rules.yaml by render.py)."""
    w, ids = window(th), ", ".join(IDENTITY)
    live = R.check(th)["windows"]["live"]
    tests = F.episode_exprs(th, F.signal_exprs(th, by=IDENTITY, window=w, live_window=live), IDENTITY,
                            F.ITL_LES, w)
    long_prefill = " or ".join(f'label_replace(({F.long_prefill_expr(cut, ids, w)}) > 0, "cut", "{cut}", "", "")'
                               for cut in CUTS)
    n = names(th)
    rules = [{"record": n["presence"], "expr": F.presence_expr(IDENTITY, w)},
             {"record": n["impaired"], "expr": tests["impaired"]},
             {"record": n["load"], "expr": tests["load"]},
             {"record": n["long_prefill"], "expr": long_prefill},
             {"record": n["kv_pressure"], "expr": tests["kv_pressure"]}]
    return {"name": GROUP, "interval": w, "rules": rules}


def usable(th: dict, by, matchers, window_s: float, step_s: float) -> str | None:
    """Why the recorded series cannot answer this triage (None when they can)."""
    if tuple(by) != IDENTITY:
        return f"--group-by must be the rules' identity {', '.join(IDENTITY)}"
    bad = [name for name, _, _ in matchers if name not in IDENTITY]
    if bad:
        return f"a selector may use the identity labels {', '.join(IDENTITY)} only, not {bad[0]!r}"
    if abs(window_s - parse_duration(window(th))) > 1e-9 or abs(step_s - window_s) > 1e-9:
        return f"the window and the step must be the rules' window {window(th)}"
    return None


def probe(th: dict, matchers, span: str) -> str:
    """Replicas with recorded presence over the span: > 0 where the rules are installed (or backfilled)."""
    return f"count(last_over_time({names(th)['presence']}{{{F.matcher_text(matchers)}}}[{span}]))"


def last_eval(th: dict, matchers) -> str:
    """The latest evaluation time of the rules (its value is the timestamp), to align the triage's grid."""
    return f"max(timestamp({names(th)['presence']}{{{F.matcher_text(matchers)}}}))"


def exprs(th: dict, matchers, cut: str, step_s: float) -> dict[str, str]:
    """{test: PromQL} reading the recorded series of the replicas `matchers` select; `cut` is their
    long-prefill cut (fleet.iteration_cut)."""
    n, ids = names(th), ", ".join(IDENTITY)
    sel = F.matcher_text(matchers)
    r = R.fmt_duration(step_s - 0.001)

    def last(name: str, extra: str = "") -> str:
        return f"last_over_time({name}{{{','.join(x for x in (sel, extra) if x)}}}[{r}])"
    load = last(n["load"])
    if cut in CUTS:
        at_cut = f'cut="{cut}"'
        load = f"max by ({ids}) ({load} or {last(n['long_prefill'], at_cut)})"
    return {"impaired": last(n["impaired"]), "load": load, "kv_pressure": last(n["kv_pressure"]),
            "presence": last(n["presence"])}
