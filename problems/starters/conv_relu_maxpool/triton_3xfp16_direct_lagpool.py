"""Conv2d -> ReLU -> MaxPool2d, Triton: triton_3xfp16_s2d_onedot_lagpool.py (the one-dot 3xFP16 conv with
the ReLU in its epilogue and the max pool inside the same kernel, LAG images behind, per-image
release/acquire counters: see that file for the pool's design, the schedule and its measured figures) whose
conv reads x DIRECTLY (conv2d/triton_3xfp16_direct_onedot.py's K loop): no space-to-depth pre-pass.

Why: ncu (H100) of the lagpool: `_s2d_split_kernel` 43 us (DRAM 77%: x fp32 read, x_s2d fp16 hi/lo written,
60 MB each way, read back by the conv) of the 0.319 ms judged; the conv+pool kernel 267 us (L2 throughput
77%, the top unit). Here the conv loads x (fp32 NCHW) at the s2d index (lane g = (tap, c, dy, dx) of output
pixel (oh, ow) = x[n, c, (oh+ty)*S + dy - pad, (ow+tx)*S + dx - pad], zero outside) by 8-byte cp.async.ca,
scales by 2^X_SHIFT and splits into fp16 hi + lo in registers; a K step is one MMA of A = [hi | lo | hi |
lo] (register operand: the permute(join(join)) order puts each value where the wgmma wants it, PTX read
offline: no shuffle, no shared-memory round trip) against W = [w_hi | w_hi | w_lo | 0] (LOLO 1: w_lo, the
fourth product). Bytes per 128-pixel tile: x 216 KB + W 243 KB (before: A 336 + W 252 KB), and no pre-pass.
Expected: the conv part ~190-215 us (was ~228 in the same kernel's conv), pool share as before, 5 us weight
pass -> 0.26-0.29 ms judged (0.319 now; target 0.31). PRE 1: the old conv path (pre-pass + x_s2d loop),
everything else the same: the in-file baseline.
Measured on the H100 (2026-11-26, benchmarks/round7_gpu.sh): it LOST: as written 0.4426 ms swept, best BLOCK_M 64
0.4249 (judged 0.4229) against lagpool's 0.3160 in the same call (why: conv2d/triton_3xfp16_direct_onedot.py).
Registers (ptxas via Triton 3.6, sm_90, offline, AlexNet's ints; no spills anywhere): default (KX 16, 4
warps, 4 stages, FUSE 1) 242, 72 KB of shared memory -> two programs per SM (the lagpool's 159 / 112 KB);
3 stages 242 (52 KB); 8 warps 130 (two programs of 8 warps per SM); BLOCK_M 256 / 8 warps (3 stages) 242,
68 KB: one per SM; BLOCK_M 64: 130; POOL_BLOCK 512: 242; PRE 1: 159, 112 KB (the lagpool as measured).
K loop `wgmma.wait_group 7` in every setting (PRE 1: 2).
Interpreter: correct at the small size (kgen eval); direct checks against float64 conv -> relu -> pool, x1
and x100 inputs: 3x3x96x83 (96 channels, conv 23x20) LAG 1 1.4e-7; 3x3x43x47 LAG 2 PRE 1 1.2e-7;
3x5x23x19 (k 5, s 2, p 1, 40 channels, VEC 1) LAG 1 1.3e-7; 2x3x71x67 FUSE 0 LOLO 1 1.4e-7; 4x3x43x47
LAG 2 BLOCK_M 64 KX 32 1.5e-7; 3x3x43x47 24 channels LAG 16 (all pooled by the tail programs) 1.4e-7.
The waits are bounded (SPIN_MAX polls, ~1 s): a broken count or schedule gives a wrong result, not a hang.
Range and split as triton_3xfp16_s2d.py: |x| < 8188 with X_SHIFT = 3; per-channel weight scaling 2^e.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 64      # channel tile (a power of two); SPLIT 1 adds a second tile of BLOCK_N // 2
SPLIT = 1         # 0: one dot of BLOCK_N channels per step; 1: BLOCK_N + BLOCK_N // 2 channels, two dots
KX = 16           # PRE 0: s2d lanes per K step (the MMA is 4 * KX deep)
LOLO = 0          # PRE 0: 1 adds the x_lo x w_lo product (a 4th block of weights loaded; 0: zeros, masked)
PRE = 0           # 1: the old conv path (s2d split pre-pass, the onedot loop over x_s2d): the in-file baseline
KSTEP = 64        # PRE 1: virtual-K depth of one step: 4 (64) or 8 (128) units of 16
NUM_WARPS = 4
NUM_STAGES = 4    # H100 sweep best (0.3164 ms vs 0.3226 at 3 stages); 112 KB of shared memory per program
MAXNREG = 0       # registers per thread cap (0: none)
S2D_BLOCK_J = 32  # PRE 1: s2d pixels per prologue program
FUSE = 1          # 1: the pool inside the conv kernel, LAG images behind; 0: a pool kernel after the conv
LAG = 16          # FUSE 1: a tile of image i pools its share of image i - LAG (done, still in L2)
POOL_BLOCK = 1024 # pooled outputs per step of a tile's pool share (FUSE 1) or per program (FUSE 0)
POOL_CG = 0       # 1: the pool's loads bypass L1 (.cg); 0: default caching (L1 serves the windows' overlap)
POOL_WARPS = 8    # warps of the separate pool kernel (FUSE 0)
BLOCK_K = 16      # one fp16 MMA deep; the chunk (and channel padding) unit
X_SHIFT = 3       # x is scaled by 2^X_SHIFT before the split (exact): range vs small-value precision
SPIN_MAX = 1 << 20  # polls of a counter before a pool share gives up (~1 s; never reached when all is well)

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [32, 64, 128],
    "SPLIT": [0, 1],
    "KX": [16, 32],
    "LOLO": [0, 1],
    "PRE": [0, 1],
    "KSTEP": [32, 64, 128],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4, 5],
    "MAXNREG": [0, 168, 232],
    "S2D_BLOCK_J": [16, 32, 64],
    "FUSE": [0, 1],
    "LAG": [8, 12, 16, 24, 32],
    "POOL_BLOCK": [256, 512, 1024, 2048],
    "POOL_CG": [0, 1],
    "POOL_WARPS": [4, 8],
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
def _weight_virtual_kernel(w_ptr, wv_ptr, inv_ptr, cnt_ptr, NCNT, OC, C, KH, KW, KWs, NCH, KV,
                           S: tl.constexpr, CS_PAD: tl.constexpr, BLOCK_K: tl.constexpr, X_SHIFT: tl.constexpr,
                           BLOCK: tl.constexpr):
    # w [OC, C, KH, KW] -> wv [OC_pad, KV] fp16 in virtual-K order: unit u (BLOCK_K wide) = chunk q = u // 3,
    # part u % 3: 0 -> w_lo[q], 1 -> w_hi[q], 2 -> w_hi[q] (x's units: a_hi, a_lo, a_hi); zeros past 3 * NCH
    # units and for rows past OC. Chunk q, lane j: k = q * BLOCK_K + j = tap * CS_PAD + (c*S + dy)*S + dx,
    # tap (kh, kw) = (a*S + dy, b*S + dx). Scaled by 2^e per output channel (max |w| * 2^e in [2^13, 2^14):
    # lo stays normal); inv[oc] = 2^-(e + X_SHIFT) undoes both scalings. One program per output channel;
    # program 0 also zeroes the NCNT per-image tile counters of the conv kernel (which runs after it)
    oc = tl.program_id(0)
    if oc == 0:                                   # the conv kernel's per-image tile counters start at 0
        for k0 in range(0, NCNT, BLOCK):
            kk = k0 + tl.arange(0, BLOCK)
            tl.store(cnt_ptr + kk, tl.zeros([BLOCK], dtype=tl.int32), mask=kk < NCNT)
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
def _weight_direct_kernel(w_ptr, wv_ptr, inv_ptr, cnt_ptr, NCNT, OC, C, KH, KW, KWs, NG, KV,
                          S: tl.constexpr, CS_PAD: tl.constexpr, KX: tl.constexpr, X_SHIFT: tl.constexpr,
                          LOLO: tl.constexpr, BLOCK: tl.constexpr):
    # w [OC, C, KH, KW] -> wv [OC_pad, KV] fp16 in the direct kernel's K order: step t covers s2d lanes
    # g = t*KX .. t*KX + KX-1 as 4 blocks of KX: w_hi (x's hi), w_hi (x's lo), w_lo (x's hi), w_lo or zeros
    # (x's lo; LOLO 0: never loaded). Lane g = tap * CS_PAD + (c*S + dy)*S + dx, tap (kh, kw) = (a*S + dy,
    # b*S + dx); zeros past NG lanes, for taps past the kernel and rows past OC. Scaled by 2^e per output
    # channel (max |w| * 2^e in [2^13, 2^14): lo stays normal); inv[oc] = 2^-(e + X_SHIFT) undoes both.
    # Program 0 also zeroes the NCNT per-image tile counters of the conv kernel (which runs after it).
    oc = tl.program_id(0)
    if oc == 0:
        for k0 in range(0, NCNT, BLOCK):
            kk = k0 + tl.arange(0, BLOCK)
            tl.store(cnt_ptr + kk, tl.zeros([BLOCK], dtype=tl.int32), mask=kk < NCNT)
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
    g_limit = tl.where(oc < OC, NG, 0)            # padding rows past OC: all zeros
    for k0 in range(0, KV, BLOCK):
        kv = k0 + tl.arange(0, BLOCK)
        blk = (kv // KX) % 4
        g = (kv // (4 * KX)) * KX + kv % KX
        tap = g // CS_PAD
        cs = g % CS_PAD
        c = cs // (S * S)
        kh = (tap // KWs) * S + (cs // S) % S
        kw = (tap % KWs) * S + cs % S
        ok = (g < g_limit) & (c < C) & (kh < KH) & (kw < KW)
        if not LOLO:
            ok = ok & (blk < 3)
        w = tl.load(w_ptr + ((oc * C + c) * KH + kh) * KW + kw, mask=ok, other=0.0) * scale
        hi = w.to(tl.float16)
        lo = (w - hi.to(tl.float32)).to(tl.float16)
        tl.store(wv_ptr + oc * KV + kv, tl.where(blk < 2, hi, lo), mask=kv < KV)


@triton.jit
def _w_tile_direct(wv_ptr, n_base, OC, KV, kv0, BN: tl.constexpr, KX: tl.constexpr, LOLO: tl.constexpr):
    # [4*KX, BN] operand of one step; LOLO 0: the 4th block (w_lo x x's lo) is masked: zeros, never loaded
    rn = n_base + tl.arange(0, BN)
    kk = tl.arange(0, 4 * KX)
    off = rn[:, None] * KV + kv0 + kk[None, :]
    if LOLO:
        ok = (rn < OC)[:, None] & (kk >= 0)[None, :]
    else:
        ok = (rn < OC)[:, None] & (kk < 3 * KX)[None, :]
    return tl.trans(tl.load(wv_ptr + off, mask=ok, other=0.0))


@triton.jit
def _direct_acc(x_ptr, wv_ptr, img, p, n0, C, H, W, OC, OH, OW, NG, KV,
                S: tl.constexpr, PAD: tl.constexpr, KWs: tl.constexpr, CS: tl.constexpr, CS_PAD: tl.constexpr,
                OFF64: tl.constexpr, VEC: tl.constexpr, BLOCK_M: tl.constexpr, T0: tl.constexpr,
                T1: tl.constexpr, KX: tl.constexpr, X_SCALE: tl.constexpr, LOLO: tl.constexpr):
    # the conv of BLOCK_M output pixels p of image img x (T0 + T1) channels from n0, reading x (fp32 NCHW)
    # at the space-to-depth index and splitting it in registers: step t = s2d lanes g = t*KX + j, lane g =
    # (tap, c, dy, dx) -> x[img, c, (oh + ty)*S + dy - PAD, (ow + tx)*S + dx - PAD] (zero outside)
    OHW = OH * OW
    p_ld = tl.minimum(p, OHW - 1)                 # clamped: every address valid, no row mask
    oh = p_ld // OW
    ow = p_ld % OW
    iy0 = oh * S
    ix0 = ow * S
    if OFF64:
        xrow = img.to(tl.int64) * C * H * W + iy0 * W + ix0
    else:
        xrow = img * C * H * W + iy0 * W + ix0
    xrow = tl.multiple_of(xrow, VEC)             # VEC 2: every run of 2 lanes is 8-byte aligned (host checks)
    j = tl.arange(0, KX)
    acc0 = tl.zeros((BLOCK_M, T0), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, T1 if T1 > 0 else 16), dtype=tl.float32)
    for g0 in range(0, NG, KX):
        g = g0 + j
        tap = g // CS_PAD
        cs = g % CS_PAD
        ry = (tap // KWs) * S + (cs // S) % S - PAD
        rx = (tap % KWs) * S + cs % S - PAD
        coff = tl.max_contiguous(tl.multiple_of((cs // (S * S)) * H * W + ry * W + rx, VEC), VEC)
        iy = iy0[:, None] + ry[None, :]
        ix = ix0[:, None] + rx[None, :]
        ok = (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W) & ((cs < CS) & (g < NG))[None, :]
        ok = tl.max_constancy(ok, [1, VEC])       # both lanes of a run are in or out together
        v = tl.load(x_ptr + xrow[:, None] + coff[None, :], mask=ok, other=0.0) * X_SCALE  # a power of 2: exact
        hi = v.to(tl.float16)
        lo = (v - hi.to(tl.float32)).to(tl.float16)  # v - hi is exact in fp32
        # A = [hi | lo | hi | lo] along K: [BM, KX, t, s] -> [BM, s, t, KX]; this order keeps each thread's
        # registers where the wgmma wants them (PTX: no shuffle, no shared-memory round trip)
        hl = tl.join(hi, lo)
        a = tl.reshape(tl.permute(tl.join(hl, hl), (0, 3, 2, 1)), (BLOCK_M, 4 * KX))
        kv0 = g0 * 4
        acc0 = tl.dot(a, _w_tile_direct(wv_ptr, n0, OC, KV, kv0, T0, KX, LOLO), acc0)
        if T1 > 0:
            acc1 = tl.dot(a, _w_tile_direct(wv_ptr, n0 + T0, OC, KV, kv0, T1, KX, LOLO), acc1)
    return acc0, acc1


@triton.jit
def _s2d_acc(xs_ptr, wv_ptr, img, p, n0, OC, OH, OW, Hs, Ws, NCH, KV, KWs: tl.constexpr, CS_PAD: tl.constexpr,
             OFF64: tl.constexpr, BLOCK_M: tl.constexpr, T0: tl.constexpr, T1: tl.constexpr, KSTEP: tl.constexpr,
             BLOCK_K: tl.constexpr):
    # PRE 1: the onedot conv loop of triton_3xfp16_s2d_onedot_lagpool.py over x_s2d (fp16 hi/lo chunks)
    OHW = OH * OW
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
    return acc0, acc1


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
def _pool_share(y_ptr, out_ptr, pimg, share, SHARE, NOUT, OC, OH, OW, PH, PW, PS,
                PK: tl.constexpr, POOL_BLOCK: tl.constexpr, POOL_CG: tl.constexpr):
    # pooled outputs [share * SHARE, (share + 1) * SHARE) of image pimg (flat (oc, py, px) order, NOUT of them)
    lo = share * SHARE
    hi = tl.minimum(lo + SHARE, NOUT)
    y_img = pimg.to(tl.int64) * OC * OH * OW
    o_img = pimg.to(tl.int64) * NOUT
    for o0 in range(lo, hi, POOL_BLOCK):
        o = o0 + tl.arange(0, POOL_BLOCK)
        ok = o < hi
        px = o % PW
        t = o // PW
        py = t % PH
        oc = t // PH
        base = y_img + (oc * OH + py * PS) * OW + px * PS
        best = tl.full([POOL_BLOCK], float("-inf"), tl.float32)
        for dy in tl.static_range(PK):
            for dx in tl.static_range(PK):
                if POOL_CG:
                    v = tl.load(y_ptr + base + dy * OW + dx, mask=ok, other=float("-inf"), cache_modifier=".cg")
                else:
                    v = tl.load(y_ptr + base + dy * OW + dx, mask=ok, other=float("-inf"))
                best = tl.maximum(best, v)
        tl.store(out_ptr + o_img + o, best, mask=ok)  # the conv epilogue applied the ReLU


@triton.jit
def _conv_pool_kernel(xs_ptr, wv_ptr, inv_ptr, bias_ptr, y_ptr, out_ptr, cnt_ptr,
                      OC, OH, OW, Hs, Ws, NCH, KV, NB, TP, NN, N_CONV, LAG_N, PH, PW, PS, NOUT, SHARE,
                      C, H, W, NG,
                      KWs: tl.constexpr, CS_PAD: tl.constexpr, HAS_BIAS: tl.constexpr, RELU: tl.constexpr,
                      OFF64: tl.constexpr, BLOCK_M: tl.constexpr, T0: tl.constexpr, T1: tl.constexpr,
                      KSTEP: tl.constexpr, BLOCK_K: tl.constexpr, FUSE: tl.constexpr, PK: tl.constexpr,
                      POOL_BLOCK: tl.constexpr, POOL_CG: tl.constexpr, SPIN_MAX: tl.constexpr,
                      PRE: tl.constexpr, S: tl.constexpr, PAD: tl.constexpr, CS: tl.constexpr, VEC: tl.constexpr,
                      KX: tl.constexpr, X_SCALE: tl.constexpr, LOLO: tl.constexpr):
    # programs 0 .. N_CONV-1: one conv tile each, image-major (BLOCK_M output pixels x (T0 + T1) channels; the
    # TPI = TP * NN tiles of image i are programs i*TPI .. i*TPI + TPI-1); FUSE 1: each then pools share r (its
    # rank in its image) of image i - LAG_N, and programs N_CONV .. N_CONV + LAG_N*TPI - 1 pool the last
    # LAG_N images' shares (no conv). PRE 0: xs_ptr is x itself (fp32 NCHW, read directly); PRE 1: x_s2d
    pid = tl.program_id(0)
    TPI = TP * NN
    pimg = pid * 0 - 1                            # the image this program pools (-1: none)
    share = pid * 0
    if pid < N_CONV:
        img = pid // TPI
        r = pid % TPI
        pid_n = r // TP
        pid_p = r % TP
        OHW = OH * OW
        p = pid_p * BLOCK_M + tl.arange(0, BLOCK_M)
        n0 = pid_n * (T0 + T1)
        if PRE:
            acc0, acc1 = _s2d_acc(xs_ptr, wv_ptr, img, p, n0, OC, OH, OW, Hs, Ws, NCH, KV, KWs, CS_PAD, OFF64,
                                  BLOCK_M, T0, T1, KSTEP, BLOCK_K)
        else:
            acc0, acc1 = _direct_acc(xs_ptr, wv_ptr, img, p, n0, C, H, W, OC, OH, OW, NG, KV, S, PAD, KWs, CS,
                                     CS_PAD, OFF64, VEC, BLOCK_M, T0, T1, KX, X_SCALE, LOLO)

        p_ok = p < OHW
        y_img = img.to(tl.int64) * OC * OHW
        _store_tile(y_ptr, inv_ptr, bias_ptr, acc0, y_img, p, p_ok, n0 + tl.arange(0, T0), OC, OHW, HAS_BIAS, RELU)
        if T1 > 0:
            _store_tile(y_ptr, inv_ptr, bias_ptr, acc1, y_img, p, p_ok, n0 + T0 + tl.arange(0, T1), OC, OHW,
                        HAS_BIAS, RELU)
        if FUSE:
            # every thread's stores of this tile, then one release at GPU scope: the tile is counted done
            tl.debug_barrier()
            tl.atomic_add(cnt_ptr + img, 1, sem="release", scope="gpu")
            pimg = img - LAG_N
            share = r
    else:
        t = pid - N_CONV
        pimg = NB - LAG_N + t // TPI
        share = t % TPI
    if FUSE:  # noqa: SIM102  (FUSE is a compile-time branch, pimg a run-time one)
        if pimg >= 0:
            # wait (acquire, GPU scope) until the TPI tiles of image pimg are counted: with LAG_N images of
            # lag they finished long ago and this is one atomic; all of them are earlier programs, so the wait
            # ends however the programs are scheduled (and at once in the interpreter, which runs them in order)
            # (bounded: a broken count or schedule gives a wrong result after ~1 s, never a hung GPU)
            done = tl.atomic_add(cnt_ptr + pimg, 0, sem="acquire", scope="gpu")
            spins = 0
            while (done < TPI) & (spins < SPIN_MAX):
                done = tl.atomic_add(cnt_ptr + pimg, 0, sem="acquire", scope="gpu")
                spins += 1
            tl.debug_barrier()
            _pool_share(y_ptr, out_ptr, pimg, share, SHARE, NOUT, OC, OH, OW, PH, PW, PS,
                        PK, POOL_BLOCK, POOL_CG)


@triton.jit
def _maxpool_kernel(y_ptr, out_ptr, NOUT, OC, OH, OW, PH, PW, PS,
                    PK: tl.constexpr, POOL_BLOCK: tl.constexpr, POOL_CG: tl.constexpr):
    # FUSE 0: the pool after the conv; program (share, image): POOL_BLOCK pooled outputs of one image
    _pool_share(y_ptr, out_ptr, tl.program_id(1), tl.program_id(0), POOL_BLOCK, NOUT, OC, OH, OW, PH, PW, PS,
                PK, POOL_BLOCK, POOL_CG)


def conv_relu_pool_3xfp16_direct(x, weight, bias, stride, padding, PK, PS):
    x = x.contiguous().float()
    NB, C, H, W = x.shape
    OC, _, KH, KW = weight.shape
    S = stride
    OH = (H + 2 * padding - KH) // S + 1
    OW = (W + 2 * padding - KW) // S + 1
    PH = (OH - PK) // PS + 1 if OH >= PK else 0
    PW = (OW - PK) // PS + 1 if OW >= PK else 0
    out = torch.empty((NB, OC, PH, PW), device=x.device, dtype=torch.float32)
    if out.numel() == 0:
        return out
    y = torch.empty((NB, OC, OH, OW), device=x.device, dtype=torch.float32)
    KHs, KWs = triton.cdiv(KH, S), triton.cdiv(KW, S)
    Hs, Ws = OH + KHs - 1, OW + KWs - 1           # exactly the s2d pixels some output reads (PRE 1)
    CS = S * S * C
    CS_PAD = triton.cdiv(CS, BLOCK_K) * BLOCK_K
    NCH = KHs * KWs * CS_PAD // BLOCK_K           # 16-channel chunks of K (27 at AlexNet's size)
    NG = NCH * BLOCK_K                            # s2d lanes of K (PRE 0)
    T0, T1 = BLOCK_N, (BLOCK_N // 2 if SPLIT else 0)
    CH = T0 + T1
    OC_pad = triton.cdiv(OC, CH) * CH
    inv = torch.empty((OC_pad,), device=x.device, dtype=torch.float32)
    cnt = torch.empty((NB,), device=x.device, dtype=torch.int32)   # zeroed by the weight kernel
    w32 = weight.contiguous().float()
    if PRE:
        xs = torch.empty((NB * Hs * Ws * 2 * CS_PAD,), device=x.device, dtype=torch.float16)
        _s2d_split_kernel[(NB * Hs, triton.cdiv(Ws, S2D_BLOCK_J))](
            x, xs, C, H, W, Hs, Ws, padding, S=S, CS=CS, CS_PAD=CS_PAD, CS_P2=triton.next_power_of_2(CS_PAD),
            BLOCK_J=S2D_BLOCK_J, BLOCK_K=BLOCK_K, X_SCALE=float(2 ** X_SHIFT), num_warps=4)
        KV = triton.cdiv(3 * NCH * BLOCK_K, KSTEP) * KSTEP
        wv = torch.empty((OC_pad, KV), device=x.device, dtype=torch.float16)
        _weight_virtual_kernel[(OC_pad,)](w32, wv, inv, cnt, NB if FUSE else 0, OC, C, KH, KW, KWs, NCH, KV,
                                          S=S, CS_PAD=CS_PAD, BLOCK_K=BLOCK_K, X_SHIFT=X_SHIFT, BLOCK=256,
                                          num_warps=4)
        src, vec = xs, 1
    else:
        KV = triton.cdiv(NG, KX) * 4 * KX         # the MMA's K: 4 blocks of KX per step
        wv = torch.empty((OC_pad, KV), device=x.device, dtype=torch.float16)
        _weight_direct_kernel[(OC_pad,)](w32, wv, inv, cnt, NB if FUSE else 0, OC, C, KH, KW, KWs, NG, KV,
                                         S=S, CS_PAD=CS_PAD, KX=KX, X_SHIFT=X_SHIFT, LOLO=LOLO, BLOCK=256,
                                         num_warps=4)
        # 8-byte runs need every 2-lane run aligned: x's base (torch: 256 B), S, pad, W and H*W even
        src = x
        vec = 2 if S % 2 == 0 and padding % 2 == 0 and W % 2 == 0 and (H * W) % 2 == 0 \
            and x.data_ptr() % 8 == 0 else 1
    TP, NN = triton.cdiv(OH * OW, BLOCK_M), OC_pad // CH
    TPI = TP * NN                                 # conv tiles per image
    N_CONV = NB * TPI
    NOUT = OC * PH * PW                           # pooled outputs per image
    LAG_N = min(LAG, NB) if FUSE else 0
    SHARE = triton.cdiv(NOUT, TPI)                # pooled outputs per tile (FUSE 1)
    extra = {"maxnreg": MAXNREG} if MAXNREG else {}
    _conv_pool_kernel[(N_CONV + LAG_N * TPI,)](
        src, wv, inv, bias if bias is not None else inv, y, out, cnt,
        OC, OH, OW, Hs, Ws, NCH, KV, NB, TP, NN, N_CONV, LAG_N, PH, PW, PS, NOUT, SHARE, C, H, W, NG,
        KWs=KWs, CS_PAD=CS_PAD, HAS_BIAS=bias is not None, RELU=True,
        OFF64=src.numel() >= 2**31, BLOCK_M=BLOCK_M, T0=T0, T1=T1, KSTEP=KSTEP, BLOCK_K=BLOCK_K,
        FUSE=FUSE, PK=PK, POOL_BLOCK=POOL_BLOCK, POOL_CG=POOL_CG, SPIN_MAX=SPIN_MAX,
        PRE=PRE, S=S, PAD=padding, CS=CS, VEC=vec, KX=KX, X_SCALE=float(2 ** X_SHIFT), LOLO=LOLO,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES, **extra)
    if not FUSE:
        _maxpool_kernel[(triton.cdiv(NOUT, POOL_BLOCK), NB)](y, out, NOUT, OC, OH, OW, PH, PW, PS, PK=PK,
                                                           POOL_BLOCK=POOL_BLOCK, POOL_CG=POOL_CG,
                                                           num_warps=POOL_WARPS)
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
        return conv_relu_pool_3xfp16_direct(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0],
                                            self.pool_kernel, self.pool_stride)
