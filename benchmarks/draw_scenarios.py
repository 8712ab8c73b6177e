"""Draw a held-out scenario set at random (issue 16): the parameters, not the author, choose what is tried.

The idea: a set written by hand tries what its author thought of; a set drawn once from a seeded RNG over
the space below, written into benchmarks/scenario_sets.py and committed before its first run, tries what
a new user might. Held-out 9 is seed 20261203, held-out 10 seed 202612031,
held-out 11 seed 202612032; held-out 12, KV pools only, `--seed 202612033 --kv 8`; held-out 13 seed
202612034, held-out 14 seed 202612035, held-out 15 seed 202612036,
held-out 16 seed 202612037, held-out 17 seed 202612038, held-out 18 seed
202612039, held-out 19 seed 202612040, held-out 20 seed 202612041,
held-out 21 seed 202612042, held-out 22 seed 202612043, held-out 23 seed 202612044,
held-out 24 seed 202612045; held-out 25 seed 202612046; held-out 26, the 512-768 band only,
`--seed 202612047 --band 8` (docs/accuracy.md); held-out 27 seed 202612048; held-out 28, the cost model's runs only,
`--seed 202612049 --starve 6`; held-out 29 the same, `--seed 202612050 --starve 6`;
held-out 30 the same, `--seed 202612051 --starve 6`;
held-out 31, the band again, `--seed 202612052 --band 8`; held-out 32 seed 202612053;
held-out 33, the cost model's runs recorded with the iteration-details log, `--seed 202612054 --starve 6`;
held-out 34 the same, `--seed 202612055 --starve 6`;
held-out 35 the same, after the attention tiles changed, `--seed 202612056 --starve 6`; held-out 36 seed 202612057;
held-out 37, the cost model's runs again, `--seed 202612058 --starve 6`; held-out 38 seed 202612059;
held-out 39 seed 202612060;
held-out 40, the cost model's runs again, `--seed 202612061 --starve 6`;
held-out 41, the band on the fixed server, `--seed 202612062 --band 8`;
held-out 42 and 43, the band after the slowest step was sized exactly, `--seed 202612063 --band 8` and
`--seed 202612064 --band 8`; held-out 44 and 45, the band after the prompt-token rate joined it,
`--seed 202612065 --band 8` and `--seed 202612066 --band 8`; held-out 46, the band after the off branch
changed, `--seed 202612067 --band 8`; held-out 47 the same, `--seed 202612068 --band 8`;
held-out 48 the band again, `--seed 202612069 --band 8`, and held-out 49 a general draw, `--seed 202612070`;
held-out 50 the band, `--seed 202612071 --band 8`, and held-out 51 a general draw, `--seed 202612072`;
held-out 52 the band, `--seed 202612073 --band 8`, and held-out 53 a general draw, `--seed 202612074`;
held-out 54 the band, `--seed 202612075 --band 8`, and held-out 55 a general draw, `--seed 202612076`;
held-out 56 the band, `--seed 202612077 --band 8`, and held-out 57 KV pools only, `--seed 202612078 --kv 8`;
held-out 58 the band, `--seed 202612079 --band 8`, and held-out 59 a general draw, `--seed 202612080`;
held-out 60 the band, `--seed 202612081 --band 8`; held-out 61 the band, `--seed 202612082 --band 8`;
held-out 62 a general draw, `--seed 202612083`; held-out 63 the band, `--seed 202612084 --band 8`;
held-out 64 the band, `--seed 202612085 --band 8`; held-out 65 KV pools only, `--seed 202612086 --kv 8`;
held-out 66 the band, `--seed 202612087 --band 8`; held-out 67 KV pools only, `--seed 202612088 --kv 8`;
held-out 68 the band, `--seed 202612089 --band 8`; held-out 69 a general draw, `--seed 202612090`;
held-out 70 a general draw, `--seed 202612091`; held-out 71 the band, `--seed 202612092 --band 8`;
held-out 72 the band, `--seed 202612093 --band 8`; held-out 73 KV pools only, `--seed 202612094 --kv 8`;
held-out 74 the band, `--seed 202612095 --band 8`; held-out 75 a general draw, `--seed 202612096`;
held-out 76 the band, `--seed 202612097 --band 8`; held-out 77 KV pools only, `--seed 202612098 --kv 8`;
held-out 78 a general draw, `--seed 202612099`; held-out 79 the band, `--seed 202612100 --band 8`;
held-out 80 a general draw, `--seed 202612101`; held-out 81 KV pools only, `--seed 202612102 --kv 8`;
held-out 82 a general draw, `--seed 202612103`; held-out 83 the band, `--seed 202612104 --band 8`;
held-out 84 a general draw, `--seed 202612105`; held-out 85 the band, `--seed 202612106 --band 8`;
held-out 86 a general draw, `--seed 202612107`; held-out 87 a general draw, `--seed 202612108`;
held-out 88 the band, `--seed 202612109 --band 8`; held-out 89 KV pools only, `--seed 202612110 --kv 8`;
held-out 90 KV pools only, `--seed 202612111 --kv 8`; held-out 91 a general draw, `--seed 202612112`;
held-out 92 the band, `--seed 202612113 --band 8`; held-out 93 KV pools only, `--seed 202612114 --kv 8`;
held-out 94 a general draw, `--seed 202612115`; 95 KV pools only, `--seed 202612116 --kv 8`; 96 the band,
`--seed 202612117 --band 8`;
held-out 97 and 98 KV pools only, `--seed 202612118 --kv 8` and `--seed 202612119 --kv 8`; held-out 99 KV pools
only, `--seed 202612120 --kv 8`; held-out 100 KV pools only, `--seed 202612121 --kv 8`; held-out 101 a general
draw, `--seed 202612122`; held-out 102 the band, `--seed 202612123 --band 8`; held-out 103 and 105 KV pools only,
`--seed 202612124 --kv 8` and `--seed 202612126 --kv 8`; held-out 104 a general draw, `--seed 202612125`; held-out
106 the band, `--seed 202612127 --band 8`; held-out 107 KV pools only, `--seed 202612128 --kv 8`;
held-out 108 KV pools only, `--seed 202612129 --kv 8`; held-out 109 a general draw, `--seed 202612130`;
held-out 110 the band, `--seed 202612131 --band 8`; held-out 111 KV pools only, `--seed 202612132 --kv 8`;
held-out 112 a general draw, `--seed 202612133`; held-out 113 and 115 KV pools only, `--seed 202612134 --kv 8`
and `--seed 202612136 --kv 8`; held-out 114 the band, `--seed 202612135 --band 8`;
held-out 116 and 119 general draws, `--seed 202612137` and `--seed 202612140`; held-out 117 the band,
`--seed 202612138 --band 8`; held-out 118 KV pools only, `--seed 202612139 --kv 8`;
held-out 120 and 123 general draws, `--seed 202612141` and `--seed 202612144`; held-out 121 the band,
`--seed 202612142 --band 8`; held-out 122 KV pools only, `--seed 202612143 --kv 8`;
held-out 124-127 general draws, `--seed 202612145` to `--seed 202612148`;
held-out 128-131 general draws, `--seed 202612149` to `--seed 202612152`; held-out 132-135 general draws,
`--seed 202612153` to `--seed 202612156`; held-out 136-139 general draws, `--seed 202612157` to
`--seed 202612160`; held-out 140-143 general draws, `--seed 202612161` to `--seed 202612164`;
held-out 144-147 general draws, `--seed 202612165` to `--seed 202612168`;
held-out 148-151 general draws, `--seed 202612169` to `--seed 202612172`; held-out 152 and 153 the
band, `--seed 202612173 --band 8` and `--seed 202612174 --band 8`.

    python benchmarks/draw_scenarios.py --seed 20261203
    python benchmarks/draw_scenarios.py --seed 202612075 --band 8 --held-out 54 --first-seed 541   # as code
"""

