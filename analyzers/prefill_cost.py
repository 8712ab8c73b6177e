"""Prefill cost from the metrics: seconds per computed prompt token, by least squares over scrape increments.

The idea: vLLM records a request's prefill time (first scheduled to first token) and its computed prompt
tokens together, when the request finishes (`request_prefill_time_seconds`, `request_prefill_kv_computed_tokens`,
0.13+). Between two scrapes the increments of their sums and of the request count satisfy

    prefill seconds = a x requests + c x computed tokens

where `a` is what a request's prefill holds besides its own tokens (its steps' fixed and decode work) and `c`
the cost per computed token. Short and long prompts finish in different scrape intervals, so the intervals
separate the two (non-negative least squares); a ratio of sums would average a 32-token prompt's per-token
cost with a 1,500-token one's and blur the fixed part into both. The fit declines only when the two columns
cannot be told apart at all: every interval finished requests of one size, so tokens are a fixed multiple of
requests (the smallest singular value of the normalised columns under 1 % of the largest, the step-cost
fit's rule, `step_cost.SEPARABLE`); the caller then divides the sums. A spread rule declined before
(tokens per request differing by 2x in at least 3 intervals each way). With many short prompts per interval a
long one moves tokens per request by less than 2x, so it declined on runs the fit reads well, and the sums,
less a decode step per request, divide the long prompts' time by every prompt's tokens: 7 of 22 such
recordings within 25 % of the step trace's cost per token, against 11 with this rule (docs/accuracy.md).
`c` includes the attention a long prompt's
tokens do, which is what a chunk of such a prompt costs. With a known chunk budget B, a chunked prompt's
prefill spans one step per B tokens, each with the running decodes: `c` holds that share, which the caller
takes out (decode step / B).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from stallscope.analyzers.step_cost import SEPARABLE, _nnls_with_intercept
from stallscope.analyzers.workload import PREFILL_TIME as TIME

TOKENS = "vllm:request_prefill_kv_computed_tokens_sum"
MIN_INTERVALS = 3


def totals(samples: pd.DataFrame, metric: str) -> pd.Series:
    """A counter's value per scrape, summed over its series."""
    rows = samples[samples["metric"] == metric]
    return rows.groupby("ts")["value"].sum()


def increments(samples: pd.DataFrame) -> pd.DataFrame:
    """Per scrape interval that finished a request with computed tokens: prefill seconds `t`, requests `n`,
    computed tokens `p` (counter resets dropped)."""
    df = pd.concat({"t": totals(samples, TIME + "_sum"), "n": totals(samples, TIME + "_count"),
                    "p": totals(samples, TOKENS)}, axis=1).dropna()
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
    x = inc[["n", "p"]].to_numpy(dtype=float)
    sv = np.linalg.svd(x / np.abs(x).max(axis=0), compute_uv=False)
    if sv[-1] < SEPARABLE * sv[0]:
        return None     # requests of one size: a per-request cost cannot be told from a per-token one
    # the request count is the fit's (weighted) intercept column: both terms >= 0
    per_request, (per_token,) = _nnls_with_intercept(inc[["p"]].to_numpy(dtype=float), inc["n"].to_numpy(dtype=float),
                                                     inc["t"].to_numpy(dtype=float))
    if not per_token > 0:
        return None
    return {"per_request_s": float(per_request), "per_token_s": float(per_token), "intervals": int(len(inc))}
