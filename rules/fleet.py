"""Fleet push-down: every signal the detectors read, as a PromQL expression grouped by a replica's identity.

The idea: the server evaluates the windowed quantiles, rates and gauges of `analyzers/signals.py`, so a
`query_range` answers one series per replica per signal instead of every raw bucket. One definition:

1. Where a recording rule of `render.py` computes the signal (ITL/TTFT quantiles, the prompt,
   generation and preemption rates), its rendered `expr` is reused with `by (model_name, instance` replaced
   by the identity labels, the window replaced by the signals' window and the caller's matchers added to
   every selector. Changing the rules changes the fleet query.
2. The rest follows `signals.py`'s module docstring term by term: `itl_stall_share` is
   sum over the buckets whose lower edge is >= the SLO of (lower edge x bucket rate), over `rate(_sum)`,
   with the weights as a constant vector keyed by `le` (the bucket bounds are read from the server);
   `long_prefill_rate` is rate(+Inf) - rate(le = the cut), the cut rounded up to a bucket bound per
   replica; the live rates use the live window; gauges are instant (Prometheus' 5 min lookback), the KV
   usage is `max by`, `waiting` the capacity reason where exported. Not pushed down: `nothing_for_s`
   (seconds since the counters or the scheduler gauges last moved) and `unserved_for_s` (since the ITL count
   last rose), scrape-by-scrape scans with no PromQL form; the drill-down computes them from the raw series, as
   cause evidence, the `still` state (analyzers/episodes.py 1) and the open gap of its severity, which the
   triage sees once the live window does.
3. `rules/fleet_recorded.py` renders the window tests of 4. as recording rules (rules/fleet.rules.yaml),
   from these same functions; where they are installed the triage reads them by name (`path="recorded"`).
4. `episode_exprs` composes the detectors' window tests from the same expressions (same thresholds):
   impaired streams (analyzers/episodes.py's window states and severity), prefill load (the evidence of
   decode starvation) and KV pressure; the server answers only the windows that fail a test.

    >>> e = signal_exprs(load_thresholds(), by=("pod",), window="1m")
    >>> e["prompt_rate"]
    'sum by (pod) (rate(vllm:prompt_tokens_by_source_total{source="local_compute"}[1m])) or sum by (pod) (rate(vllm:prompt_tokens_total[1m]))'
"""

from __future__ import annotations

import math
import re

from stallscope.analyzers import episodes as E
from stallscope.core.config import load_thresholds, parse_duration  # noqa: F401  (doctest)
from stallscope.core.errors import InputError
from stallscope.rules import render as R

DEFAULT_IDENTITY = ("namespace", "pod", "instance", "model_name", "engine")
ITL = "vllm:inter_token_latency_seconds"
ITL_LEGACY = "vllm:time_per_output_token_seconds"
TTFT = "vllm:time_to_first_token_seconds"
ITERATION = "vllm:iteration_tokens_total"
# vLLM's default ITL buckets as prometheus_client writes `le` (refserver/metrics.py ITL_BUCKETS)
ITL_LES = ("0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5", "0.75", "1.0", "2.5",
           "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf")
ITERATION_LES = ("1.0", "8.0", "16.0", "32.0", "64.0", "128.0", "256.0", "512.0", "1024.0", "2048.0", "4096.0",
                 "8192.0", "16384.0", "+Inf")
_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_SELECTOR = re.compile(r"(vllm:[A-Za-z0-9_:]+)(\{[^}]*\})?(?=\[|\)|\s|$)")


def label_list(labels) -> tuple[str, ...]:
    """Identity labels from "a, b" or an iterable, each checked as a Prometheus label name."""
    items = [s.strip() for s in (labels.split(",") if isinstance(labels, str) else labels) if s.strip()]
    bad = [s for s in items if not _NAME.match(s) or s == "le" or s.startswith("__")]
    if bad or not items:
        raise InputError(f"identity labels {labels!r}: {bad[0] if bad else 'none given'!r} is not a usable "
                         "Prometheus label name")
    return tuple(dict.fromkeys(items))


