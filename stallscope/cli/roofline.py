"""`stallscope roofline`: ridge point, decode intensity per batch, KV sizes and capacity, weight-read floor.

    stallscope roofline --gpu H100-SXM --model llama-3-70b --tp 4 --batch 1,8,32,256 --format json
    stallscope roofline --measure          # this host: numpy on the CPU, torch on a GPU when present
"""

from __future__ import annotations

import json
import sys

from stallscope.core.errors import InputError


def add_arguments(parser) -> None:
    parser.add_argument("--gpu", default="H100-SXM", help="GPU table key or NVML name (default H100-SXM)")
    parser.add_argument("--model", default="llama-3-8b", help="model key, Hugging Face id or refserver preset")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    parser.add_argument("--batch", default="1,8,32,256", help="comma-separated decode batch sizes")
    parser.add_argument("--context-len", type=int, default=1024, help="tokens of context per request (default 1024)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp8"], help="tensor-core dtype")
    parser.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8"], help="KV cache dtype")
    parser.add_argument("--block-size", type=int, default=16, help="KV block size in tokens (default 16)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="memory fraction (default 0.9)")
    parser.add_argument("--format", default="text", choices=["text", "json"])
    parser.add_argument("--measure", action="store_true", help="also measure this host's FLOP/s and bandwidth")
    parser.add_argument("--list", action="store_true", help="list the known GPUs and models")


def _batches(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--batch must be comma-separated integers, got {text!r}") from None
    if not out or min(out) < 1:
        raise InputError(f"--batch values must be >= 1, got {text!r}")
    return out


def run(args) -> int:
    from stallscope.analyzers import roofline as R

    if args.list:
        data = {"gpus": sorted(R.gpu_specs()), "models": sorted(R.model_specs())}
        print(json.dumps(data, indent=2) if args.format == "json" else
              "GPUs:   " + ", ".join(data["gpus"]) + "\nmodels: " + ", ".join(data["models"]))
        return 0
    if args.tp < 1:
        raise InputError(f"--tp must be >= 1, got {args.tp}")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise InputError(f"--gpu-memory-utilization must be in (0, 1], got {args.gpu_memory_utilization}")
    if args.context_len < 0 or args.block_size < 1:
        raise InputError(f"--context-len must be >= 0 and --block-size >= 1, got {args.context_len}, "
                         f"{args.block_size}")
    gpu, model = R.gpu_spec(args.gpu), R.model_spec(args.model)
    result = R.table(gpu, model, tp=args.tp, batches=_batches(args.batch), context_len=args.context_len,
                     kv_dtype=args.kv_cache_dtype, dtype=args.dtype, block_size=args.block_size,
                     gpu_memory_utilization=args.gpu_memory_utilization)
    if args.measure:
        result["measured"] = R.measure_host()
    if args.format == "json":
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    _print_text(result, R)
    return 0


def _print_text(r: dict, R) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False)
    con.print(f"[bold]{r['model']}[/] on {r['tp']} x [bold]{r['gpu']}[/] ({r['dtype']}): peak "
              f"{r['peak_flops'] / 1e12:,.1f} TFLOP/s dense, {r['hbm_bytes_per_s'] / 1e12:.2f} TB/s, ridge "
              f"[bold]{r['ridge_flop_per_byte']:.0f} FLOP/B[/]")
    con.print(f"{r['num_params'] / 1e9:.2f} B parameters, {R.fmt_bytes(r['weight_bytes'])} of weights read per "
              f"decode step: floor {r['weight_read_floor_s'] * 1e3:.2f} ms per step with TP {r['tp']}")
    t = Table(title=f"decode step, {r['context_len']} tokens of context per request, KV {r['kv_cache_dtype']}")
    for c in ("batch", "FLOP/B", "bound", "step floor", "tokens/s ceiling"):
        t.add_column(c, justify="right")
    for p in r["decode"]:
        t.add_row(str(p["batch"]), f"{p['intensity']:.1f}", p["bound"], f"{p['step_floor_s'] * 1e3:.2f} ms",
                  f"{p['tokens_per_s_ceiling']:,.0f}")
    con.print(t)
    k = Table(title=f"KV cache (block {r['block_size']} tokens, gpu_memory_utilization {r['gpu_memory_utilization']})")
    for c in ("kv dtype", "per token", "per block", "capacity (tokens)"):
        k.add_column(c, justify="right")
    for name, v in r["kv"].items():
        k.add_row(name, R.fmt_bytes(v["bytes_per_token"]), R.fmt_bytes(v["bytes_per_block"]),
                  f"{v['capacity_tokens']:,}")
    con.print(k)
    if "measured" in r:
        m = r["measured"]
        con.print(f"measured on this host, {m['device']}: {m['peak_flops'] / 1e9:,.1f} GFLOP/s, "
                  f"{m['hbm_bytes_per_s'] / 1e9:,.1f} GB/s, ridge {m['ridge_flop_per_byte']:.1f} FLOP/B")
