"""Conv2d -> ReLU -> MaxPool2d, Triton: triton_3xfp16_s2d_lagpool_oneprep.py (the one-dot 3xFP16 space-to-depth
conv, the weight layout folded into the split's launch, the conv launched with PDL, the max pool inside the conv
kernel LAG images behind: see that file and triton_3xfp16_s2d_onedot_lagpool.py for all of it) with the conv's
scratch output laid out for the pool. Same conv, same K loop, same numerics (the pool is exact: a max of the
stored fp32 values); only the scratch's layout, the pool shares and what the compiler knows of the geometry change.

Why: oneprep is judged 0.3099 / 0.3111 / 0.3096 ms (target 0.31), the conv alone (conv2d oneprep) 0.2755: the
pooled epilogue costs ~35 us. Pooling in the tile itself does not pay at this size (lagpool's docstring:
pool-aligned tiles recompute 1.16-1.5x the MMAs; 55-wide rows), so the 116 MB scratch stays, and what is left
to cut is the work of the pool shares each conv program runs after its tile (its SM's tensor cores lose that
program meanwhile) and their L2 traffic on an L2-bound conv (ncu: L2 77%). In oneprep a share is 2,916 outputs
in flat (oc, py, px) order over an NCHW scratch: per output 9 scalar 4-byte loads (px steps by 2 floats: no
vectors), three runtime div/mods (PW, PH, OW are runtime ints), and the conv's stores are scalar too (the
channel stride, 3,025 floats, has no 16-byte alignment): 96 STG.32 per thread per tile.

How, one knob each (defaults: what should be fastest):
  NHWC 1: the scratch is pixel-major, y[img, pixel, OC_pad] (every padded channel stored: their weights are 0,
    so they hold ReLU(0) = 0). The conv's epilogue stores 384-byte rows (16-byte STG.128, 24 per thread per
    tile instead of 96); a share is SHARE = cdiv(27 * 27, 24) = 31 pooled pixels of image i - LAG, all channels,
    as [POOL_PIX, POOL_CB] = [32, 32] blocks: each of the 9 taps is one 16-byte load of 4 channels per thread
    (27 block loads per share: 54 LDG.128 per thread, ~216 LDG.32 before; L1 wavefronts ~2.5x fewer), the
    taps' overlap (dx 0 of px + 1 = dx 2 of px) served by L1, and the pooled store to NCHW `out` transposed
    by Triton through shared memory. OW, PW and PS are compile-time (one compile per shape, as every launch
    config here), so a pixel's (py, px) is a multiply-shift once per pixel, not three div/mods per output.
  NHWC 2: shares are (channel group of POOL_CB, band of BAND = cdiv(27, 24 / 3) = 4 pooled rows): 21 units
    for 24 tiles, [32 px, 32 ch] blocks, and the window's third conv row is the next pooled row's first
    (pool 3 / stride 2), so its horizontal max is carried down the band: 9 conv rows read per 4 pooled rows
    (12 before) and 6 loads per output instead of 9. Costs: 3 of 24 tiles pool nothing (units are 4 rows of
    3,456 outputs vs NHWC 1's 2,976), the band's rows are a dependent loop of 4 steps.
  NHWC 0: oneprep's NCHW scratch and flat shares (with the compile-time geometry): the in-file reference.
  Y_EVICT 1 (NHWC 1/2): the scratch stored evict_last and read by the pool evict_first, so the 18.6 MB of
    scratch between a tile and its pool share stay in L2 over the streamed x_s2d; 0: no hints.
Traffic per tile (AlexNet size): conv as before (~344 KB of x_s2d and ~258 KB of weights from L2), 48 KB of
scratch written; its pool share reads ~48 KB of scratch from L2 (NHWC 2: ~36 KB) and writes 11.7 KB of `out`.
Expected: the pool phase ~2-3x fewer instructions and L1 wavefronts, the epilogue's stores 4x fewer; if the
~35 us are mostly the share's issue/latency time: -10 to -15 us; if mostly L2 bytes: -3 to -8 us (NHWC 2 more).
Expected 0.295-0.303 ms judged. Measured (H100, `bash benchmarks/crm10_gpu.sh 190`, tenth session; RESULTS.md):
swept NHWC 2 LAG 8 0.3029 ms (the defaults now), NHWC 1 LAG 8 0.3044, NHWC 0 0.3044, oneprep as written 0.3081;
judged (`kgen eval --no-baselines`, same call) 0.3045 ms against oneprep's 0.3105 (-1.9%). The gain is smaller than
hoped and NHWC 0 (oneprep's layout with compile-time geometry) gets most of it: the pool's cost is mostly its L2
traffic and latency, not its instruction count; fusing the pool into the conv tile is the next step.
PTX / ptxas (Triton 3.9.0's wheel here, sm_90, offline; ints specialized as the JIT does at AlexNet's size; the
device's Triton 3.6 may differ a little): NHWC 1: 182 registers, no spills, 114,688 B shared (2 programs per SM
as before: shared memory is the limit); per thread the epilogue is 24 st.global.v4.b32, a pool block step 18
ld.global.v4.b32 (9 taps x 2) and 8 scalar stores to `out`; NHWC 2: 182, 18 v4 loads (the carried row's 6, then
12 per pooled row); NHWC 0 (oneprep's pattern): 168, 104 scalar stores (96 of them the epilogue's) and 72 scalar
loads per step; NHWC 2 POOL_CB 64: 198; Y_EVICT 1: the hints as L2::cache_hint policies, 184.
Interpreter (Triton 3.9 CPU, TRITON_INTERPRET=1): direct checks against float64 conv -> relu -> pool, x1 and
x100 inputs, normwise and elementwise (rtol 1e-5): the small size 2x3x43x47 (16 channels) NHWC 1 and 2:
1.16e-7-1.24e-7; 5x3x96x83 (96 channels, k 11, s 4, p 2, pool 3/2) LAG 2 NHWC 1 and 2: 1.23e-7-1.24e-7;
3x3x96x83 LAG 16 POOL_PIX 16 POOL_CB 64: 1.25e-7; 4x3x71x67 LAG 1 ONEPREP 0 POOL_CB 128; 3x3x71x67 FUSE 0
(NHWC 1 and 2), NHWC 0 LAG 1, Y_EVICT 1 LAG 1; 3x3x100x90 NHWC 2 LAG 16 POOL_CB 64; 3x5x23x19 (k 5, s 2, p 1,
40 channels: a masked channel group, 3 units on 1 tile) NHWC 2 POOL_CB 16 Y_EVICT 1: 1.0e-7; 4x5x23x19 SPLIT 0
BLOCK_N 32 pool 2/2 (no carry) LAG 2, NHWC 1 and 2: 1.2e-7. Every one under 1.3e-7.
The waits are bounded (SPIN_MAX polls, ~1 s): a broken count or schedule gives a wrong result, not a hang.
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
NUM_STAGES = 4    # H100 sweep best (0.3164 ms vs 0.3226 at 3 stages); 112 KB of shared memory per program
MAXNREG = 0       # registers per thread cap (0: none)
S2D_BLOCK_J = 32  # s2d pixels per split program
S2D_WARPS = 4     # warps per prep program
S2D_VEC = 0       # 1: hi/lo interleaved in registers (join/permute via 4 KB shared); 0: lagpool's two stores
ONEPREP = 1       # 1: the weight layout (and counter zeroing) as extra programs of the split's launch; 0: 2 launches
PDL = 1           # 1: the conv launched with programmatic dependent launch, griddepcontrol.wait at its top
PDL_TRIGGER = 1   # PDL: where the prep programs allow the conv's launch: 1 at their start, 2 at their end, 0 exit
FUSE = 1          # 1: the pool inside the conv kernel, LAG images behind; 0: a pool kernel after the conv
LAG = 8           # FUSE 1: a tile of image i pools its share of image i - LAG (done, still in L2); H100: 8
NHWC = 2          # 1: the conv scratch y pixel-major [img, pixel, OC_pad] (pool loads 16 B vectors); 0: NCHW;
                  # 2: NHWC, shares are (channel group, band of pooled rows), a window row's max carried down
POOL_PIX = 32     # NHWC 1: pooled pixels per step of a pool share (x POOL_CB channels)
POOL_CB = 32      # NHWC 1: channels per step of a pool share (a power of two)
Y_EVICT = 0       # NHWC 1: 1 the scratch stored evict_last and read by the pool evict_first (L2 priority); 0 none
POOL_BLOCK = 1024 # NHWC 0: pooled outputs per step of a tile's pool share (FUSE 1) or per program (FUSE 0)
POOL_CG = 0       # 1: the pool's loads bypass L1 (.cg); 0: default caching (L1 serves the windows' overlap)
POOL_WARPS = 8    # warps of the separate pool kernel (FUSE 0)
BLOCK_K = 16      # one fp16 MMA deep; the chunk (and channel padding) unit
X_SHIFT = 3       # x is scaled by 2^X_SHIFT before the split (exact): range vs small-value precision
SPIN_MAX = 1 << 20  # polls of a counter before a pool share gives up (~1 s; never reached when all is well)

KGEN_TUNABLE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [32, 64, 128],
    "SPLIT": [0, 1],
    "KSTEP": [32, 64, 128],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4, 5],
    "MAXNREG": [0, 168, 232],
    "S2D_BLOCK_J": [16, 32, 64],
    "S2D_WARPS": [2, 4, 8],
    "S2D_VEC": [0, 1],
    "ONEPREP": [0, 1],
    "PDL": [0, 1],
    "PDL_TRIGGER": [0, 1, 2],
    "FUSE": [0, 1],
    "LAG": [8, 12, 16, 24, 32],
    "NHWC": [0, 1, 2],
    "POOL_PIX": [16, 32, 64],
    "POOL_CB": [16, 32, 64, 128],
    "Y_EVICT": [0, 1],
    "POOL_BLOCK": [256, 512, 1024, 2048],
    "POOL_CG": [0, 1],
    "POOL_WARPS": [4, 8],
}


@triton.jit
def _s2d_program(x_ptr, xs_ptr, row, jb, C, H, W, Hs, Ws, pad,
                 S: tl.constexpr, CS: tl.constexpr, CS_PAD: tl.constexpr, CS_P2: tl.constexpr,
                 BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr, X_SCALE: tl.constexpr, VEC: tl.constexpr):
    # row (n * Hs + i) of x_s2d, pixels jb * BLOCK_J ..: x_s2d[n, i, j] holds CS_PAD channels (c, dy, dx) as
    # chunks of BLOCK_K: [hi x BLOCK_K | lo x BLOCK_K] each; zeros for padding and channels past CS
    n = row // Hs
    i = row % Hs
    j = jb * BLOCK_J + tl.arange(0, BLOCK_J)
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
    if VEC:
        # interleave in registers into the stored order ([chunk][hi | lo][16]): one contiguous run of
        # 2 * CS_PAD halves per pixel, one store (ptxas: 16-byte STG either way; VEC 0 already vectorizes)
        NQ: tl.constexpr = CS_P2 // BLOCK_K
        hl = tl.join(tl.reshape(hi, (BLOCK_J, NQ, BLOCK_K)), tl.reshape(lo, (BLOCK_J, NQ, BLOCK_K)))
        hl = tl.reshape(tl.permute(hl, (0, 1, 3, 2)), (BLOCK_J, 2 * CS_P2))
        e = tl.arange(0, 2 * CS_P2)
        dst = (row.to(tl.int64) * Ws + j[:, None]) * (2 * CS_PAD) + e[None, :]
        tl.store(xs_ptr + dst, hl, mask=(j < Ws)[:, None] & (e < 2 * CS_PAD)[None, :])
    else:
        dst = (row.to(tl.int64) * Ws + j[:, None]) * (2 * CS_PAD) + (cs + (cs // BLOCK_K) * BLOCK_K)[None, :]
        ok = (j < Ws)[:, None] & (cs < CS_PAD)[None, :]
        tl.store(xs_ptr + dst, hi, mask=ok)
        tl.store(xs_ptr + dst + BLOCK_K, lo, mask=ok)


@triton.jit
def _weight_program(w_ptr, wv_ptr, inv_ptr, cnt_ptr, oc, NCNT, OC, C, KH, KW, KWs, NCH, KV,
                    S: tl.constexpr, CS_PAD: tl.constexpr, BLOCK_K: tl.constexpr, X_SHIFT: tl.constexpr,
                    BLOCK: tl.constexpr):
    # w [OC, C, KH, KW] -> wv [OC_pad, KV] fp16 in virtual-K order: unit u (BLOCK_K wide) = chunk q = u // 3,
    # part u % 3: 0 -> w_lo[q], 1 -> w_hi[q], 2 -> w_hi[q] (x's units: a_hi, a_lo, a_hi); zeros past 3 * NCH
    # units and for rows past OC. Chunk q, lane j: k = q * BLOCK_K + j = tap * CS_PAD + (c*S + dy)*S + dx,
    # tap (kh, kw) = (a*S + dy, b*S + dx). Scaled by 2^e per output channel (max |w| * 2^e in [2^13, 2^14):
    # lo stays normal); inv[oc] = 2^-(e + X_SHIFT) undoes both scalings. Output channel oc; oc 0 also zeroes
    # the NCNT per-image tile counters of the conv kernel (which runs after this launch)
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
def _prep_kernel(x_ptr, xs_ptr, C, H, W, Hs, Ws, pad, NJ,
                 w_ptr, wv_ptr, inv_ptr, cnt_ptr, NW, NCNT, OC, KH, KW, KWs, NCH, KV,
                 S: tl.constexpr, CS: tl.constexpr, CS_PAD: tl.constexpr, CS_P2: tl.constexpr,
                 BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr, X_SCALE: tl.constexpr, X_SHIFT: tl.constexpr,
                 VEC: tl.constexpr, DO_S2D: tl.constexpr, DO_W: tl.constexpr, TRIGGER: tl.constexpr):
    # 1-D grid: programs 0 .. NW-1 build the weight's virtual-K layout (one output channel each, first so
    # they run in the first wave beside the split programs), the rest are s2d split programs (NJ per row).
    # ONEPREP 1: both in this one launch; 0: two launches (DO_W only, then DO_S2D only, NW = 0)
    pid = tl.program_id(0)
    if TRIGGER == 1:
        # PDL: the conv grid may launch once every program here has started (its programs wait in
        # griddepcontrol.wait for this grid's completion and memory flush before reading anything)
        tl.extra.cuda.gdc_launch_dependents()
    if DO_W and pid < NW:
        _weight_program(w_ptr, wv_ptr, inv_ptr, cnt_ptr, pid, NCNT, OC, C, KH, KW, KWs, NCH, KV,
                        S, CS_PAD, BLOCK_K, X_SHIFT, 256)
    if DO_S2D and pid >= NW:
        t = pid - NW
        _s2d_program(x_ptr, xs_ptr, t // NJ, t % NJ, C, H, W, Hs, Ws, pad,
                     S, CS, CS_PAD, CS_P2, BLOCK_J, BLOCK_K, X_SCALE, VEC)
    if TRIGGER == 2:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _w_tile(wv_ptr, n_base, OC, KV, kv0, BN: tl.constexpr, KSTEP: tl.constexpr):
    # [KSTEP, BN] operand: channels n_base .. n_base + BN (rows past OC masked: never loaded), virtual K kv0..
    rn = n_base + tl.arange(0, BN)
    off = rn[:, None] * KV + kv0 + tl.arange(0, KSTEP)[None, :]
    return tl.trans(tl.load(wv_ptr + off, mask=(rn < OC)[:, None], other=0.0))


@triton.jit
def _store_tile(y_ptr, inv_ptr, bias_ptr, acc, img, p, p_ok, offs_n, OC, OCP, OHW,
                HAS_BIAS: tl.constexpr, RELU: tl.constexpr, NHWC: tl.constexpr, Y_EVICT: tl.constexpr):
    # NHWC 1: row p of the tile is OCP contiguous floats of y (every channel up to OC_pad, padding rows 0 after
    # the ReLU: zero weights, no bias), so the conv's stores and the pool's loads are whole 16-byte vectors
    n_ok = offs_n < OC
    acc = acc * tl.load(inv_ptr + offs_n, mask=n_ok, other=0.0)[None, :]     # exact: a power of two
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    if NHWC:
        y_off = (img.to(tl.int64) * OHW + p[:, None]) * OCP + offs_n[None, :]
        if Y_EVICT:   # kept in L2 over the x_s2d stream until its pool share reads it (LAG images later)
            tl.store(y_ptr + y_off, acc, mask=p_ok[:, None], eviction_policy="evict_last")
        else:
            tl.store(y_ptr + y_off, acc, mask=p_ok[:, None])
    else:
        y_off = img.to(tl.int64) * OC * OHW + offs_n[None, :].to(tl.int64) * OHW + p[:, None]
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
def _pool_share_nhwc(y_ptr, out_ptr, pimg, share, SHARE, OC, OCP, OH, OW: tl.constexpr, PH, PW: tl.constexpr,
                     PS: tl.constexpr, PK: tl.constexpr, POOL_PIX: tl.constexpr, POOL_CB: tl.constexpr,
                     Y_EVICT: tl.constexpr):
    # NHWC 1: pooled pixels [share * SHARE, (share + 1) * SHARE) of image pimg (flat py * PW + px), all OC
    # channels, as [POOL_PIX, POOL_CB] blocks: each of the PK * PK taps is one load of POOL_CB contiguous
    # channels per pixel (16-byte vectors; the taps' overlap, dx 0 / dx 2 of neighbours, hits L1); PW, OW and PS
    # are compile-time, so the pixel's (py, px) costs a multiply-shift, once per pixel, not per output.
    # Traffic per pooled output: 9 loads of 4 B (~4 conv outputs' worth from L2), one 4 B store to out (NCHW)
    NPIX = PH * PW
    lo = share * SHARE
    hi = tl.minimum(lo + SHARE, NPIX)
    y_img = pimg.to(tl.int64) * OH * OW * OCP
    o_img = pimg.to(tl.int64) * OC * NPIX
    for q0 in range(lo, hi, POOL_PIX):
        q = q0 + tl.arange(0, POOL_PIX)
        ok = q < hi
        pix = (q // PW) * (PS * OW) + (q % PW) * PS          # the window's top-left conv pixel
        for c0 in range(0, OC, POOL_CB):
            oc = c0 + tl.arange(0, POOL_CB)
            m = ok[:, None] & (oc < OC)[None, :]
            best = tl.full([POOL_PIX, POOL_CB], float("-inf"), tl.float32)
            for dy in tl.static_range(PK):
                for dx in tl.static_range(PK):
                    off = y_img + (pix + dy * OW + dx)[:, None] * OCP + oc[None, :]
                    if Y_EVICT:   # read by this share (and its neighbour's halo), then dead
                        v = tl.load(y_ptr + off, mask=m, other=float("-inf"), eviction_policy="evict_first")
                    else:
                        v = tl.load(y_ptr + off, mask=m, other=float("-inf"))
                    best = tl.maximum(best, v)
            tl.store(out_ptr + o_img + oc[None, :].to(tl.int64) * NPIX + q[:, None], best, mask=m)


@triton.jit
def _hrow_max(y_ptr, y_img, row, px, oc, m, OW: tl.constexpr, OCP, PS: tl.constexpr, PK: tl.constexpr,
              Y_EVICT: tl.constexpr):
    # [px, oc]: max over the PK conv outputs of conv row `row` that pooled column px's window covers
    base = row * OW + px * PS
    h = tl.full(m.shape, float("-inf"), tl.float32)
    for dx in tl.static_range(PK):
        off = y_img + (base + dx)[:, None] * OCP + oc[None, :]
        if Y_EVICT:
            v = tl.load(y_ptr + off, mask=m, other=float("-inf"), eviction_policy="evict_first")
        else:
            v = tl.load(y_ptr + off, mask=m, other=float("-inf"))
        h = tl.maximum(h, v)
    return h


@triton.jit
def _pool_band_nhwc(y_ptr, out_ptr, pimg, share, NSHARE, NBAND, BAND, OC, OCP, OH, OW: tl.constexpr, PH,
                    PW: tl.constexpr, PS: tl.constexpr, PK: tl.constexpr, PW_P2: tl.constexpr,
                    POOL_CB: tl.constexpr, Y_EVICT: tl.constexpr):
    # NHWC 2: units (channel group cg, band of BAND pooled rows) of image pimg, u = share, share + NSHARE, ..:
    # a [PW_P2, POOL_CB] block per pooled row; with PK == PS + 1 (3/2) the window's last conv row is the next
    # pooled row's first, so its horizontal max is carried: each conv row of the band is read once
    # (2 * BAND + 1 rows, not 3 * BAND) and 6 loads per output instead of 9
    CARRY: tl.constexpr = PK == PS + 1
    NCG = (OC + POOL_CB - 1) // POOL_CB
    NPIX = PH * PW
    y_img = pimg.to(tl.int64) * OH * OW * OCP
    o_img = pimg.to(tl.int64) * OC * NPIX
    px = tl.arange(0, PW_P2)
    for u in range(share, NCG * NBAND, NSHARE):
        oc = (u % NCG) * POOL_CB + tl.arange(0, POOL_CB)
        m = (px < PW)[:, None] & (oc < OC)[None, :]
        py0 = (u // NCG) * BAND
        py1 = tl.minimum(py0 + BAND, PH)
        if py0 < PH:
            carry = tl.full([PW_P2, POOL_CB], float("-inf"), tl.float32)
            if CARRY:
                carry = _hrow_max(y_ptr, y_img, py0 * PS, px, oc, m, OW, OCP, PS, PK, Y_EVICT)
            for py in range(py0, py1):
                best = carry
                for dy in tl.static_range(1 if CARRY else 0, PK):
                    h = _hrow_max(y_ptr, y_img, py * PS + dy, px, oc, m, OW, OCP, PS, PK, Y_EVICT)
                    best = tl.maximum(best, h)
                    if CARRY and dy == PK - 1:
                        carry = h
                tl.store(out_ptr + o_img + oc[None, :].to(tl.int64) * NPIX + py * PW + px[:, None], best, mask=m)


@triton.jit
def _conv_pool_kernel(xs_ptr, wv_ptr, inv_ptr, bias_ptr, y_ptr, out_ptr, cnt_ptr,
                      OC, OCP, OH, OW: tl.constexpr, Hs, Ws, NCH, KV, NB, TP, NN, N_CONV, LAG_N, PH,
                      PW: tl.constexpr, PS: tl.constexpr, NOUT, SHARE, KWs: tl.constexpr, CS_PAD: tl.constexpr,
                      HAS_BIAS: tl.constexpr, RELU: tl.constexpr,
                      OFF64: tl.constexpr, BLOCK_M: tl.constexpr, T0: tl.constexpr, T1: tl.constexpr,
                      KSTEP: tl.constexpr, BLOCK_K: tl.constexpr, FUSE: tl.constexpr, PK: tl.constexpr,
                      POOL_BLOCK: tl.constexpr, POOL_CG: tl.constexpr, SPIN_MAX: tl.constexpr,
                      USE_GDC: tl.constexpr, NHWC: tl.constexpr, POOL_PIX: tl.constexpr,
                      POOL_CB: tl.constexpr, Y_EVICT: tl.constexpr, NBAND, BAND, PW_P2: tl.constexpr):
    # programs 0 .. N_CONV-1: one conv tile each, image-major (BLOCK_M output pixels x (T0 + T1) channels; the
    # TPI = TP * NN tiles of image i are programs i*TPI .. i*TPI + TPI-1); FUSE 1: each then pools share r (its
    # rank in its image) of image i - LAG_N, and programs N_CONV .. N_CONV + LAG_N*TPI - 1 pool the last
    # LAG_N images' shares (no conv)
    pid = tl.program_id(0)
    if USE_GDC:
        # launched with PDL while the prep grid may still run: wait for its completion and memory flush (x_s2d,
        # wv, inv and the zeroed counters) before any load; launch and block start-up overlapped its tail
        tl.extra.cuda.gdc_wait()
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
        p_ld = tl.minimum(p, OHW - 1)             # clamped: every load in bounds, no row mask
        oh = p_ld // OW
        ow = p_ld % OW
        pix = (img * Hs + oh) * Ws + ow           # top-left tap's pixel in x_s2d
        if OFF64:
            base = pix.to(tl.int64) * (2 * CS_PAD)
        else:
            base = pix * (2 * CS_PAD)
        base = tl.multiple_of(base, 2 * BLOCK_K)
        NC: tl.constexpr = CS_PAD // BLOCK_K      # chunks per tap
        col = tl.arange(0, KSTEP)
        n0 = pid_n * (T0 + T1)

        acc0 = tl.zeros((BLOCK_M, T0), dtype=tl.float32)
        acc1 = tl.zeros((BLOCK_M, T1 if T1 > 0 else 16), dtype=tl.float32)
        for kv0 in range(0, KV, KSTEP):
            u = kv0 // BLOCK_K + col // BLOCK_K   # virtual unit of each column
            q = tl.minimum(u // 3, NCH - 1)       # its chunk (units past 3 * NCH meet zero weights)
            tap = q // NC
            coff = ((tap // KWs) * Ws + tap % KWs) * (2 * CS_PAD) + (q % NC) * (2 * BLOCK_K) \
                + tl.where(u % 3 == 1, BLOCK_K, 0) + col % BLOCK_K
            coff = tl.max_contiguous(tl.multiple_of(coff, BLOCK_K), BLOCK_K)
            a = tl.load(xs_ptr + base[:, None] + coff[None, :])
            acc0 = tl.dot(a, _w_tile(wv_ptr, n0, OC, KV, kv0, T0, KSTEP), acc0)
            if T1 > 0:
                acc1 = tl.dot(a, _w_tile(wv_ptr, n0 + T0, OC, KV, kv0, T1, KSTEP), acc1)

        p_ok = p < OHW
        _store_tile(y_ptr, inv_ptr, bias_ptr, acc0, img, p, p_ok, n0 + tl.arange(0, T0), OC, OCP, OHW,
                    HAS_BIAS, RELU, NHWC, Y_EVICT)
        if T1 > 0:
            _store_tile(y_ptr, inv_ptr, bias_ptr, acc1, img, p, p_ok, n0 + T0 + tl.arange(0, T1), OC, OCP, OHW,
                        HAS_BIAS, RELU, NHWC, Y_EVICT)
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
            if NHWC == 2:
                _pool_band_nhwc(y_ptr, out_ptr, pimg, share, TPI, NBAND, BAND, OC, OCP, OH, OW, PH, PW, PS,
                                PK, PW_P2, POOL_CB, Y_EVICT)
            elif NHWC:
                _pool_share_nhwc(y_ptr, out_ptr, pimg, share, SHARE, OC, OCP, OH, OW, PH, PW, PS,
                                 PK, POOL_PIX, POOL_CB, Y_EVICT)
            else:
                _pool_share(y_ptr, out_ptr, pimg, share, SHARE, NOUT, OC, OH, OW, PH, PW, PS,
                            PK, POOL_BLOCK, POOL_CG)


@triton.jit
def _maxpool_kernel(y_ptr, out_ptr, NOUT, OC, OCP, OH, OW: tl.constexpr, PH, PW: tl.constexpr, PS: tl.constexpr,
                    PK: tl.constexpr, POOL_BLOCK: tl.constexpr, POOL_CG: tl.constexpr, NHWC: tl.constexpr,
                    POOL_PIX: tl.constexpr, POOL_CB: tl.constexpr, NBAND, BAND, PW_P2: tl.constexpr):
    # FUSE 0: the pool after the conv; program (share, image): POOL_BLOCK pooled outputs (NHWC 1: POOL_PIX
    # pooled pixels; NHWC 2: one (channel group, band) unit) of one image
    if NHWC == 2:
        _pool_band_nhwc(y_ptr, out_ptr, tl.program_id(1), tl.program_id(0), tl.num_programs(0), NBAND, BAND, OC,
                        OCP, OH, OW, PH, PW, PS, PK, PW_P2, POOL_CB, 0)
    elif NHWC:
        _pool_share_nhwc(y_ptr, out_ptr, tl.program_id(1), tl.program_id(0), POOL_PIX, OC, OCP, OH, OW, PH, PW,
                         PS, PK, POOL_PIX, POOL_CB, 0)
    else:
        _pool_share(y_ptr, out_ptr, tl.program_id(1), tl.program_id(0), POOL_BLOCK, NOUT, OC, OH, OW, PH, PW, PS,
                    PK, POOL_BLOCK, POOL_CG)


def conv_relu_pool_s2d_3xfp16_v10(x, weight, bias, stride, padding, PK, PS):
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
    KHs, KWs = triton.cdiv(KH, S), triton.cdiv(KW, S)
    Hs, Ws = OH + KHs - 1, OW + KWs - 1           # exactly the s2d pixels some output reads
    CS = S * S * C
    CS_PAD = triton.cdiv(CS, BLOCK_K) * BLOCK_K
    xs = torch.empty((NB * Hs * Ws * 2 * CS_PAD,), device=x.device, dtype=torch.float16)
    NCH = KHs * KWs * CS_PAD // BLOCK_K           # 16-channel chunks of K (27 at AlexNet's size)
    KV = triton.cdiv(3 * NCH * BLOCK_K, KSTEP) * KSTEP
    T0, T1 = BLOCK_N, (BLOCK_N // 2 if SPLIT else 0)
    CH = T0 + T1
    OC_pad = triton.cdiv(OC, CH) * CH
    wv = torch.empty((OC_pad, KV), device=x.device, dtype=torch.float16)
    inv = torch.empty((OC_pad,), device=x.device, dtype=torch.float32)
    cnt = torch.empty((NB,), device=x.device, dtype=torch.int32)   # zeroed by the weight programs
    # the conv's ReLU'd output, read back by the pool: NHWC 1 pixel-major with every padded channel, 0 NCHW
    y = torch.empty((NB * OH * OW * OC_pad,) if NHWC else (NB * OC * OH * OW,), device=x.device,
                    dtype=torch.float32)
    use_gdc = bool(PDL) and x.is_cuda             # griddepcontrol: GPU only (not in the interpreter)
    trigger = PDL_TRIGGER if use_gdc else 0
    NJ = triton.cdiv(Ws, S2D_BLOCK_J)
    n_s2d = NB * Hs * NJ
    w = weight.contiguous().float()
    prep = (x, xs, C, H, W, Hs, Ws, padding, NJ, w, wv, inv, cnt)
    meta = dict(S=S, CS=CS, CS_PAD=CS_PAD, CS_P2=triton.next_power_of_2(CS_PAD), BLOCK_J=S2D_BLOCK_J,
                BLOCK_K=BLOCK_K, X_SCALE=float(2 ** X_SHIFT), X_SHIFT=X_SHIFT, VEC=S2D_VEC,
                num_warps=S2D_WARPS)
    wargs = (NB if FUSE else 0, OC, KH, KW, KWs, NCH, KV)
    if ONEPREP:   # one launch: OC_pad weight programs, then the split programs
        _prep_kernel[(OC_pad + n_s2d,)](*prep, OC_pad, *wargs, DO_S2D=True, DO_W=True, TRIGGER=trigger, **meta)
    else:         # the old order: the split, then the weight kernel (the conv's PDL predecessor)
        _prep_kernel[(n_s2d,)](*prep, 0, *wargs, DO_S2D=True, DO_W=False, TRIGGER=0, **meta)
        _prep_kernel[(OC_pad,)](*prep, OC_pad, *wargs, DO_S2D=False, DO_W=True, TRIGGER=trigger, **meta)
    TP, NN = triton.cdiv(OH * OW, BLOCK_M), OC_pad // CH
    TPI = TP * NN                                 # conv tiles per image
    N_CONV = NB * TPI
    NOUT = OC * PH * PW                           # pooled outputs per image
    LAG_N = min(LAG, NB) if FUSE else 0
    # a tile's pool share (FUSE 1): NHWC 1 pooled pixels (all channels), 0 pooled outputs
    SHARE = triton.cdiv(PH * PW if NHWC else NOUT, TPI)
    # NHWC 2: (channel group, band) units, about one per tile: bands of BAND pooled rows
    NCG = triton.cdiv(OC, POOL_CB)
    BAND = triton.cdiv(PH, max(1, TPI // NCG))
    NBAND = triton.cdiv(PH, BAND)
    extra = {"maxnreg": MAXNREG} if MAXNREG else {}
    if use_gdc:
        extra["launch_pdl"] = True                # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    _conv_pool_kernel[(N_CONV + LAG_N * TPI,)](
        xs, wv, inv, bias if bias is not None else inv, y, out, cnt,
        OC, OC_pad, OH, OW, Hs, Ws, NCH, KV, NB, TP, NN, N_CONV, LAG_N, PH, PW, PS, NOUT, SHARE,
        KWs=KWs, CS_PAD=CS_PAD, HAS_BIAS=bias is not None, RELU=True,
        OFF64=xs.numel() >= 2**31, BLOCK_M=BLOCK_M, T0=T0, T1=T1, KSTEP=KSTEP, BLOCK_K=BLOCK_K,
        FUSE=FUSE, PK=PK, POOL_BLOCK=POOL_BLOCK, POOL_CG=POOL_CG, SPIN_MAX=SPIN_MAX, USE_GDC=use_gdc,
        NHWC=NHWC, POOL_PIX=POOL_PIX, POOL_CB=POOL_CB, Y_EVICT=Y_EVICT, NBAND=NBAND, BAND=BAND,
        PW_P2=triton.next_power_of_2(PW), num_warps=NUM_WARPS, num_stages=NUM_STAGES, **extra)
    if not FUSE:
        n_prog = NCG * NBAND if NHWC == 2 else triton.cdiv(PH * PW, POOL_PIX) if NHWC else triton.cdiv(NOUT, POOL_BLOCK)
        _maxpool_kernel[(n_prog, NB)](y, out, NOUT, OC, OC_pad, OH, OW, PH, PW, PS, PK=PK, POOL_BLOCK=POOL_BLOCK,
                                      POOL_CG=POOL_CG, NHWC=NHWC, POOL_PIX=POOL_PIX, POOL_CB=POOL_CB,
                                      NBAND=NBAND, BAND=BAND, PW_P2=triton.next_power_of_2(PW), num_warps=POOL_WARPS)
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
        return conv_relu_pool_s2d_3xfp16_v10(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0],
                                            self.pool_kernel, self.pool_stride)
