"""The one declared schema: every frame's columns, dtypes and units, and `validate(frame, kind)`.

Times are integer nanoseconds (`ts`, `*_ns`) since the Unix epoch unless a column says otherwise;
values are in base units (seconds, bytes, ratios 0-1, Hz, W). Every collector's output passes
through `validate`. docs/schema.md documents each column; a meta-test keeps the two in sync.
"""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.core.errors import SchemaError


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # "int" (int64), "float", "str", "object" (dict/list), "bool"
    doc: str
    required: bool = True


FRAMES: dict[str, list[Column]] = {
    # One row per scraped Prometheus sample of a vLLM-style endpoint.
    "samples": [
        Column("ts", "int", "scrape time, ns since the Unix epoch"),
        Column("metric", "str", "canonical vLLM name, e.g. `vllm:kv_cache_usage_perc` (histograms keep the `_bucket`/`_sum`/`_count` suffix)"),
        Column("source_metric", "str", "the name as scraped, before alias mapping"),
        Column("labels", "object", "dict of label name to value, without `le`"),
        Column("le", "float", "bucket upper bound for `_bucket` rows (inf for +Inf), NaN otherwise"),
        Column("value", "float", "sample value in base units"),
        Column("target", "str", "scrape target name (added by the store and the loaders)", required=False),
    ],
    # One row per GPU metric sample (DCGM exporter or NVML), canonical names and base units.
    "gpu": [
        Column("ts", "int", "sample time, ns since the Unix epoch"),
        Column("hostname", "str", "host the GPU is on"),
        Column("gpu", "str", "GPU index as a string"),
        Column("uuid", "str", "GPU UUID"),
        Column("model", "str", "GPU model name, e.g. `NVIDIA H100 80GB HBM3`"),
        Column("metric", "str", "canonical name: tensor_active, dram_active, sm_active, power_w, fb_used_bytes, ..."),
        Column("value", "float", "value in base units (ratio 0-1, bytes, W, Hz, Celsius, bytes/s)"),
        Column("pod", "str", "Kubernetes pod, when the exporter attaches one", required=False),
        Column("namespace", "str", "Kubernetes namespace, when present", required=False),
        Column("container", "str", "Kubernetes container, when present", required=False),
        Column("gpu_instance", "str", "MIG GPU instance id (DCGM `GPU_I_ID`), '' for a whole GPU; present only on MIG hosts", required=False),
        Column("target", "str", "scrape target name (added by the store and the loaders)", required=False),
    ],
    # One row per engine step: the reference engine's step trace, or steps rebuilt from an nsys export.
    "steps": [
        Column("step", "int", "step index, from 0"),
        Column("start_ns", "int", "step start, ns since the Unix epoch (nsys: ns on the trace clock)"),
        Column("end_ns", "int", "step end, ns"),
        Column("num_prefill_tokens", "float", "prompt tokens computed in this step (NaN when unknown)"),
        Column("num_decode_tokens", "float", "decode tokens computed in this step (NaN when unknown)"),
        Column("num_running", "float", "requests in RUNNING after scheduling (NaN when unknown)", required=False),
        Column("num_waiting", "float", "requests in WAITING after scheduling (NaN when unknown)", required=False),
        Column("num_preempted", "float", "requests preempted in this step (NaN when unknown)", required=False),
        Column("kv_blocks_used", "float", "KV blocks held by requests after the step (NaN when unknown)", required=False),
        Column("num_gpu_blocks", "float", "KV blocks in the pool (NaN when unknown)", required=False),
        Column("gpu_busy_ns", "float", "union of kernel time inside the step (nsys only)", required=False),
        Column("num_kernels", "float", "kernels inside the step (nsys only)", required=False),
    ],
    # One row per GPU kernel read from an Nsight Systems export (collectors/nsight_sqlite.py).
    "kernels": [
        Column("start_ns", "int", "kernel start, ns on the trace clock"),
        Column("end_ns", "int", "kernel end, ns on the trace clock"),
        Column("dur_ns", "int", "end_ns - start_ns"),
        Column("device_id", "int", "CUDA device id (TARGET_INFO_GPU.id)"),
        Column("context_id", "int", "CUDA context id"),
        Column("stream_id", "int", "CUDA stream id"),
        Column("pid", "int", "process id, (globalPid >> 24) & 0xFFFFFF"),
        Column("global_pid", "int", "nsys serialized global process id"),
        Column("name", "str", "demangled kernel name (StringIds[demangledName])"),
        Column("short_name", "str", "base kernel name (StringIds[shortName])"),
        Column("grid_x", "int", "grid size in x (FlashAttention: query blocks)"),
        Column("graph_node_id", "float", "CUDA graph node id when traced with --cuda-graph-trace=node (NaN otherwise)"),
        Column("launch_ns", "float", "start of the launching runtime/driver call (same correlationId and process), ns; NaN when not joined", required=False),
        Column("role", "str", "kernel role from analyzers/kernel_roles.yaml (added by classify)", required=False),
    ],
    # One row per finding of any detector.
    "findings": [
        Column("kind", "str", "decode_starvation, kv_pressure, kv_near_full, scheduler_stall, memory_bound_decode, ..."),
        Column("severity", "str", "info, warning or critical"),
        Column("start_ns", "int", "window start, ns"),
        Column("end_ns", "int", "window end, ns"),
        Column("target", "str", "target/model/pod the finding is about ('' when global)"),
        Column("evidence", "object", "dict of figures that support the finding, base units"),
        Column("explanation", "str", "one paragraph in plain words"),
        Column("recommendation", "str", "concrete flags and their expected effect"),
    ],
}

