"""Conv2d -> ReLU -> MaxPool2d in one persistent Triton kernel: the space-to-depth 3xTF32 implicit GEMM
of conv2d/triton_3xtf32_s2d.py with the ReLU and the max pool in its epilogue, so the conv output
(116 MB at AlexNet's size: ~0.08 ms of HBM time written and read back) never goes to HBM.

Triton cannot shift values across rows of an MMA accumulator, so the pool reads the conv tile back
from a scratch buffer private to each program, written and read between two barriers; the scratch is
reused band after band (grid = PROGS_PER_SM x SMs programs, ~200 KB each), so its lines can stay in
L2 and be overwritten there rather than streamed to HBM: 26 MB in all at one program per SM, 52 MB
(more than L2) at two, which in exchange overlap one program's pool phase with the other's MMAs.
  * a program owns bands of POOL_ROWS pooled rows of one image, i.e. (POOL_ROWS-1)*PS + PK full-width
    conv rows (AlexNet, POOL_ROWS = 4: 9 conv rows x 55 = 495 pixels in 512 slots, 97% used); the
    conv row shared with the next band is computed twice (9/8 of the conv's MMAs);
  * per band: the conv in BLOCK_M-pixel chunks (x_s2d rows of BLOCK_K contiguous floats, one scalar
    offset per K step, x split into TF32 hi/lo in registers, weight pre-split and K-major, NSUB channel
    tiles sharing each A tile), bias + ReLU, into scratch [channel, pixel]; barrier; the PK x PK / PS
    max over scratch (L2-cached loads) into the NCHW output; barrier (the next band overwrites it);
  * OC beyond NSUB*BLOCK_N: a second grid axis over channel tiles, each with its own scratch.
Registers (ptxas for sm_90 through Triton 3.9, no GPU): 64 x (3 x 32) with 8 warps takes 192, no spills;
with 4 warps, or BLOCK_M = 128, it spills (255 + stack) -- the nested band/chunk/K loops cost more
than conv2d/triton_3xtf32_s2d.py's single K loop, whose 64 x (3 x 32) takes 128 with 4 warps.
Traffic: x read, x_s2d written and read (60 MB each), pooled output written (28 MB).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 64
BLOCK_N = 32
NSUB = 3          # channel tiles of BLOCK_N per program (1-4), all multiplying the same gathered A tile
BLOCK_K = 16      # also the channel padding unit: 48 channels at AlexNet's size; 32 would pad to 64
PROMOTE = 0
NUM_WARPS = 8
NUM_STAGES = 3
POOL_ROWS = 4     # pooled rows per band: 9 conv rows at AlexNet's size (recompute 1 in 8)
PROGS_PER_SM = 1  # 192 registers x 256 threads: one program fits an SM
POOL_BLOCK = 512  # pooled outputs per step of the epilogue's pool loop
S2D_BLOCK_J = 32  # s2d pixels per prologue program

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [16, 32, 64],
    "NSUB": [1, 2, 3, 4],
    "BLOCK_K": [16, 32],
    "PROMOTE": [0, 1],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4, 5],
    "POOL_ROWS": [2, 3, 4, 6, 8],
    "PROGS_PER_SM": [1, 2, 3],
    "POOL_BLOCK": [256, 512, 1024],
    "S2D_BLOCK_J": [16, 32, 64],
}


@triton.jit
def _split_tf32(x):
    bits = x.to(tl.uint32, bitcast=True)
    hi = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)  # round to nearest TF32
    return hi, x - hi


@triton.jit
def _s2d_kernel(x_ptr, xs_ptr, C, H, W, Hs, Ws, pad,
                S: tl.constexpr, CS: tl.constexpr, CS_PAD: tl.constexpr, CS_P2: tl.constexpr,
                BLOCK_J: tl.constexpr):
    # one program per (image row i of x_s2d, BLOCK_J pixels j): reads 4 contiguous floats per (c, dy),
    # writes BLOCK_J * CS_PAD contiguous floats; zeros for padding and for channels past CS
    row = tl.program_id(0)                        # n * Hs + i
    n = row // Hs
    i = row % Hs
    j = tl.program_id(1) * BLOCK_J + tl.arange(0, BLOCK_J)
    cs = tl.arange(0, CS_P2)
    c = cs // (S * S)
    dy = (cs // S) % S
    dx = cs % S
    ih = i * S + dy - pad                         # [CS_P2]
    iw = j[:, None] * S + dx[None, :] - pad       # [BLOCK_J, CS_P2]
    inside = (cs < CS)[None, :] & (ih >= 0)[None, :] & (ih < H)[None, :] & (iw >= 0) & (iw < W)
    src = (n.to(tl.int64) * C + c[None, :]) * H * W + ih[None, :] * W + iw
    v = tl.load(x_ptr + src, mask=inside, other=0.0)
    dst = (row.to(tl.int64) * Ws + j[:, None]) * CS_PAD + cs[None, :]
    tl.store(xs_ptr + dst, v, mask=(j < Ws)[:, None] & (cs < CS_PAD)[None, :])


@triton.jit
def _weight_s2d_kernel(w_ptr, hi_ptr, lo_ptr, OC, C, KH, KW, KWs, K,
                       S: tl.constexpr, CS_PAD: tl.constexpr, BLOCK: tl.constexpr):
    # w [OC, C, KH, KW] -> hi, lo [OC_pad, K] with k = (a*KWs + b)*CS_PAD + (c*S + dy)*S + dx,
    # tap (kh, kw) = (a*S + dy, b*S + dx); zeros past OC, C, KH, KW (one program per output row)
    oc = tl.program_id(0)
    k_limit = tl.where(oc < OC, K, 0)             # padding rows past OC are all zeros
    for k0 in range(0, K, BLOCK):
        kk = k0 + tl.arange(0, BLOCK)
        tap = kk // CS_PAD
        cs = kk % CS_PAD
        c = cs // (S * S)
        kh = (tap // KWs) * S + (cs // S) % S
        kw = (tap % KWs) * S + cs % S
        ok = (kk < k_limit) & (c < C) & (kh < KH) & (kw < KW)
        w = tl.load(w_ptr + ((oc * C + c) * KH + kh) * KW + kw, mask=ok, other=0.0)
        hi, lo = _split_tf32(w)
        tl.store(hi_ptr + oc * K + kk, hi, mask=kk < K)
        tl.store(lo_ptr + oc * K + kk, lo, mask=kk < K)


@triton.jit
def _mma3(a_hi, a_lo, whi_ptr, wlo_ptr, w_off, acc, PROMOTE: tl.constexpr):
    # acc += A (hi+lo) @ W-tile (hi+lo) without the lo*lo term; the W tiles are K-major [BLOCK_N, BLOCK_K]
    b_hi = tl.trans(tl.load(whi_ptr + w_off))
    b_lo = tl.trans(tl.load(wlo_ptr + w_off))
    if PROMOTE:
        part = tl.dot(a_lo, b_hi, input_precision="tf32")
        part = tl.dot(a_hi, b_lo, part, input_precision="tf32")
        part = tl.dot(a_hi, b_hi, part, input_precision="tf32")
        acc += part
    else:
        acc = tl.dot(a_lo, b_hi, acc, input_precision="tf32")
        acc = tl.dot(a_hi, b_lo, acc, input_precision="tf32")
        acc = tl.dot(a_hi, b_hi, acc, input_precision="tf32")
    return acc


@triton.jit
def _store_scratch(scr_ptr, bias_ptr, acc, slot, slot_ok, offs_n, ch0, OC, BAND_SLOTS,
                   HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr):
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < OC, other=0.0)[None, :]
    acc = tl.maximum(acc, 0.0)                    # ReLU commutes with the max pool
    off = (ch0 + tl.arange(0, BLOCK_N))[None, :] * BAND_SLOTS + slot[:, None]
    tl.store(scr_ptr + off, acc, mask=slot_ok[:, None])


@triton.jit
def _conv_pool_kernel(xs_ptr, whi_ptr, wlo_ptr, bias_ptr, scratch_ptr, out_ptr,
                      OC, OH, OW, Hs, Ws, K, PH, PW, BANDS_PER_IMG, N_BANDS, BAND_SLOTS,
                      KWs: tl.constexpr, CS_PAD: tl.constexpr, PK: tl.constexpr, PS: tl.constexpr,
                      POOL_ROWS: tl.constexpr, HAS_BIAS: tl.constexpr, PROMOTE: tl.constexpr,
                      OFF64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NSUB: tl.constexpr,
                      BLOCK_K: tl.constexpr, POOL_BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    pid_n = tl.program_id(1)
    NCH: tl.constexpr = NSUB * BLOCK_N
    scr = scratch_ptr + (pid_n * tl.num_programs(0) + pid).to(tl.int64) * NCH * BAND_SLOTS
    kk = tl.arange(0, BLOCK_K)
    n0 = pid_n * NCH
    offs_n = n0 + tl.arange(0, BLOCK_N)
    w_off = offs_n[:, None] * K + kk[None, :]     # [BLOCK_N, BLOCK_K], K-major
    w_sub = BLOCK_N * K                           # next channel tile
    for band in range(pid, N_BANDS, tl.num_programs(0)):
        img = band // BANDS_PER_IMG
        py0 = (band % BANDS_PER_IMG) * POOL_ROWS
        n_py = tl.minimum(POOL_ROWS, PH - py0)
        r0 = py0 * PS                             # first conv row of the band
        n_slots = ((n_py - 1) * PS + PK) * OW     # its conv pixels, row-major, full width
        for s0 in range(0, n_slots, BLOCK_M):
            slot = s0 + tl.arange(0, BLOCK_M)
            s_ld = tl.minimum(slot, n_slots - 1)  # clamped: every load in bounds
            pix = (img * Hs + r0 + s_ld // OW) * Ws + s_ld % OW
            if OFF64:
                base = pix.to(tl.int64) * CS_PAD
            else:
                base = pix * CS_PAD
            base = tl.multiple_of(base, BLOCK_K)
            acc0 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            acc3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                tap = k0 // CS_PAD                # scalar work only: a step never crosses a tap
                tap_off = ((tap // KWs) * Ws + tap % KWs) * CS_PAD + k0 % CS_PAD
                tap_off = tl.multiple_of(tap_off, BLOCK_K)
                a_hi, a_lo = _split_tf32(tl.load(xs_ptr + (base + tap_off)[:, None] + kk[None, :]))
                acc0 = _mma3(a_hi, a_lo, whi_ptr, wlo_ptr, w_off + k0, acc0, PROMOTE)
                if NSUB > 1:
                    acc1 = _mma3(a_hi, a_lo, whi_ptr, wlo_ptr, w_off + w_sub + k0, acc1, PROMOTE)
                if NSUB > 2:
                    acc2 = _mma3(a_hi, a_lo, whi_ptr, wlo_ptr, w_off + 2 * w_sub + k0, acc2, PROMOTE)
                if NSUB > 3:
                    acc3 = _mma3(a_hi, a_lo, whi_ptr, wlo_ptr, w_off + 3 * w_sub + k0, acc3, PROMOTE)
            slot_ok = slot < n_slots
            _store_scratch(scr, bias_ptr, acc0, slot, slot_ok, offs_n, 0, OC, BAND_SLOTS, HAS_BIAS, BLOCK_N)
            if NSUB > 1:
                _store_scratch(scr, bias_ptr, acc1, slot, slot_ok, offs_n + BLOCK_N, BLOCK_N, OC, BAND_SLOTS,
                               HAS_BIAS, BLOCK_N)
            if NSUB > 2:
                _store_scratch(scr, bias_ptr, acc2, slot, slot_ok, offs_n + 2 * BLOCK_N, 2 * BLOCK_N, OC, BAND_SLOTS,
                               HAS_BIAS, BLOCK_N)
            if NSUB > 3:
                _store_scratch(scr, bias_ptr, acc3, slot, slot_ok, offs_n + 3 * BLOCK_N, 3 * BLOCK_N, OC, BAND_SLOTS,
                               HAS_BIAS, BLOCK_N)
        tl.debug_barrier()                        # the whole band's conv is in scratch
        n_out = n_py * PW
        for q0 in range(0, NCH * n_out, POOL_BLOCK):
            q = q0 + tl.arange(0, POOL_BLOCK)
            ch = q // n_out
            rem = q % n_out
            py = rem // PW
            px = rem % PW
            ok = (q < NCH * n_out) & (n0 + ch < OC)
            src = ch * BAND_SLOTS + (py * PS) * OW + px * PS
            best = tl.full([POOL_BLOCK], float("-inf"), tl.float32)
            for dy in tl.static_range(PK):
                for dx in tl.static_range(PK):
                    v = tl.load(scr + src + dy * OW + dx, mask=ok, other=float("-inf"), cache_modifier=".cg")
                    best = tl.maximum(best, v)
            dst = ((img * OC + n0 + ch).to(tl.int64) * PH + py0 + py) * PW + px
            tl.store(out_ptr + dst, best, mask=ok)
        tl.debug_barrier()                        # the next band overwrites scratch


def conv_relu_maxpool_s2d(x, weight, bias, stride, padding, pool_kernel, pool_stride):
    x = x.contiguous().float()
    NB, C, H, W = x.shape
    OC, _, KH, KW = weight.shape
    S = stride
    OH = (H + 2 * padding - KH) // S + 1
    OW = (W + 2 * padding - KW) // S + 1
    PK, PS = pool_kernel, pool_stride
    PH = (OH - PK) // PS + 1 if OH >= PK else 0
    PW = (OW - PK) // PS + 1 if OW >= PK else 0
    out = torch.empty((NB, OC, PH, PW), device=x.device, dtype=torch.float32)
    if out.numel() == 0:
        return out
    KHs, KWs = triton.cdiv(KH, S), triton.cdiv(KW, S)
    Hs, Ws = OH + KHs - 1, OW + KWs - 1           # exactly the s2d pixels some output reads
    CS = S * S * C
    CS_PAD = triton.cdiv(CS, BLOCK_K) * BLOCK_K
    xs = torch.empty((NB * Hs * Ws * CS_PAD,), device=x.device, dtype=torch.float32)
    _s2d_kernel[(NB * Hs, triton.cdiv(Ws, S2D_BLOCK_J))](
        x, xs, C, H, W, Hs, Ws, padding, S=S, CS=CS, CS_PAD=CS_PAD,
        CS_P2=triton.next_power_of_2(CS_PAD), BLOCK_J=S2D_BLOCK_J, num_warps=4)
    K = KHs * KWs * CS_PAD
    NCH = NSUB * BLOCK_N
    n_tiles = triton.cdiv(OC, NCH)
    w_hi = torch.empty((n_tiles * NCH, K), device=x.device, dtype=torch.float32)
    w_lo = torch.empty_like(w_hi)
    _weight_s2d_kernel[(n_tiles * NCH,)](weight.contiguous().float(), w_hi, w_lo, OC, C, KH, KW, KWs, K,
                                         S=S, CS_PAD=CS_PAD, BLOCK=128, num_warps=4)
    rows = min(POOL_ROWS, PH)
    bands_per_img = triton.cdiv(PH, rows)
    n_bands = NB * bands_per_img
    band_slots = triton.cdiv(((rows - 1) * PS + PK) * OW, BLOCK_M) * BLOCK_M
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
    n_progs = max(1, min(n_bands, (sms * PROGS_PER_SM) // n_tiles))
    scratch = torch.empty((n_tiles * n_progs * NCH * band_slots,), device=x.device, dtype=torch.float32)
    _conv_pool_kernel[(n_progs, n_tiles)](
        xs, w_hi, w_lo, bias if bias is not None else w_hi, scratch, out,
        OC, OH, OW, Hs, Ws, K, PH, PW, bands_per_img, n_bands, band_slots,
        KWs=KWs, CS_PAD=CS_PAD, PK=PK, PS=PS, POOL_ROWS=rows, HAS_BIAS=bias is not None,
        PROMOTE=bool(PROMOTE) or K > 1024, OFF64=max(xs.numel(), scratch.numel(), out.numel()) >= 2**31,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, NSUB=NSUB, BLOCK_K=BLOCK_K, POOL_BLOCK=POOL_BLOCK,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return out


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int,
                 pool_kernel: int, pool_stride: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=padding)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=pool_kernel, stride=pool_stride)
        self.pool_kernel = pool_kernel
        self.pool_stride = pool_stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        assert conv.groups == 1 and conv.dilation == (1, 1) and conv.stride[0] == conv.stride[1] \
            and isinstance(conv.padding, tuple) and conv.padding[0] == conv.padding[1]
        return conv_relu_maxpool_s2d(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0],
                                     self.pool_kernel, self.pool_stride)
