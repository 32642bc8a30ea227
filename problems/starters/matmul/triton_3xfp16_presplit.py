"""fp32 matmul C = A @ B, Triton: 3xFP16 with BOTH operands presplit, every wgmma operand read from shared memory.

Same arithmetic as triton_3xfp16_asplit.py (x = hi + lo in fp16 after a power-of-two scale, C = A_hi B_hi
+ A_hi B_lo + A_lo B_hi on fp16 tensor cores, each K step's partial sum promoted into an fp32 sum with the
scales undone); what differs is where A is split.  asplit streams A as fp32 and splits each tile in
registers (shared memory -> registers -> scale, cvt, subtract, cvt -> wgmma's register operand): that
work sits between the K step's barrier and its first MMA, and costs ~130 of its ~340 instructions per
warp per K step (sm_90 SASS, BLOCK_K 64).  Here one prep launch splits A once (A_hi, A_lo fp16 [M, K]:
as many bytes as fp32 A, so the GEMM streams the same 64 KiB per 128x128x64 step) and the GEMM's loop is
loads + three wgmmas + the promotion: ~210 instructions per K step instead of ~340.
The price: A is read and written once more (+64 MiB read, +64 MiB written, ~40 us at 3 TB/s).
Like asplit, this may legitimately run below kgen's TF32 / 3 floor for fp32 (0.989 ms), which kgen calls
`suspicious` until kgen/problems/roofline.py counts fp16 / 3 for fp32 at the default tolerance.

Scales, all local to one tile of the prep pass, so no extra pass for maxima: A per (row, K block of
BLOCK_K): the row's max over those BLOCK_K elements; B per [BLOCK_K, BLOCK_N] tile (the GEMM's tile):
one power of two from the tile's max.  The GEMM undoes them per K step, when it promotes: acc +=
part * (1/s_row,kb * 1/t_kb,nb), one fused multiply-add per accumulator element.  The largest scaled
value lands in [2^14, 2^15) (fp16 max 65504); hi + lo keeps 22+ bits down to ~2^-16 of its group's
max, below that an absolute error of 2^-25 of the scaled unit (2^-20 of the max: ~19 bits; see
triton_3xfp16_asplit.py).  inf/NaN inputs are not propagated like torch's.

Passes: (1) _prep_kernel: A tiles [64, BLOCK_K] -> A_hi, A_lo [M, K] fp16 + 1/s [K/BLOCK_K, M]; B tiles
[BLOCK_K, BLOCK_N] -> B_hi, B_lo transposed to [N, K] fp16 (K-major, which wgmma wants) + 1/t; 128 MiB
read, 128 MiB written (~85 us).  (2) _mm3h_kernel: grouped persistent tiles, cp.async (or TMA with
USE_TMA) pipelined loads of the four fp16 tiles, three chained m64n128k16 wgmmas into a fresh accumulator
per K step, promoted.

CPU (interpreter): normwise 1.4e-7 at 96^3 (x1, x100, x1e-6, x1e6, rows/columns scaled 1e-8..1e8).
sm_90 build (Triton 3.6, no GPU, 4096^3 shapes): BLOCK_K 64, 8 warps, 3 stages: 248 registers (USE_TMA:
190), no spills, 192 KiB shared memory, 12 m64n128k16 f16 wgmmas and ~210 SASS instructions per warp per
K step (USE_TMA: ~250, five CTA barriers); BLOCK_K 32: 230 (TMA 190).  4 warps, 64x128 tiles, BLOCK_K 32,
3 stages: 246 registers and 72 KiB (2 CTAs per SM: PERSISTENT 2 or 0), with TMA 168 registers (3 CTAs per
SM: PERSISTENT 3).  Not yet run on a GPU.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
PERSISTENT = 1    # p > 0: p programs per SM loop over the output tiles in grouped order; 0: a program per tile
USE_TMA = 0       # 1: TMA descriptors for the four operand tiles (needs K % 8 == 0)
PREP_ROWS = 64    # rows of A per prep program

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128],
    "BLOCK_K": [32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "PERSISTENT": [0, 1, 2],
    "USE_TMA": [0, 1],
}


@triton.jit
def _pow2_scale(amax):
    # s = 2^(14 - floor(log2 amax)) so that amax * s is in [2^14, 2^15); exponent clamped so that s and
    # 1/s are normal floats (amax 0, subnormal or tiny: s = 2^126)
    e = (amax.to(tl.uint32, bitcast=True) >> 23).to(tl.int32)
    es = tl.minimum(tl.maximum(268 - e, 1), 253)
    return (es << 23).to(tl.float32, bitcast=True), ((254 - es) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _split16(x):
    hi = x.to(tl.float16)
    return hi, (x - hi.to(tl.float32)).to(tl.float16)


@triton.jit
def _prep_kernel(a_ptr, b_ptr, ahi_ptr, alo_ptr, isa_ptr, bhi_ptr, blo_ptr, itb_ptr, M, N, K,
                 BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    # programs [0, cdiv(M, ROWS) * num_kb): A tiles [ROWS, BLOCK_K], a scale per row; the rest: B tiles
    # [BLOCK_K, BLOCK_N], one scale per tile, stored transposed
    pid = tl.program_id(0)
    num_kb = tl.cdiv(K, BLOCK_K)
    a_programs = tl.cdiv(M, ROWS) * num_kb
    if pid < a_programs:
        kb = pid % num_kb
        rows = (pid // num_kb) * ROWS + tl.arange(0, ROWS)
        ka = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        amask = (rows[:, None] < M) & (ka[None, :] < K)
        a_off = rows[:, None].to(tl.int64) * K + ka[None, :]
        y = tl.load(a_ptr + a_off, mask=amask, other=0.0)
        s, inv_s = _pow2_scale(tl.max(tl.abs(y), axis=1))
        a_hi, a_lo = _split16(y * s[:, None])
        tl.store(ahi_ptr + a_off, a_hi, mask=amask)
        tl.store(alo_ptr + a_off, a_lo, mask=amask)
        tl.store(isa_ptr + kb * M + rows, inv_s, mask=rows < M)
    else:
        num_nb = tl.cdiv(N, BLOCK_N)
        tile = pid - a_programs
        kb = tile // num_nb
        offs_k = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        offs_n = (tile % num_nb) * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (offs_k[:, None] < K) & (offs_n[None, :] < N)
        x = tl.load(b_ptr + offs_k[:, None].to(tl.int64) * N + offs_n[None, :], mask=mask, other=0.0)
        t, inv_t = _pow2_scale(tl.max(tl.max(tl.abs(x), axis=1), axis=0))
        b_hi, b_lo = _split16(x * t)
        out = offs_n[:, None].to(tl.int64) * K + offs_k[None, :]
        mask_t = (offs_n[:, None] < N) & (offs_k[None, :] < K)
        tl.store(bhi_ptr + out, tl.trans(b_hi), mask=mask_t)
        tl.store(blo_ptr + out, tl.trans(b_lo), mask=mask_t)
        tl.store(itb_ptr + tile, inv_t)


@triton.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    # grouped order: GROUP_M row tiles share their B column tiles in L2
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    return first_pid_m + ((tile % num_pid_in_group) % group_size_m), (tile % num_pid_in_group) // group_size_m


@triton.jit
def _mm3h_kernel(ahi_ptr, alo_ptr, isa_ptr, bhi_ptr, blo_ptr, itb_ptr, c_ptr, M, N, K, num_programs,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # A_hi/A_lo: [M, K] fp16; B_hi/B_lo: [N, K] fp16 (B^T); 1/scales: isa [num_kb, M], itb [num_kb, num_nb]
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_kb = tl.cdiv(K, BLOCK_K)
    offs_k = tl.arange(0, BLOCK_K)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, num_programs):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        # rows/columns past the edge are clamped for the loads (always in bounds) and masked at the store
        rows = tl.minimum(offs_m, M - 1)
        cols = tl.minimum(offs_n, N - 1)
        a_off = rows[:, None].to(tl.int64) * K + offs_k[None, :]
        bt_off = cols[:, None].to(tl.int64) * K + offs_k[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        f = tl.load(isa_ptr + rows) * tl.load(itb_ptr + pid_n)
        for k in range(0, num_kb):
            # the next K step's unscale factors, loaded a step ahead (their latency hides behind this step)
            kn = tl.minimum(k + 1, num_kb - 1)
            f_next = tl.load(isa_ptr + kn * M + rows) * tl.load(itb_ptr + kn * num_pid_n + pid_n)
            k0 = k * BLOCK_K
            k_ok = offs_k[None, :] < K - k0
            a_hi = tl.load(ahi_ptr + a_off + k0, mask=k_ok, other=0.0)
            a_lo = tl.load(alo_ptr + a_off + k0, mask=k_ok, other=0.0)
            b_hi = tl.trans(tl.load(bhi_ptr + bt_off + k0, mask=k_ok, other=0.0))
            b_lo = tl.trans(tl.load(blo_ptr + bt_off + k0, mask=k_ok, other=0.0))
            # a chain into a fresh accumulator (`acc += tl.dot(a, b)` would be folded into one long-lived
            # tensor-core accumulator), promoted with this K step's scales undone
            part = tl.dot(a_lo, b_hi)
            part = tl.dot(a_hi, b_lo, part)
            part = tl.dot(a_hi, b_hi, part)
            acc += part * f[:, None]
            f = f_next
        c_off = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
        tl.store(c_ptr + c_off, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _mm3h_tma_kernel(ahi_desc, alo_desc, isa_ptr, bhi_desc, blo_desc, itb_ptr, c_ptr, M, N, K, num_programs,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    # _mm3h_kernel with TMA loads (one thread issues each tile; out-of-bounds boxes are zero-filled)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_kb = tl.cdiv(K, BLOCK_K)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, num_programs):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rows = tl.minimum(offs_m, M - 1)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        f = tl.load(isa_ptr + rows) * tl.load(itb_ptr + pid_n)
        for k in range(0, num_kb):
            kn = tl.minimum(k + 1, num_kb - 1)
            f_next = tl.load(isa_ptr + kn * M + rows) * tl.load(itb_ptr + kn * num_pid_n + pid_n)
            k0 = k * BLOCK_K
            a_hi = ahi_desc.load([pid_m * BLOCK_M, k0])
            a_lo = alo_desc.load([pid_m * BLOCK_M, k0])
            b_hi = tl.trans(bhi_desc.load([pid_n * BLOCK_N, k0]))
            b_lo = tl.trans(blo_desc.load([pid_n * BLOCK_N, k0]))
            part = tl.dot(a_lo, b_hi)
            part = tl.dot(a_hi, b_lo, part)
            part = tl.dot(a_hi, b_hi, part)
            acc += part * f[:, None]
            f = f_next
        c_off = offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
        tl.store(c_ptr + c_off, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _programs(device, tiles):
    if PERSISTENT and device.type == "cuda":
        return min(tiles, PERSISTENT * torch.cuda.get_device_properties(device).multi_processor_count)
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
        num_kb = triton.cdiv(K, BLOCK_K)
        num_nb = triton.cdiv(N, BLOCK_N)
        scales = torch.empty(num_kb * (M + num_nb), device=A.device, dtype=torch.float32)
        isa, itb = scales.split([num_kb * M, num_kb * num_nb])
        a_hi = torch.empty((M, K), device=A.device, dtype=torch.float16)
        a_lo = torch.empty_like(a_hi)
        b_hi = torch.empty((N, K), device=A.device, dtype=torch.float16)
        b_lo = torch.empty_like(b_hi)
        _prep_kernel[(triton.cdiv(M, PREP_ROWS) * num_kb + num_kb * num_nb,)](
            A, B, a_hi, a_lo, isa, b_hi, b_lo, itb, M, N, K, BLOCK_K=BLOCK_K, BLOCK_N=BLOCK_N, ROWS=PREP_ROWS,
            num_warps=8)
        tiles = triton.cdiv(M, BLOCK_M) * num_nb
        programs = _programs(A.device, tiles)
        meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, num_warps=NUM_WARPS,
                    num_stages=NUM_STAGES)
        if USE_TMA and K % 8 == 0:  # TMA: 16-byte aligned row strides (fp16: K % 8)
            from triton.tools.tensor_descriptor import TensorDescriptor
            descs = [TensorDescriptor.from_tensor(x, [BLOCK_M, BLOCK_K]) for x in (a_hi, a_lo)]
            descs += [TensorDescriptor.from_tensor(x, [BLOCK_N, BLOCK_K]) for x in (b_hi, b_lo)]
            _mm3h_tma_kernel[(programs,)](descs[0], descs[1], isa, descs[2], descs[3], itb, C, M, N, K, programs,
                                          **meta)
        else:
            _mm3h_kernel[(programs,)](a_hi, a_lo, isa, b_hi, b_lo, itb, C, M, N, K, programs, **meta)
        return C