def matcher_text(matchers) -> str:
    """`name="v",other=~"r"` of (name, op, value) matchers, values escaped for a PromQL string."""
    out = []
    for name, op, value in matchers:
        if not _NAME.match(str(name)) or op not in ("=", "!=", "=~", "!~"):
            raise InputError(f"selector matcher {name}{op}{value!r} is not a PromQL label matcher")
        escaped = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        out.append(f'{name}{op}"{escaped}"')
    return ",".join(out)


def with_matchers(expr: str, matchers) -> str:
    """`expr` with the matchers added to every `vllm:` selector in it."""
    extra = matcher_text(matchers)
    if not extra:
        return expr

    def add(m):
        inner = (m.group(2) or "{}")[1:-1]
        return f"{m.group(1)}{{{inner + ',' if inner else ''}{extra}}}"
    return _SELECTOR.sub(add, expr)


def _rule_expr(th: dict, record: str, quantile: str | None = None) -> str:
    """The rendered `expr` of one recording rule (of the short window)."""
    for rule in R.vllm_recording_rules(th):
        if rule.get("record") == record and (quantile is None or rule.get("labels", {}).get("quantile") == quantile):
            return rule["expr"]
    raise KeyError(record)  # pragma: no cover - render.py always renders these


def _regroup(expr: str, by: str, window: str, short: str) -> str:
    return expr.replace(f"by ({R.BY}", f"by ({by}").replace(f"[{short}]", f"[{window}]")


def _bounds(les) -> list[tuple[str, float]]:
    out = sorted(((le, float(le)) for le in les), key=lambda x: x[1])
    if not out or not math.isinf(out[-1][1]):
        raise InputError(f"histogram buckets {list(les)!r} lack the +Inf bucket")
    return out


def _bucket(family: str, le: str, by: str, w: str) -> str:
    return f'sum by ({by}) (rate({family}_bucket{{le="{le}"}}[{w}]))'


def _itl_bucket(le: str, by: str, w: str, families=(ITL, ITL_LEGACY)) -> str:
    return "(" + " or ".join(_bucket(f, le, by, w) for f in families) + ")"


def first_bound_at_or_above(les, value: float) -> str | None:
    """The `le` string of the smallest bucket bound >= value (None when only +Inf is)."""
    return next((le for le, b in _bounds(les) if b >= value and not math.isinf(b)), None)


def _le_regex(les) -> str:
    return "|".join(re.escape(le) for le in les).replace("\\", "\\\\")


def stall_share_expr(slo: float, les, by: str, w: str, families=(ITL, ITL_LEGACY)) -> str:
    """sum_{lower_i >= slo} lower_i x (c_i - c_(i-1)) / rate(_sum), summed by parts: c_j's coefficient is its
    own lower edge (when above the SLO) minus its bound (when the next bucket is above); the coefficients
    are a constant vector keyed by `le`, so one selector reads every bucket involved."""
    bounds = _bounds(les)
    lower = [0.0] + [b for _, b in bounds[:-1]]
    above = [lo >= slo for lo in lower]
    coeffs = {}
    for j, (le, b) in enumerate(bounds):
        coeff = (lower[j] if above[j] else 0.0) - (b if j + 1 < len(bounds) and above[j + 1] else 0.0)
        if coeff:
            coeffs[le] = coeff
    total = "(" + " or ".join(f"sum by ({by}) (rate({f}_sum[{w}]))" for f in families) + ")"
    if not coeffs:
        return f"clamp(0 * {total}, 0, 1)"
    weights = " or ".join(f'label_replace(vector({c!r}), "le", "{le}", "", "")' for le, c in coeffs.items())
    regex = _le_regex(coeffs)
    numerator = " or ".join(f'sum by ({by}) (sum without (le) (rate({f}_bucket{{le=~"{regex}"}}[{w}]) '
                            f"* on (le) group_left () ({weights})))" for f in families)
    return f"clamp(({numerator}) / {total}, 0, 1)"


