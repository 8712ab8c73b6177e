"""Paths for the Nsight Systems tests: the real exports in tests/fixtures/nsys_samples (provenance in its SOURCE)
and our synthetic traces in sample_traces/."""

from conftest import FIXTURES, ROOT

SAMPLES = FIXTURES / "nsys_samples"
SAMPLE_TRACES = ROOT / "sample_traces"
CNN = "dlprof_pytorch_cnn_rtx2070s_nsys2022.1.3.sqlite"
TRT = "memfusion_trt_rtx3090_nsys2023.1.2.sqlite"
LLMC = "llmc_gpt2_train_T4_NO_KERNEL_TABLE_nsys2024.2.3export.sqlite"
LLAMA_SIM = "llama3_layer_sim_rtx4060ti_nsys2024.6.2.sqlite"
TINY = "torch_tiny_rtx3080_nsys2026.1.1.sqlite"
VIDEO = "fastvideo_wan_t2v_2xH100_nsys2026.2.1_window1s.sqlite"
TRAIN = "fastvideo_train_fa2_nccl_2xH100_nsys2026.2.1_window0.3s.sqlite"
WITH_KERNELS = [CNN, TRT, LLAMA_SIM, TINY, VIDEO, TRAIN]
ALL = WITH_KERNELS + [LLMC]


def nsys_sample(name: str):
    """A real export carried in the repo; a missing one is a broken checkout, so it fails loudly."""
    path = SAMPLES / name
    assert path.is_file(), f"{path} missing from the checkout"
    return path


def kernel_export(path, kernels, strings):
    """A minimal nsys-format export: META_DATA_EXPORT, StringIds and CUPTI_ACTIVITY_KIND_KERNEL with no
    NOT NULL constraints, so a test can put any value in any column. `kernels`: (start, end, deviceId,
    contextId, streamId, demangledName, shortName, gridX, globalPid) rows; `strings`: {id: value}."""
    import sqlite3

    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, demangledName,
            shortName, gridX, globalPid, graphNodeId, correlationId);""")
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2024.6.2')")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(strings.items()))
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)", kernels)
    con.commit()
    con.close()
    return path
