"""Load a generated 24 h store (1 vLLM target + one 8-GPU DCGM target, 5 s interval) into frames.

Limits: 10 s wall and 2 GB peak RSS. The store is written in the collector's own format: the first
scrape of each target goes through `vllm.parse`/`dcgm.parse` + `Store.append` (registering every
series), the other 17,279 per target are bulk-inserted with the store's own SQL and blobs carrying
random-walk values. The load runs in a fresh child process (`loader.load(db)`), timed inside the
child; its peak RSS comes from `getrusage(RUSAGE_CHILDREN)`. Peer in the same run: the same child
reading the same samples with one SQL row per sample (`SELECT … FROM <flat table>`), i.e. the
"one row per sample" design the chunked layout replaces, on a 1-hour slice scaled to 24 h.

    python benchmarks/bench_collect_load.py [--hours 24] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from stallscope.collectors import dcgm, store, vllm

LIMIT_S, LIMIT_GB = 10.0, 2.0
ROOT = Path(__file__).resolve().parent.parent
VLLM_TEXT = (ROOT / "tests/fixtures/vllm_metrics/v0_33_0_custom_itl_buckets.txt").read_text()
DCGM_ONE = ROOT / "tests/fixtures/dcgm_samples/l4_full_kops_driver580.txt"
NS = 10**9


def dcgm_8gpu() -> str:
    """The real L4 capture's lines replicated for GPUs 0-7 (index, device and UUID changed)."""
    src = DCGM_ONE.read_text().splitlines()
    out = [ln for ln in src if ln.startswith("# HELP") or ln.startswith("# TYPE")]
    samples = [ln for ln in src if ln and not ln.startswith("#")]
    for g in range(8):
        out += [ln.replace('gpu="0"', f'gpu="{g}"').replace('device="nvidia0"', f'device="nvidia{g}"')
                .replace("-1343419b1a1c", f"-1343419b1a1{g}") for ln in samples]
    return "\n".join(out) + "\n"


def build(db: Path, hours: float, interval_s: float = 5.0) -> int:
    n = int(hours * 3600 / interval_s)
    t0 = 1_790_000_000 * NS
    rng = np.random.default_rng(42)
    total = 0
    with store.Store(db) as st:
        st.append("vllm", t0, 0.01, samples=vllm.parse(VLLM_TEXT, t0))
        st.append("dcgm", t0, 0.02, gpu=dcgm.parse(dcgm_8gpu(), t0))
        for name in ("vllm", "dcgm"):
            tid = st.targets[name]
            ids_blob, vals_blob = st.con.execute(
                "SELECT c.series_ids, c.vals FROM chunks c JOIN scrapes s ON s.id = c.scrape_id WHERE s.target_id = ?",
                (tid,)).fetchone()
            base = np.frombuffer(vals_blob, dtype="<f8")
            walk = np.cumsum(rng.random((n - 1, len(base)), dtype=np.float64), axis=0) + base
            total += n * len(base)
            next_id = st.con.execute("SELECT max(id) FROM scrapes").fetchone()[0] + 1
            ts = t0 + interval_s * NS * np.arange(1, n, dtype=np.int64)
            with st.con:
                st.con.executemany(store.INSERT_SCRAPE.replace("(target_id,", "(id, target_id,").replace(
                    "VALUES (?,", "VALUES (?, ?,"), ((next_id + i, tid, int(ts[i]), 0.01, 1, None, len(base))
                                                     for i in range(n - 1)))
                st.con.executemany(store.INSERT_CHUNK, ((next_id + i, ids_blob, walk[i].astype("<f8").tobytes())
                                                        for i in range(n - 1)))
    return total


CHILD = """
import json, sys, time
t0 = time.perf_counter()
from stallscope.collectors import loader
t1 = time.perf_counter()
f = loader.load(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1,
                  "rows": {k: {kind: len(df) for kind, df in v.items()} for k, v in f.items()}}))
"""

FLAT_CHILD = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1])
t0 = time.perf_counter()
rows = con.execute("SELECT series_id, ts, value FROM flat").fetchall()
print(time.perf_counter() - t0, len(rows))
"""


def child(code: str, *args) -> tuple[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, check=True)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return out.stdout, max(peak_kb, before) / 1024 / 1024


def flat_peer(db: Path, work: Path) -> float:
    """Seconds to read one hour as one SQL row per sample, scaled ×24 (the design not taken)."""
    flat = work / "flat.db"
    src = store.connect_ro(db)
    dst = __import__("sqlite3").connect(flat)
    dst.execute("CREATE TABLE flat (series_id INTEGER, ts INTEGER, value REAL)")
    first = src.execute("SELECT min(ts) FROM scrapes").fetchone()[0]
    for ts, ids, vals in src.execute("SELECT s.ts, c.series_ids, c.vals FROM scrapes s JOIN chunks c "
                                     "ON c.scrape_id = s.id WHERE s.ts < ?", (first + 3600 * NS,)):
        i, v = np.frombuffer(ids, "<i4"), np.frombuffer(vals, "<f8")
        dst.executemany("INSERT INTO flat VALUES (?, ?, ?)", zip(i.tolist(), [ts] * len(i), v.tolist()))
    dst.commit()
    dst.close()
    out, _ = child(FLAT_CHILD, flat)
    return float(out.split()[0]) * 24


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--keep", default=None, help="write the store into this directory and keep it")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp())
    work.mkdir(parents=True, exist_ok=True)
    db = work / "day.db"
    db.unlink(missing_ok=True)
    t = time.perf_counter()
    n = build(db, args.hours)
    print(f"generated {n / 1e6:.2f} M samples ({args.hours:g} h, 5 s, 1 vLLM + 8-GPU DCGM) in "
          f"{time.perf_counter() - t:.1f} s; store {db.stat().st_size / 2**20:.0f} MiB")
    out, peak_gb = child(CHILD, db)
    res = json.loads(out)
    rows = sum(sum(v.values()) for v in res["rows"].values())
    print(f"loader.load: {res['load_s']:.2f} s = {res['load_s'] / LIMIT_S:.2f} x the 10 s limit "
          f"({rows / 1e6:.2f} M frame rows; +{res['import_s']:.2f} s imports)")
    print(f"peak RSS of the loading process: {peak_gb:.2f} GB = {peak_gb / LIMIT_GB:.2f} x the 2 GB limit")
    peer = flat_peer(db, work)
    print(f"peer: one SQL row per sample (fetch only, 1 h x 24): {peer:.2f} s "
          f"(chunked load incl. frames = {res['load_s'] / peer:.2f} x that)")


if __name__ == "__main__":
    main()