from __future__ import annotations

import argparse

import numpy as np

BUDGETS = [64, 128, 192, 256, 384, 512, 640, 768, 1024, 1536]


def startable_max_model_len(mb: float, dtype: str) -> int | None:
    """None when a `tiny` pool of `mb` MiB holds one request of its 2,048-token context; else the
    `--max-model-len` vLLM's startup error names (the usable blocks' tokens), which the scenario then runs with
    (drawn values are unchanged: this adds a field, not a draw)."""
    from stallscope.refserver.config import EngineConfig
    from stallscope.refserver.engine import pool_context_tokens

    cfg = EngineConfig(model="tiny", kv_cache_mb=mb, kv_cache_dtype=dtype)
    tokens = pool_context_tokens(cfg)
    return None if tokens >= cfg.resolved_max_model_len else tokens


def draw(seed: int) -> list[tuple]:
    """Six prefill scenarios, two KV pools (with the `--max-model-len` a small pool needs, or None), one
    short-prompt negative and one run that ends inside a stall."""
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
        dtype = str(r.choice(["auto", "fp8"]))
        out.append(("kv", mb, dtype, int(r.integers(8, 40)), startable_max_model_len(mb, dtype)))
    out.append(("neg", int(r.integers(8, 128)), int(r.integers(8, 64))))
    model = "small" if r.random() < 0.5 else "tiny"
    out.append(("end", model, int(r.integers(600, 2000) // 50 * 50), "1s" if r.random() < 0.5 else "0.5s"))
    return out


def draw_kv(seed: int, n: int = 8) -> list[tuple]:
    """`n` KV-pool scenarios on `tiny` over a wider space than `draw`'s two, so some preempt and some do not:
    a pool of 2,048-16,384 tokens (log-uniform; from one request of `tiny`'s max_model_len, the least vLLM
    starts with) in `auto` or `fp8`, 8-48 sessions, 64-256 output tokens per short request, long prompts of
    600-1,800 tokens every 1-5 s, 0.5 s or 1 s scrapes. The pool is printed in MiB, as `--kv-cache-mb`
    takes it (rounded up to 0.1)."""
    from stallscope.refserver.config import EngineConfig

    r = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        tokens = float(np.exp(r.uniform(np.log(2048), np.log(16384))))
        dtype = str(r.choice(["auto", "fp8"]))
        mb = float(np.ceil(tokens * EngineConfig(model="tiny", kv_cache_dtype=dtype).bytes_per_token / 2**20 * 10) / 10)
        out.append(("kv", mb, dtype, int(r.integers(8, 49)), int(r.integers(64, 257)),
                    int(r.integers(600, 1801) // 50 * 50), round(float(r.uniform(1, 5)), 1),
                    "1s" if r.random() < 0.3 else "0.5s"))
    return out


def draw_band(seed: int, n: int = 8) -> list[tuple]:
    """`n` chunked-prefill scenarios where the metrics alone are least sure (docs/accuracy.md, "the 512-768
    band"): a budget from 320 to 832 (a multiple of 64, uniform), on `small` (whose chunk steps cross the
    200 ms SLO) three times in four, else `tiny`; 2-16 sessions; long prompts of 600-1,900 tokens every 1-10 s;
    0.5 s or 1 s scrapes. Rows as `draw`'s prefill rows."""
    r = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        model = "small" if r.random() < 0.75 else "tiny"
        budget = int(r.integers(5, 14)) * 64
        out.append(("prefill", model, "chunk", budget, int(r.integers(2, 17)), int(r.integers(600, 1901) // 50 * 50),
                    round(float(r.uniform(1, 10)), 1), "1s" if r.random() < 0.3 else "0.5s"))
    return out


def draw_starve(seed: int, n: int = 6) -> list[tuple]:
    """`n` scenarios whose long prompts hold the running decodes on `tiny`, the runs whose budget advice the cost
    model is judged on (docs/accuracy.md, "the cost model"): chunking off half the time, else on at a budget
    of 768-1,536 (a multiple of 64, uniform); 2-16 sessions; long prompts of 1,000-2,000 tokens every 2-10 s;
    0.5 s or 1 s scrapes. Rows as `draw`'s prefill rows."""
    r = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        chunk = r.random() < 0.5
        budget = int(r.integers(12, 25)) * 64 if chunk else None
        out.append(("prefill", "tiny", "chunk" if chunk else "nochunk", budget, int(r.integers(2, 17)),
                    int(r.integers(1000, 2001) // 50 * 50), round(float(r.uniform(2, 10)), 1),
                    "1s" if r.random() < 0.3 else "0.5s"))
    return out


def _scrape_suffix(interval: str) -> str:
    """The name suffix of a drawn row scraped every second (the default is 0.5 s)."""
    return "-scrape1s" if interval == "1s" else ""


def _prefill_entry(n: int, row: tuple, rows: list[tuple]) -> tuple[str, str, str]:
    """(name, server and load arguments as code, what it exercises) of a prefill row."""
    _, model, mode, budget, sessions, tokens, every, interval = row
    twin = any(x[:5] == row[:5] and x[5] != tokens for x in rows)   # same budget and sessions: name the size
    name = (f"h{n}-{model}-chunk{budget}{f'-{tokens}' if twin else ''}-s{sessions}" if mode == "chunk"
            else f"h{n}-{model}-nochunk-{tokens}-s{sessions}") + _scrape_suffix(interval)
    what = (f"budget {budget}, {sessions} sessions, {tokens:,}-token prompts every {every} s" if mode == "chunk"
            else f"{sessions} sessions, whole {tokens:,}-token prefills every {every} s")
    what = ("`small`, " if model == "small" else "") + what + (", 1 s scrapes" if interval == "1s" else "")
    args = (f"{f'chunked({budget})' if mode == 'chunk' else 'OFF'}, _h2({sessions}, {tokens}, {every})"
            + (', model="small"' if model == "small" else ""))
    return name, args, what


def _entry(n: int, row: tuple, rows: list[tuple]) -> tuple[str, str, str, str]:
    """(name, arguments, keyword arguments, what it exercises) of one drawn row as a `Scenario`."""
    kind = row[0]
    one_s = ', interval="1s"' if row[-1] == "1s" else ""
    if kind == "prefill":
        name, args, what = _prefill_entry(n, row, rows)
        return name, args, one_s, what
    if kind == "kv" and len(row) == 5:       # draw's pools: the general load
        _, mb, dtype, sessions, max_len = row
        extra = "" if max_len is None else f', "--max-model-len", "{max_len}"'
        return (f"h{n}-kv-{dtype}-{mb}mb-{sessions}sess",
                f'KV + ("--kv-cache-mb", "{mb}", "--kv-cache-dtype", "{dtype}"{extra}),\n             '
                f'("--sessions", "{sessions}") + KV_LOAD[2:]', "", f"a {mb} MiB {dtype} pool, {sessions} sessions")
    if kind == "kv":                           # draw_kv's pools
        _, mb, dtype, sessions, max_tokens, tokens, every, interval = row
        return (f"h{n}-kv-{dtype}-{mb}mb-{sessions}sess" + _scrape_suffix(interval),
                f'KV + ("--kv-cache-mb", "{mb}", "--kv-cache-dtype", "{dtype}"),\n             ("--sessions", '
                f'"{sessions}", "--short-prompt-tokens", "32", "--max-tokens", "{max_tokens}", "--long-max-tokens", '
                f'"16",\n              "--long-prompt-tokens", "{tokens}", "--long-every", "{every}")', one_s,
                f"a {mb} MiB {dtype} pool, {sessions} sessions of {max_tokens} output tokens, {tokens:,}-token "
                f"prompts every {every} s")
    if kind == "neg":
        _, sessions, tokens = row
        return (f"h{n}-neg-short-{sessions}sess", f'("--max-num-seqs", "128"),\n             ("--sessions", "{sessions}", '
                f'"--short-prompt-tokens", "{tokens}", "--max-tokens", "32") + SHORT_ONLY', "",
                f"negative: {sessions} sessions of {tokens}-token prompts")
    _, model, tokens, interval = row         # "end": the data ends 2 s after a whole prefill starts
    return (f"h{n}-end-in-stall-{model}-{tokens}" + _scrape_suffix(interval),
            f'OFF, _h2(4, {tokens}, "{{half}}")' + (', model="small"' if model == "small" else ""),
            one_s + ", collect_frac=0.5, collect_tail_s=2.0",
            f"`{model}`: the data ends 2 s after a whole {tokens:,}-token prefill starts")


def as_code(rows: list[tuple], n: int, first_seed: int) -> str:
    """The drawn rows as benchmarks/scenario_sets.py's `HELD_OUT_<n>` list, seeds from `first_seed` on; every
    name unique (SystemExit naming the first repeat)."""
    lines, names = [f"HELD_OUT_{n} = ["], set()
    for seed, row in enumerate(rows, first_seed):
        name, args, kw, what = _entry(n, row, rows)
        if name in names:
            raise SystemExit(f"two drawn scenarios would be named {name}")
        names.add(name)
        head = f'    Scenario("{name}", {args}, seed={seed}{kw},'
        wide = len(head.splitlines()[-1]) + len(f" held_out={n},") > 120
        lines += [head + ("\n             " if wide else " ") + f"held_out={n},", f'             exercises="{what}"),']
    return "\n".join(lines + ["]"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--kv", type=int, default=0, help="draw this many KV-pool scenarios only (draw_kv)")
    ap.add_argument("--band", type=int, default=0, help="draw this many chunked scenarios in the 320-832 band only "
                                                        "(draw_band)")
    ap.add_argument("--starve", type=int, default=0, help="draw this many `tiny` starvation scenarios only "
                                                          "(draw_starve: the cost model's runs)")
    ap.add_argument("--held-out", type=int, metavar="N", help="print the rows as scenario_sets.py's HELD_OUT_N")
    ap.add_argument("--first-seed", type=int, default=1, help="with --held-out: the first scenario's seed")
    args = ap.parse_args()
    rows = (draw_kv(args.seed, args.kv) if args.kv else draw_band(args.seed, args.band) if args.band
            else draw_starve(args.seed, args.starve) if args.starve else draw(args.seed))
    if args.held_out is not None:
        print(as_code(rows, args.held_out, args.first_seed))
        return 0
    for row in rows:
        print(*row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
