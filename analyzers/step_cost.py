"""Step-cost model: how long one engine step takes, as a function of what the scheduler put in it.

    step_time_s = intercept + a·prefill_tokens + b·decode_reqs + c·kv_tokens_read
                  + d·prefill_attn_pairs + e·decode_kv_padded + f·prefill_reqs

1. Features come from the batch: `prefill_tokens` (prompt tokens computed, all chunks),
   `decode_reqs` (one token each), `kv_tokens_read` (Σ over scheduled requests of the context
   their attention reads, `num_computed_tokens + num_scheduled`), `prefill_attn_pairs`
   (Σ over prefill chunks of `num_scheduled × (num_computed_tokens + num_scheduled)`: the
   query-key products of chunked attention, which dominate long prompts on compute-bound hardware),
   and `decode_kv_padded` (decode requests × the longest decode context: what a decode kernel that
   pads its batch to the longest block table reads, as the reference engine's does), and `prefill_reqs`
   (requests with a prompt chunk in the step: each one's set-up, prefix-cache lookup and attention call
   cost something whatever its length). The fit keeps
   whichever terms the measurements support.
2. Fitted by non-negative least squares on measured steps (`end_ns - start_ns`), iteratively
   reweighted by 1/predicted duration so the error minimised is relative: millisecond decode steps
   (which set ITL P50) count as much as second-long prefill steps (which set ITL P99). Steps come from the engine's step
   trace (docs/step-trace.md) or an nsys steps frame. When a trace lacks per-request token counts
   the KV terms are unknown and dropped. The fit reports MAPE and R² on its own steps.
3. The residuals (measured / predicted) are kept in up to five bins by predicted duration, so a
   simulator can replay the measured noise *and* the fit's bias at each scale (`draw`): a noisy
   5 ms decode step and a steady 2 s prefill step do not share one error distribution.
4. The busy gaps (idle time between a step's end and the next step's start while work remained:
   engine-loop and output overhead) are kept too; `gap_s` is their median.
4. Without measured steps, `roofline_cost` derives the same shape from a GPU's peak FLOP/s and HBM
   bandwidth and a model's parameters: max(compute time, memory time) + a fixed launch overhead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from stallscope.core import schema
from stallscope.core.errors import InputError
from stallscope.engine import step_trace

FEATURES = ("prefill_tokens", "decode_reqs", "kv_tokens_read", "prefill_attn_pairs", "decode_kv_padded", "prefill_reqs")


@dataclass(frozen=True)
class StepCostModel:
    """A step-time predictor. `predict` takes feature arrays (or scalars) and returns seconds.

    >>> m = StepCostModel(intercept_s=0.002, coef_s={"prefill_tokens": 1e-5, "decode_reqs": 1e-4})
    >>> round(m.predict(prefill_tokens=512, decode_reqs=8), 6)
    0.00792
    """

    intercept_s: float
    coef_s: dict = field(default_factory=dict)  # feature name -> seconds per unit
    gap_s: float = 0.0                          # idle time between busy steps, s
    kind: str = "linear"                        # "linear" (fitted) or "roofline"
    source: str = ""
    n_steps: int = 0
    mape: float = float("nan")                  # mean |pred - measured| / measured, on the fit's steps
    r2: float = float("nan")
    residuals: tuple = ()                        # measured / predicted, per fitted step
    residual_bins: tuple = ()                    # ((upper predicted s, (residuals...)), ...), ascending
    gaps: tuple = ()                             # measured busy gaps, s
    roofline: dict = field(default_factory=dict)  # peak_flops, hbm_bytes_s, ... for kind="roofline"

    def predict(self, **features) -> np.ndarray | float:
        if self.kind == "roofline":
            return _roofline_time(self.roofline, features)
        t = self.intercept_s
        for name, coef in self.coef_s.items():
            t = t + coef * np.asarray(features.get(name, 0.0), dtype=float)
        return t if np.ndim(t) else float(t)

    def draw(self, predicted_s: float, rng: np.random.Generator) -> float:
        """One step time: the prediction times a residual measured at a similar predicted duration."""
        if self.residual_bins:
            for upper, res in self.residual_bins:
                if predicted_s <= upper:
                    break
            return predicted_s * res[rng.integers(len(res))]
        if self.residuals:
            return predicted_s * self.residuals[rng.integers(len(self.residuals))]
        return predicted_s

    def draw_gap(self, rng: np.random.Generator) -> float:
        """One inter-step gap: a measured busy gap, or `gap_s` when none were kept."""
        return self.gaps[rng.integers(len(self.gaps))] if self.gaps else self.gap_s

    def summary(self) -> dict:
        """JSON-ready description: coefficients, fit error, source."""
        return {
            "kind": self.kind, "source": self.source, "n_steps": self.n_steps,
            "intercept_s": self.intercept_s, "coef_s": dict(self.coef_s), "gap_s": self.gap_s,
            "mape": None if np.isnan(self.mape) else self.mape,
            "r2": None if np.isnan(self.r2) else self.r2,
            **({"roofline": dict(self.roofline)} if self.roofline else {}),
        }


def batch_features(chunks) -> dict:
    """Features of one step from its scheduled chunks.

    `chunks` is an iterable of `(num_computed_tokens_before, num_scheduled, is_prefill)`.

    >>> batch_features([(0, 256, True), (40, 1, False), (10, 1, False)])
    {'prefill_tokens': 256, 'decode_reqs': 2, 'kv_tokens_read': 308, 'prefill_attn_pairs': 65536, 'decode_kv_padded': 82, 'prefill_reqs': 1}
    """
    prefill = decode = kv = pairs = longest = reqs = 0
    for computed, n, is_prefill in chunks:
        kv += computed + n
        if is_prefill:
            prefill += n
            reqs += 1
            pairs += n * (computed + n)
        else:
            decode += 1
            longest = max(longest, computed + n)
    return {"prefill_tokens": prefill, "decode_reqs": decode, "kv_tokens_read": kv, "prefill_attn_pairs": pairs,
            "decode_kv_padded": decode * longest, "prefill_reqs": reqs}


def read_step_trace(path: str | Path) -> pd.DataFrame:
    """A step-trace JSONL file (docs/step-trace.md) as a steps frame; InputError names the file and
    line for a missing file, bad JSON or missing fields, and says so when it has no steps."""
    rows = step_trace.read_records(path)
    if not rows:
        raise InputError(f"step trace {path} has no steps")
    return schema.steps_frame(rows)


def step_features(steps: pd.DataFrame) -> pd.DataFrame:
    """Per-step features and measured duration from a steps frame, ordered by start.

    With a `num_scheduled_tokens` column ({request_id: tokens}), each request's context is rebuilt
    by accumulating its scheduled tokens; a request that decoded and is then scheduled more than one
    token was preempted and is recomputing, so its context restarts at 0. A request's prefix-cache
    hit (`num_cached_tokens`, {request_id: tokens} in the step that schedules it) is context its first
    chunk attends to without computing it. Without `num_scheduled_tokens` the KV features are NaN.
    """
    steps = steps.sort_values("start_ns", kind="stable").reset_index(drop=True)
    out = pd.DataFrame({
        "duration_s": (steps["end_ns"] - steps["start_ns"]).to_numpy(dtype=float) / 1e9,
        "prefill_tokens": steps["num_prefill_tokens"].to_numpy(dtype=float),
        "decode_reqs": steps["num_decode_tokens"].to_numpy(dtype=float),
    })
    kv, pairs, padded, reqs = (np.full(len(steps), np.nan) for _ in range(4))
    if "num_scheduled_tokens" in steps:
        computed: dict = {}
        decoding: set = set()
        cached_col = steps["num_cached_tokens"] if "num_cached_tokens" in steps else [None] * len(steps)
        for i, (sched, cached) in enumerate(zip(steps["num_scheduled_tokens"], cached_col)):
            if not isinstance(sched, dict):
                continue
            cached = cached if isinstance(cached, dict) else {}
            chunks = []
            for rid, n in sched.items():
                n = int(n)
                is_prefill = not (rid in decoding and n == 1) and not (rid in computed and n == 1)
                if is_prefill and rid in decoding:  # recompute after preemption
                    computed[rid] = 0
                    decoding.discard(rid)
                if rid in cached and rid not in decoding:   # scheduled (again): its cached prefix is context
                    computed[rid] = max(computed.get(rid, 0), int(cached[rid]))
                chunks.append((computed.get(rid, 0), n, is_prefill))
                computed[rid] = computed.get(rid, 0) + n
                if not is_prefill:
                    decoding.add(rid)
            f = batch_features(chunks)
            kv[i], pairs[i], padded[i] = f["kv_tokens_read"], f["prefill_attn_pairs"], f["decode_kv_padded"]
            reqs[i] = f["prefill_reqs"]
    out["kv_tokens_read"] = kv
    out["prefill_attn_pairs"] = pairs
    out["decode_kv_padded"] = padded
    out["prefill_reqs"] = reqs
    return out


def busy_gaps_s(steps: pd.DataFrame) -> np.ndarray:
    """Gaps between a step's end and the next step's start while requests remained (s).

    Traces concatenated from several runs carry a `trace` column; gaps never span two traces. A gap
    longer than the trace's longest step is not engine overhead (the engine was idle or the runs were
    apart) and is left out.
    """
    if "trace" in steps and steps["trace"].nunique() > 1:
        parts = [busy_gaps_s(g.drop(columns="trace")) for _, g in steps.groupby("trace", sort=False)]
        return np.concatenate(parts) if parts else np.empty(0)
    steps = steps.sort_values("start_ns", kind="stable")
    gaps = (steps["start_ns"].shift(-1) - steps["end_ns"]).to_numpy(dtype=float)[:-1] / 1e9
    if "num_running" in steps:
        waiting = steps["num_waiting"].fillna(0) if "num_waiting" in steps else 0   # a vLLM log states no queue
        busy = (steps["num_running"].fillna(0) + waiting).to_numpy()[:-1] > 0
        gaps = gaps[busy]
    longest = float((steps["end_ns"] - steps["start_ns"]).max()) / 1e9 if len(steps) else 0.0
    return gaps[np.isfinite(gaps) & (gaps >= 0) & (gaps <= longest)]


def trace_token_times(steps: pd.DataFrame) -> dict[str, list[int]]:
    """Engine-side token times (step `end_ns`) per request, rebuilt from a step trace.

    1. Each scheduled entry is a decode or a prefill chunk. An entry of more than one token is a
       chunk; a one-token entry of a request that is already decoding is a decode; other one-token
       entries are decodes only as far as the step's `num_decode_tokens` leaves room (a prompt's last
       chunk can be a single token).
    2. A decode always yields a token; a chunk yields one when the request's next entry is a decode
       (it finished the prompt) or when it never appears again (it finished).
    These are the timestamps vLLM's `vllm:inter_token_latency_seconds` is computed from, free of
    HTTP and client delivery effects.
    """
    steps = steps.sort_values("start_ns", kind="stable")
    decodes = steps["num_decode_tokens"].to_numpy(dtype=float) if "num_decode_tokens" in steps else None
    entries: list[list] = []                  # per step: [rid, is_decode]
    decoding: set = set()
    for i, d in enumerate(steps["num_scheduled_tokens"]):
        d = d if isinstance(d, dict) else {}
        row = []
        ones = [rid for rid, n in d.items() if int(n) == 1]
        sure = sum(1 for rid in ones if rid in decoding)
        room = (int(decodes[i]) - sure) if decodes is not None and np.isfinite(decodes[i]) else len(ones)
        for rid, n in d.items():
            is_decode = int(n) == 1 and (rid in decoding or room > 0)
            if int(n) == 1 and rid not in decoding and is_decode:
                room -= 1
            (decoding.add if is_decode else decoding.discard)(rid)
            row.append([rid, is_decode])
        entries.append(row)
    times: dict[str, list[int]] = {}
    next_is_decode: dict[str, bool | None] = {}
    for end_ns, row in zip(steps["end_ns"].to_numpy(dtype=np.int64)[::-1], entries[::-1]):
        for rid, is_decode in row:
            if is_decode or next_is_decode.get(rid, None) in (True, None):
                times.setdefault(rid, []).append(int(end_ns))
            next_is_decode[rid] = is_decode
    return {rid: t[::-1] for rid, t in times.items()}


def trace_itl(steps: pd.DataFrame) -> np.ndarray:
    """Engine-side inter-token latencies (s), pooled over requests, from a step trace."""
    gaps = [np.diff(np.asarray(t, dtype=np.int64)) / 1e9 for t in trace_token_times(steps).values() if len(t) > 1]
    return np.concatenate(gaps) if gaps else np.empty(0)


def fit_step_cost(steps: pd.DataFrame, *, source: str = "steps", min_steps: int = 8) -> StepCostModel:
    """Fit a `StepCostModel` to measured steps by non-negative least squares.

    Features that are unknown (NaN) or constant zero in the trace are left out. Raises InputError
    when fewer than `min_steps` usable steps remain.
    """
    feats = step_features(steps)
    ok = np.isfinite(feats["duration_s"]) & (feats["duration_s"] > 0)
    ok &= (feats["prefill_tokens"] + feats["decode_reqs"]) > 0
    names = [n for n in FEATURES if feats[n][ok].notna().all() and feats[n][ok].abs().sum() > 0]
    feats = feats[ok]
    names = _separable(feats, names)
    if len(feats) < min_steps:
        raise InputError(f"{source}: {len(feats)} usable steps, need at least {min_steps} to fit a step-cost model")
    y = feats["duration_s"].to_numpy()
    gaps = busy_gaps_s(steps)
    x = feats[names].to_numpy(dtype=float)
    # relative error, iteratively reweighted by the prediction (not the noisy measurement), so the
    # fit tracks the mean step time at every scale instead of leaning under the noisy small steps
    scale = y.copy()
    for _ in range(4):
        intercept, coefs = _nnls_with_intercept(x / scale[:, None], 1.0 / scale, y / scale)
        pred = intercept + x @ coefs
        scale = np.maximum(pred, 0.2 * y.min())
    resid = y / np.maximum(pred, 1e-12)
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return StepCostModel(
        intercept_s=float(intercept),
        coef_s={n: float(c) for n, c in zip(names, coefs) if c > 0},
        gap_s=float(np.median(gaps)) if len(gaps) else 0.0,
        kind="linear",
        source=source,
        n_steps=len(y),
        mape=float(np.mean(np.abs(pred - y) / y)),
        r2=1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
        residuals=tuple(float(r) for r in resid),
        residual_bins=_bin_residuals(pred, resid),
        gaps=tuple(float(g) for g in gaps),
    )


SEPARABLE = 0.01   # smallest / largest singular value of the prefill steps' normalised prefill columns


def _separable(feats: pd.DataFrame, names: list[str]) -> list[str]:
    """`names` less the prefill terms the prefill steps cannot tell apart: when every prefill computes a prompt
    of one of two sizes from context 0, a per-request, a per-token and an attention term are collinear (and
    with one size, the last two), so any split of them fits and none extrapolates to other chunks. Dropped
    in order, `prefill_reqs` then `prefill_attn_pairs`, until the rest are separable; what remains prices a
    prompt's tokens at the trace's own average (a chunk of a long prompt is then priced at the whole prompt's
    average cost per token)."""
    pf = feats[feats["prefill_tokens"] > 0]
    for drop in ("prefill_reqs", "prefill_attn_pairs"):
        cols = [n for n in ("prefill_reqs", "prefill_tokens", "prefill_attn_pairs") if n in names]
        if drop not in cols or len(pf) < len(cols):
            continue
        x = pf[cols].to_numpy(dtype=float)
        x = x / np.abs(x).max(axis=0)
        sv = np.linalg.svd(x, compute_uv=False)
        if sv[-1] < SEPARABLE * sv[0]:
            names = [n for n in names if n != drop]
    return names


def _bin_residuals(pred: np.ndarray, resid: np.ndarray, *, width_decades: float = 0.5, min_per_bin: int = 10) -> tuple:
    """Residuals grouped by predicted duration in bins half a decade wide (×3.16); a bin with fewer
    than `min_per_bin` steps joins its lower neighbour. The last bin is open-ended."""
    order = np.argsort(pred, kind="stable")
    logp = np.log10(np.maximum(pred[order], 1e-9))
    edges = np.arange(np.floor(logp[0] / width_decades) * width_decades, logp[-1] + width_decades, width_decades)[1:]
    groups: list[list[int]] = [[]]
    k = 0
    for i, lp in zip(order, logp):
        while k < len(edges) - 1 and lp > edges[k]:
            k += 1
            groups.append([])
        groups[-1].append(i)
    merged: list[list[int]] = []
    for g in groups:
        if merged and (len(g) < min_per_bin or len(merged[-1]) < min_per_bin):
            merged[-1].extend(g)
        elif g:
            merged.append(list(g))
    out = []
    for n, g in enumerate(merged):
        upper = float("inf") if n == len(merged) - 1 else float(pred[g].max())
        out.append((upper, tuple(float(resid[i]) for i in g)))
    return tuple(out)


def _nnls_with_intercept(x: np.ndarray, ones: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Least squares of y ~ intercept·ones + x·coefs with the intercept and every coefficient ≥ 0.

    Active set: drop the most negative term and refit (a negative fixed cost or per-token cost is
    unphysical). `ones` is the (weighted) intercept column, so a caller can fit relative error by
    dividing every row by its target.
    """
    a = np.column_stack([ones, x])
    # Columns scaled to unit max so the solve is well conditioned (pairs run to ~1e7, reqs to ~1e2).
    scale = np.maximum(np.abs(a).max(axis=0), 1e-30)
    a = a / scale
    active = list(range(a.shape[1]))
    sol = np.zeros(0)
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], y, rcond=None)
        if sol.min() >= 0:
            break
        active.pop(int(np.argmin(sol)))
    full = np.zeros(a.shape[1])
    full[active] = sol / scale[active]
    return float(full[0]), full[1:]


