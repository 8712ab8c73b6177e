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


def name_facts(names: list[str], table: dict) -> dict:
    """Per distinct name, with one extra last entry for a missing name: role index and the phase flags."""
    ph = table["phase"]
    per_name = lambda pats: np.r_[_matches(names, pats), False]  # noqa: E731 - bool per name
    return {"role": np.array([ROLES.index(role_of(n, table)) for n in names] + [ROLES.index("other")]),
            "decode": per_name(ph["decode"] + ph["combine"]), "prefill": per_name(ph["prefill"]),
            "by_grid": per_name(ph["by_grid_x"]), "combine": per_name(ph["combine"])}


def classify(kernels: pd.DataFrame, table: dict | None = None) -> pd.DataFrame:
    """Copy of `kernels` with `role` (categorical), `attention_phase` ('decode', 'prefill' or '') and
    `attention_core` (the per-layer attention call itself: not a combine or KV-cache-write kernel)."""
    table = table or default_table()
    col = kernels["name"]
    names = col.array if isinstance(col.dtype, pd.CategoricalDtype) else pd.Categorical(col.astype(object))
    out = kernels.copy()
    return _apply(out, name_facts(list(names.categories), table), names.codes)  # -1 picks the missing entry


def _apply(out: pd.DataFrame, facts: dict, codes: np.ndarray, carry: dict | None = None) -> pd.DataFrame:
    """Set role/attention_phase/attention_core from per-name `facts` indexed by each kernel's `codes`."""
    role_idx = facts["role"]
    out["role"] = pd.Categorical.from_codes(role_idx[codes], categories=ROLES)
    is_attn = (role_idx == ROLES.index("attention"))[codes]
    by_name_decode, by_name_prefill = facts["decode"][codes], facts["prefill"][codes]
    by_grid = facts["by_grid"][codes]
    combine = facts["combine"][codes] & is_attn
    phase = np.zeros(len(out), dtype=np.int8)  # index into PHASE_LABELS
    grid_x = out["grid_x"].to_numpy() if len(out) else np.array([], dtype=np.int64)
    phase[is_attn & by_grid & (grid_x == 1)] = 1
    phase[is_attn & by_grid & (grid_x > 1)] = 2
    phase[is_attn & by_name_prefill] = 2
    phase[is_attn & by_name_decode] = 1
    phase[_split_kv_before_combine(out, is_attn & ~combine, combine, carry)] = 1
    out["attention_phase"] = pd.Categorical.from_codes(phase, categories=PHASE_LABELS)
    out["attention_core"] = is_attn & ~combine & (by_grid | by_name_decode | by_name_prefill)
    return out


def _split_kv_before_combine(k: pd.DataFrame, attn: np.ndarray, combine: np.ndarray,
                             carry: dict | None = None) -> np.ndarray:
    """Attention kernels whose next attention-role kernel on the same stream is a combine kernel.

    With `carry` (batches in start order), the last attention-role kernel of each (pid, stream) waits
    there for the next batch: carry[key] = (it is attention, not combine; flipped to decode)."""
    hit = np.zeros(len(k), dtype=bool)
    if not combine.any() and carry is None:
        return hit
    idx = np.nonzero(attn | combine)[0]
    sub = k.iloc[idx]
    order = np.lexsort((sub["start_ns"].to_numpy(), sub["stream_id"].to_numpy(), sub["pid"].to_numpy()))
    rows = idx[order]
    stream, pid = k["stream_id"].to_numpy()[rows], k["pid"].to_numpy()[rows]
    same_stream = (stream[1:] == stream[:-1]) & (pid[1:] == pid[:-1])
    before = rows[:-1][same_stream & combine[rows][1:] & attn[rows][:-1]]
    hit[before] = True
    if carry is not None and len(rows):
        first = np.r_[True, ~same_stream]
        for i in np.nonzero(first)[0]:  # the first attention-role kernel of each stream in this batch
            key = (int(pid[i]), int(stream[i]))
            if key in carry and carry[key][0] and combine[rows[i]]:
                carry["flipped"].append(carry[key][1])
        last = np.r_[~same_stream, True]
        for i in np.nonzero(last)[0]:
            carry[(int(pid[i]), int(stream[i]))] = (bool(attn[rows[i]]), int(rows[i]))
    return hit


class BatchClassifier:
    """`classify` for kernel batches in start order that carry StringIds ids (`name_id`), not names:
    each distinct name is matched once for the whole trace. A split-KV attention kernel whose combine
    kernel lands in a later batch comes back from that batch's `classify` in `flipped`, as the handle
    `remember` stored for it."""

    def __init__(self, name_of, table: dict | None = None):
        self.name_of, self.table = name_of, table or default_table()
        self.ids = np.zeros(0, dtype=np.int64)  # sorted ids seen so far
        self.facts = {k: v[:-1] for k, v in name_facts([], self.table).items()}
        self.carry: dict = {"flipped": []}
        self.phase = np.zeros(0, np.int8)

    def codes(self, ids: np.ndarray) -> np.ndarray:
        """Index of each id into the per-name facts (names not seen before are matched now)."""
        new = np.setdiff1d(np.unique(ids), self.ids)
        if len(new):
            more = name_facts([str(n) for n in self.name_of(new)], self.table)
            merged = np.r_[self.ids, new]
            order = np.argsort(merged, kind="stable")
            self.facts = {k: np.r_[self.facts[k], more[k][:-1]][order] for k in self.facts}
            self.ids = merged[order]
        return np.searchsorted(self.ids, ids)

    def roles(self, ids: np.ndarray) -> np.ndarray:
        """Index into ROLES of each kernel name id."""
        return self.facts["role"][self.codes(ids)] if len(ids) else np.zeros(0, np.int64)

    def classify(self, batch: pd.DataFrame) -> tuple[pd.DataFrame, list]:
        """(`batch` classified in place as `classify` does, handles of earlier kernels now known to be
        split-KV decode)."""
        codes = self.codes(batch["name_id"].to_numpy())
        self.carry["flipped"] = []
        out = _apply(batch, self.facts, codes, self.carry)  # the batch is the caller's to give
        self.phase = out["attention_phase"].cat.codes.to_numpy()
        return out, list(self.carry["flipped"])

    def remember(self, handle) -> None:
        """Store `handle(row, phase)` for the last attention kernel of each stream in the last batch."""
        for key, value in self.carry.items():
            if key != "flipped" and isinstance(value[1], (int, np.integer)):
                self.carry[key] = (value[0], handle(int(value[1]), int(self.phase[value[1]])))