def signal_exprs(th: dict, *, by=DEFAULT_IDENTITY, window: str | None = None, matchers=(), itl_les=ITL_LES,
                 iteration_cut: str | None = None, itl_families=(ITL, ITL_LEGACY),
                 live_window: str | None = None) -> dict[str, str]:
    """{signals column: PromQL} for the raw path (see the module docstring); `iteration_cut` is the `le`
    of the long-prefill cut (None: no `long_prefill_rate`); `itl_families` the ITL histogram names the
    fleet exports (both, joined with `or` as in the rules, unless the caller found only one); `live_window`
    the live signals' window (signals.live_window; default half the window)."""
    fam = tuple(itl_families)
    ids = ", ".join(label_list(by))
    short = R.fmt_duration(parse_duration(th["windows"]["short"]))
    w = window or short
    slo = float(th["itl_slo_s"])
    out = {}
    for tag, metric in (("itl", "vllm_inter_token_latency_seconds"), ("ttft", "vllm_time_to_first_token_seconds")):
        for q, col in (("0.99", f"{tag}_p99"), ("0.5", f"{tag}_p50")):
            out[col] = _regroup(_rule_expr(th, R.name_quantile(metric, short), q), ids, w, short)
    for col, metric in (("prompt_rate", "vllm_prompt_tokens"), ("gen_rate", "vllm_generation_tokens"),
                        ("preempt_rate", "vllm_num_preemptions")):
        out[col] = _regroup(_rule_expr(th, R.name_rate(metric, short)), ids, w, short)
    lw = live_window or R.fmt_duration(parse_duration(w) / 2)
    out["live_prompt_rate"] = _regroup(_rule_expr(th, R.name_rate("vllm_prompt_tokens", short)), ids, lw, short)
    out["live_gen_rate"] = _regroup(_rule_expr(th, R.name_rate("vllm_generation_tokens", short)), ids, lw, short)
    out["live_mean_itl"] = f"(sum by ({ids}) (vllm:num_requests_running) > 0) / ({out['live_gen_rate']})"
    out["prompt_computed"] = (f'(sum by ({ids}) (rate(vllm:prompt_tokens_by_source_total{{source="local_compute"}}[{w}])) '
                              f"* 0 + 1) or (sum by ({ids}) (rate(vllm:prompt_tokens_total[{w}])) * 0)")
    out["itl_rate"] = _itl_bucket("+Inf", ids, w, fam)
    b_slo = first_bound_at_or_above(itl_les, slo)
    out["itl_above_slo_rate"] = (f"clamp_min({_itl_bucket('+Inf', ids, w, fam)} - {_itl_bucket(b_slo, ids, w, fam)}, 0)"
                                 if b_slo else f"0 * {_itl_bucket('+Inf', ids, w, fam)}")
    out["itl_stall_share"] = stall_share_expr(slo, itl_les, ids, w, fam)
    out["prefill_time_rate"] = f"sum by ({ids}) (rate(vllm:request_prefill_time_seconds_sum[{w}]))"
    out["prefill_count_rate"] = f"sum by ({ids}) (rate(vllm:request_prefill_time_seconds_count[{w}]))"
    out["running"] = f"sum by ({ids}) (vllm:num_requests_running)"
    out["waiting_total"] = f"sum by ({ids}) (vllm:num_requests_waiting)"
    out["waiting"] = (f'sum by ({ids}) (vllm:num_requests_waiting_by_reason{{reason="capacity"}}) '
                      f"or sum by ({ids}) (vllm:num_requests_waiting)")
    out["kv_usage"] = f"max by ({ids}) ({R.KV_USAGE})"
    out["kv_usage_peak"] = " or ".join(f"max by ({ids}) (max_over_time({m}[{w}]))" for m in R.KV_USAGE_NAMES)
    out["asleep"] = f'max by ({ids}) (vllm:engine_sleep_state{{sleep_state!="awake"}}) >= bool 1'
    drafts = f"sum by ({ids}) (rate(vllm:spec_decode_num_drafts_total[{w}]))"
    out["tokens_per_output"] = (f"1 + sum by ({ids}) (rate(vllm:spec_decode_num_accepted_tokens_total[{w}])) / "
                                f"({drafts} > 0)")
    if iteration_cut:
        out["long_prefill_rate"] = long_prefill_expr(iteration_cut, ids, w)
    return {col: with_matchers(expr, matchers) for col, expr in out.items()}


def long_prefill_expr(cut: str, ids: str, w: str) -> str:
    """Engine steps above the `cut` bucket per second (rate(+Inf) - rate(le = cut)), by the identity."""
    return f"clamp_min({_bucket(ITERATION, '+Inf', ids, w)} - {_bucket(ITERATION, cut, ids, w)}, 0)"