_DTYPE_KIND = {"int": "iu", "float": "fiu", "str": "OSU", "object": "O", "bool": "b"}


def columns(kind: str, *, required_only: bool = False) -> list[str]:
    """Column names of a frame kind, in declared order.

    >>> columns("findings")[:3]
    ['kind', 'severity', 'start_ns']
    """
    if kind not in FRAMES:
        raise SchemaError(f"unknown frame kind {kind!r}; known: {', '.join(FRAMES)}")
    return [c.name for c in FRAMES[kind] if c.required or not required_only]


def validate(frame, kind: str):
    """Check that `frame` has every required column of `kind` with a compatible dtype; return it.

    Raises SchemaError("missing column `dur` in nsight kernels frame")-style messages.
    """
    if kind not in FRAMES:
        raise SchemaError(f"unknown frame kind {kind!r}; known: {', '.join(FRAMES)}")
    dtypes = frame.dtypes  # one lookup, not one Series per column (validate runs on every scrape)
    for col in FRAMES[kind]:
        if col.name not in dtypes.index:
            if col.required:
                raise SchemaError(f"missing column `{col.name}` in {kind} frame")
            continue
        if len(frame) == 0:
            continue
        got = dtypes[col.name].kind
        if got not in _DTYPE_KIND[col.dtype]:
            raise SchemaError(
                f"column `{col.name}` in {kind} frame has dtype {dtypes[col.name]}, expected {col.dtype}"
            )
    return frame


def empty(kind: str):
    """An empty frame with the declared columns of `kind` (all, including optional ones)."""
    import pandas as pd

    dtypes = {"int": "int64", "float": "float64", "str": "object", "object": "object", "bool": "bool"}
    return pd.DataFrame({c.name: pd.Series(dtype=dtypes[c.dtype]) for c in FRAMES[kind] if c.required})


def samples_frame(ts, metric, source_metric, labels, le, value, target=None):
    """The samples frame from its columns. Arrays and Categoricals are used as they are (no copy), lists
    become arrays; `ts` and `target` may be one value for every row."""
    n = len(value)
    return _frame("samples", n, ts, value, {"metric": metric, "source_metric": source_metric, "labels": labels},
                  le=le, target=target)


def gpu_frame(ts, hostname, gpu, uuid, model, metric, value, *, pod=None, namespace=None, container=None,
              gpu_instance=None, target=None):
    """The gpu frame from its columns, as `samples_frame`. None in a string column stands for "", and an
    optional column (pod, namespace, container, gpu_instance) is kept only if some value in it is non-empty."""
    optional = {"pod": pod, "namespace": namespace, "container": container, "gpu_instance": gpu_instance}
    strs = {"hostname": hostname, "gpu": gpu, "uuid": uuid, "model": model, "metric": metric,
            **{k: v for k, v in optional.items() if v is not None and any(getattr(v, "categories", v))}}
    return _frame("gpu", len(value), ts, value, strs, target=target)


def _frame(kind: str, n: int, ts, value, strs: dict, le=None, target=None):
    import numpy as np
    import pandas as pd

    cols = {"ts": np.full(n, ts, dtype=np.int64) if np.ndim(ts) == 0 else np.asarray(ts, dtype=np.int64),
            **{k: _objects(v, n) for k, v in strs.items()}, "value": np.asarray(value, dtype=np.float64)}
    if le is not None:
        cols["le"] = np.asarray(le, dtype=np.float64)
    if target is not None:
        cols["target"] = _objects(target, n)
    return validate(pd.DataFrame({c.name: cols[c.name] for c in FRAMES[kind] if c.name in cols}, copy=False), kind)


def _objects(values, n: int):
    """An object column (a Categorical stays one): pandas makes an object array of str its `str` dtype."""
    import numpy as np
    import pandas as pd

    if isinstance(values, pd.Categorical):
        return values
    if isinstance(values, str):
        values = [values] * n
    if not (isinstance(values, np.ndarray) and values.dtype == object):
        arr = np.empty(n, dtype=object)
        arr[:] = ["" if v is None else v for v in values]
        values = arr
    return pd.Series(values, dtype=object, copy=False)


def steps_frame(rows: list[dict]):
    """A steps frame from step-trace records: `step` numbered from 0 when absent, the declared columns
    cast to int64/float64, every other field (e.g. `num_scheduled_tokens`) kept as it is."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame(rows)
    if "step" not in frame:
        frame["step"] = np.arange(len(frame))
    cast = {"int": "int64", "float": "float64"}
    return validate(frame.astype({c.name: cast[c.dtype] for c in FRAMES["steps"] if c.name in frame}), "steps")
