"""Roofline: where a model's decode and prefill sit against a GPU's compute and bandwidth roofs.

The idea: a step is bound by max(FLOPs / peak FLOP/s, bytes / HBM bandwidth). The ridge point
peak / bandwidth (FLOP per byte) separates the two; H100 SXM: 989.4 TFLOPS dense BF16 / 3.35 TB/s
= 295 FLOP/B (the often-quoted 1,979 TFLOPS is the 2:4-sparse figure).

Decode at batch B with context L per request, per step (all GPUs of a TP group together):
    FLOPs = 2 x matmul_params x B + 4 x layers x heads x head_dim x L x B      (attention QK and AV)
    bytes = matmul_params x weight_bytes + B x L x kv_bytes_per_token
    kv_bytes_per_token = 2 (K, V) x layers x kv_heads x head_dim x kv_dtype_bytes
Intensity = FLOPs / bytes, about B FLOP/B for short contexts at 16-bit weights: decode is memory bound
until B nears the ridge. The weight-read floor per decode step is weight bytes / TP / bandwidth. The KV
capacity of a budget is (TP x memory x gpu_memory_utilization - weights) / kv_bytes_per_token
(activations and CUDA graphs ignored, so it is an upper bound).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd
import yaml

from stallscope.core.errors import InputError
from stallscope.engine.config import DTYPE_BYTES, ModelConfig


@dataclass(frozen=True)
class GpuSpec:
    name: str
    bf16_dense_tflops: float
    hbm_tb_s: float
    memory_gb: float
    fp8_dense_tflops: float | None = None
    nvlink_gb_s: float | None = None
    tdp_w: float | None = None
    names: tuple = ()

    def peak_flops(self, dtype: str = "bf16") -> float:
        if DTYPE_BYTES.get(dtype) == 1:
            if not self.fp8_dense_tflops:
                raise InputError(f"GPU {self.name} has no FP8 tensor cores; use --dtype bf16")
            return self.fp8_dense_tflops * 1e12
        return self.bf16_dense_tflops * 1e12

    @property
    def bandwidth(self) -> float:
        """HBM bandwidth, bytes/s."""
        return self.hbm_tb_s * 1e12

    def ridge(self, dtype: str = "bf16") -> float:
        """FLOP per byte where compute and bandwidth roofs meet.

        >>> round(gpu_spec("H100-SXM").ridge())
        295
        """
        return self.peak_flops(dtype) / self.bandwidth


@lru_cache(maxsize=1)
def gpu_specs() -> dict[str, GpuSpec]:
    raw = yaml.safe_load(resources.files("stallscope.analyzers").joinpath("gpu_specs.yaml").read_text())
    return {k: GpuSpec(name=k, **{**v, "names": tuple(v.get("names", ()))}) for k, v in raw.items()}


@lru_cache(maxsize=1)
def model_specs() -> dict[str, ModelConfig]:
    raw = yaml.safe_load(resources.files("stallscope.analyzers").joinpath("model_configs.yaml").read_text())
    out = {k: ModelConfig(name=k, **{**v, "names": tuple(v.get("names", ()))}) for k, v in raw.items()}
    from stallscope.refserver.config import PRESETS   # the reference engine's: float32 weights, 16-bit KV for "auto"

    out.update({key: replace(mc, names=(f"refserver-{key}",)) for key, mc in PRESETS.items()})
    return out


def _norm(s: str) -> str:
    return "".join(ch for ch in s.lower() if ch.isalnum())


def _lookup(name: str, table: dict, what: str, flag: str, exact: bool = False):
    key, tail = _norm(name), _norm(str(name).split("/")[-1])
    for k, spec in table.items():
        if key == _norm(k) or any(_norm(n) in (key, tail) or _norm(n.split("/")[-1]) in (key, tail)
                                  for n in spec.names):
            return spec
    prefixed = [spec for k, spec in table.items() if _norm(k).startswith(key)]
    if key and len(prefixed) == 1 and not exact:
        return prefixed[0]
    raise InputError(f"unknown {what} {name!r} for {flag}; known: {', '.join(table)}")


def gpu_spec(name: str) -> GpuSpec:
    """A GPU by table key (`H100-SXM`) or NVML/DCGM product name (`NVIDIA H100 80GB HBM3`)."""
    return _lookup(name, gpu_specs(), "GPU", "--gpu")


def model_spec(name: str, exact: bool = False) -> ModelConfig:
    """A model by table key (`llama-3-70b`), Hugging Face id or refserver preset (`tiny`, `small`); a unique
    key prefix too unless `exact` (a served `model_name` is matched whole)."""
    return _lookup(name, model_specs(), "model", "--model", exact)


def decode_point(model: ModelConfig, batch: int, *, context_len: int = 1024, kv_dtype: str = "auto",
                 weight_dtype: str | None = None) -> dict:
    """FLOPs, bytes and arithmetic intensity of one decode step at `batch` requests of `context_len`."""
    if batch < 1:
        raise InputError(f"batch must be >= 1, got {batch}")
    attn = 4 * model.num_layers * model.num_heads * model.head_dim * context_len
    flops = 2 * model.matmul_params * batch + attn * batch
    bytes_ = model.weight_bytes(weight_dtype) + batch * context_len * model.kv_bytes_per_token(kv_dtype)
    return {"batch": batch, "flops": float(flops), "bytes": float(bytes_), "intensity": flops / bytes_}


def kv_capacity_tokens(model: ModelConfig, gpu: GpuSpec, *, tp: int = 1, gpu_memory_utilization: float = 0.9,
                       kv_dtype: str = "auto", weight_dtype: str | None = None) -> int:
    """Tokens of KV cache that fit beside the weights (an upper bound: activations are ignored)."""
    budget = tp * gpu.memory_gb * 1e9 * gpu_memory_utilization - model.num_params * DTYPE_BYTES[
        weight_dtype or model.weight_dtype]
    return max(0, int(budget // model.kv_bytes_per_token(kv_dtype)))


def weight_read_floor_s(model: ModelConfig, gpu: GpuSpec, *, tp: int = 1, weight_dtype: str | None = None) -> float:
    """Seconds one decode step needs at least just to stream the weights once (each GPU reads 1/TP)."""
    return model.weight_bytes(weight_dtype) / tp / gpu.bandwidth


def roofline_cost(model: ModelConfig, gpu: GpuSpec, *, tp: int = 1, batch: int = 16, context_len: int = 1024,
                  efficiency: float = 0.5, dtype: str = "bf16") -> dict:
    """{decode_step_s, prefill_s_per_token, source} for the chunk-budget recommendation, from the roofs."""
    p = decode_point(model, batch, context_len=context_len)
    decode = max(p["flops"] / gpu.peak_flops(dtype), p["bytes"] / gpu.bandwidth) / tp / efficiency
    per_token = 2 * model.matmul_params / gpu.peak_flops(dtype) / tp / efficiency
    return {"decode_step_s": decode, "prefill_s_per_token": per_token,
            "source": f"the roofline of {model.name} on {tp}x {gpu.name} at {efficiency:.0%} of peak"}


def table(gpu: GpuSpec, model: ModelConfig, *, tp: int = 1, batches=(1, 8, 32, 256), context_len: int = 1024,
          kv_dtype: str = "auto", dtype: str = "bf16", block_size: int = 16,
          gpu_memory_utilization: float = 0.9) -> dict:
    """Every roofline figure for one GPU, model and TP size, JSON-ready."""
    if tp < 1:
        raise InputError(f"--tp must be >= 1, got {tp}")
    ridge = gpu.ridge(dtype)
    points = []
    for b in batches:
        p = decode_point(model, b, context_len=context_len, kv_dtype=kv_dtype)
        t_compute = p["flops"] / tp / gpu.peak_flops(dtype)
        t_memory = p["bytes"] / tp / gpu.bandwidth
        points.append({**p, "bound": "compute" if p["intensity"] >= ridge else "memory",
                       "step_floor_s": max(t_compute, t_memory), "tokens_per_s_ceiling": b / max(t_compute, t_memory)})
    kv = {}
    for kd in ("auto", "fp8"):
        per_tok = model.kv_bytes_per_token(kd)
        kv[kd] = {"bytes_per_token": per_tok, "bytes_per_block": per_tok * block_size,
                  "capacity_tokens": kv_capacity_tokens(model, gpu, tp=tp, kv_dtype=kd,
                                                        gpu_memory_utilization=gpu_memory_utilization)}
    return {
        "gpu": gpu.name, "model": model.name, "tp": tp, "dtype": dtype, "context_len": context_len,
        "kv_cache_dtype": kv_dtype, "block_size": block_size, "gpu_memory_utilization": gpu_memory_utilization,
        "peak_flops": gpu.peak_flops(dtype), "hbm_bytes_per_s": gpu.bandwidth, "ridge_flop_per_byte": ridge,
        "num_params": model.num_params, "weight_bytes": model.weight_bytes(),
        "weight_read_floor_s": weight_read_floor_s(model, gpu, tp=tp), "kv": kv, "decode": points,
        "prefill_intensity_flop_per_byte": None if context_len <= 0 else
        decode_point(model, 1, context_len=0)["flops"] * context_len / model.weight_bytes(),
    }


def _per_second(op, seconds: float, sync=lambda: None) -> float:
    """How many times `op()` completes per second, run for `seconds` (`sync` waits for queued device work)."""
    sync()
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        op()
        reps += 1
    sync()
    return reps / (time.perf_counter() - t0)


def measure_host(seconds: float = 1.0) -> dict:
    """Measured peak FLOP/s and memory bandwidth of this host: torch on a GPU when present, else numpy."""
    try:
        import torch  # noqa: F401
        if torch.cuda.is_available():  # pragma: no cover - needs a GPU
            return _measure_torch(seconds)
    except ImportError:
        pass
    n = 1024
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = a.copy()
    a @ b  # warm up
    flops = 2 * n**3 * _per_second(lambda: a @ b, seconds / 2)
    src = np.ones(16 * 2**20, dtype=np.float64)  # 128 MiB: larger than any cache
    dst = np.empty_like(src)
    np.copyto(dst, src)
    bw = 2 * src.nbytes * _per_second(lambda: np.copyto(dst, src), seconds / 2)  # read + write
    return {"device": "cpu (numpy float32 matmul, 128 MiB copy)", "peak_flops": flops, "hbm_bytes_per_s": bw,
            "ridge_flop_per_byte": flops / bw}


def _measure_torch(seconds: float) -> dict:  # pragma: no cover - needs a GPU
    import torch

    dev = torch.device("cuda")
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    flops = 2 * n**3 * _per_second(lambda: a @ a, seconds / 2, sync=torch.cuda.synchronize)
    src = torch.empty(2**28, device=dev, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    bw = 2 * src.numel() * _per_second(lambda: dst.copy_(src), seconds / 2, sync=torch.cuda.synchronize)
    return {"device": f"{torch.cuda.get_device_name()} (torch bf16 matmul, 256 MiB copy)", "peak_flops": flops,
            "hbm_bytes_per_s": bw, "ridge_flop_per_byte": flops / bw}


def measured_points(gpu: pd.DataFrame) -> dict | None:
    """Operating points from DCGM ratios: FLOP/s = tensor_active x peak, bytes/s = dram_active x bandwidth.

    Returns {"gpu", "peak_flops", "peak_bw", "points": frame(series, intensity, flops)} for the first GPU
    model found in the table, or None when the frame has no known GPU or no ratios.
    """
    if gpu is None or not len(gpu) or "model" not in gpu:
        return None
    for model_name in gpu["model"].dropna().unique():
        try:
            spec = gpu_spec(str(model_name))
        except InputError:
            continue
        rows = gpu[(gpu["model"] == model_name) & gpu["metric"].isin(["tensor_active", "dram_active"])]
        if not len(rows):
            continue
        wide = rows.pivot_table(index=["hostname", "gpu", "ts"], columns="metric", values="value", aggfunc="last")
        if not {"tensor_active", "dram_active"} <= set(wide.columns):
            continue
        wide = wide.dropna()
        wide = wide[wide["dram_active"] > 0]
        flops = wide["tensor_active"].to_numpy() * spec.peak_flops()
        bytes_s = wide["dram_active"].to_numpy() * spec.bandwidth
        series = [f"{h}/gpu{g}" for h, g, _ in wide.index]
        pts = pd.DataFrame({"series": series, "intensity": flops / bytes_s, "flops": flops})
        return {"gpu": spec.name, "peak_flops": spec.peak_flops(), "peak_bw": spec.bandwidth,
                "points": pts[pts["flops"] > 0].reset_index(drop=True)}
    return None


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n}"  # pragma: no cover


__all__ = ["GpuSpec", "ModelConfig", "gpu_spec", "model_spec", "gpu_specs", "model_specs", "decode_point",
           "kv_capacity_tokens", "weight_read_floor_s", "roofline_cost", "table", "measure_host",
           "measured_points", "fmt_bytes", "math"]
