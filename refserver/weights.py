"""Model weights: seeded random initialisation, or an `.npz` file (format in docs/weights-format.md).

Linear weights are stored (in_features, out_features) so a layer is `x @ W`; q/k/v and gate/up are fused.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from stallscope.core.errors import InputError

from .config import ModelConfig


def weight_shapes(mc: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every array the model needs, name -> shape."""
    d, hd, v = mc.hidden_size, mc.head_dim, mc.vocab_size
    shapes = {"embed_tokens": (v, d), "norm": (d,), "lm_head": (d, v)}
    for i in range(mc.num_layers):
        shapes[f"layers.{i}.input_norm"] = (d,)
        shapes[f"layers.{i}.qkv_proj"] = (d, (mc.num_heads + 2 * mc.num_kv_heads) * hd)
        shapes[f"layers.{i}.o_proj"] = (mc.num_heads * hd, d)
        shapes[f"layers.{i}.post_attention_norm"] = (d,)
        shapes[f"layers.{i}.gate_up_proj"] = (d, 2 * mc.intermediate_size)
        shapes[f"layers.{i}.down_proj"] = (mc.intermediate_size, d)
    return shapes


def init_weights(mc: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights: N(0, 1/fan_in) linears, residual outputs scaled down by sqrt(2 * layers)."""
    rng = np.random.default_rng(seed)
    resid = 1.0 / np.sqrt(2 * mc.num_layers)
    weights = {}
    for name, shape in weight_shapes(mc).items():
        if name.endswith("norm"):
            weights[name] = np.ones(shape, dtype=np.float32)
            continue
        std = 1.0 if name == "embed_tokens" else 1.0 / np.sqrt(shape[0])
        if name.endswith(("o_proj", "down_proj")):
            std *= resid
        if name == "lm_head":
            std *= 4.0                                  # logits with std ~4: clear greedy winners
        w = rng.standard_normal(shape, dtype=np.float32)
        w *= np.float32(std)
        weights[name] = w
    return weights


def save_npz(path: str | Path, weights: dict[str, np.ndarray]) -> None:
    np.savez(path, **weights)


def load_npz(path: str | Path, mc: ModelConfig) -> dict[str, np.ndarray]:
    """Load and check every array's name, shape and dtype against `mc`; InputError names the first mismatch."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"weights file {str(path)!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"weights file {str(path)!r} is not a readable .npz: {exc}") from None
    weights = {}
    for name, shape in weight_shapes(mc).items():
        if name not in arrays:
            raise InputError(f"weights file {str(path)!r} lacks array {name!r} (model {mc.name!r})")
        a = arrays.pop(name)
        if a.shape != shape:
            raise InputError(f"weights file {str(path)!r}: {name!r} has shape {a.shape}, "
                             f"model {mc.name!r} needs {shape}")
        if not np.issubdtype(a.dtype, np.floating):
            raise InputError(f"weights file {str(path)!r}: {name!r} has dtype {a.dtype}, needs a float type")
        weights[name] = np.ascontiguousarray(a, dtype=np.float32)
    if arrays:
        raise InputError(f"weights file {str(path)!r} has unexpected arrays: {', '.join(sorted(arrays)[:5])}")
    return weights
