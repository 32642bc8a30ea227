"""fp32 matmul C = A @ B, Triton: 3xTF32 on tensor cores; B split once (K-major), A split in registers.

x = hi + lo, hi = x rounded to TF32 (integer add-and-mask), lo = x - hi (exact in fp32);
C = A_hi B_hi + A_hi B_lo + A_lo B_hi (the dropped A_lo B_lo and TF32's truncation of lo are ~2^-21
relative per product, far inside the 1e-5 fp32 tolerance).

Why this layout (triton_3xtf32_presplit.py is the starting point, 1.46-1.49 ms at 4096^3 on the H100):
  * the presplit kernel streams FOUR operand tiles (A_hi, A_lo, B_hi, B_lo) per K step for three MMAs.
    At 128x128 tiles that is 48 FLOP per byte moved from L2 to the SM: the TF32 rate (417 TFLOP/s
    measured) would need ~8.7 TB/s of L2 bandwidth, more than the H100's L2 delivers, so the GEMM is
    bound by operand traffic, not by the tensor cores.
  * Here A is streamed once, as fp32, and split in registers: Hopper's wgmma takes its A operand from
    registers (only B must come from shared memory, K-major), so A_hi and A_lo never exist in memory.
    Three tiles per K step instead of four (-25% operand traffic) and no A split pass (-64 MiB read,
    -128 MiB written: ~0.06 ms at 4096^2).
  * B is split once into transposed [N, K] copies (wgmma reads TF32 B only K-major).
  * PERSISTENT = 1 runs one program per SM over the tiles in grouped order (GROUP_M row tiles share
    their B column tiles in L2), so the next tile's loads overlap the last tile's epilogue.
Accuracy on Hopper: the tensor core's own fp32 accumulation drops low bits over long K (all three
products in one accumulator over K = 4096 measured 2.9e-5 normwise), so each PROMOTE*BLOCK_K chunk is
accumulated in a fresh tensor-core accumulator and promoted into an ordinary fp32 sum.

Measured on the H100 (benchmarks/mm_gpu.sh, sweep.py medians, 2026-11-25): 1.406 ms persistent, 1.418 ms
not, against 1.461 ms for triton_3xtf32_presplit.py in the same call; error 2.4e-7.  What did not help:
BLOCK_N 256 at 8 warps (2.67 ms: the two 128x256 accumulators need 256 registers per thread and spill),
16 warps (5.1 ms), BLOCK_K 16 (1.54-1.72 ms).  The two accumulators (the promotion) cap the tile at
128x128, and at that tile the three operand tiles per K step keep the GEMM bound by L2-to-SM traffic.
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
PERSISTENT = 1    # 1: one program per SM loops over the output tiles
SPLIT_BLOCK = 64

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [16, 32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8, 16],
    "NUM_STAGES": [2, 3, 4, 5],
    "PROMOTE": [1, 2, 4],
    "PERSISTENT": [0, 1],
}


@triton.jit
def _tf32_split(x):
    bits = x.to(tl.uint32, bitcast=True)
    hi = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)  # round to nearest TF32
    return hi, x - hi


@triton.jit
def _split_t_kernel(x_ptr, hi_ptr, lo_ptr, R, C, BLOCK: tl.constexpr):
    # x: contiguous [R, C]; hi, lo: contiguous [C, R] (the transpose)
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    x = tl.load(x_ptr + offs_r[:, None].to(tl.int64) * C + offs_c[None, :], mask=mask, other=0.0)
    hi, lo = _tf32_split(x)
    out = offs_c[:, None].to(tl.int64) * R + offs_r[None, :]
    mask_t = (offs_c[:, None] < C) & (offs_r[None, :] < R)
    tl.store(hi_ptr + out, tl.trans(hi), mask=mask_t)
    tl.store(lo_ptr + out, tl.trans(lo), mask=mask_t)


@triton.jit
def _mm3_asplit_kernel(a_ptr, bhi_ptr, blo_ptr, c_ptr, M, N, K, num_programs,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, PROMOTE: tl.constexpr):
    # A: contiguous [M, K] fp32; B_hi/B_lo: contiguous [N, K] (B transposed, split); C: contiguous [M, N]
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    num_pid_in_group = GROUP_M * num_pid_n
    offs_k = tl.arange(0, BLOCK_K)
    for tile in range(tl.program_id(0), num_tiles, num_programs):
        group_id = tile // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((tile % num_pid_in_group) % group_size_m)
        pid_n = (tile % num_pid_in_group) // group_size_m
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        # rows/columns past the edge are clamped for the loads (always in bounds) and masked at the store
        rows = tl.minimum(offs_m, M - 1)
        cols = tl.minimum(offs_n, N - 1)
        a_off = rows[:, None].to(tl.int64) * K + offs_k[None, :]
        bt_off = cols[:, None].to(tl.int64) * K + offs_k[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K * PROMOTE)):
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for j in tl.static_range(PROMOTE):
                k0 = (k * PROMOTE + j) * BLOCK_K
                k_ok = offs_k[None, :] < K - k0
                a = tl.load(a_ptr + a_off + k0, mask=k_ok, other=0.0)
                b_hi = tl.trans(tl.load(bhi_ptr + bt_off + k0, mask=k_ok, other=0.0))
                b_lo = tl.trans(tl.load(blo_ptr + bt_off + k0, mask=k_ok, other=0.0))
                a_hi, a_lo = _tf32_split(a)
                part = tl.dot(a_lo, b_hi, part, input_precision="tf32")
                part = tl.dot(a_hi, b_lo, part, input_precision="tf32")
                part = tl.dot(a_hi, b_hi, part, input_precision="tf32")
            acc += part
        c_off = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
        tl.store(c_ptr + c_off, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _split_t(x):
    R, C = x.shape
    hi = torch.empty((C, R), device=x.device, dtype=x.dtype)
    lo = torch.empty_like(hi)
    grid = (triton.cdiv(R, SPLIT_BLOCK), triton.cdiv(C, SPLIT_BLOCK))
    _split_t_kernel[grid](x, hi, lo, R, C, BLOCK=SPLIT_BLOCK, num_warps=8)
    return hi, lo


def _programs(device, tiles):
    if PERSISTENT and device.type == "cuda":
        return min(tiles, torch.cuda.get_device_properties(device).multi_processor_count)
    return tiles


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
        b_hi, b_lo = _split_t(B)
        tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
        programs = _programs(A.device, tiles)
        _mm3_asplit_kernel[(programs,)](A, b_hi, b_lo, C, M, N, K, programs,
                                        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                                        PROMOTE=PROMOTE, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return C
