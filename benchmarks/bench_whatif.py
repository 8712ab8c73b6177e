"""How fast `stallscope whatif` simulates: wall time of a 5-budget prediction, against a 10 s limit.

The workload is the loadgen's scenario at a larger scale (32 sessions, one 2,048-token prompt every
2 s, 60 s per budget) with a step-cost model of the reference engine's shape; the figure is the wall
time of `predict()` over budgets 256..4096 plus chunking off, and simulated steps per second.

    python benchmarks/bench_whatif.py
"""

from __future__ import annotations

import time

from stallscope.analyzers.step_cost import StepCostModel
from stallscope.analyzers.whatif import predict
from stallscope.engine.config import SchedulerConfig
from stallscope.analyzers.workload import LengthDist, Workload

LIMIT_S = 10.0


def main() -> int:
    cost = StepCostModel(intercept_s=0.006, coef_s={"prefill_tokens": 3e-4, "kv_tokens_read": 2e-6,
                                                    "prefill_attn_pairs": 5e-8, "decode_kv_padded": 5e-7},
                         gap_s=0.003, residuals=(0.8, 0.9, 1.0, 1.1, 1.4))
    w = Workload(LengthDist.fixed(32), LengthDist((31.0,), (96.0,), (1.0,)), sessions=32, long_prompt_tokens=2048,
                 long_output_tokens=16, long_every_s=2.0, duration_s=60.0)
    t0 = time.perf_counter()
    preds = predict(w, cost, [256, 512, 1024, 2048, 4096], include_unchunked=True,
                    shape=SchedulerConfig(num_gpu_blocks=4096, max_model_len=4096))
    wall = time.perf_counter() - t0
    steps = int(preds["num_steps"].sum())
    simulated = 60.0 * len(preds)
    print(f"predict(): {len(preds)} arms x 60 s simulated, {steps:,} steps in {wall:.2f} s "
          f"({steps / wall:,.0f} steps/s, {simulated / wall:.0f}x real time); "
          f"{wall / LIMIT_S:.2f} of the {LIMIT_S:.0f} s limit")
    return 0 if wall <= LIMIT_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
