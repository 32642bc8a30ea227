"""Conv2d -> ReLU -> MaxPool2d, Triton, two kernels: the 3xTF32 implicit-GEMM convolution of
conv2d/triton_3xtf32_padded.py (zero-padded copy of x, one add per gathered element, TF32 split in
registers, K-major split weight, NSUB channel tiles sharing each gathered A tile), then a fused
ReLU + max pool kernel (any kernel/stride, no padding, floor mode) over the conv output.

Why not fused: the previous fused band kernels (triton_fused_band.py) spent more on occupancy than
the conv output's round trip costs (116 MB at AlexNet's size, ~0.08 ms of HBM traffic); the
convolution itself is where the time goes, so this starter puts the fast one in front of the pool.
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
POOL_BLOCK = 512
POOL_WARPS = 8

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [16, 32, 64, 128],
    "NSUB": [1, 2, 3, 4],
    "BLOCK_K": [16, 32, 64],
    "PRESPLIT": [0, 1],
    "PROMOTE": [0, 1],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "POOL_BLOCK": [256, 512, 1024, 2048],
    "POOL_WARPS": [2, 4, 8],
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


@triton.jit
def _relu_maxpool_kernel(y_ptr, out_ptr, total, OH, OW, PH, PW, PS,
                         PK: tl.constexpr, POOL_BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * POOL_BLOCK + tl.arange(0, POOL_BLOCK)
    mask = offs < total
    px = offs % PW
    t = offs // PW
    py = t % PH
    plane = t // PH                               # image * OC + oc
    base = plane * OH * OW + (py * PS) * OW + px * PS
    best = tl.full([POOL_BLOCK], float("-inf"), tl.float32)
    for dy in tl.static_range(PK):
        for dx in tl.static_range(PK):
            v = tl.load(y_ptr + base + dy * OW + dx, mask=mask, other=float("-inf"))
            best = tl.maximum(best, v)
    tl.store(out_ptr + offs, tl.maximum(best, 0.0), mask=mask)


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
        y = conv2d_3xtf32(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0])
        NB, OC, OH, OW = y.shape
        PK, PS = self.pool_kernel, self.pool_stride
        PH = (OH - PK) // PS + 1
        PW = (OW - PK) // PS + 1
        out = torch.empty((NB, OC, max(PH, 0), max(PW, 0)), device=y.device, dtype=torch.float32)
        total = out.numel()
        if total == 0:
            return out
        _relu_maxpool_kernel[(triton.cdiv(total, POOL_BLOCK),)](y, out, total, OH, OW, PH, PW, PS, PK=PK,
                                                               POOL_BLOCK=POOL_BLOCK, num_warps=POOL_WARPS)
        return out
