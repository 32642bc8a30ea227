"""Conv2d -> ReLU -> MaxPool2d fused in one Triton kernel; the full conv output is never written.

Work item = (image, band of POOL_ROWS pooled rows, BLOCK_OC out-channels).  The band needs the conv
rows [band*POOL_ROWS*PS, ... + (POOL_ROWS-1)*PS + PK) over the CW = (PW-1)*PS + PK conv columns
(row halo only: (2*POOL_ROWS+1)/(2*POOL_ROWS) recompute for the 3/2 pool).  The program computes that
conv region in BLOCK_M-pixel chunks (implicit GEMM: im2col gathered in registers, tl.dot with
3xTF32 (TF32X3 = 1) or exact FMA "ieee" (TF32X3 = 0), bias added) and parks each chunk in a small
per-program scratch slab, then (after a CTA barrier) max-pools the slab into the output with ReLU.
The grid is persistent (PROGRAMS_PER_SM programs per SM, each looping over work items) and each
program reuses its own slab, so the scratch (programs x BLOCK_OC x region floats, a few MB to
~20 MB) stays in L2: HBM sees only the input, the weights and the pooled output.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 64          # conv pixels per chunk
BLOCK_OC = 32         # out-channels per work item
BLOCK_K = 32
POOL_ROWS = 4         # pooled rows per work item
BLOCK_P = 64          # pooled outputs per pooling step
TF32X3 = 1
PROGRAMS_PER_SM = 2
NUM_WARPS = 4
NUM_STAGES = 2

KGEN_TUNABLE = {
    "BLOCK_M": [32, 64, 128],
    "BLOCK_OC": [16, 32, 64],
    "BLOCK_K": [16, 32, 64],
    "POOL_ROWS": [1, 2, 3, 4, 6],
    "BLOCK_P": [32, 64, 128],
    "TF32X3": [0, 1],
    "PROGRAMS_PER_SM": [1, 2, 4, 8],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [1, 2, 3],
}


@triton.jit
def _split_tf32(x):
    bits = x.to(tl.uint32, bitcast=True)
    hi = ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return hi, x - hi


@triton.jit
def _fused_conv_relu_pool_kernel(
        x_ptr, w_ptr, bias_ptr, out_ptr, scratch_ptr,
        NB, C, H, W, OC, OH, OW, stride, pad, PH, PW, PS,
        n_bands, n_oc_tiles, n_items, items_per_prog, n_progs, CW, REGION, SLAB,
        KH: tl.constexpr, KW: tl.constexpr, PK: tl.constexpr, HAS_BIAS: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_OC: tl.constexpr, BLOCK_K: tl.constexpr,
        POOL_ROWS: tl.constexpr, BLOCK_P: tl.constexpr, TF32X3: tl.constexpr):
    pid = tl.program_id(0)
    K = C * KH * KW
    OHW = OH * OW
    CH = (POOL_ROWS - 1) * PS + PK
    slab = scratch_ptr + pid.to(tl.int64) * SLAB               # [BLOCK_OC, REGION] floats
    oc_l = tl.arange(0, BLOCK_OC)
    for it in range(0, items_per_prog):
        item = pid + it * n_progs
        oc_t = item % n_oc_tiles
        t = item // n_oc_tiles
        band = t % n_bands
        img = t // n_bands
        offs_oc = oc_t * BLOCK_OC + oc_l
        oc_ok = (offs_oc < OC) & ((oc_l * 0 + item) < n_items)   # vector form (interpreter-safe)
        cy0 = band * POOL_ROWS * PS
        x_img = x_ptr + img.to(tl.int64) * C * H * W
        if HAS_BIAS:
            bias = tl.load(bias_ptr + offs_oc, mask=oc_ok, other=0.0)
        # ---- conv region -> slab ----
        for q0 in range(0, REGION, BLOCK_M):
            q = q0 + tl.arange(0, BLOCK_M)
            rr = q // CW
            cc = q % CW
            oh = cy0 + rr
            q_ok = (q < CH * CW) & (oh < OH) & ((q * 0 + item) < n_items)
            ih0 = oh * stride - pad
            iw0 = cc * stride - pad
            acc = tl.zeros((BLOCK_M, BLOCK_OC), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                kk = k0 + tl.arange(0, BLOCK_K)
                k_ok = kk < K
                c = kk // (KH * KW)
                r = kk % (KH * KW)
                kh = r // KW
                kw = r % KW
                ih = ih0[:, None] + kh[None, :]
                iw = iw0[:, None] + kw[None, :]
                a_mask = q_ok[:, None] & k_ok[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                a = tl.load(x_img + (c * H * W)[None, :] + ih * W + iw, mask=a_mask, other=0.0)
                b = tl.load(w_ptr + offs_oc[None, :].to(tl.int64) * K + kk[:, None],
                            mask=k_ok[:, None] & oc_ok[None, :], other=0.0)
                if TF32X3:
                    a_hi, a_lo = _split_tf32(a)
                    b_hi, b_lo = _split_tf32(b)
                    acc = tl.dot(a_lo, b_hi, acc, input_precision="tf32")
                    acc = tl.dot(a_hi, b_lo, acc, input_precision="tf32")
                    acc = tl.dot(a_hi, b_hi, acc, input_precision="tf32")
                else:
                    acc = tl.dot(a, b, acc, input_precision="ieee")
            if HAS_BIAS:
                acc += bias[None, :]
            tl.store(slab + oc_l[None, :] * REGION + q[:, None], acc)
        tl.debug_barrier()                                      # slab writes visible to the whole CTA
        # ---- ReLU + max pool from the slab ----
        n_pool = POOL_ROWS * PW
        for p0 in range(0, n_pool, BLOCK_P):
            pp = p0 + tl.arange(0, BLOCK_P)
            pyl = pp // PW
            px = pp % PW
            py = band * POOL_ROWS + pyl
            p_ok = (pp < n_pool) & (py < PH) & ((pp * 0 + item) < n_items)
            best = tl.full((BLOCK_P, BLOCK_OC), float("-inf"), tl.float32)
            for dy in tl.static_range(PK):
                for dx in tl.static_range(PK):
                    qq = (pyl * PS + dy) * CW + px * PS + dx
                    v = tl.load(slab + oc_l[None, :] * REGION + qq[:, None],
                                mask=p_ok[:, None], other=float("-inf"), cache_modifier=".cg")
                    best = tl.maximum(best, v)
            best = tl.maximum(best, 0.0)
            o_off = (img.to(tl.int64) * OC + offs_oc[None, :]) * PH * PW + (py * PW + px)[:, None]
            tl.store(out_ptr + o_off, best, mask=p_ok[:, None] & oc_ok[None, :])
        tl.debug_barrier()                                      # slab free before the next item


def _num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


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
        s, pad = conv.stride[0], conv.padding[0]
        x = x.contiguous()
        w = conv.weight.contiguous()
        NB, C, H, W = x.shape
        OC, _, KH, KW = w.shape
        OH = (H + 2 * pad - KH) // s + 1
        OW = (W + 2 * pad - KW) // s + 1
        PK, PS = self.pool_kernel, self.pool_stride
        PH = (OH - PK) // PS + 1
        PW = (OW - PK) // PS + 1
        out = torch.empty((NB, OC, PH, PW), device=x.device, dtype=torch.float32)
        if out.numel() == 0:
            return out
        CH = (POOL_ROWS - 1) * PS + PK
        CW = (PW - 1) * PS + PK
        REGION = triton.cdiv(CH * CW, BLOCK_M) * BLOCK_M
        SLAB = BLOCK_OC * REGION
        n_bands = triton.cdiv(PH, POOL_ROWS)
        n_oc_tiles = triton.cdiv(OC, BLOCK_OC)
        n_items = NB * n_bands * n_oc_tiles
        n_progs = max(1, min(n_items, _num_sms(x.device) * PROGRAMS_PER_SM))
        items_per_prog = triton.cdiv(n_items, n_progs)
        scratch = torch.empty((n_progs * SLAB,), device=x.device, dtype=torch.float32)
        _fused_conv_relu_pool_kernel[(n_progs,)](
            x, w, conv.bias if conv.bias is not None else w, out, scratch,
            NB, C, H, W, OC, OH, OW, s, pad, PH, PW, PS,
            n_bands, n_oc_tiles, n_items, items_per_prog, n_progs, CW, REGION, SLAB,
            KH=KH, KW=KW, PK=PK, HAS_BIAS=conv.bias is not None,
            BLOCK_M=BLOCK_M, BLOCK_OC=BLOCK_OC, BLOCK_K=BLOCK_K, POOL_ROWS=POOL_ROWS, BLOCK_P=BLOCK_P,
            TF32X3=TF32X3, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return out
