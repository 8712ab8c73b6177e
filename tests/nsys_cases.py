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
