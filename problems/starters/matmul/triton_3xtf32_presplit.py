"""fp32 matmul C = A @ B, Triton: 3xTF32 on tensor cores with the operands split ONCE, before the GEMM.

x = hi + lo, hi = x rounded to TF32 (10 mantissa bits, integer add-and-mask), lo = x - hi (exact in
fp32).  C = A_hi B_hi + (A_lo B_hi + A_hi B_lo); the dropped A_lo B_lo term and TF32's truncation of
lo are ~2^-21 relative per product, far inside the 1e-5 fp32 tolerance.

Why split first: triton_3xtf32.py splits each tile inside the K loop, so every tile goes shared memory
-> registers (split) -> shared memory again before the tensor cores can read it; that round trip, not
the three MMAs, is what made it slower than cuBLAS.  Here a memory-bound elementwise kernel writes
A_hi, A_lo, B_hi, B_lo (4 x 64 MiB at 4096^2: ~0.13 ms at 3 TB/s), and the GEMM streams the four
operands straight from global memory into the tensor cores (cp.async or TMA pipeline, no register pass).

Accuracy on Hopper: the tensor core's own fp32 accumulation drops low bits (measured: all three products
in one accumulator over K = 4096 give 2.9e-5 normwise, outside 1e-5).  So the dominant hi*hi product
and the two cross products are accumulated per PROMOTE*BLOCK_K chunk in a fresh tensor-core
accumulator and promoted into an ordinary fp32 sum.  (Keeping the cross products in their own
long-lived accumulator measured 9.6e-6 on the H100: too close to the tolerance, so not offered.)

Operand layout: Hopper's wgmma reads TF32 operands from shared memory only K-major (the transposed
layouts exist for 16-bit types), and B [K, N] row-major is N-major.  B_KMAJOR = 1 has the split kernel
write B_hi, B_lo transposed ([N, K]), so the GEMM loads [BLOCK_N, BLOCK_K] tiles and multiplies by
their transpose.  Measured on the H100 at 4096^3 (benchmarks/RESULTS.md): B_KMAJOR = 0 3.69 ms (~110
TFLOP/s of TF32 work), B_KMAJOR = 1 1.46-1.49 ms (1.8x cuBLAS fp32), normwise error 2.4e-7; TMA
descriptors (USE_TMA = 1) 1.52 ms.
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
PROMOTE = 1       # K chunks (of BLOCK_K) summed in the tensor core before promotion to the fp32 sum
B_KMAJOR = 1      # 1: B is split into transposed [N, K] copies, so both MMA operands are K-major
USE_TMA = 0       # 1: tensor-memory-accelerator descriptors for the four operands (Hopper)
SPLIT_BLOCK = 4096

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [16, 32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8, 16],
    "NUM_STAGES": [2, 3, 4],
    "PROMOTE": [1, 2, 4],
    "B_KMAJOR": [0, 1],
    "USE_TMA": [0, 1],
}


@triton.jit
def _split_kernel(x_ptr, hi_ptr, lo_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    bits = x.to(tl.uint32, bitcast=True)
    hi = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)  # round to nearest TF32
    tl.store(hi_ptr + offs, hi, mask=mask)
    tl.store(lo_ptr + offs, x - hi, mask=mask)


@triton.jit
def _split_t_kernel(x_ptr, hi_ptr, lo_ptr, R, C, BLOCK: tl.constexpr):
    # x: contiguous [R, C]; hi, lo: contiguous [C, R] (the transpose), split as in _split_kernel
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    x = tl.load(x_ptr + offs_r[:, None].to(tl.int64) * C + offs_c[None, :], mask=mask, other=0.0)
    bits = x.to(tl.uint32, bitcast=True)
    hi = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    lo = x - hi
    out = offs_c[:, None].to(tl.int64) * R + offs_r[None, :]
    mask_t = (offs_c[:, None] < C) & (offs_r[None, :] < R)
    tl.store(hi_ptr + out, tl.trans(hi), mask=mask_t)
    tl.store(lo_ptr + out, tl.trans(lo), mask=mask_t)


@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # grouped order: GROUP_M row-tiles share their B column-tiles in L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _mm3_kernel(ahi_ptr, alo_ptr, bhi_ptr, blo_ptr, c_ptr, M, N, K,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                PROMOTE: tl.constexpr, B_KMAJOR: tl.constexpr):
    # A_hi/A_lo: contiguous [M, K]; B_hi/B_lo: contiguous [K, N], or [N, K] when B_KMAJOR; C: contiguous [M, N]
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m[:, None] < M
    mask_n = offs_n[None, :] < N
    a_off = offs_m[:, None].to(tl.int64) * K + offs_k[None, :]
    if B_KMAJOR:
        bt_off = offs_n[:, None].to(tl.int64) * K + offs_k[None, :]        # [BLOCK_N, BLOCK_K] tiles of B^T
    else:
        b_off = offs_k[:, None].to(tl.int64) * N + offs_n[None, :]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K * PROMOTE)):
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for j in tl.static_range(PROMOTE):
            k0 = (k * PROMOTE + j) * BLOCK_K
            a_mask = mask_m & (offs_k[None, :] < K - k0)
            a_hi = tl.load(ahi_ptr + a_off + k0, mask=a_mask, other=0.0)
            a_lo = tl.load(alo_ptr + a_off + k0, mask=a_mask, other=0.0)
            if B_KMAJOR:
                bt_mask = (offs_n[:, None] < N) & (offs_k[None, :] < K - k0)
                b_hi = tl.trans(tl.load(bhi_ptr + bt_off + k0, mask=bt_mask, other=0.0))
                b_lo = tl.trans(tl.load(blo_ptr + bt_off + k0, mask=bt_mask, other=0.0))
            else:
                b_mask = (offs_k[:, None] < K - k0) & mask_n
                b_hi = tl.load(bhi_ptr + b_off + k0.to(tl.int64) * N, mask=b_mask, other=0.0)
                b_lo = tl.load(blo_ptr + b_off + k0.to(tl.int64) * N, mask=b_mask, other=0.0)
            part = tl.dot(a_lo, b_hi, part, input_precision="tf32")
            part = tl.dot(a_hi, b_lo, part, input_precision="tf32")
            part = tl.dot(a_hi, b_hi, part, input_precision="tf32")
        acc += part
    c_off = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    tl.store(c_ptr + c_off, acc, mask=mask_m & mask_n)


@triton.jit
def _mm3_tma_kernel(ahi_desc, alo_desc, bhi_desc, blo_desc, c_ptr, M, N, K,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                    PROMOTE: tl.constexpr, B_KMAJOR: tl.constexpr):
    # same schedule as _mm3_kernel; the descriptors zero-fill out-of-bounds boxes, so no masks
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K * PROMOTE)):
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for j in tl.static_range(PROMOTE):
            k0 = (k * PROMOTE + j) * BLOCK_K
            a_hi = ahi_desc.load([off_m, k0])
            a_lo = alo_desc.load([off_m, k0])
            if B_KMAJOR:
                b_hi = tl.trans(bhi_desc.load([off_n, k0]))
                b_lo = tl.trans(blo_desc.load([off_n, k0]))
            else:
                b_hi = bhi_desc.load([k0, off_n])
                b_lo = blo_desc.load([k0, off_n])
            part = tl.dot(a_lo, b_hi, part, input_precision="tf32")
            part = tl.dot(a_hi, b_lo, part, input_precision="tf32")
            part = tl.dot(a_hi, b_hi, part, input_precision="tf32")
        acc += part
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    c_off = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    tl.store(c_ptr + c_off, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _split(x):
    hi = torch.empty_like(x)
    lo = torch.empty_like(x)
    n = x.numel()
    _split_kernel[(triton.cdiv(n, SPLIT_BLOCK),)](x, hi, lo, n, BLOCK=SPLIT_BLOCK, num_warps=4)
    return hi, lo


def _split_t(x):
    R, C = x.shape
    hi = torch.empty((C, R), device=x.device, dtype=x.dtype)
    lo = torch.empty_like(hi)
    _split_t_kernel[(triton.cdiv(R, 64), triton.cdiv(C, 64))](x, hi, lo, R, C, BLOCK=64, num_warps=8)
    return hi, lo


def _tma_ok(M, N, K):
    # TMA needs 16-byte aligned row strides (fp32: multiples of 4) and a Hopper-class GPU
    return (USE_TMA and K % 4 == 0 and N % 4 == 0 and torch.cuda.is_available()
            and torch.cuda.get_device_capability()[0] >= 9)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        assert A.dim() == 2 and B.dim() == 2 and A.shape[1] == B.shape[0]
        A = A.contiguous().float()
        B = B.contiguous().float()
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=torch.float32)
        if M == 0 or N == 0:
            return C
        if K == 0:
            return C.zero_()
        a_hi, a_lo = _split(A)
        b_hi, b_lo = _split_t(B) if B_KMAJOR else _split(B)
        grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
        meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, PROMOTE=PROMOTE,
                    B_KMAJOR=B_KMAJOR, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        if _tma_ok(M, N, K):
            from triton.tools.tensor_descriptor import TensorDescriptor
            descs = [TensorDescriptor.from_tensor(a_hi, [BLOCK_M, BLOCK_K]),
                     TensorDescriptor.from_tensor(a_lo, [BLOCK_M, BLOCK_K]),
                     TensorDescriptor.from_tensor(b_hi, [BLOCK_N, BLOCK_K] if B_KMAJOR else [BLOCK_K, BLOCK_N]),
                     TensorDescriptor.from_tensor(b_lo, [BLOCK_N, BLOCK_K] if B_KMAJOR else [BLOCK_K, BLOCK_N])]
            _mm3_tma_kernel[grid](*descs, C, M, N, K, **meta)
        else:
            _mm3_kernel[grid](a_hi, a_lo, b_hi, b_lo, C, M, N, K, **meta)
        return C
