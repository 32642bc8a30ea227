"""Conv2d (any C, OC, KH, KW, stride, padding; groups 1, dilation 1), Triton implicit GEMM on 3xTF32
tensor cores, with the per-element work of the im2col gather cut to one add.

GEMM view: M = N*OH*OW output pixels, N = OC, K = C*KH*KW.  triton_implicit_gemm.py spends most of
its time on integer work, not on the MMAs (measured on the H100: the same 1.63-1.67 ms whether
BLOCK_N is 32 or 128, i.e. whatever the tensor-core work): every gathered element gets a 64-bit
address and six bounds tests.  Here:
  * a prologue kernel copies x into a zero-padded [N, C, H+2p, W+2p] buffer, already split into
    TF32 hi and lo parts (PRESPLIT = 1; ~0.06 ms at AlexNet's size), so the gather needs no bounds
    tests: a pixel's receptive field is a dense window of the padded image;
  * element (m, k) is at base[m] + koff[k] (32-bit offsets when the padded input allows), with
    base[m] computed once per program and koff[k] once per K step;
  * the weight is split, zero-padded to [OC_pad, K_pad] and kept K-major (Hopper's TF32 MMAs read
    K-major operands), so its tiles need no masks;
  * rows past M are clamped to the last pixel for the loads (in bounds) and masked at the store;
  * one program covers NSUB * BLOCK_N output channels as NSUB separate tensor-core tiles that share
    the gathered A tile: OC = 96 is 3 x 32 with no padded channels (one 128-wide tile wastes 25% of
    the MMAs), and A is gathered once per pixel rather than once per channel tile.
Measured on the H100 (benchmarks/RESULTS.md): PRESPLIT = 0 (gather once, split in registers) beats
gathering pre-split hi and lo; PROMOTE = 0 (2.5e-6 normwise at K = 363) is ~10% faster than 1 (1.5e-7).
Accuracy: x = hi + lo with hi = x rounded to TF32; acc += lo*hi + hi*lo + hi*hi on tensor cores; with
PROMOTE = 1 each BLOCK_K chunk is summed in a fresh accumulator and promoted into an fp32 sum (the
tensor core's own accumulation drops low bits on Hopper, which matters for long K).  PRESPLIT = 0 gathers x once and splits in registers instead (half the loads, more
ALU work).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 32
NSUB = 3          # channel tiles of BLOCK_N per program (1-4), all multiplying the same gathered A tile
BLOCK_K = 16
PRESPLIT = 0
PROMOTE = 0       # 1: promote every BLOCK_K chunk (always done when K > 1024, where Hopper's accumulation drifts)
NUM_WARPS = 4
NUM_STAGES = 3
PAD_BLOCK = 1024

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [16, 32, 64, 128],
    "NSUB": [1, 2, 3, 4],
    "BLOCK_K": [16, 32, 64],
    "PRESPLIT": [0, 1],
    "PROMOTE": [0, 1],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
}


@triton.jit
def _split_tf32(x):
    bits = x.to(tl.uint32, bitcast=True)
    hi = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)  # round to nearest TF32
    return hi, x - hi


@triton.jit
def _pad_split_kernel(x_ptr, hi_ptr, lo_ptr, total, H, W, Hp, Wp, pad, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    # one program per BLOCK padded elements: [N*C, Hp, Wp] <- x [N*C, H, W], zeros outside
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_range = offs < total
    plane = offs // (Hp * Wp)
    r = offs % (Hp * Wp)
    ih = r // Wp - pad
    iw = r % Wp - pad
    inside = in_range & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    x = tl.load(x_ptr + plane * H * W + ih * W + iw, mask=inside, other=0.0)
    if SPLIT:
        hi, lo = _split_tf32(x)
        tl.store(hi_ptr + offs, hi, mask=in_range)
        tl.store(lo_ptr + offs, lo, mask=in_range)
    else:
        tl.store(hi_ptr + offs, x, mask=in_range)


@triton.jit
def _weight_split_kernel(w_ptr, hi_ptr, lo_ptr, OC, K, K_pad, BLOCK: tl.constexpr):
    # w [OC, K] -> hi, lo [OC_pad, K_pad], zero-padded (one program per output row)
    oc = tl.program_id(0)
    k_limit = tl.where(oc < OC, K, 0)              # padding rows past OC are all zeros
    for k0 in range(0, K_pad, BLOCK):
        kk = k0 + tl.arange(0, BLOCK)
        w = tl.load(w_ptr + oc * K + kk, mask=kk < k_limit, other=0.0)
        hi, lo = _split_tf32(w)
        tl.store(hi_ptr + oc * K_pad + kk, hi, mask=kk < K_pad)
        tl.store(lo_ptr + oc * K_pad + kk, lo, mask=kk < K_pad)


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
def _store_tile(y_ptr, bias_ptr, acc, img, p, row_ok, offs_n, OC, OHW,
                HAS_BIAS: tl.constexpr, RELU: tl.constexpr):
    n_ok = offs_n < OC
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    y_off = img.to(tl.int64)[:, None] * OC * OHW + offs_n[None, :].to(tl.int64) * OHW + p[:, None]
    tl.store(y_ptr + y_off, acc, mask=row_ok[:, None] & n_ok[None, :])


@triton.jit
def _conv_kernel(xhi_ptr, xlo_ptr, whi_ptr, wlo_ptr, bias_ptr, y_ptr,
                 M, C, Hp, Wp, OC, OH, OW, stride, K, K_pad,
                 KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr, RELU: tl.constexpr,
                 PRESPLIT: tl.constexpr, PROMOTE: tl.constexpr, OFF64: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NSUB: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    OHW = OH * OW
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ld = tl.minimum(offs_m, M - 1)              # clamped: every load in bounds, no row mask
    img = m_ld // OHW
    p = m_ld % OHW
    oh = p // OW
    ow = p % OW
    if OFF64:
        base = img.to(tl.int64) * C * Hp * Wp + (oh * stride) * Wp + ow * stride
    else:
        base = img * (C * Hp * Wp) + (oh * stride) * Wp + ow * stride
    n0 = pid_n * (NSUB * BLOCK_N)
    offs_n = n0 + tl.arange(0, BLOCK_N)
    w_off = offs_n[:, None] * K_pad + tl.arange(0, BLOCK_K)[None, :]   # [BLOCK_N, BLOCK_K], K-major
    w_sub = BLOCK_N * K_pad                                              # next channel tile

    # one accumulator per channel tile; those past NSUB are never used (compiled away)
    acc0 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K_pad, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        k_ok = kk < K
        c = kk // (KH * KW)
        r = kk % (KH * KW)
        koff = c * (Hp * Wp) + (r // KW) * Wp + (r % KW)
        a_off = base[:, None] + koff[None, :]
        if PRESPLIT:
            a_hi = tl.load(xhi_ptr + a_off, mask=k_ok[None, :], other=0.0)
            a_lo = tl.load(xlo_ptr + a_off, mask=k_ok[None, :], other=0.0)
        else:
            a_hi, a_lo = _split_tf32(tl.load(xhi_ptr + a_off, mask=k_ok[None, :], other=0.0))
        acc0 = _mma3(a_hi, a_lo, whi_ptr, wlo_ptr, w_off + k0, acc0, PROMOTE)
        if NSUB > 1:
            acc1 = _mma3(a_hi, a_lo, whi_ptr, wlo_ptr, w_off + w_sub + k0, acc1, PROMOTE)
        if NSUB > 2:
            acc2 = _mma3(a_hi, a_lo, whi_ptr, wlo_ptr, w_off + 2 * w_sub + k0, acc2, PROMOTE)
        if NSUB > 3:
            acc3 = _mma3(a_hi, a_lo, whi_ptr, wlo_ptr, w_off + 3 * w_sub + k0, acc3, PROMOTE)

    row_ok = offs_m < M
    _store_tile(y_ptr, bias_ptr, acc0, img, p, row_ok, offs_n, OC, OHW, HAS_BIAS, RELU)
    if NSUB > 1:
        _store_tile(y_ptr, bias_ptr, acc1, img, p, row_ok, offs_n + BLOCK_N, OC, OHW, HAS_BIAS, RELU)
    if NSUB > 2:
        _store_tile(y_ptr, bias_ptr, acc2, img, p, row_ok, offs_n + 2 * BLOCK_N, OC, OHW, HAS_BIAS, RELU)
    if NSUB > 3:
        _store_tile(y_ptr, bias_ptr, acc3, img, p, row_ok, offs_n + 3 * BLOCK_N, OC, OHW, HAS_BIAS, RELU)


def conv2d_3xtf32(x, weight, bias, stride, padding, relu=False):
    x = x.contiguous().float()
    NB, C, H, W = x.shape
    OC, _, KH, KW = weight.shape
    OH = (H + 2 * padding - KH) // stride + 1
    OW = (W + 2 * padding - KW) // stride + 1
    y = torch.empty((NB, OC, OH, OW), device=x.device, dtype=torch.float32)
    if y.numel() == 0:
        return y
    Hp, Wp = H + 2 * padding, W + 2 * padding
    total = NB * C * Hp * Wp
    x_hi = torch.empty(total, device=x.device, dtype=torch.float32)
    x_lo = torch.empty(total, device=x.device, dtype=torch.float32) if PRESPLIT else x_hi
    _pad_split_kernel[(triton.cdiv(total, PAD_BLOCK),)](x, x_hi, x_lo, total, H, W, Hp, Wp, padding,
                                                       SPLIT=PRESPLIT, BLOCK=PAD_BLOCK, num_warps=4)
    K = C * KH * KW
    K_pad = triton.cdiv(K, BLOCK_K) * BLOCK_K
    OC_pad = triton.cdiv(OC, NSUB * BLOCK_N) * NSUB * BLOCK_N
    w_hi = torch.empty((OC_pad, K_pad), device=x.device, dtype=torch.float32)
    w_lo = torch.empty_like(w_hi)
    _weight_split_kernel[(OC_pad,)](weight.contiguous().float(), w_hi, w_lo, OC, K, K_pad, BLOCK=128, num_warps=4)
    M = NB * OH * OW
    grid = (triton.cdiv(M, BLOCK_M), OC_pad // (NSUB * BLOCK_N))
    _conv_kernel[grid](x_hi, x_lo, w_hi, w_lo, bias if bias is not None else w_hi, y,
                       M, C, Hp, Wp, OC, OH, OW, stride, K, K_pad,
                       KH=KH, KW=KW, HAS_BIAS=bias is not None, RELU=relu, PRESPLIT=PRESPLIT, PROMOTE=bool(PROMOTE) or K > 1024,
                       OFF64=total + K_pad * Hp * Wp >= 2**31,
                       BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, NSUB=NSUB, BLOCK_K=BLOCK_K, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        assert conv.groups == 1 and conv.dilation == (1, 1) and conv.stride[0] == conv.stride[1] \
            and isinstance(conv.padding, tuple) and conv.padding[0] == conv.padding[1]
        return conv2d_3xtf32(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0])
