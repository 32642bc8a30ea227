"""Conv2d (any C, OC, KH, KW, stride, padding; groups 1, dilation 1), Triton: triton_3xfp16_s2d_onedot.py (the
one-dot 3xFP16 space-to-depth implicit GEMM: see that file for the virtual K, the split and the arithmetic) with
the launches around the conv tightened as conv_relu_maxpool's triton_3xfp16_s2d_lagpool_oneprep.py did (issue 25).
Same conv kernel, same numerics; only the pre-passes and how the conv follows them change.

Why: onedot is judged 0.281 ms; Nsight Compute (RESULTS.md, seventh session) splits its forward into three
launches: the s2d split 43 us (DRAM 2.6 TB/s: reads x 60 MB, writes the fp16 hi/lo copy 62 MB; 40 us at 3.0
TB/s), the weight's virtual-K layout 5.1 us (96 programs: launch- and latency-sized, 1% DRAM) and the conv 228 us;
the rest are launch gaps. On conv_relu_maxpool the same two changes took lagpool from 0.3178/0.319 to 0.3096-0.3111
ms judged (-8 us).

How, one knob each (defaults: the crm sweep's best, ONEPREP 1, PDL 1, PDL_TRIGGER 1):
  ONEPREP 1: the weight layout becomes the first OC_pad = 96 programs of the split's own launch (`_prep_kernel`,
    a branch on program_id): they run in the split's first wave (96 of its 132 x 16 = 2,112 resident slots; the
    launch holds 11,400 split programs at AlexNet's size, BLOCK_J 32), so the 5.1 us kernel and one launch gap
    go: expected -5 to -6 us. 0: two launches of the same code (split, then weight), onedot's order.
  PDL 1: the conv is launched with programmatic dependent launch (Triton 3.4+: `launch_pdl=True`, i.e.
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) and its first instruction is `griddepcontrol.wait`
    (tl.extra.cuda.gdc_wait, before any load): it waits for the prep grid's completion and memory flush, so
    every read of x_s2d, wv and inv stays ordered; what overlaps is the conv grid's launch and its CTAs'
    start-up (114 KB of shared memory each at 4 stages) with the prep's tail. Expected -1 to -3 us.
    PDL_TRIGGER: where the prep programs call `griddepcontrol.launch_dependents` (1: at their start, so the conv
    grid may launch as soon as the prep's last wave is resident; 2: after their stores; 0: never, the implicit
    trigger at exit). With ONEPREP 0 the trigger is in the weight launch (the conv's predecessor).
    Off the GPU (interpreter, CPU tensors) PDL is ignored: no launch_pdl, no griddepcontrol.
  S2D_BLOCK_J / S2D_WARPS: the split's tile (pixels per program) and warps, for the 2.6 -> 3.0 TB/s gap.
Expected: 0.281 - 6 (ONEPREP) - 1..3 (PDL) = ~0.272-0.274 ms judged (the split's own 40 us floor is 3 us away).
Registers (ptxas via Triton 3.6.0's wheel, sm_90, offline: cuobjdump --dump-resource-usage; ints specialized as
the JIT does at AlexNet's size): `_prep_kernel` ONEPREP 1, BLOCK_J 32, 4 warps, TRIGGER 1: 34 registers, no
stack, 16 B shared (TRIGGER 2: 38); the split-only launch (ONEPREP 0): 34, the weight-only launch: 29; BLOCK_J
64: 48 (8 warps: 32); BLOCK_J 16, 2 warps: 34; BLOCK_J 32, 8 warps: 28 (8 warps add a 2-byte store path);
loads 4-byte `ld.global.b32`, stores `st.global.v4.b32` (16 B). `_conv_kernel` USE_GDC 1 (PDL): 170 registers,
no spills, 114,688 B shared at NUM_STAGES 4 (two programs per SM; 3 stages: 160, 86,016 B), as USE_GDC 0
(onedot's); SASS: ACQBULK (griddepcontrol.wait) is instruction 12, before any global load. Conv grid at
AlexNet's size: 24 x 100 = 2,400 programs, 264 resident: ~9 waves.
Interpreter: direct checks against float64 conv (normwise, x1 / x100 inputs): 2x3x96x83 (96 channels, k 11, s 4,
p 2) defaults: 1.67e-7 / 1.67e-7; the same ONEPREP 0: 1.68e-7 / 1.67e-7; 2x3x71x67 S2D_BLOCK_J 16 S2D_WARPS 2
PDL_TRIGGER 2: 1.66e-7 / 1.66e-7; 1x5x23x19 (k 5, s 2, p 1, 40 channels): 1.36e-7 / 1.34e-7; 2x5x23x19 SPLIT 0
BLOCK_N 32 ONEPREP 0 S2D_BLOCK_J 64 S2D_WARPS 8: 1.36e-7 / 1.36e-7. check_starters (small): 1.62e-7; `kgen
eval` on the CPU: correct, normwise 1.84e-7 (torch fp32 3.4e-7).
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
NUM_STAGES = 4    # onedot's H100 sweep best (0.2777 ms vs 0.2791 at 3 stages)
MAXNREG = 0       # registers per thread cap (0: none)
S2D_BLOCK_J = 32  # s2d pixels per split program
S2D_WARPS = 4     # warps per prep program
ONEPREP = 1       # 1: the weight layout as extra programs of the split's launch; 0: two launches
PDL = 1           # 1: the conv launched with programmatic dependent launch, griddepcontrol.wait at its top
PDL_TRIGGER = 1   # PDL: where the prep programs allow the conv's launch: 1 at their start, 2 at their end, 0 exit
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
    "S2D_WARPS": [2, 4, 8],
    "ONEPREP": [0, 1],
    "PDL": [0, 1],
    "PDL_TRIGGER": [0, 1, 2],
}


@triton.jit
def _s2d_program(x_ptr, xs_ptr, row, jb, C, H, W, Hs, Ws, pad,
                 S: tl.constexpr, CS: tl.constexpr, CS_PAD: tl.constexpr, CS_P2: tl.constexpr,
                 BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr, X_SCALE: tl.constexpr):
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
    dst = (row.to(tl.int64) * Ws + j[:, None]) * (2 * CS_PAD) + (cs + (cs // BLOCK_K) * BLOCK_K)[None, :]
    ok = (j < Ws)[:, None] & (cs < CS_PAD)[None, :]
    tl.store(xs_ptr + dst, hi, mask=ok)           # ptxas: 16-byte stores (st.global.v4.b32)
    tl.store(xs_ptr + dst + BLOCK_K, lo, mask=ok)


@triton.jit
def _weight_program(w_ptr, wv_ptr, inv_ptr, oc, OC, C, KH, KW, KWs, NCH, KV,
                    S: tl.constexpr, CS_PAD: tl.constexpr, BLOCK_K: tl.constexpr, X_SHIFT: tl.constexpr,
                    BLOCK: tl.constexpr):
    # w [OC, C, KH, KW] -> wv [OC_pad, KV] fp16 in virtual-K order: unit u (BLOCK_K wide) = chunk q = u // 3,
    # part u % 3: 0 -> w_lo[q], 1 -> w_hi[q], 2 -> w_hi[q] (x's units: a_hi, a_lo, a_hi); zeros past 3 * NCH
    # units and for rows past OC. Chunk q, lane j: k = q * BLOCK_K + j = tap * CS_PAD + (c*S + dy)*S + dx,
    # tap (kh, kw) = (a*S + dy, b*S + dx). Scaled by 2^e per output channel (max |w| * 2^e in [2^13, 2^14):
    # lo stays normal); inv[oc] = 2^-(e + X_SHIFT) undoes both scalings. Output channel oc
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
                 w_ptr, wv_ptr, inv_ptr, NW, OC, KH, KW, KWs, NCH, KV,
                 S: tl.constexpr, CS: tl.constexpr, CS_PAD: tl.constexpr, CS_P2: tl.constexpr,
                 BLOCK_J: tl.constexpr, BLOCK_K: tl.constexpr, X_SCALE: tl.constexpr, X_SHIFT: tl.constexpr,
                 DO_S2D: tl.constexpr, DO_W: tl.constexpr, TRIGGER: tl.constexpr):
    # 1-D grid: programs 0 .. NW-1 build the weight's virtual-K layout (one output channel each, first so
    # they run in the first wave beside the split programs), the rest are s2d split programs (NJ per row).
    # ONEPREP 1: both in this one launch; 0: two launches (DO_S2D only with NW = 0, then DO_W only)
    pid = tl.program_id(0)
    if TRIGGER == 1:
        # PDL: the conv grid may launch once every program here has started (its programs wait in
        # griddepcontrol.wait for this grid's completion and memory flush before reading anything)
        tl.extra.cuda.gdc_launch_dependents()
    if DO_W and pid < NW:
        _weight_program(w_ptr, wv_ptr, inv_ptr, pid, OC, C, KH, KW, KWs, NCH, KV,
                        S, CS_PAD, BLOCK_K, X_SHIFT, 256)
    if DO_S2D and pid >= NW:
        t = pid - NW
        _s2d_program(x_ptr, xs_ptr, t // NJ, t % NJ, C, H, W, Hs, Ws, pad,
                     S, CS, CS_PAD, CS_P2, BLOCK_J, BLOCK_K, X_SCALE)
    if TRIGGER == 2:
        tl.extra.cuda.gdc_launch_dependents()


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
                 KSTEP: tl.constexpr, BLOCK_K: tl.constexpr, USE_GDC: tl.constexpr):
    # one program: BLOCK_M output pixels of one image x (T0 + T1) output channels (T1 = 0: one tile)
    if USE_GDC:
        # launched with PDL while the prep grid may still run: wait for its completion and memory flush (x_s2d,
        # wv, inv) before any load; launch and block start-up overlapped its tail
        tl.extra.cuda.gdc_wait()
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


def conv2d_s2d_3xfp16_oneprep(x, weight, bias, stride, padding, relu=False):
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
    NCH = KHs * KWs * CS_PAD // BLOCK_K           # 16-channel chunks of K (27 at AlexNet's size)
    KV = triton.cdiv(3 * NCH * BLOCK_K, KSTEP) * KSTEP
    T0, T1 = BLOCK_N, (BLOCK_N // 2 if SPLIT else 0)
    CH = T0 + T1
    OC_pad = triton.cdiv(OC, CH) * CH
    wv = torch.empty((OC_pad, KV), device=x.device, dtype=torch.float16)
    inv = torch.empty((OC_pad,), device=x.device, dtype=torch.float32)
    use_gdc = bool(PDL) and x.is_cuda             # griddepcontrol: GPU only (not in the interpreter)
    trigger = PDL_TRIGGER if use_gdc else 0
    NJ = triton.cdiv(Ws, S2D_BLOCK_J)
    n_s2d = NB * Hs * NJ
    w = weight.contiguous().float()
    prep = (x, xs, C, H, W, Hs, Ws, padding, NJ, w, wv, inv)
    meta = dict(S=S, CS=CS, CS_PAD=CS_PAD, CS_P2=triton.next_power_of_2(CS_PAD), BLOCK_J=S2D_BLOCK_J,
                BLOCK_K=BLOCK_K, X_SCALE=float(2 ** X_SHIFT), X_SHIFT=X_SHIFT, num_warps=S2D_WARPS)
    wargs = (OC, KH, KW, KWs, NCH, KV)
    if ONEPREP:   # one launch: OC_pad weight programs, then the split programs
        _prep_kernel[(OC_pad + n_s2d,)](*prep, OC_pad, *wargs, DO_S2D=True, DO_W=True, TRIGGER=trigger, **meta)
    else:         # onedot's order: the split, then the weight kernel (the conv's PDL predecessor)
        _prep_kernel[(n_s2d,)](*prep, 0, *wargs, DO_S2D=True, DO_W=False, TRIGGER=0, **meta)
        _prep_kernel[(OC_pad,)](*prep, OC_pad, *wargs, DO_S2D=False, DO_W=True, TRIGGER=trigger, **meta)
    grid = (triton.cdiv(OH * OW, BLOCK_M), NB, OC_pad // CH)
    extra = {"maxnreg": MAXNREG} if MAXNREG else {}
    if use_gdc:
        extra["launch_pdl"] = True                # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    _conv_kernel[grid](xs, wv, inv, bias if bias is not None else inv, y,
                       OC, OH, OW, Hs, Ws, NCH, KV,
                       KWs=KWs, CS_PAD=CS_PAD, HAS_BIAS=bias is not None, RELU=relu,
                       OFF64=xs.numel() >= 2**31, BLOCK_M=BLOCK_M, T0=T0, T1=T1, KSTEP=KSTEP, BLOCK_K=BLOCK_K,
                       USE_GDC=use_gdc, num_warps=NUM_WARPS, num_stages=NUM_STAGES, **extra)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv
        assert conv.groups == 1 and conv.dilation == (1, 1) and conv.stride[0] == conv.stride[1] \
            and isinstance(conv.padding, tuple) and conv.padding[0] == conv.padding[1]
        return conv2d_s2d_3xfp16_oneprep(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0])
