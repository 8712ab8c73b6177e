#!/usr/bin/env python3
"""Write the synthetic Nsight Systems SQLite exports in sample_traces/ (deterministic, seed 42).

SYNTHETIC: these files are generated here, not captured on a GPU. They follow the nsys 2024.6.2
export schema (3.16.1; tables created lazily, as nsys does) and model a vLLM-like serving timeline of
a 4-layer Llama-style decoder on one H100 whose decode step takes ~32 ms with 32 running streams:

1. starvation.sqlite   a 16K-token prefill in one step holding the GPU ~1.9 s amid the decode steps;
                       vLLM NVTX step ranges `execute_context_{n}({tok})_generation_{m}({tok})`;
                       GPU metrics sampled at 100 Hz (SMs Active, Tensor Active, DRAM Read).
2. chunked.sqlite      the same load with chunked prefill at 512 tokens (32 mixed steps).
3. cuda_graphs.sqlite  captured with --cuda-graph-trace=graph: decode steps are whole-graph launches
                       (CUPTI_ACTIVITY_KIND_GRAPH_TRACE), the prefill step runs piecewise graphs plus
                       eager attention kernels; no NVTX.

    python scripts/make_sample_traces.py [OUT_DIR]

`build_export(path, steps, ...)` is reused by benchmarks/bench_nsight.py for a 2M-kernel export.
"""

from __future__ import annotations

import random
import sqlite3
import sys
from pathlib import Path