def iteration_cut(peak_running: float, tokens_per_output: float = 1.0, les=ITERATION_LES) -> str:
    """signals._put_long_prefill's cut, max(512, 2 x peak running x tokens per output), as the `le` of the
    first bucket bound at or above it (+Inf when none is)."""
    cut = max(512.0, 2.0 * float(peak_running if math.isfinite(peak_running) else 0.0)
              * float(tokens_per_output if math.isfinite(tokens_per_output) else 1.0))
    return first_bound_at_or_above(les, cut) or "+Inf"


def quantile_above(q: float, bound: str, by: str, w: str, families=(ITL, ITL_LEGACY)) -> str:
    """`histogram_quantile(q, ITL) > bound` without the quantile: the q-quantile lies above a bucket bound
    exactly when that bucket's count is below q x the total (the first bucket reaching q x total lies
    beyond it), so `itl_p99_lo >= slo` costs two bucket rates instead of every bucket."""
    return f"({_itl_bucket(bound, by, w, families)} < {q!r} * {_itl_bucket('+Inf', by, w, families)})"


def _tag(expr: str, tag: str) -> str:
    return f'label_replace({expr}, "stallscope_test", "{tag}", "", "")'


def episode_exprs(th: dict, exprs: dict[str, str], by, itl_les=ITL_LES, window: str | None = None,
                  itl_families=(ITL, ITL_LEGACY)) -> dict[str, str]:
    """{test: PromQL} answering only where a window fails it, composed from `exprs` (signal_exprs) with analyzers/episodes.py's window states and kv_pressure's mask:

    - `impaired`, unless the engine sleeps, as up to three tagged series: `share` (its value, where
      itl_stall_share >= 1 %: interference from 1 %, missed from 5 %, critical from 20 %), `p99` (2 where
      the ITL P99's bucket is at or above the SLO, 3 at or above 2 x SLO) and `frozen` (2 where requests
      run and the live mean gap per stream, running / live generation rate, is above the SLO; 3 at 2 x);
    - `load`: prompt rate >= prefill_tokens_rate_high or a long prefill completed (the cause's evidence);
    - `kv_pressure`: analyzers/kv_pressure.window_codes: 3 where preemptions >= preemptions_rate_high, 2 where
      KV usage >= kv_usage_high with requests waiting or preemptions and the pool ran out (a scrape of the
      window at kv_usage_full, or a preemption), 1 where only the former. Each signal is evaluated once per test."""
    ids = ", ".join(label_list(by))
    w = window or R.fmt_duration(parse_duration(th["windows"]["short"]))
    slo = float(th["itl_slo_s"])
    b1, b2 = first_bound_at_or_above(itl_les, slo), first_bound_at_or_above(itl_les, 2 * slo)
    tests = [_tag(f"({exprs['itl_stall_share']}) >= {E.INTERFERENCE_SHARE!r}", "share")]
    if b1:
        fam = tuple(itl_families)
        crit = f"({_itl_bucket(b2, ids, w, fam)} < bool 0.99 * {_itl_bucket('+Inf', ids, w, fam)})" if b2 else "0"
        tests.append(_tag(f"({crit} + 2) and on ({ids}) {quantile_above(0.99, b1, ids, w, fam)}", "p99"))
    running, gen = f"({exprs['running']})", f"({exprs['live_gen_rate']})"
    frozen = f"(({running} > 0) and on ({ids}) ({gen} < {running} / {slo!r}))"
    tests.append(_tag(f"(({gen} <= bool {running} / {2 * slo!r}) + 2) and on ({ids}) {frozen}", "frozen"))
    asleep = f"({exprs['asleep']}) == 1"
    impaired = f"({' or '.join(tests)}) unless on ({ids}) ({asleep})"
    load = [f"({exprs['prompt_rate']}) >= {float(th['prefill_tokens_rate_high'])!r}"]
    if "long_prefill_rate" in exprs:
        load.append(f"({exprs['long_prefill_rate']}) > 0")
    kv, waiting, preempt, seen = (f"({exprs[c]})" for c in ("kv_usage", "waiting", "preempt_rate", "kv_usage_peak"))
    hot = (f"(({kv} >= {float(th['kv_usage_high'])!r}) and on ({ids}) "
           f"(({waiting} >= {float(th['waiting_high'])!r}) or ({preempt} > 0)))")
    full = float(th["kv_usage_full"])
    ran_out = f"(({preempt} > 0) or ({seen} >= {full!r}) or ({kv} >= {full!r}))"
    pressure = (f"(({preempt} >= {float(th['preemptions_rate_high'])!r}) * 0 + 3) or "
                f"(({hot} and on ({ids}) {ran_out}) * 0 + 2) or ({hot} * 0 + 1)")
    return {"impaired": impaired, "load": " or ".join(f"({p})" for p in load), "kv_pressure": pressure}


