"""Conv2d (any C, OC, KH, KW, stride, padding; groups 1, dilation 1), 3xFP16 space-to-depth implicit GEMM
(the prologue kernel and the x_s2d layout of triton_3xfp16_s2d_async.py) whose K loop is ONE tl.dot per
step: the three fp16 products are laid side by side along K instead of being three dots.

Why: Triton 3.6 (sm_90, PTX read offline) makes a wgmma wait at once when its dot feeds another dot or
an add in the same iteration: a small test kernel with `acc = dot(a, b, acc); acc = dot(a2, b2, acc)` gets
`wgmma.wait_group 0` after each dot; a loop of `acc = dot(a, b, acc)` alone gets `wait_group 1` (the MMAs
of step i+1 are issued while step i's run), and so does this kernel (`wait_group 2` with its two channel
tiles: two independent loop-carried dots on the same A tile). The async starter's MODE 1 waits after
every dot (6 per K step with 64+32 channel tiles), MODE 4 once per step: ncu of the old conv: tensor
pipe 26%, no eligible warp 67% of cycles. Here a "virtual K" carries the three products: per 16-channel
chunk q of x_s2d the units
  (a_hi[q], w_lo[q]), (a_lo[q], w_hi[q]), (a_hi[q], w_hi[q])
each 16 deep (= one k16 wgmma, so every wgmma instruction multiplies one kind of product; the sum over
instructions is the fp32 accumulator, as MODE 2's single accumulator: measured 5.8e-7 normwise on the
H100, the bound is 1e-5). The 3 x 27 = 81 units at AlexNet's size run 4 (KSTEP 64) or 8 (KSTEP 128) per
step: 21 or 11 steps of one dot [BLOCK_M x KSTEP] x [KSTEP x BLOCK_N]; 3 of 84 units (or 7 of 88) are
zeros. The weights are written in that virtual order by the weight pre-pass (contiguous K per channel);
the A tile's columns are gathered from x_s2d: unit v -> chunk v // 3, hi or lo, 16 contiguous halves
(32 B aligned: tl.multiple_of / tl.max_contiguous hints keep the cp.async 16 bytes wide). a_hi is read
twice from L2 (1.5x the A bytes of the old kernel).
Channels: SPLIT 1 (default): tiles of BLOCK_N + BLOCK_N / 2 (64 + 32 = 96 exactly), two dots per step on
the same A tile; SPLIT 0: one tile of BLOCK_N (96 -> 128: 33% of the MMAs on zero weight rows, masked,
never loaded), one dot. PTX (Triton 3.6, sm_90, offline): the K loop waits `wgmma.wait_group 2` (SPLIT 1)
or `1` (SPLIT 0): a step's wgmmas are still running when the next step's are issued, in every setting
compiled (BLOCK_M 64/128/256, KSTEP 32/64/128, 4/8 warps); A and W by 16-byte cp.async.cg.
Registers (ptxas via Triton 3.6): default (128 x (64 + 32), KSTEP 64, 4 warps, 3 stages): 176, 86 KB of
shared memory -> two programs per SM; KSTEP 128: 176 (3 stages 172 KB: one per SM; 2 stages 115 KB);
KSTEP 32: 172; BLOCK_M 64: 88; BLOCK_M 256 (8 warps): 176; SPLIT 0 BLOCK_N 128: 4 warps 255 + 32 B
spilled, 8 warps 186; no spills elsewhere.
Arithmetic at AlexNet's size (H100: 2048 fp16 FMA/clk/SM, 128 B/clk of shared memory, 132 SMs, ~1.75 GHz
under load), default: 2,400 tiles x 21 steps = 50,400 steps, 382 per SM. Per step: MMA 128x96x64 / 2048 =
384 clk; shared memory: wgmma reads (each m64 wgmma reads its A half and all of its B) 8 x (2+2) KB +
8 x (2+1) KB = 56 KB, cp.async writes A 16 KB + W 12 KB: 84 KB = 656 clk -> bound by shared memory:
382 x 656 = 250k clk = 143 us; L2->SM 28 KB/step = 1.41 GB (~200 us at 7 TB/s, ~255 at 5.5: the other
candidate limit; the old kernel moved 0.91 GB in 270 us). BLOCK_M 256 (8 warps, one program per SM)
moves 1.11 GB (W per pixel halved) at the same shared memory per pixel. SPLIT 0 + BLOCK_N 128 (8 warps):
MMA 512 clk, shared memory 48 + 28 = 76 KB = 594 clk per step. Expected: conv kernel 170-230 us (was 270)
+ 48 us of pre-passes + ~5 us of launches -> 0.23-0.29 ms judged (was 0.325; target 0.31).
Interpreter: correct at the small size; direct checks against float64 conv at 2x3x96x83 (AlexNet's conv,
96 channels, 23x20 output) and 1x5x23x19 (k 5, s 2, p 1, 40 channels), several settings: 1.4-2.0e-7.
Range and split as triton_3xfp16_s2d.py: |x| < 8188 with X_SHIFT = 3; per-channel weight scaling 2^e.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 64      # channel tile (a power of two); SPLIT 1 adds a second tile of BLOCK_N // 2
SPLIT = 1         # 0: one dot of BLOCK_N channels per step; 1: BLOCK_N + BLOCK_N // 2 channels, two dots
KSTEP = 64        # virtual-K depth of one step: 4 (64) or 8 (128) units of 16
NUM_WARPS = 4
NUM_STAGES = 4
MAXNREG = 0       # registers per thread cap (0: none)
S2D_BLOCK_J = 32  # s2d pixels per prologue program
BLOCK_K = 16      # one fp16 MMA deep; the chunk (and channel padding) unit
X_SHIFT = 3       # x is scaled by 2^X_SHIFT before the split (exact): range vs small-value precision

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [32, 64, 128],
    "SPLIT": [0, 1],
    "KSTEP": [32, 64, 128],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4, 5],
    "MAXNREG": [0, 168, 232],
    "S2D_BLOCK_J": [16, 32, 64],
}


@triton.jit
def _s2d_split_kernel(x_ptr, xs_ptr, C, H, W, Hs, Ws, pad,
                      S: tl.constexpr, CS: tl.constexpr, CS_PAD: tl.constexpr, CS_P2: tl.constexpr,
                      BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr, X_SCALE: tl.constexpr):
    # one program per (row i of x_s2d, BLOCK_J pixels j): x_s2d[n, i, j] holds CS_PAD channels (c, dy, dx)
    # as chunks of BLOCK_K: [hi x BLOCK_K | lo x BLOCK_K] each; zeros for padding and channels past CS
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
def _weight_virtual_kernel(w_ptr, wv_ptr, inv_ptr, OC, C, KH, KW, KWs, NCH, KV,
                           S: tl.constexpr, CS_PAD: tl.constexpr, BLOCK_K: tl.constexpr, X_SHIFT: tl.constexpr,
                           BLOCK: tl.constexpr):
    # w [OC, C, KH, KW] -> wv [OC_pad, KV] fp16 in virtual-K order: unit u (BLOCK_K wide) = chunk q = u // 3,
    # part u % 3: 0 -> w_lo[q], 1 -> w_hi[q], 2 -> w_hi[q] (x's units: a_hi, a_lo, a_hi); zeros past 3 * NCH
    # units and for rows past OC. Chunk q, lane j: k = q * BLOCK_K + j = tap * CS_PAD + (c*S + dy)*S + dx,
    # tap (kh, kw) = (a*S + dy, b*S + dx). Scaled by 2^e per output channel (max |w| * 2^e in [2^13, 2^14):
    # lo stays normal); inv[oc] = 2^-(e + X_SHIFT) undoes both scalings. One program per output channel.
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
    u_limit = tl.where(oc < OC, 3 * NCH, 0)       # padding rows past OC: all zeros
    for k0 in range(0, KV, BLOCK):
        kv = k0 + tl.arange(0, BLOCK)
        u = kv // BLOCK_K
        q = u // 3
        part = u % 3
        k = q * BLOCK_K + kv % BLOCK_K
        tap = k // CS_PAD
        cs = k % CS_PAD
        c = cs // (S * S)
        kh = (tap // KWs) * S + (cs // S) % S
        kw = (tap % KWs) * S + cs % S
        ok = (u < u_limit) & (c < C) & (kh < KH) & (kw < KW)
        w = tl.load(w_ptr + ((oc * C + c) * KH + kh) * KW + kw, mask=ok, other=0.0) * scale
        hi = w.to(tl.float16)
        lo = (w - hi.to(tl.float32)).to(tl.float16)
        tl.store(wv_ptr + oc * KV + kv, tl.where(part == 0, lo, hi), mask=kv < KV)


@triton.jit
def _w_tile(wv_ptr, n_base, OC, KV, kv0, BN: tl.constexpr, KSTEP: tl.constexpr):
    # [KSTEP, BN] operand: channels n_base .. n_base + BN (rows past OC masked: never loaded), virtual K kv0..
    rn = n_base + tl.arange(0, BN)
    off = rn[:, None] * KV + kv0 + tl.arange(0, KSTEP)[None, :]
    return tl.trans(tl.load(wv_ptr + off, mask=(rn < OC)[:, None], other=0.0))


@triton.jit
def _store_tile(y_ptr, inv_ptr, bias_ptr, acc, y_img, p, p_ok, offs_n, OC, OHW,
                HAS_BIAS: tl.constexpr, RELU: tl.constexpr):
    n_ok = offs_n < OC
    acc = acc * tl.load(inv_ptr + offs_n, mask=n_ok, other=0.0)[None, :]     # exact: a power of two
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    y_off = y_img + offs_n[None, :].to(tl.int64) * OHW + p[:, None]
    tl.store(y_ptr + y_off, acc, mask=p_ok[:, None] & n_ok[None, :])


@triton.jit
def _conv_kernel(xs_ptr, wv_ptr, inv_ptr, bias_ptr, y_ptr,
                 OC, OH, OW, Hs, Ws, NCH, KV,
                 KWs: tl.constexpr, CS_PAD: tl.constexpr, HAS_BIAS: tl.constexpr, RELU: tl.constexpr,
                 OFF64: tl.constexpr, BLOCK_M: tl.constexpr, T0: tl.constexpr, T1: tl.constexpr,
                 KSTEP: tl.constexpr, BLOCK_K: tl.constexpr):
    # one program: BLOCK_M output pixels of one image x (T0 + T1) output channels (T1 = 0: one tile)
    pid_p = tl.program_id(0)
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
    NC: tl.constexpr = CS_PAD // BLOCK_K          # chunks per tap
    col = tl.arange(0, KSTEP)
    n0 = pid_n * (T0 + T1)

    acc0 = tl.zeros((BLOCK_M, T0), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, T1 if T1 > 0 else 16), dtype=tl.float32)
    for kv0 in range(0, KV, KSTEP):
        u = kv0 // BLOCK_K + col // BLOCK_K       # virtual unit of each column
        q = tl.minimum(u // 3, NCH - 1)           # its chunk (units past 3 * NCH meet zero weights)
        tap = q // NC
        coff = ((tap // KWs) * Ws + tap % KWs) * (2 * CS_PAD) + (q % NC) * (2 * BLOCK_K) \
            + tl.where(u % 3 == 1, BLOCK_K, 0) + col % BLOCK_K
        coff = tl.max_contiguous(tl.multiple_of(coff, BLOCK_K), BLOCK_K)
        a = tl.load(xs_ptr + base[:, None] + coff[None, :])
        acc0 = tl.dot(a, _w_tile(wv_ptr, n0, OC, KV, kv0, T0, KSTEP), acc0)
        if T1 > 0:
            acc1 = tl.dot(a, _w_tile(wv_ptr, n0 + T0, OC, KV, kv0, T1, KSTEP), acc1)

    p_ok = p < OHW
    y_img = img.to(tl.int64) * OC * OHW
    _store_tile(y_ptr, inv_ptr, bias_ptr, acc0, y_img, p, p_ok, n0 + tl.arange(0, T0), OC, OHW, HAS_BIAS, RELU)
    if T1 > 0:
        _store_tile(y_ptr, inv_ptr, bias_ptr, acc1, y_img, p, p_ok, n0 + T0 + tl.arange(0, T1), OC, OHW,
                    HAS_BIAS, RELU)


def conv2d_s2d_3xfp16_onedot(x, weight, bias, stride, padding, relu=False):
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
    NCH = KHs * KWs * CS_PAD // BLOCK_K           # 16-channel chunks of K (27 at AlexNet's size)
    KV = triton.cdiv(3 * NCH * BLOCK_K, KSTEP) * KSTEP
    T0, T1 = BLOCK_N, (BLOCK_N // 2 if SPLIT else 0)
    CH = T0 + T1
    OC_pad = triton.cdiv(OC, CH) * CH
    wv = torch.empty((OC_pad, KV), device=x.device, dtype=torch.float16)
    inv = torch.empty((OC_pad,), device=x.device, dtype=torch.float32)
    _weight_virtual_kernel[(OC_pad,)](weight.contiguous().float(), wv, inv, OC, C, KH, KW, KWs, NCH, KV,
                                      S=S, CS_PAD=CS_PAD, BLOCK_K=BLOCK_K, X_SHIFT=X_SHIFT, BLOCK=256,
                                      num_warps=4)
    grid = (triton.cdiv(OH * OW, BLOCK_M), NB, OC_pad // CH)
    extra = {"maxnreg": MAXNREG} if MAXNREG else {}
    _conv_kernel[grid](xs, wv, inv, bias if bias is not None else inv, y,
                       OC, OH, OW, Hs, Ws, NCH, KV,
                       KWs=KWs, CS_PAD=CS_PAD, HAS_BIAS=bias is not None, RELU=relu,
                       OFF64=xs.numel() >= 2**31, BLOCK_M=BLOCK_M, T0=T0, T1=T1, KSTEP=KSTEP, BLOCK_K=BLOCK_K,
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
        return conv2d_s2d_3xfp16_onedot(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0])