DDL = """CREATE TABLE GPU_METRICS (
 timestamp INTEGER,
 typeId INTEGER NOT NULL,
 metricId INTEGER NOT NULL,
 value INTEGER NOT NULL
);
CREATE TABLE TARGET_INFO_GPU_METRICS (
 typeId INTEGER NOT NULL,
 sourceId INTEGER NOT NULL,
 typeName TEXT NOT NULL,
 metricId INTEGER NOT NULL,
 metricName TEXT NOT NULL
);
CREATE TABLE ANALYSIS_DETAILS (
 globalVid INTEGER NOT NULL,
 duration INTEGER NOT NULL,
 startTime INTEGER NOT NULL,
 stopTime INTEGER NOT NULL
);
CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (
 start INTEGER NOT NULL,
 end INTEGER NOT NULL,
 deviceId INTEGER NOT NULL,
 contextId INTEGER NOT NULL,
 greenContextId INTEGER,
 streamId INTEGER NOT NULL,
 correlationId INTEGER,
 globalPid INTEGER,
 graphId INTEGER NOT NULL,
 graphExecId INTEGER NOT NULL
);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
 start INTEGER NOT NULL,
 end INTEGER NOT NULL,
 deviceId INTEGER NOT NULL,
 contextId INTEGER NOT NULL,
 greenContextId INTEGER,
 streamId INTEGER NOT NULL,
 correlationId INTEGER,
 globalPid INTEGER,
 demangledName INTEGER NOT NULL,
 shortName INTEGER NOT NULL,
 mangledName INTEGER,
 launchType INTEGER,
 cacheConfig INTEGER,
 registersPerThread INTEGER NOT NULL,
 gridX INTEGER NOT NULL,
 gridY INTEGER NOT NULL,
 gridZ INTEGER NOT NULL,
 blockX INTEGER NOT NULL,
 blockY INTEGER NOT NULL,
 blockZ INTEGER NOT NULL,
 staticSharedMemory INTEGER NOT NULL,
 dynamicSharedMemory INTEGER NOT NULL,
 localMemoryPerThread INTEGER NOT NULL,
 localMemoryTotal INTEGER NOT NULL,
 gridId INTEGER NOT NULL,
 sharedMemoryExecuted INTEGER,
 graphNodeId INTEGER,
 sharedMemoryLimitConfig INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
 start INTEGER NOT NULL,
 end INTEGER NOT NULL,
 deviceId INTEGER NOT NULL,
 contextId INTEGER NOT NULL,
 greenContextId INTEGER,
 streamId INTEGER NOT NULL,
 correlationId INTEGER,
 globalPid INTEGER,
 bytes INTEGER NOT NULL,
 copyKind INTEGER NOT NULL,
 deprecatedSrcId INTEGER,
 srcKind INTEGER,
 dstKind INTEGER,
 srcDeviceId INTEGER,
 srcContextId INTEGER,
 dstDeviceId INTEGER,
 dstContextId INTEGER,
 migrationCause INTEGER,
 graphNodeId INTEGER,
 virtualAddress INTEGER
);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
 start INTEGER NOT NULL,
 end INTEGER NOT NULL,
 eventClass INTEGER NOT NULL,
 globalTid INTEGER,
 correlationId INTEGER,
 nameId INTEGER NOT NULL,
 returnValue INTEGER NOT NULL,
 callchainId INTEGER
);
CREATE TABLE META_DATA_CAPTURE (
 name TEXT NOT NULL,
 value TEXT
);
CREATE TABLE META_DATA_EXPORT (
 name TEXT NOT NULL,
 value TEXT
);
CREATE TABLE NVTX_EVENTS (
 start INTEGER NOT NULL,
 end INTEGER,
 eventType INTEGER NOT NULL,
 rangeId INTEGER,
 category INTEGER,
 color INTEGER,
 text TEXT,
 globalTid INTEGER,
 endGlobalTid INTEGER,
 textId INTEGER,
 domainId INTEGER,
 uint64Value INTEGER,
 int64Value INTEGER,
 doubleValue REAL,
 uint32Value INTEGER,
 int32Value INTEGER,
 floatValue REAL,
 jsonTextId INTEGER,
 jsonText TEXT,
 binaryData TEXT
);
CREATE TABLE PROCESSES (
 globalPid INTEGER,
 pid INTEGER,
 name TEXT
);
CREATE TABLE StringIds (
 id INTEGER NOT NULL PRIMARY KEY,
 value TEXT NOT NULL
);
CREATE TABLE TARGET_INFO_GPU (
 vmId INTEGER NOT NULL,
 id INTEGER NOT NULL,
 name TEXT,
 busLocation TEXT,
 isDiscrete INTEGER,
 l2CacheSize INTEGER,
 totalMemory INTEGER,
 memoryBandwidth INTEGER,
 clockRate INTEGER,
 smCount INTEGER,
 pwGpuId INTEGER,
 uuid TEXT,
 luid INTEGER,
 chipName TEXT,
 cuDevice INTEGER,
 ctxswDevPath TEXT,
 ctrlDevPath TEXT,
 revision INTEGER,
 nodeMask INTEGER,
 constantMemory INTEGER,
 maxIPC INTEGER,
 maxRegistersPerBlock INTEGER,
 maxShmemPerBlock INTEGER,
 maxShmemPerBlockOptin INTEGER,
 maxShmemPerSm INTEGER,
 maxRegistersPerSm INTEGER,
 threadsPerWarp INTEGER,
 asyncEngines INTEGER,
 maxWarpsPerSm INTEGER,
 maxBlocksPerSm INTEGER,
 maxThreadsPerBlock INTEGER,
 maxBlockDimX INTEGER,
 maxBlockDimY INTEGER,
 maxBlockDimZ INTEGER,
 maxGridDimX INTEGER,
 maxGridDimY INTEGER,
 maxGridDimZ INTEGER,
 computeMajor INTEGER,
 computeMinor INTEGER,
 smMajor INTEGER,
 smMinor INTEGER
);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (
 utcEpochNs INTEGER,
 utcTime TEXT,
 localTime TEXT
);
"""

PID, TID = 4242, 4242
GLOBAL_PID = (1 << 48) | (PID << 24)  # nsys serialized globalPid: vm id 1, pid in bits 24..47
GLOBAL_TID = GLOBAL_PID | TID
SESSION_START_UTC_NS = 1764400000000000000
T0 = 1_000_000_000  # ns on the trace clock where serving starts
DECODE_STEP_NS = 32_000_000
CPU_GAP_NS = 1_500_000  # scheduling + output processing between steps
STREAMS = 32

