"""Classify every kernel of a trace into an LLM-serving role, from a user-extendable YAML table.

Roles: attention, gemm, small_gemm (small-M GEMM/GEMV, split-K), collective, norm_elementwise,
sampling, memcpy, other. Names are matched once per distinct name (the frame keeps a categorical), so
classifying millions of kernels costs one regex pass over a few hundred names.

Attention kernels also get a phase from shape facts: FlashAttention's gridX = ceil(max_seqlen_q /
kBlockM), so gridX == 1 is decode-only attention and gridX > 1 carries a prefill chunk; an attention
kernel followed on its stream by a combine kernel ran split-KV (flash-decoding), i.e. decode.

    >>> k = classify(trace.kernels)               # doctest: +SKIP
    >>> k.groupby("role", observed=True)["dur_ns"].sum()   # doctest: +SKIP
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from stallscope.core.errors import ConfigError

ROLES = ["attention", "gemm", "small_gemm", "collective", "norm_elementwise", "sampling", "memcpy", "other"]
DEFAULT_TABLE = Path(__file__).with_name("kernel_roles.yaml")
PHASES = ("decode", "prefill", "by_grid_x", "combine")
PHASE_LABELS = ["", "decode", "prefill"]


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read kernel-role table {str(path)!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"kernel-role table {str(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("roles", []), list):
        raise ConfigError(f"kernel-role table {str(path)!r} needs a `roles:` list of {{role, patterns}}")
    return data


def _compile(pattern: str, path) -> re.Pattern:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ConfigError(f"bad pattern {pattern!r} in kernel-role table {str(path)!r}: {exc}") from None


def load_table(extra: str | Path | None = None) -> dict:
    """Role table: `extra` roles first (they win), then the shipped ones; phase lists are merged."""
    sources = ([(Path(extra), _read_yaml(Path(extra)))] if extra else []) + [(DEFAULT_TABLE, _read_yaml(DEFAULT_TABLE))]
    roles, phase = [], {k: [] for k in PHASES}
    for path, data in sources:
        for entry in data.get("roles", []):
            role = entry.get("role") if isinstance(entry, dict) else None
            if role not in ROLES:
                raise ConfigError(f"unknown role {role!r} in kernel-role table {str(path)!r}; known: {', '.join(ROLES)}")
            roles += [(role, _compile(p, path)) for p in entry.get("patterns", [])]
        for key, pats in (data.get("attention_phase") or {}).items():
            if key not in PHASES:
                raise ConfigError(f"unknown attention_phase key {key!r} in {str(path)!r}; known: {', '.join(PHASES)}")
            phase[key] += [_compile(p, path) for p in pats]
    return {"roles": roles, "phase": phase}


@lru_cache(maxsize=1)
def default_table() -> dict:
    return load_table()


def role_of(name: str, table: dict | None = None) -> str:
    """Role of one kernel name.

    >>> role_of("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096>)")
    'collective'
    """
    for role, rx in (table or default_table())["roles"]:
        if rx.search(name):
            return role
    return "other"


def _matches(names, patterns) -> np.ndarray:
    return np.array([any(rx.search(n) for rx in patterns) for n in names], dtype=bool)


def classify(kernels: pd.DataFrame, table: dict | None = None) -> pd.DataFrame:
    """Copy of `kernels` with `role` (categorical), `attention_phase` ('decode', 'prefill' or '') and
    `attention_core` (the per-layer attention call itself: not a combine or KV-cache-write kernel)."""
    table = table or default_table()
    out = kernels.copy()
    col = out["name"]
    names = col.array if isinstance(col.dtype, pd.CategoricalDtype) else pd.Categorical(col.astype(object))
    cats = list(names.categories)
    codes = names.codes  # per kernel; -1 (missing name) picks the appended last entry below
    role_idx = np.array([ROLES.index(role_of(n, table)) for n in cats] + [ROLES.index("other")])
    out["role"] = pd.Categorical.from_codes(role_idx[codes], categories=ROLES)
    ph = table["phase"]
    per_cat = lambda pats: np.r_[_matches(cats, pats), False]  # noqa: E731 - bool per category
    is_attn = (role_idx == ROLES.index("attention"))[codes]
    by_name_decode = per_cat(ph["decode"] + ph["combine"])[codes]
    by_name_prefill = per_cat(ph["prefill"])[codes]
    by_grid = per_cat(ph["by_grid_x"])[codes]
    combine = per_cat(ph["combine"])[codes] & is_attn
    phase = np.zeros(len(out), dtype=np.int8)  # index into PHASE_LABELS
    grid_x = out["grid_x"].to_numpy() if len(out) else np.array([], dtype=np.int64)
    phase[is_attn & by_grid & (grid_x == 1)] = 1
    phase[is_attn & by_grid & (grid_x > 1)] = 2
    phase[is_attn & by_name_prefill] = 2
    phase[is_attn & by_name_decode] = 1
    phase[_split_kv_before_combine(out, is_attn & ~combine, combine)] = 1
    out["attention_phase"] = pd.Categorical.from_codes(phase, categories=PHASE_LABELS)
    out["attention_core"] = is_attn & ~combine & (by_grid | by_name_decode | by_name_prefill)
    return out


def _split_kv_before_combine(k: pd.DataFrame, attn: np.ndarray, combine: np.ndarray) -> np.ndarray:
    """Attention kernels whose next attention-role kernel on the same stream is a combine kernel."""
    hit = np.zeros(len(k), dtype=bool)
    if not combine.any():
        return hit
    idx = np.nonzero(attn | combine)[0]
    sub = k.iloc[idx]
    order = np.lexsort((sub["start_ns"].to_numpy(), sub["stream_id"].to_numpy(), sub["pid"].to_numpy()))
    rows = idx[order]
    same_stream = ((k["stream_id"].to_numpy()[rows][1:] == k["stream_id"].to_numpy()[rows][:-1])
                   & (k["pid"].to_numpy()[rows][1:] == k["pid"].to_numpy()[rows][:-1]))
    before = rows[:-1][same_stream & combine[rows][1:] & attn[rows][:-1]]
    hit[before] = True
    return hit
