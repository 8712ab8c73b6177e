"""Prefill cost from the metrics: seconds per computed prompt token, by least squares over scrape increments.

The idea: vLLM records a request's prefill time (first scheduled to first token) and its computed prompt
tokens together, when the request finishes (`request_prefill_time_seconds`, `request_prefill_kv_computed_tokens`,
0.13+). Between two scrapes the increments of their sums and of the request count satisfy

    prefill seconds = a x requests + c x computed tokens

where `a` is what a request's prefill holds besides its own tokens (its steps' fixed and decode work) and `c`
the cost per computed token. Short and long prompts finish in different scrape intervals, so the intervals
separate the two (non-negative least squares); a ratio of sums would average a 32-token prompt's per-token
cost with a 1,500-token one's and blur the fixed part into both. When every interval finishes requests of about one size (tokens per request within a factor
of 2) the two terms cannot be told apart and the fit declines (the caller divides the sums instead); so it does
when fewer than 3 intervals lie on either side of that factor (one cold prompt among cache hits would
decide the split alone).
`c` includes the attention a long prompt's
tokens do, which is what a chunk of such a prompt costs. With a known chunk budget B, a chunked prompt's
prefill spans one step per B tokens, each with the running decodes: `c` holds that share, which the caller
takes out (decode step / B).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers.step_cost import _nnls_with_intercept

TIME = "vllm:request_prefill_time_seconds"
TOKENS = "vllm:request_prefill_kv_computed_tokens_sum"
MIN_INTERVALS = 3
SPREAD = 2.0    # the intervals' tokens per request must differ by this factor to separate the two terms


def _totals(samples: pd.DataFrame, metric: str) -> pd.Series:
    rows = samples[samples["metric"] == metric]
    return rows.groupby("ts")["value"].sum()


def increments(samples: pd.DataFrame) -> pd.DataFrame:
    """Per scrape interval that finished a request with computed tokens: prefill seconds `t`, requests `n`,
    computed tokens `p` (counter resets dropped)."""
    df = pd.concat({"t": _totals(samples, TIME + "_sum"), "n": _totals(samples, TIME + "_count"),
                    "p": _totals(samples, TOKENS)}, axis=1).dropna()
    inc = df.diff().iloc[1:]
    return inc[(inc >= 0).all(axis=1) & (inc["n"] > 0) & (inc["p"] > 0)]


def fit(samples: pd.DataFrame | None) -> dict | None:
    """{per_request_s, per_token_s, intervals} from one target's samples, or None when the counters are absent
    or fewer than 3 scrape intervals finished a request with computed tokens."""
    if samples is None or not len(samples):
        return None
    return fit_increments(increments(samples))


def fit_increments(inc: pd.DataFrame) -> dict | None:
    """`fit` on per-interval increments (columns `t`, `n`, `p`, as `increments` returns them)."""
    if len(inc) < MIN_INTERVALS or not np.isfinite(inc.to_numpy(dtype=float)).all():
        return None
    per_request_tokens = inc["p"] / inc["n"]
    large = (per_request_tokens >= SPREAD * per_request_tokens.min()).sum()
    small = (per_request_tokens * SPREAD <= per_request_tokens.max()).sum()
    if min(large, small) < MIN_INTERVALS:
        return None     # requests of one size: a per-request cost cannot be told from a per-token one
    # the request count is the fit's (weighted) intercept column: both terms >= 0
    per_request, (per_token,) = _nnls_with_intercept(inc[["p"]].to_numpy(dtype=float), inc["n"].to_numpy(dtype=float),
                                                     inc["t"].to_numpy(dtype=float))
    if not per_token > 0:
        return None
    return {"per_request_s": float(per_request), "per_token_s": float(per_token), "intervals": int(len(inc))}
