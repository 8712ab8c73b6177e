"""A long prompt's chunk steps priced from the metrics: the average cost per prompt token, split by the model's
attention share, so that the step a budget gives is priced at the context its chunks reach.

The idea: the metrics give one cost per computed prompt token, `c`, averaged over a long prompt's tokens
(stallscope.analyzers.prefill_cost). A token's cost is not flat. Its linear layers cost the same at any depth,
but its attention reads every earlier token of the prompt. The model's shapes give the ratio of the two (per
token, 2 x the matmul parameters FLOPs; per query-key pair, 4 x layers x heads x head_dim), the prompt-length
histogram gives the long prompt's length L. Causal attention makes L x L / 2 query-key pairs over a prompt
however it is chunked (a chunk of n tokens ending at context e makes n x (e - n/2)), so c = linear + pair x L / 2
whatever budget it was measured under. Then a budget N is priced chunk by chunk. vLLM gives each running decode
its token first and the rest to the prompt, so a prompt of L tokens is computed in chunks of N - decodes
tokens, each one deeper than the last. The slowest of those steps, beside the decode step, is what every
stream waits for: a first chunk costs less per token than `c`, a late one more. Without a known model (no
`model_name` the shape table holds, no --model) the split is unknown and callers keep the flat average.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from stallscope.analyzers.chunking import LONG_PREFILL_TOKENS
from stallscope.analyzers.prefill_cost import totals
from stallscope.analyzers.workload import PROMPT_HIST
from stallscope.core.errors import InputError


@dataclass(frozen=True)
class ChunkCost:
    """Seconds per prompt token apart from attention (`linear_s`) and per causal query-key pair (`pair_s`), for
    a long prompt of `prompt_tokens`; `model` names the shapes the split came from.

    >>> c = ChunkCost(linear_s=1e-4, pair_s=1e-7, prompt_tokens=1000, model="m")
    >>> round(c.chunk_s(500, 1000), 6)       # 500 tokens x 0.1 ms + 500 x 750 pairs x 0.1 us
    0.0875
    >>> [round(x, 4) for x in c.slowest(512, decodes=12)]   # chunks of 500: the second, deeper one is slower
    [0.0875, 500, 1000]
    """

    linear_s: float
    pair_s: float
    prompt_tokens: int
    model: str

    def chunk_s(self, tokens: int, context: int) -> float:
        """A chunk of `tokens` prompt tokens whose last token sits at `context` (its prefill work alone)."""
        return tokens * self.linear_s + self.pair_s * tokens * (context - tokens / 2)

    def slowest(self, budget: int, decodes: int = 0) -> tuple[float, int, int]:
        """(seconds, tokens, context) of the costliest chunk of the long prompt at `budget`, `decodes` running
        decodes taking their token first (at least one prompt token per step)."""
        size = max(int(budget) - max(int(decodes), 0), 1)
        full, rest = divmod(self.prompt_tokens, size)    # a chunk costs more the deeper it ends: the last full
        last = [(size, full * size)] if full else []     # chunk and the partial one after it are the candidates
        last += [(rest, self.prompt_tokens)] if rest else []
        return max((self.chunk_s(n, end), n, end) for n, end in last)

    def average_s(self) -> float:
        """The whole prompt's cost per token, prefilled in one step."""
        return self.chunk_s(self.prompt_tokens, self.prompt_tokens) / self.prompt_tokens

    def as_evidence(self) -> dict:
        return {"linear_s_per_token": self.linear_s, "attention_s_per_pair": self.pair_s,
                "long_prompt_tokens": self.prompt_tokens, "model": self.model}


def largest_budget(cost: ChunkCost, limit_s: float, decode_step_s: float, decodes: int = 0, *, block: int = 64,
                   lo: int = 64, hi: int = 16384) -> int | None:
    """The largest budget (a multiple of `block` in [lo, hi]) whose slowest step, the decode step plus the
    costliest chunk, stays within `limit_s`; None when even `lo` does not.

    >>> largest_budget(ChunkCost(1e-4, 1e-7, 1000, "m"), 0.1, 0.01)   # 640: 84.5 ms + 10 ms; 704: 95.2 + 10
    640
    """
    fits = [b for b in range(lo, hi + 1, block) if decode_step_s + cost.slowest(b, decodes)[0] <= limit_s]
    return max(fits) if fits else None


def pair_ratio(model) -> float:
    """Seconds per query-key pair over seconds per token of linear work, from FLOPs: 4 x layers x heads x
    head_dim against 2 x the matmul parameters (stallscope.core ModelConfig)."""
    return 4.0 * model.num_layers * model.num_heads * model.head_dim / (2.0 * model.matmul_params)


