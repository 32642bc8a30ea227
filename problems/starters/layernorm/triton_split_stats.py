"""LayerNorm over the last three dims, Triton: split every row across many programs.

Only 16 rows of 4M elements, so one program per row would use 16 SMs.  Three kernels:
  1. partial stats, grid (chunks, rows): each program holds a BLOCK_SIZE chunk in registers and
     computes its exact chunk mean and M2 = sum((x - mean_chunk)^2) (two passes over registers);
  2. combine, grid (rows,): merges the chunk (count, mean, M2) triples in float64
     (mean = sum n_i mean_i / N, M2 = sum M2_i + sum n_i (mean_i - mean)^2) -> mean, rstd;
  3. normalize, grid (column tiles,): each program loads its weight/bias tile once and loops over
     the rows, writing (x - mean) * rstd * w + b.
x is read twice from HBM (stats, normalize); weight/bias once.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 8192        # elements per stats program
STATS_WARPS = 8
NORM_BLOCK = 2048        # columns per normalize program
NORM_WARPS = 8
COMBINE_BLOCK = 1024

KGEN_TUNABLE = {
    "BLOCK_SIZE": [2048, 4096, 8192, 16384],
    "STATS_WARPS": [4, 8, 16],
    "NORM_BLOCK": [1024, 2048, 4096, 8192],
    "NORM_WARPS": [4, 8, 16],
    "COMBINE_BLOCK": [256, 1024, 4096],
}


@triton.jit
def _ln_partial_stats(x_ptr, pmean_ptr, pm2_ptr, N, n_chunks, BLOCK_SIZE: tl.constexpr):
    chunk = tl.program_id(0)
    row = tl.program_id(1)
    offs = chunk.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < N
    x = tl.load(x_ptr + row.to(tl.int64) * N + offs, mask=mask, other=0.0).to(tl.float32)
    cnt = tl.minimum(N - chunk.to(tl.int64) * BLOCK_SIZE, BLOCK_SIZE).to(tl.float32)
    mean = tl.sum(x, axis=0) / cnt
    d = tl.where(mask, x - mean, 0.0)
    m2 = tl.sum(d * d, axis=0)
    tl.store(pmean_ptr + row * n_chunks + chunk, mean)
    tl.store(pm2_ptr + row * n_chunks + chunk, m2)


@triton.jit
def _ln_combine(pmean_ptr, pm2_ptr, mean_ptr, rstd_ptr, N, n_chunks, eps,
                BLOCK_SIZE: tl.constexpr, COMBINE_BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * n_chunks
    Nf = N.to(tl.float64)
    acc = tl.zeros([COMBINE_BLOCK], tl.float64)
    for start in range(0, n_chunks, COMBINE_BLOCK):
        idx = start + tl.arange(0, COMBINE_BLOCK)
        msk = idx < n_chunks
        mu = tl.load(pmean_ptr + base + idx, mask=msk, other=0.0).to(tl.float64)
        cnt = tl.minimum(N - idx.to(tl.int64) * BLOCK_SIZE, BLOCK_SIZE).to(tl.float64)
        acc += tl.where(msk, cnt * mu, 0.0)
    mean = tl.sum(acc, axis=0) / Nf
    acc2 = tl.zeros([COMBINE_BLOCK], tl.float64)
    for start in range(0, n_chunks, COMBINE_BLOCK):
        idx = start + tl.arange(0, COMBINE_BLOCK)
        msk = idx < n_chunks
        mu = tl.load(pmean_ptr + base + idx, mask=msk, other=0.0).to(tl.float64)
        m2 = tl.load(pm2_ptr + base + idx, mask=msk, other=0.0).to(tl.float64)
        cnt = tl.minimum(N - idx.to(tl.int64) * BLOCK_SIZE, BLOCK_SIZE).to(tl.float64)
        dm = mu - mean
        acc2 += tl.where(msk, m2 + cnt * dm * dm, 0.0)
    var = tl.sum(acc2, axis=0) / Nf
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(mean_ptr + row, mean.to(tl.float32))
    tl.store(rstd_ptr + row, rstd.to(tl.float32))


@triton.jit
def _ln_normalize(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, N, n_rows,
                  HAS_AFFINE: tl.constexpr, NORM_BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * NORM_BLOCK + tl.arange(0, NORM_BLOCK)
    mask = offs < N
    if HAS_AFFINE:
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x_row = x_ptr + offs
    y_row = y_ptr + offs
    for row in range(0, n_rows):
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        x = tl.load(x_row, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        y = (x - mean) * rstd
        if HAS_AFFINE:
            y = y * w + b
        tl.store(y_row, y, mask=mask, eviction_policy="evict_first")
        x_row += N
        y_row += N


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)  # parameter holder (weight, bias, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = tuple(self.ln.normalized_shape)
        N = 1
        for s in shape:
            N *= s
        x2 = x.contiguous()
        rows = x2.numel() // N
        y = torch.empty_like(x2)
        if rows == 0 or N == 0:
            return y
        n_chunks = triton.cdiv(N, BLOCK_SIZE)
        dev = x2.device
        pmean = torch.empty((rows, n_chunks), device=dev, dtype=torch.float32)
        pm2 = torch.empty((rows, n_chunks), device=dev, dtype=torch.float32)
        mean = torch.empty((rows,), device=dev, dtype=torch.float32)
        rstd = torch.empty((rows,), device=dev, dtype=torch.float32)
        _ln_partial_stats[(n_chunks, rows)](x2, pmean, pm2, N, n_chunks, BLOCK_SIZE=BLOCK_SIZE, num_warps=STATS_WARPS)
        _ln_combine[(rows,)](pmean, pm2, mean, rstd, N, n_chunks, float(self.ln.eps),
                             BLOCK_SIZE=BLOCK_SIZE, COMBINE_BLOCK=COMBINE_BLOCK, num_warps=4)
        has_affine = self.ln.weight is not None
        w = self.ln.weight.contiguous() if has_affine else x2
        b = self.ln.bias.contiguous() if (has_affine and self.ln.bias is not None) else None
        if has_affine and b is None:
            b = torch.zeros_like(w)
        _ln_normalize[(triton.cdiv(N, NORM_BLOCK),)](x2, y, w, b if b is not None else x2, mean, rstd, N, rows,
                                                     HAS_AFFINE=has_affine, NORM_BLOCK=NORM_BLOCK, num_warps=NORM_WARPS)
        return y
