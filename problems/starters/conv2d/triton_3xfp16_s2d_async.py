"""Conv2d (any C, OC, KH, KW, stride, padding; groups 1, dilation 1), the 3xFP16 space-to-depth implicit
GEMM of triton_3xfp16_s2d.py (same prologue kernels, same split, same x_s2d / weight layouts) with a main
loop whose tensor-core work never waits on itself: three accumulators per channel tile, one dot each
per K step, so every wgmma of a step is in flight at once.

Why (read from the PTX that Triton 3.6 emits for sm_90, no GPU; `ptxas` register counts below): the old
starter's MODE 1 (the measured best, 0.351 ms at 128 x (3 x 32), 4 warps; judged 0.357) chains three dots
into a fresh accumulator and adds it to the running sum, and Triton makes a dot that feeds another dot
or an add in the same iteration synchronous: its K step is 9 groups of 2 m64n32k16 wgmmas, each followed
by `wgmma.wait_group 0` (9 waits per step, 27 steps per tile). ncu (benchmarks/results/h100_2026-11-26/
ncu): tensor pipe 26%, issue slots 30%, 2 warps per scheduler, no eligible warp 67% of cycles, 190
registers: latency-bound on those waits, 1088 SM cycles per 128-row K step against 288 of MMA work.
MODE 2 (hi*w_hi alone, the two small products chained) still waits after each chained pair (3 waits per
step); MODE 3 is fully async but loads A hi and W hi twice (1.5x the L2->SM bytes) and was only measured
with A_REGS = 1, which is slow for every mode.
Here:
  * MODE 4 (default): acc_hh += a_hi.w_hi, acc_hl += a_hi.w_lo, acc_lh += a_lo.w_hi, each its own
    loop-carried accumulator used by nothing but its own dot: Triton issues a step's 18 (or 12 with
    WIDE) wgmmas back to back and waits once per step for the previous step's groups (`wait_group 6` /
    `wait_group 9` in the PTX; MODE 1: 9 x `wait_group 0`). The bytes per step are MODE 1's (A hi and
    lo, W hi and lo once each). The price is registers: 3 x 96 = 288 fp32 accumulators per pixel row,
    so 128 rows take 8 warps (two warpgroups of 64 rows, 144 accumulator registers per thread).
    Accuracy: hi*w_hi accumulates over all of K without promotion, as MODE 2's large product (measured
    on the H100: normwise 5.8e-7 for MODE 2, 1.4e-7 for MODE 1; the bound is 1e-5), and the two small
    products each in their own accumulator (at 2^-11 of the output, their truncation is negligible).
  * WIDE = 1: the 96 channels as tiles of 64 + 32 instead of 3 x 32: each A tile feeds 2 wgmmas per
    product instead of 3 (m64n64k16 reads 2 KB of A and 2 KB of W from shared memory for 32 cycles of
    MMA; m64n32k16 2 KB + 1 KB for 16 cycles, i.e. above the SM's 128 B/clk): shared-memory reads per
    128-row step 42 KB instead of 54, wgmma instructions 12 instead of 18, same MMA cycles (288).
  * W_TMA = 1: the weight tiles through host-side TMA descriptors (triton.tools.tensor_descriptor,
    Triton >= 3.3): 2-D boxes of [channels x 16] at (n0, 2 k0), no per-thread address arithmetic or
    cp.async for W (A stays cp.async: its rows are gathered pixels of 3 output rows).
  * MODE 1 (the old default) is kept for comparison in the same file.
Expected at AlexNet's size (H100, 1.78 GHz under load as ncu saw): MMA cycles per 128-row step 288 (all
modes); MODE 4 + WIDE is bound by shared memory (42 KB of wgmma reads + 14 KB of cp.async writes = 56 KB
at 128 B/clk = 440 cycles) and by L2->SM bytes (14 KB per step, 0.9 GB per forward: ~165 us at ~5.5
TB/s), i.e. ~440 cycles x 491 steps per SM / 1.78 GHz = ~120 us of MMA-side time against L2's ~165 us
if it ran at the L2 limit; with one 8-warp program per SM (144 accumulator registers) the realistic
guess is 180-230 us for the conv kernel (was ~300), 0.23-0.28 ms judged with the 48 us of prologues.
Registers/thread, ptxas for sm_90 through Triton 3.6 (the GPU's version, no GPU; the same compile gives
164 for the old starter's default, which ncu measured at 190 on the H100), 4 stages, no spills in any:
  MODE 4, 128 x (64 + 32), 8 warps: 202 (one program per SM: 52k of the 64k registers), W_TMA 176;
  MODE 4, 128 x (3 x 32), 8 warps: 184; MODE 4, 64 x (64 + 32), 4 warps: 200 (two programs per SM);
  MODE 1, 128 x (3 x 32), 4 warps: 168 (= the old default); 128 x (64 + 32): 4 warps 210, 8 warps 128.
  PTX per K step: MODE 4 issues all of its wgmmas, then one `wgmma.wait_group 6` (WIDE) / `9` (3 x 32);
  MODE 1 9 (3 x 32) or 6 (WIDE) `wgmma.wait_group 0`. W_TMA 1: 4 TMA loads per step (cp.async.bulk.tensor),
  the A tiles stay 2 x 16-byte cp.async per thread. Without TMA the weight tiles go by 4- or 8-byte
  cp.async (a [32 x 16] fp16 tile spread over 256 threads: 2 halves each), as in the old starter.
What is uncertain: whether one 8-warp program per SM (MODE 4 at 128 rows) hides the prologue and the
epilogue of each tile (18 tiles per SM, ~1-2 us each unhidden); BLOCK_M 64 with 4 warps (two programs
per SM) hides them at twice the weight traffic from L2 (0.39 -> 0.78 GB). Both are in the sweep.
Range and split as triton_3xfp16_s2d.py: |x| < 8188 with X_SHIFT = 3, x kept to max(2^-22 |x|, 2^-28).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

try:  # Triton >= 3.3; without it W_TMA = 1 falls back to pointer loads
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None

BLOCK_M = 128
BLOCK_N = 32      # channel tile width; WIDE = 1 makes the first tile 2 x BLOCK_N
WIDE = 1          # 1: tiles of 2*BLOCK_N and BLOCK_N per program (96 = 64 + 32); 0: NSUB tiles of BLOCK_N
NSUB = 3          # channel tiles of BLOCK_N per program when WIDE = 0 (1-3)
MODE = 1          # 4: three accumulators, all dots async; 1: promote every K step (the old default)
W_TMA = 0         # 1: weight tiles by TMA (host tensor descriptors), 0: cp.async pointer loads
NUM_WARPS = 4
NUM_STAGES = 3
MAXNREG = 0       # registers per thread cap (0: none)
S2D_BLOCK_J = 32  # s2d pixels per prologue program
BLOCK_K = 16      # one fp16 MMA deep; also the channel padding unit (48 channels at AlexNet's size)
X_SHIFT = 3       # x is scaled by 2^X_SHIFT before the split (exact): range vs small-value precision

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [16, 32, 64],
    "WIDE": [0, 1],
    "NSUB": [1, 2, 3],
    "MODE": [1, 4],
    "W_TMA": [0, 1],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4, 5, 6],
    "MAXNREG": [0, 168, 232],
    "S2D_BLOCK_J": [16, 32, 64],
}

@triton.jit
def _s2d_split_kernel(x_ptr, xs_ptr, C, H, W, Hs, Ws, pad,
                      S: tl.constexpr, CS: tl.constexpr, CS_PAD: tl.constexpr, CS_P2: tl.constexpr,
                      BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr, X_SCALE: tl.constexpr):
    # one program per (row i of x_s2d, BLOCK_J pixels j): reads 4 contiguous floats per (c, dy) and writes
    # BLOCK_J * 2 * CS_PAD contiguous halves, each BLOCK_K channels as [hi x BLOCK_K | lo x BLOCK_K];
    # zeros for padding and for channels past CS
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
    v = tl.load(x_ptr + src, mask=inside, other=0.0) * X_SCALE   # a power of two: exact
    hi = v.to(tl.float16)
    lo = (v - hi.to(tl.float32)).to(tl.float16)   # v - hi is exact in fp32
    dst = (row.to(tl.int64) * Ws + j[:, None]) * (2 * CS_PAD) + (cs + (cs // BLOCK_K) * BLOCK_K)[None, :]
    ok = (j < Ws)[:, None] & (cs < CS_PAD)[None, :]
    tl.store(xs_ptr + dst, hi, mask=ok)
    tl.store(xs_ptr + dst + BLOCK_K, lo, mask=ok)


@triton.jit
def _weight_split_kernel(w_ptr, ws_ptr, inv_ptr, OC, C, KH, KW, KWs, K,
                         S: tl.constexpr, CS_PAD: tl.constexpr, BLOCK_K: tl.constexpr, X_SHIFT: tl.constexpr,
                         BLOCK: tl.constexpr):
    # w [OC, C, KH, KW] -> ws [OC_pad, 2K] fp16, K-major, each BLOCK_K of k as [lo x BLOCK_K | hi x BLOCK_K]
    # (x_s2d's chunks are [hi | lo]: one chunk of each multiplied along K gives hi*w_lo + lo*w_hi), with
    # k = (a*KWs + b)*CS_PAD + (c*S + dy)*S + dx, tap (kh, kw) = (a*S + dy, b*S + dx), scaled by 2^e
    # (e per output channel: max |w| * 2^e in [2^13, 2^14), so lo stays normal); inv[oc] = 2^-(e + X_SHIFT)
    # undoes both scalings. One program per output channel.
    oc = tl.program_id(0)
    CKK = C * KH * KW
    ckk_limit = tl.where(oc < OC, CKK, 0)
    wmax = 0.0
    for k0 in range(0, CKK, BLOCK):
        kk = k0 + tl.arange(0, BLOCK)
        v = tl.load(w_ptr + oc * CKK + kk, mask=kk < ckk_limit, other=0.0)
        wmax = tl.maximum(wmax, tl.max(tl.abs(v), axis=0))
    ebits = (wmax.to(tl.uint32, bitcast=True) >> 23).to(tl.int32)     # biased exponent of max |w|
    e = tl.where(wmax > 0.0, 140 - ebits, 0)                          # 13 - floor(log2(max |w|))
    e = tl.minimum(tl.maximum(e, -100), 100)
    scale = ((e + 127) << 23).to(tl.float32, bitcast=True)
    tl.store(inv_ptr + oc, ((127 - e - X_SHIFT) << 23).to(tl.float32, bitcast=True))
    k_limit = tl.where(oc < OC, K, 0)             # padding rows past OC are all zeros
    for k0 in range(0, K, BLOCK):
        kk = k0 + tl.arange(0, BLOCK)
        tap = kk // CS_PAD
        cs = kk % CS_PAD
        c = cs // (S * S)
        kh = (tap // KWs) * S + (cs // S) % S
        kw = (tap % KWs) * S + cs % S
        ok = (kk < k_limit) & (c < C) & (kh < KH) & (kw < KW)
        w = tl.load(w_ptr + ((oc * C + c) * KH + kh) * KW + kw, mask=ok, other=0.0) * scale
        hi = w.to(tl.float16)
        lo = (w - hi.to(tl.float32)).to(tl.float16)
        dst = oc * (2 * K) + kk + (kk // BLOCK_K) * BLOCK_K
        tl.store(ws_ptr + dst, lo, mask=kk < K)
        tl.store(ws_ptr + dst + BLOCK_K, hi, mask=kk < K)


@triton.jit
def _w_tile(ws_ptr, w_desc, w_row, n_base, k0, K, W_TMA: tl.constexpr, BN: tl.constexpr, BLOCK_K: tl.constexpr):
    # this K step's [w_lo | w_hi] chunk of BN output channels from n_base, as two [BLOCK_K, BN] operands
    if W_TMA:
        b_lo = tl.trans(w_desc.load([n_base, 2 * k0]))
        b_hi = tl.trans(w_desc.load([n_base, 2 * k0 + BLOCK_K]))
    else:
        kk = tl.arange(0, BLOCK_K)[None, :]
        off = (n_base + w_row) * (2 * K) + 2 * k0 + kk          # w_row: arange(BN)[:, None]
        b_lo = tl.trans(tl.load(ws_ptr + off))
        b_hi = tl.trans(tl.load(ws_ptr + off + BLOCK_K))
    return b_lo, b_hi


@triton.jit
def _mma_tile(a_hi, a_lo, b_lo, b_hi, acc, acc_b, acc_c, MODE: tl.constexpr):
    if MODE == 4:   # three loop-carried accumulators, one dot each: nothing waits inside the step
        acc = tl.dot(a_hi, b_hi, acc)
        acc_b = tl.dot(a_hi, b_lo, acc_b)
        acc_c = tl.dot(a_lo, b_hi, acc_c)
    else:           # MODE 1: a fresh accumulator per step, promoted by an fp32 add
        part = tl.dot(a_lo, b_hi)
        part = tl.dot(a_hi, b_lo, part)
        part = tl.dot(a_hi, b_hi, part)
        acc += part
    return acc, acc_b, acc_c


@triton.jit
def _store_tile(y_ptr, inv_ptr, bias_ptr, acc, acc_b, acc_c, y_img, p, p_ok, offs_n, OC, OHW,
                MODE: tl.constexpr, HAS_BIAS: tl.constexpr, RELU: tl.constexpr):
    n_ok = offs_n < OC
    if MODE == 4:
        acc += acc_b + acc_c                                 # the two small products first
    acc = acc * tl.load(inv_ptr + offs_n)[None, :]          # exact: a power of two
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    y_off = y_img + offs_n[None, :].to(tl.int64) * OHW + p[:, None]
    tl.store(y_ptr + y_off, acc, mask=p_ok[:, None] & n_ok[None, :])


@triton.jit
def _conv_kernel(xs_ptr, ws_ptr, w_desc0, w_desc1, inv_ptr, bias_ptr, y_ptr,
                 OC, OH, OW, Hs, Ws, K,
                 KWs: tl.constexpr, CS_PAD: tl.constexpr, HAS_BIAS: tl.constexpr, RELU: tl.constexpr,
                 MODE: tl.constexpr, W_TMA: tl.constexpr, OFF64: tl.constexpr, BLOCK_M: tl.constexpr,
                 T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr, BLOCK_K: tl.constexpr):
    # one program: BLOCK_M output pixels of one image x (T0 + T1 + T2) output channels, as up to three
    # channel tiles (widths T0, T1, T2; 0 = absent) that all multiply the same A tiles
    pid_p = tl.program_id(0)                      # tile of pixels inside one image
    img = tl.program_id(1)
    pid_n = tl.program_id(2)
    OHW = OH * OW
    p = pid_p * BLOCK_M + tl.arange(0, BLOCK_M)
    p_ld = tl.minimum(p, OHW - 1)                 # clamped: every load in bounds, no row mask
    oh = p_ld // OW
    ow = p_ld % OW
    pix = (img * Hs + oh) * Ws + ow               # top-left tap's pixel in x_s2d
    if OFF64:
        base = pix.to(tl.int64) * (2 * CS_PAD)
    else:
        base = pix * (2 * CS_PAD)
    base = tl.multiple_of(base, 2 * BLOCK_K)
    ar = tl.arange(0, BLOCK_K)
    n0 = pid_n * (T0 + T1 + T2)

    acc0 = tl.zeros((BLOCK_M, T0), dtype=tl.float32)
    b0 = tl.zeros((BLOCK_M, T0), dtype=tl.float32)
    c0 = tl.zeros((BLOCK_M, T0), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, T1 if T1 > 0 else 16), dtype=tl.float32)
    b1 = tl.zeros((BLOCK_M, T1 if T1 > 0 else 16), dtype=tl.float32)
    c1 = tl.zeros((BLOCK_M, T1 if T1 > 0 else 16), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, T2 if T2 > 0 else 16), dtype=tl.float32)
    b2 = tl.zeros((BLOCK_M, T2 if T2 > 0 else 16), dtype=tl.float32)
    c2 = tl.zeros((BLOCK_M, T2 if T2 > 0 else 16), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        tap = k0 // CS_PAD                        # scalar work only: a step never crosses a tap
        tap_off = ((tap // KWs) * Ws + tap % KWs) * (2 * CS_PAD) + 2 * (k0 % CS_PAD)
        a_row = (base + tl.multiple_of(tap_off, 2 * BLOCK_K))[:, None]
        a_hi = tl.load(xs_ptr + a_row + ar[None, :])
        a_lo = tl.load(xs_ptr + a_row + BLOCK_K + ar[None, :])
        b_lo, b_hi = _w_tile(ws_ptr, w_desc0, tl.arange(0, T0)[:, None], n0, k0, K, W_TMA, T0, BLOCK_K)
        acc0, b0, c0 = _mma_tile(a_hi, a_lo, b_lo, b_hi, acc0, b0, c0, MODE)
        if T1 > 0:
            b_lo, b_hi = _w_tile(ws_ptr, w_desc1, tl.arange(0, T1)[:, None], n0 + T0, k0, K, W_TMA, T1, BLOCK_K)
            acc1, b1, c1 = _mma_tile(a_hi, a_lo, b_lo, b_hi, acc1, b1, c1, MODE)
        if T2 > 0:
            b_lo, b_hi = _w_tile(ws_ptr, w_desc1, tl.arange(0, T2)[:, None], n0 + T0 + T1, k0, K, W_TMA, T2,
                                 BLOCK_K)
            acc2, b2, c2 = _mma_tile(a_hi, a_lo, b_lo, b_hi, acc2, b2, c2, MODE)

    p_ok = p < OHW
    y_img = img.to(tl.int64) * OC * OHW
    _store_tile(y_ptr, inv_ptr, bias_ptr, acc0, b0, c0, y_img, p, p_ok, n0 + tl.arange(0, T0), OC, OHW,
                MODE, HAS_BIAS, RELU)
    if T1 > 0:
        _store_tile(y_ptr, inv_ptr, bias_ptr, acc1, b1, c1, y_img, p, p_ok, n0 + T0 + tl.arange(0, T1), OC, OHW,
                    MODE, HAS_BIAS, RELU)
    if T2 > 0:
        _store_tile(y_ptr, inv_ptr, bias_ptr, acc2, b2, c2, y_img, p, p_ok, n0 + T0 + T1 + tl.arange(0, T2), OC,
                    OHW, MODE, HAS_BIAS, RELU)


def _channel_tiles():
    if WIDE:
        return 2 * BLOCK_N, BLOCK_N, 0
    return BLOCK_N, BLOCK_N if NSUB > 1 else 0, BLOCK_N if NSUB > 2 else 0


def conv2d_s2d_3xfp16_async(x, weight, bias, stride, padding, relu=False):
    x = x.contiguous().float()
    NB, C, H, W = x.shape
    OC, _, KH, KW = weight.shape
    S = stride
    OH = (H + 2 * padding - KH) // S + 1
    OW = (W + 2 * padding - KW) // S + 1
    y = torch.empty((NB, OC, OH, OW), device=x.device, dtype=torch.float32)
    if y.numel() == 0:
        return y
    KHs, KWs = triton.cdiv(KH, S), triton.cdiv(KW, S)
    Hs, Ws = OH + KHs - 1, OW + KWs - 1           # exactly the s2d pixels some output reads
    CS = S * S * C
    CS_PAD = triton.cdiv(CS, BLOCK_K) * BLOCK_K
    xs = torch.empty((NB * Hs * Ws * 2 * CS_PAD,), device=x.device, dtype=torch.float16)
    _s2d_split_kernel[(NB * Hs, triton.cdiv(Ws, S2D_BLOCK_J))](
        x, xs, C, H, W, Hs, Ws, padding, S=S, CS=CS, CS_PAD=CS_PAD, CS_P2=triton.next_power_of_2(CS_PAD),
        BLOCK_J=S2D_BLOCK_J, BLOCK_K=BLOCK_K, X_SCALE=float(2 ** X_SHIFT), num_warps=4)
    K = KHs * KWs * CS_PAD
    T0, T1, T2 = _channel_tiles()
    CH = T0 + T1 + T2
    OC_pad = triton.cdiv(OC, CH) * CH
    ws = torch.empty((OC_pad, 2 * K), device=x.device, dtype=torch.float16)
    inv = torch.empty((OC_pad,), device=x.device, dtype=torch.float32)
    _weight_split_kernel[(OC_pad,)](weight.contiguous().float(), ws, inv, OC, C, KH, KW, KWs, K,
                                    S=S, CS_PAD=CS_PAD, BLOCK_K=BLOCK_K, X_SHIFT=X_SHIFT, BLOCK=128, num_warps=4)
    use_tma = bool(W_TMA) and TensorDescriptor is not None
    if use_tma:
        d0 = TensorDescriptor.from_tensor(ws, [T0, BLOCK_K])
        d1 = TensorDescriptor.from_tensor(ws, [BLOCK_N, BLOCK_K]) if T1 else d0
    else:
        d0 = d1 = ws
    OHW = OH * OW
    grid = (triton.cdiv(OHW, BLOCK_M), NB, OC_pad // CH)
    extra = {"maxnreg": MAXNREG} if MAXNREG else {}
    _conv_kernel[grid](xs, ws, d0, d1, inv, bias if bias is not None else inv, y,
                       OC, OH, OW, Hs, Ws, K,
                       KWs=KWs, CS_PAD=CS_PAD, HAS_BIAS=bias is not None, RELU=relu,
                       MODE=MODE, W_TMA=use_tma, OFF64=xs.numel() >= 2**31, BLOCK_M=BLOCK_M,
                       T0=T0, T1=T1, T2=T2, BLOCK_K=BLOCK_K,
                       num_warps=NUM_WARPS, num_stages=NUM_STAGES, **extra)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        assert conv.groups == 1 and conv.dilation == (1, 1) and conv.stride[0] == conv.stride[1] \
            and isinstance(conv.padding, tuple) and conv.padding[0] == conv.padding[1]
        return conv2d_s2d_3xfp16_async(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0])
