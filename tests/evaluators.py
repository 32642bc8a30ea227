"""Evaluating machines other than this one, as kgen.judge.evaluator_facts records them: the H100 of the
real-model measurement (issue 32; its figures as its round-1 prompts and ceilings cache state them) and a
CPU evaluator with another torch and Triton than this machine's. Tests use them where the process rendering
a prompt is not the machine that evaluates."""

from kgen.judge.evaluator_facts import EvaluatorFacts
from kgen.problems.roofline import Ceilings

H100 = EvaluatorFacts(
    device="NVIDIA H100 80GB HBM3",
    versions={"torch_version": "2.11.0+cu130", "triton_version": "3.6.0", "cuda_version": "13.0"},
    device_properties={"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132,
                       "shared_memory_per_block_kib": 227, "shared_memory_per_sm_kib": 228,
                       "registers_per_sm": 65536, "l2_cache_mib": 50.0, "memory_gib": 79},
    ceilings=Ceilings(device="NVIDIA H100 80GB HBM3", bandwidth_bytes_per_s=3004112345960.2236,
                      fp32_flops_per_s=52036949950805.125, torch_version="2.11.0+cu130", measured_at=1795677864.25,
                      tf32_flops_per_s=411168864376041.1, half_flops_per_s=791206784601571.5))

# what the H100's system prompt says about it (round 1 of benchmarks/real_model/work-h100, rendered there)
H100_LINES = (
    "- Versions: torch 2.11.0+cu130, Triton 3.6.0, CUDA 13.0.",
    "- The GPU: NVIDIA H100 80GB HBM3, compute capability 9.0, 132 SMs, 227 KiB shared memory per block (opt-in "
    "maximum), 228 KiB per SM, 65536 registers per SM, 50.0 MiB L2, 79 GiB memory; measured 3004 GB/s memory "
    "bandwidth, 52.0 fp32 TFLOP/s (no tensor cores), 411 TF32 TFLOP/s, 791 fp16/bf16 TFLOP/s.",
)

OTHER_CPU = EvaluatorFacts(device="cpu", versions={"torch_version": "2.11.0+cpu", "triton_version": "3.6.0",
                                                   "cuda_version": None})