def long_prompt_tokens(samples: pd.DataFrame) -> int | None:
    """The mean length of the finished prompts past the long-prefill cut (the largest histogram bound at or
    under 512 tokens), from the prompt-length histogram's per-scrape increments: the short prompts' mean comes
    from the intervals that finished short prompts only, the long ones' total is the rest of the sum. None
    when no finished prompt is past the cut, or no interval finished short prompts alone while short prompts
    finished (their mean would be a guess).

    A bucket midpoint would not do: a hundred 40-token prompts read as 35 tokens each move a long prompt's
    estimate by hundreds of tokens.
    """
    hist = samples[samples["metric"] == PROMPT_HIST + "_bucket"]
    le = pd.to_numeric(hist["le"], errors="coerce")
    les = np.sort(le.dropna().unique())
    under = les[les <= LONG_PREFILL_TOKENS]
    if not len(under):
        return None
    at_cut = hist[le == under[-1]]
    df = pd.concat({"s": totals(samples, PROMPT_HIST + "_sum"), "n": totals(samples, PROMPT_HIST + "_count"),
                    "short": at_cut.groupby("ts")["value"].sum()}, axis=1).dropna()
    inc = df.diff().iloc[1:]
    inc = inc[(inc >= 0).all(axis=1)]
    long_n = inc["n"] - inc["short"]
    if long_n.sum() < 1:
        return None
    alone = inc[(long_n < 0.5) & (inc["n"] > 0)]
    if inc["short"].sum() > 0 and alone["n"].sum() < 1:
        return None
    short_mean = float(alone["s"].sum() / alone["n"].sum()) if len(alone) else 0.0
    mean = (float(inc["s"].sum()) - short_mean * float(inc["short"].sum())) / float(long_n.sum())
    return int(max(mean, under[-1]))


def from_average(per_token_s: float, model, prompt_tokens: int) -> ChunkCost:
    """The split of a measured average cost per token of a `prompt_tokens`-token prompt. Causal attention makes
    L x L / 2 query-key pairs over a whole prompt however it is chunked, so the average does not depend on the
    budget it was measured under."""
    if not (per_token_s > 0 and math.isfinite(per_token_s)) or prompt_tokens < 1:
        raise InputError(f"cannot split a cost of {per_token_s} s per token over a {prompt_tokens}-token prompt")
    ratio = pair_ratio(model)
    linear = per_token_s / (1.0 + ratio * prompt_tokens / 2)
    return ChunkCost(linear_s=linear, pair_s=ratio * linear, prompt_tokens=int(prompt_tokens), model=model.name)


def calibrated(cost: ChunkCost, steps: pd.DataFrame, budget: int, decode_step_s: float) -> tuple[ChunkCost, dict] | None:
    """`cost` scaled so that its deepest full chunk at the `budget` the server ran costs what the steps show, with
    the figures that decided it; None when the steps hold fewer than 3 full chunks. The steps name no request, so
    a long prompt's f full chunks are told by their size (at least 0.9 x the budget less the running decodes), and
    the deepest of each prompt's f is taken as the slowest 1/f of them (their median: the 1 - 1/(2f) quantile).
    Both terms scale alike: the steps show one depth, not the split."""
    pre = steps["num_prefill_tokens"].to_numpy(dtype=float)
    dec = steps["num_decode_tokens"].to_numpy(dtype=float)
    dur = (steps["end_ns"] - steps["start_ns"]).to_numpy(dtype=float) / 1e9
    chunky = pre >= 0.5 * budget
    decodes = int(round(float(np.median(dec[chunky])))) if chunky.any() else 0
    size = max(int(budget) - decodes, 1)
    full = (pre >= 0.9 * size) & (pre <= budget)
    per_prompt = cost.prompt_tokens // size
    if full.sum() < 3 or per_prompt < 1:
        return None
    observed = float(np.quantile(dur[full], 1 - 1 / (2 * per_prompt))) - decode_step_s
    predicted = cost.chunk_s(size, per_prompt * size)
    if not (observed > 0 and predicted > 0):
        return None
    scale = observed / predicted
    return (ChunkCost(cost.linear_s * scale, cost.pair_s * scale, cost.prompt_tokens, cost.model),
            {"observed_deepest_chunk_s": observed, "predicted_deepest_chunk_s": predicted, "scale": scale,
             "full_chunk_steps": int(full.sum()), "chunk_tokens": size, "budget_in_use": int(budget)})


def model_of(samples: pd.DataFrame | None, given: str | None = None):
    """The model's shapes: `given` (--model), else the one `model_name` the samples carry, looked up in the
    roofline's table (stallscope.analyzers.roofline.model_spec; a served name must match a table name whole,
    not as a prefix); None when neither names a known model."""
    from stallscope.analyzers.roofline import model_spec

    names = [given] if given else sorted({str(lab.get("model_name")) for lab in _labels(samples)} - {"None", ""})
    if len(names) != 1:
        return None
    try:
        return model_spec(names[0], exact=not given)
    except InputError:
        return None


def _labels(samples: pd.DataFrame | None) -> list[dict]:
    if samples is None or "labels" not in samples or samples.empty:
        return []
    rows = samples[samples["metric"] == PROMPT_HIST + "_count"]
    return [lab for lab in rows["labels"] if isinstance(lab, dict)]
