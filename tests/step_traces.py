"""A synthetic step trace with known costs (docs/step-trace.md format), shared by the step-cost and whatif tests."""

from __future__ import annotations

import json
import random

from stallscope.analyzers.step_cost import batch_features

TRUE = {"intercept": 0.004, "prefill_reqs": 2e-3, "prefill_tokens": 2e-5, "decode_reqs": 3e-4, "kv_tokens_read": 1e-6,
        "prefill_attn_pairs": 4e-9, "decode_kv_padded": 0.0}


def synthetic_trace(path, *, n_steps=300, budget=256, noise=0.0, seed=42):
    """A step trace in the docs/step-trace.md format from a toy chunked scheduler with known costs.

    Requests arrive at random, prompts 16..1500 tokens, outputs 4..40 tokens; each step serves running
    decodes first, then prefill chunks up to `budget`. Duration = TRUE coefficients · features × noise.
    """
    rng = random.Random(seed)
    reqs, t, nid, lines = {}, 1_700_000_000_000_000_000, 0, []
    for step in range(n_steps):
        while rng.random() < 0.06 or not reqs:
            reqs[f"cmpl-{nid}"] = {"prompt": rng.randint(16, 1500), "out": rng.randint(4, 40), "done": 0, "gen": 0}
            nid += 1
        sched, chunks, left = {}, [], budget
        for rid, r in list(reqs.items()):
            if r["done"] >= r["prompt"]:
                sched[rid] = 1
                chunks.append((r["done"] + r["gen"] - 1, 1, False))
                left -= 1
        for rid, r in list(reqs.items()):
            if r["done"] < r["prompt"] and left > 0:
                n = min(left, r["prompt"] - r["done"])
                sched[rid] = n
                chunks.append((r["done"], n, True))
                left -= n
        f = batch_features(chunks)
        dur = TRUE["intercept"] + sum(TRUE[k] * f[k] for k in f)
        dur *= 1 + rng.uniform(-noise, noise)
        start = t
        end = start + int(dur * 1e9)
        for rid, n in sched.items():
            r = reqs[rid]
            if n == 1 and r["done"] >= r["prompt"]:
                r["gen"] += 1
            else:
                r["done"] += n
                if r["done"] >= r["prompt"]:
                    r["gen"] += 1
            if r["gen"] >= r["out"]:
                del reqs[rid]
        lines.append({"step": step, "start_ns": start, "end_ns": end,
                      "num_prefill_tokens": f["prefill_tokens"], "num_decode_tokens": f["decode_reqs"],
                      "num_prefill_reqs": sum(1 for c in chunks if c[2]), "num_decode_reqs": f["decode_reqs"],
                      "num_running": len(reqs), "num_waiting": 0, "num_preempted": 0,
                      "kv_blocks_used": 0, "num_gpu_blocks": 512, "num_scheduled_tokens": sched})
        t = end + 300_000  # 0.3 ms between steps
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path