def roofline_cost(*, peak_flops: float, hbm_bytes_s: float, n_params: float, weight_bytes: float,
                  kv_bytes_per_token: float, n_layers: int, hidden_size: int,
                  overhead_s: float = 0.0, efficiency: float = 0.6, source: str = "roofline") -> StepCostModel:
    """A step-cost model from first principles, for when no steps were measured.

    compute = 2·n_params·tokens + 4·n_layers·hidden·(kv_tokens_read of decodes + prefill_attn_pairs)
    memory  = weight_bytes + kv_bytes_per_token·kv_tokens_read
    step    = overhead + max(compute / (efficiency·peak_flops), memory / (efficiency·hbm_bytes_s))

    >>> m = roofline_cost(peak_flops=989e12, hbm_bytes_s=3.35e12, n_params=8e9, weight_bytes=16e9,
    ...                   kv_bytes_per_token=131072, n_layers=32, hidden_size=4096, efficiency=1.0)
    >>> round(m.predict(decode_reqs=1, kv_tokens_read=1000) * 1e3, 2)  # ms, HBM-bound
    4.82
    """
    for name, value in (("peak_flops", peak_flops), ("hbm_bytes_s", hbm_bytes_s), ("efficiency", efficiency)):
        if not value > 0:
            raise InputError(f"roofline_cost: {name} must be > 0, got {value}")
    params = {"peak_flops": peak_flops, "hbm_bytes_s": hbm_bytes_s, "n_params": n_params,
              "weight_bytes": weight_bytes, "kv_bytes_per_token": kv_bytes_per_token,
              "n_layers": n_layers, "hidden_size": hidden_size, "overhead_s": overhead_s,
              "efficiency": efficiency}
    return StepCostModel(intercept_s=overhead_s, kind="roofline", source=source, roofline=params)


def _roofline_time(p: dict, f: dict):
    prefill = np.asarray(f.get("prefill_tokens", 0.0), dtype=float)
    decode = np.asarray(f.get("decode_reqs", 0.0), dtype=float)
    kv = np.asarray(f.get("kv_tokens_read", 0.0), dtype=float)
    pairs = np.asarray(f.get("prefill_attn_pairs", 0.0), dtype=float)
    decode_kv = np.maximum(kv - pairs, 0.0)  # decodes read their context once; pairs cover prefill
    flops = 2.0 * p["n_params"] * (prefill + decode) + 4.0 * p["n_layers"] * p["hidden_size"] * (decode_kv + pairs)
    nbytes = p["weight_bytes"] + p["kv_bytes_per_token"] * kv
    eff = p["efficiency"]
    t = p["overhead_s"] + np.maximum(flops / (eff * p["peak_flops"]), nbytes / (eff * p["hbm_bytes_s"]))
    return t if np.ndim(t) else float(t)