FA_TRAITS = ("Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, "
             "Flash_kernel_traits<(int)128, (int)64, (int)128, (int)4, cutlass::bfloat16_t>>")
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize{t}_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
KERNELS = {  # key: (demangled name, short name)
    "rms_norm": ("void vllm::rms_norm_kernel<c10::BFloat16, (int)8, (int)2>(c10::BFloat16 *, const c10::BFloat16 *, const c10::BFloat16 *, float, int, int)", "rms_norm_kernel"),
    "gemm_big": (GEMM.format(t="128x128x64"), GEMM.format(t="128x128x64")),
    "gemm_small": (GEMM.format(t="64x64x64"), GEMM.format(t="64x64x64")),
    "rotary": ("void vllm::rotary_embedding_kernel<c10::BFloat16, (bool)1>(const long *, c10::BFloat16 *, c10::BFloat16 *, const c10::BFloat16 *, int, long, long, long, int, int, int)", "rotary_embedding_kernel"),
    "cache": ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, __nv_bfloat16 *, const long *, long, long, long, long, int, int, int, const float *, const float *)", "reshape_and_cache_flash_kernel"),
    "attn": (f"void flash_fwd_splitkv_kernel<{FA_TRAITS}, (bool)1, (bool)0, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>(Flash_fwd_params)", "flash_fwd_splitkv_kernel"),
    "combine": (f"void flash_fwd_splitkv_combine_kernel<{FA_TRAITS}, (int)4, (int)2, (bool)1>(Flash_fwd_params)", "flash_fwd_splitkv_combine_kernel"),
    "add_norm": ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, (int)8>(c10::BFloat16 *, c10::BFloat16 *, const c10::BFloat16 *, float, int, int)", "fused_add_rms_norm_kernel"),
    "act": ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, (bool)1>(c10::BFloat16 *, const c10::BFloat16 *, int)", "act_and_mul_kernel"),
    "argmax": ("triton_red_fused_argmax_0", "triton_red_fused_argmax_0"),
}
# one layer: (kernel, share of the step's time when decoding, share when prefilling)
LAYER = [("rms_norm", .01, .005), ("gemm", .16, .22), ("rotary", .01, .005), ("cache", .01, .005),
         ("attn", .12, .16), ("combine", .02, 0), ("gemm", .10, .08), ("add_norm", .01, .005),
         ("gemm", .30, .27), ("act", .02, .02), ("gemm", .24, .23)]
STRINGS = ["cudaLaunchKernel_v7000", "cudaGraphLaunch_v10000", "cudaMemcpyAsync_v3020"] + \
    [n for pair in KERNELS.values() for n in pair]


class Builder:
    """Accumulates rows; `kernel`/`graph` place GPU work back to back and record the launch call."""

    def __init__(self, rng: random.Random):
        self.rng, self.corr = rng, 0
        self.sid = {s: i + 1 for i, s in enumerate(dict.fromkeys(STRINGS))}
        self.kernels, self.runtime, self.memcpy, self.graphs, self.nvtx = [], [], [], [], []
        self.windows = []  # (gpu start, gpu end, prefill tokens) per step, for GPU metrics

    def _launch(self, cpu_ns: int, api: str) -> int:
        self.corr += 1
        self.runtime.append((cpu_ns, cpu_ns + 3_000, 0, GLOBAL_TID, self.corr, self.sid[api], 0, None))
        return self.corr

    def kernel(self, key, gpu_ns, cpu_ns, dur_ns, grid=(132, 1, 1), block=128):
        corr = self._launch(cpu_ns, "cudaLaunchKernel_v7000")
        name, short = KERNELS[key]
        self.kernels.append((gpu_ns, gpu_ns + dur_ns, 0, 1, None, 7, corr, GLOBAL_PID, self.sid[name],
                             self.sid[short], None, 1, 0, 128, *grid, block, 1, 1, 0, 49152, 0, 0, self.corr,
                             None, None, 0))
        return gpu_ns + dur_ns + 2_000

    def graph(self, gpu_ns, cpu_ns, dur_ns, graph_id):
        corr = self._launch(cpu_ns, "cudaGraphLaunch_v10000")
        self.graphs.append((gpu_ns, gpu_ns + dur_ns, 0, 1, None, 7, corr, GLOBAL_PID, graph_id, graph_id))
        return gpu_ns + dur_ns + 2_000


