"""Which recordings' inferred chunking changes between a revision and the working tree (docs/accuracy.md).

The idea: a change to the metrics-only chunking inference (analyzers/chunking_inference.py) is checked on
every recorded run before any is scored again: the module as committed at `--base` (loaded beside the current
one, its imports resolved against today's package) and the current one read each run's store, and every run
whose inferred state (on/off, whether a step holds a long prefill, the budget estimate or the text) differs is
printed with both readings and what the server ran. Runs whose inference is unchanged keep their verdicts.

    python benchmarks/inference_diff.py --base f09d960 runs/h6?/ runs/h6?-full/ runs/h7?/ runs/h7?-full/ runs/h8?/ runs/h8?-full/
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from scenario_sets import SCENARIOS

from stallscope.analyzers import chunking_inference as current
from stallscope.collectors import loader
from stallscope.refserver.config import EngineConfig

BY_NAME = {sc.name: sc for sc in SCENARIOS}
MODULE = "analyzers/chunking_inference.py"


def at_revision(rev: str):
    """The inference module as committed at `rev`, loaded under another name."""
    text = subprocess.run(["git", "show", f"{rev}:{MODULE}"], capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "chunking_inference_base.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("chunking_inference_base", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


def reading(c) -> tuple:
    return (c.enabled, c.holds_long_prefills(), None if c.budget_estimate is None else round(c.budget_estimate),
            c.detail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="held-out pass directories (runs/h86, runs/h86-full, ...)")
    ap.add_argument("--base", required=True, help="the revision to compare with")
    ap.add_argument("--itl-slo", type=float, default=0.2)
    args = ap.parse_args()
    base = at_revision(args.base)
    runs = sorted(r for d in args.dirs for r in Path(d).iterdir() if r.name in BY_NAME and (r / "store.db").exists())
    changed = 0
    for run in runs:
        samples = next(f["samples"] for f in loader.load(run / "store.db").values() if len(f["samples"]))
        old = base.infer_from_histograms(samples, args.itl_slo)
        new = current.infer_from_histograms(samples, args.itl_slo)
        if reading(old) == reading(new):
            continue
        changed += 1
        cfg = EngineConfig.from_flags(BY_NAME[run.name].server)
        ran = f"on, budget {cfg.max_num_batched_tokens}" if cfg.enable_chunked_prefill else "off"
        print(f"{run.parent.name}/{run.name} (the server: chunking {ran})\n  {args.base}: on={old.enabled} "
              f"holds={old.holds_long_prefills()}: {old.detail}\n  now: on={new.enabled} "
              f"holds={new.holds_long_prefills()}: {new.detail}")
    print(f"{changed} of {len(runs)} recordings read differently")
    return 0


if __name__ == "__main__":
    sys.exit(main())