def impaired_codes(share, p99, frozen) -> "np.ndarray":
    """Per window: 3 critical, 2 missed or frozen, 1 interference only, 0 unimpaired, from the tagged
    answers of `episode_exprs()["impaired"]` (share values, p99 and frozen codes; NaN where absent) -
    episodes.window_states' states and its severity ratio >= 2."""
    import numpy as np

    s = np.nan_to_num(np.asarray(share, dtype=float))
    from_share = np.select([s >= 4 * E.MISSED_SHARE, s >= E.MISSED_SHARE, s >= E.INTERFERENCE_SHARE], [3, 2, 1], 0)
    return np.maximum(np.maximum(from_share, np.nan_to_num(np.asarray(p99, dtype=float))),
                      np.nan_to_num(np.asarray(frozen, dtype=float)))


def presence_expr(by, step: str, matchers=()) -> str:
    """Samples of `num_requests_running` per replica and step: 0 or absent where a replica is dead."""
    ids = ", ".join(label_list(by))
    return with_matchers(f"sum by ({ids}) (count_over_time(vllm:num_requests_running[{step}]))", matchers)


def inventory_expr(by, range_: str, matchers=()) -> str:
    """One instant query: every replica seen over the range, valued by its peak running requests."""
    ids = ", ".join(label_list(by))
    return with_matchers(f"max by ({ids}) (max_over_time(vllm:num_requests_running[{range_}]))", matchers)


# the DCGM ratios the single-replica path reads (collectors/dcgm.CANONICAL: factor to base units, every field
# spelling); memory_bound judges dram_active and tensor_active, roofline reads both
DCGM_RATIOS = ("dram_active", "tensor_active", "sm_active", "sm_occupancy", "gr_engine_active", "fp16_active",
               "gpu_util", "mem_copy_util")
DCGM_IDENTITY = ("namespace", "pod")  # dcgm-exporter's pod mapping; its `instance` is the exporter's own
DCGM_BLANK = 2147483632.0  # 0x7FFFFFF0, DCGM's smallest blank sentinel of a gauge (collectors/dcgm.blank)


def dcgm_exprs(th: dict, *, by=DCGM_IDENTITY, matchers=()) -> dict[str, str]:
    """{gpu frame metric: PromQL}: each DCGM ratio per replica identity and GPU (`gpu` kept, as
    memory_bound judges each GPU), in base units, blank sentinels dropped; `memory_bound` answers 1 where
    dram_active >= dram_active_high and tensor_active <= tensor_active_low (memory_bound's GPU test; its
    decode-dominated condition is the vLLM signals' part). Instant values: on the same grid they are the
    values `analyze --prometheus` pulls, except at a blank sample, which the push-down leaves absent
    where the pull carries the previous step's value forward (Prometheus' lookback over a dropped row)."""
    from stallscope.collectors.dcgm import FIELDS

    ids = ", ".join((*label_list(by), "gpu"))
    sel = matcher_text(matchers)
    out = {}
    for metric in DCGM_RATIOS:  # each spelling: blanks dropped in its own units, then scaled
        terms = [f"({field}{{{sel}}} < {DCGM_BLANK!r})" if factor == 1.0 else
                 f"{factor!r} * ({field}{{{sel}}} < {DCGM_BLANK!r})"
                 for field, (name, factor) in FIELDS.items() if name == metric]
        out[metric] = f"max by ({ids}) ({' or '.join(terms)})"
    out["memory_bound"] = (f"(({out['dram_active']}) >= {float(th['dram_active_high'])!r} and on ({ids}) "
                           f"({out['tensor_active']}) <= {float(th['tensor_active_low'])!r}) * 0 + 1")
    return out
