"""Greedy and temperature/top-p sampling over the byte vocabulary (+EOS), with a seeded RNG per request, and
the logprobs of a sampled token."""

from __future__ import annotations

import zlib

import numpy as np

from stallscope.engine.request import SamplingParams
from .tokenizer import ByteTokenizer


def request_rng(params: SamplingParams, engine_seed: int, request_id: str) -> np.random.Generator:
    """The request's own generator: `params.seed`, else derived from the engine seed and the id."""
    if params.seed is not None:
        return np.random.default_rng(params.seed)
    return np.random.default_rng([engine_seed, zlib.crc32(request_id.encode())])


class Sampler:
    """Picks one token per logits row; tokens outside bytes+EOS (BOS, PAD, padding) are never sampled."""

    def __init__(self, vocab_size: int):
        tok = ByteTokenizer()
        self.mask = np.full(vocab_size, -np.inf, dtype=np.float32)
        self.mask[:256] = 0.0
        self.mask[tok.eos_token_id] = 0.0

    def sample(self, logits: np.ndarray, params: list[SamplingParams],
               rngs: list[np.random.Generator | None]) -> tuple[list[int], dict[int, Exception]]:
        """logits: (n, vocab) float32 -> n token ids, and {row: exception} for rows whose sampling raised
        (their token is meaningless): one bad row fails its own request, never the batch."""
        masked = logits + self.mask                                   # (n, vocab)
        tokens, errors = masked.argmax(axis=1).tolist(), {}
        for i, p in enumerate(params):
            if p.temperature > 0:
                try:
                    tokens[i] = self._sample_one(masked[i], p, rngs[i])
                except Exception as exc:  # noqa: BLE001 -- whatever it is, it is this row's alone
                    errors[i] = exc
        return tokens, errors

    def logprobs(self, row: np.ndarray, token: int, n: int) -> tuple[int, float, list[tuple[int, float]]]:
        """`(token, its logprob, the n likeliest (token, logprob))` under the distribution the sampler draws
        from at temperature 1 (the model's logits, never-sampled ids masked)."""
        z = row.astype(np.float64) + self.mask
        lp = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
        top = np.argsort(-lp, kind="stable")[:n]
        return token, float(lp[token]), [(int(t), float(lp[t])) for t in top]

    @staticmethod
    def _sample_one(row: np.ndarray, p: SamplingParams, rng: np.random.Generator) -> int:
        z = row.astype(np.float64) / p.temperature
        probs = np.exp(z - z.max())
        probs /= probs.sum()
        if p.top_p < 1.0:
            order = np.argsort(-probs)
            cum = np.cumsum(probs[order])
            keep = order[: int(np.searchsorted(cum, p.top_p)) + 1]   # smallest set with mass >= top_p
            kept = np.zeros_like(probs)
            kept[keep] = probs[keep]
            probs = kept / kept.sum()
        return int(rng.choice(probs.size, p=probs))