def run_step(b: Builder, t: int, *, layers: int, prefill: int, decode: int, graphs: bool, nvtx: bool) -> int:
    """One engine step starting at CPU time t; returns the start of the next step."""
    jitter = lambda: b.rng.uniform(0.97, 1.03)  # noqa: E731
    extra_ns = 0 if prefill == 0 else (1_868_000_000 if prefill > 4096 else int(prefill * 88_000))  # prefill cost
    step_ns = (DECODE_STEP_NS + extra_ns) * jitter()
    per_layer = step_ns * 0.97 / layers
    gpu, cpu = t + 30_000, t
    first_gpu = gpu
    b.memcpy.append((t + 10_000, t + 14_000, 0, 1, None, 7, 0, GLOBAL_PID, 4 * (prefill + decode), 1,
                     None, 0, 2, None, None, None, None, None, None, None))
    q_blocks = max(1, -(-prefill // 128)) if prefill else 1  # FlashAttention gridX = ceil(max_seqlen_q / kBlockM)
    if graphs and not prefill:  # decode-only batch: one full CUDA graph
        gpu = b.graph(gpu, cpu, int(step_ns * 0.97), graph_id=1)
    else:
        for _ in range(layers):
            for key, dshare, pshare in LAYER:
                share = pshare if prefill else dshare
                if share == 0:
                    continue
                dur = int(per_layer * share * jitter())
                if key == "gemm":
                    key = "gemm_big" if prefill else "gemm_small"
                if graphs and key != "attn":  # piecewise graphs: everything but attention is graphed
                    gpu = b.graph(gpu, cpu, dur, graph_id=2)
                elif key == "attn":
                    splits = 1 if prefill else 4
                    gpu = b.kernel("attn", gpu, cpu, dur, grid=(q_blocks, splits if splits > 1 else max(decode, 1), 32 * (prefill and 1 or decode or 1)))
                else:
                    gpu = b.kernel(key, gpu, cpu, dur)
                cpu += 4_000
    gpu = b.kernel("rms_norm", gpu, cpu, 40_000)
    gpu = b.kernel("gemm_small" if not prefill else "gemm_big", gpu, cpu + 4_000, int(step_ns * 0.02))
    gpu = b.kernel("argmax", gpu, cpu + 8_000, 30_000, grid=(max(decode, 1), 1, 1))
    end = gpu + 100_000
    b.windows.append((first_gpu, gpu, prefill))
    if nvtx:
        name = f"execute_context_{int(prefill > 0)}({prefill})_generation_{decode}({decode})"
        b.nvtx.append((t, end, 59, None, None, None, name, GLOBAL_TID, None, None, None))
    return end + CPU_GAP_NS


def plan(kind: str) -> list[int]:
    """Prefill tokens of each step for one sample kind (0 = decode-only step)."""
    if kind == "chunked":
        return [0] * 40 + [512] * 32 + [0] * 40
    return [0] * 40 + [16384] + [0] * 40


METRICS = [(0, "SMs Active [Throughput %]", 45, 92), (1, "Tensor Active [Throughput %]", 20, 80),
           (2, "DRAM Read Bandwidth [Throughput %]", 70, 35)]  # (metricId, name, % decoding, % prefilling)
METRICS_TYPE_ID = 0x100  # GPU id = typeId & 0xFF = 0
METRICS_PERIOD_NS = 10_000_000  # --gpu-metrics-frequency=100


def gpu_metrics(windows, t_end: int) -> list:
    """GPU_METRICS rows sampled every 10 ms: busy SMs follow the step kind, idle between steps."""
    rows, i = [], 0
    for ts in range(T0, t_end, METRICS_PERIOD_NS):
        while i < len(windows) and windows[i][1] < ts:
            i += 1
        busy = i < len(windows) and windows[i][0] <= ts
        for metric_id, _, decode, prefill in METRICS:
            rows.append((ts, METRICS_TYPE_ID, metric_id, (prefill if windows[i][2] else decode) if busy else 0))
    return rows


def _insert(conn, table: str, rows: list) -> None:
    if rows:
        conn.executemany(f"INSERT INTO {table} VALUES ({','.join('?' * len(rows[0]))})", rows)
        rows.clear()


def build_export(path: Path, prefills, *, layers: int = 4, graphs: bool = False, nvtx: bool = True,
                 metrics: bool = False, seed: int = 42, flush_rows: int = 200_000) -> Path:
    """Write one export: a step per entry of `prefills` (its prefill tokens), 32 decode streams each."""
    path = Path(path)
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(DDL)  # nsys creates tables lazily: the empty ones are dropped below
    b, t = Builder(random.Random(seed)), T0
    tables = (("CUPTI_ACTIVITY_KIND_KERNEL", b.kernels), ("CUPTI_ACTIVITY_KIND_RUNTIME", b.runtime),
              ("CUPTI_ACTIVITY_KIND_MEMCPY", b.memcpy), ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", b.graphs))
    for prefill in prefills:
        t = run_step(b, t, layers=layers, prefill=prefill, decode=STREAMS, graphs=graphs, nvtx=nvtx)
        if len(b.kernels) >= flush_rows:
            for table, rows in tables:
                _insert(conn, table, rows)
    for table, rows in tables:
        _insert(conn, table, rows)
    _insert(conn, "StringIds", [(i, s) for s, i in b.sid.items()])
    if metrics:  # as captured with --gpu-metrics-devices=all --gpu-metrics-frequency=100
        _insert(conn, "GPU_METRICS", gpu_metrics(b.windows, t))
        _insert(conn, "TARGET_INFO_GPU_METRICS", [(METRICS_TYPE_ID, 1, "GH100", m, name) for m, name, _, _ in METRICS])
    _insert(conn, "NVTX_EVENTS", [r + (None,) * 9 for r in b.nvtx])
    _insert(conn, "META_DATA_EXPORT", [("EXPORT_PRODUCT_VERSION", "2024.6.2.225"), ("EXPORT_SCHEMA_VERSION", "3.16.1"),
                                       ("EXPORT_PARAM_LAZY", "true"),
                                       ("SYNTHETIC", "generated by stallscope scripts/make_sample_traces.py; not a GPU capture")])
    _insert(conn, "META_DATA_CAPTURE", [("CUDA_GRAPH_TRACE_OPTIONS:MODE", "Graph" if graphs else "Node")])
    _insert(conn, "TARGET_INFO_GPU", [(1 << 48, 0, "NVIDIA H100 80GB HBM3", "0000:19:00.0", 1, 52428800, 85520809984,
                                       3352320000000, 1980000000, 132, 0, "GPU-00000000-0000-0000-0000-000000000000",
                                       None, "GH100", 0) + (None,) * 22 + (9, 0, 9, 0)])
    _insert(conn, "TARGET_INFO_SESSION_START_TIME", [(SESSION_START_UTC_NS, "2025-11-29T07:06:40", "2025-11-29T07:06:40")])
    _insert(conn, "PROCESSES", [(GLOBAL_PID, PID, "python3")])
    _insert(conn, "ANALYSIS_DETAILS", [(1 << 48, t, 0, t)])
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        if conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0:
            conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.execute("VACUUM")
    conn.close()
    return path


def main(out_dir: str = "sample_traces") -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, prefills, graphs, nvtx in (("starvation", plan("starvation"), False, True),
                                         ("chunked", plan("chunked"), False, True),
                                         ("cuda_graphs", plan("starvation"), True, False)):
        path = build_export(out / f"{name}.sqlite", prefills, graphs=graphs, nvtx=nvtx, metrics=name == "starvation")
        print(f"{path}  {path.stat().st_size} bytes")


if __name__ == "__main__":
    main(*sys.argv[1:2])
