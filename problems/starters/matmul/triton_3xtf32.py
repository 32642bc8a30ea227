"""fp32 matmul C = A @ B, Triton: 3xTF32 error-compensated tensor-core matmul (no plain TF32).

Each fp32 operand tile is split in registers into x = hi + lo with hi = x rounded to TF32 (10
mantissa bits, via integer add-and-mask) and lo = x - hi (exact in fp32).  The product is
a_lo*b_hi + a_hi*b_lo + a_hi*b_hi on TF32 tensor cores; the dropped a_lo*b_lo term and the TF32
truncation of lo are ~2^-21 relative per product.
Measured on the H100 (benchmarks/RESULTS.md, 2026-11-23): accumulating all three products in the
tensor core's accumulator over the whole K loop (SPLIT_MODE 0) lands at 2.9e-5 normwise, outside
the 1e-5 fp32 tolerance: the tensor core's own fp32 accumulation loses the low bits.  Promoting
each BLOCK_K chunk's partial sum into an ordinary fp32 accumulator (SPLIT_MODE 1, the default)
gives 2.4e-7.  It is correct but slower than cuBLAS's fp32 SGEMM (3.7 vs 2.7 ms at 4096^3): B [K, N]
is N-major, and Hopper's wgmma reads TF32 operands only K-major, so the MMAs do not run at the
tensor cores' rate.  triton_3xtf32_presplit.py splits once, B transposed, and runs at 1.46 ms.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 32
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
# How the three TF32 products are accumulated:
#   0: all into one tensor-core accumulator over the whole K loop;
#   1: each BLOCK_K chunk into a fresh tensor-core accumulator, then added to the running sum with
#      ordinary fp32 adds ("promotion": the tensor core's own accumulation only spans one chunk);
#   2: Triton's built-in input_precision="tf32x3" (the compiler splits and sums), one accumulator;
#   3: built-in tf32x3 per chunk, promoted as in 1.
SPLIT_MODE = 1

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128],
    "BLOCK_K": [16, 32],
    "GROUP_M": [1, 4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
}


@triton.jit
def _split_tf32(x):
    bits = x.to(tl.uint32, bitcast=True)
    hi = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)  # round to nearest TF32
    return hi, x - hi


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   SPLIT_MODE: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None].to(tl.int64) * stride_bk + offs_n[None, :] * stride_bn
    mask_m = offs_m[:, None] < M
    mask_n = offs_n[None, :] < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_m & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n, other=0.0)
        if SPLIT_MODE == 0:
            a_hi, a_lo = _split_tf32(a)
            b_hi, b_lo = _split_tf32(b)
            acc = tl.dot(a_lo, b_hi, acc, input_precision="tf32")
            acc = tl.dot(a_hi, b_lo, acc, input_precision="tf32")
            acc = tl.dot(a_hi, b_hi, acc, input_precision="tf32")
        elif SPLIT_MODE == 1:
            a_hi, a_lo = _split_tf32(a)
            b_hi, b_lo = _split_tf32(b)
            part = tl.dot(a_lo, b_hi, input_precision="tf32")
            part = tl.dot(a_hi, b_lo, part, input_precision="tf32")
            part = tl.dot(a_hi, b_hi, part, input_precision="tf32")
            acc += part
        elif SPLIT_MODE == 2:
            acc = tl.dot(a, b, acc, input_precision="tf32x3")
        else:
            part = tl.dot(a, b, input_precision="tf32x3")
            acc += part
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=mask_m & mask_n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        assert A.dim() == 2 and B.dim() == 2 and A.shape[1] == B.shape[0]
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=torch.float32)
        if M == 0 or N == 0:
            return C
        if K == 0:
            return C.zero_()
        grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
        _matmul_kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                             C.stride(0), C.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                             GROUP_M=GROUP_M, SPLIT_MODE=SPLIT_MODE, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return C
