"""Draw a held-out scenario set at random (issue 16): the parameters, not the author, choose what is tried.

The idea: a set written by hand tries what its author thought of; a set drawn once from a seeded RNG over
the space below, written into benchmarks/scenario_sets.py and committed before its first run, tries what
a new user might. Held-out 9 is seed 20261203, held-out 10 seed 202612031,
held-out 11 seed 202612032 (docs/accuracy.md).

    python benchmarks/draw_scenarios.py --seed 20261203
"""

from __future__ import annotations

import argparse

import numpy as np

BUDGETS = [64, 128, 192, 256, 384, 512, 640, 768, 1024, 1536]


def draw(seed: int) -> list[tuple]:
    """Six prefill scenarios, two KV pools, one short-prompt negative and one run that ends inside a stall."""
    r = np.random.default_rng(seed)
    out = []
    for _ in range(6):
        model = "small" if r.random() < 0.3 else "tiny"
        chunk = r.random() < 0.65
        budget = int(r.choice(BUDGETS)) if chunk else None
        sessions = int(r.integers(2, 17))
        lo, hi = (400, 1500) if model == "small" else (500, 2000)
        tokens = int(r.integers(lo, hi + 1) // 50 * 50)
        every = round(float(r.uniform(1, 10)), 1)
        interval = "1s" if r.random() < 0.3 else "0.5s"
        out.append(("prefill", model, "chunk" if chunk else "nochunk", budget, sessions, tokens, every, interval))
    for _ in range(2):
        mb = round(float(r.uniform(1, 20)), 1)
        out.append(("kv", mb, str(r.choice(["auto", "fp8"])), int(r.integers(8, 40))))
    out.append(("neg", int(r.integers(8, 128)), int(r.integers(8, 64))))
    model = "small" if r.random() < 0.5 else "tiny"
    out.append(("end", model, int(r.integers(600, 2000) // 50 * 50), "1s" if r.random() < 0.5 else "0.5s"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    for row in draw(ap.parse_args().seed):
        print(*row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
