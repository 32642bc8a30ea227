"""Softmax over dim 1, Triton: one program per row, two reads of the row.

Pass 1 streams the row in BLOCK_SIZE chunks keeping a per-lane online (max, sum-of-exp); one exp per
element: with d = x - m, if d > 0 the lane's max moves to x and s = s * exp(-d) + 1, else
s = s + exp(d).  The lanes are merged once at the end.  Pass 2 walks the row backwards (the chunks
read last in pass 1 are the likeliest to still be in L2) and writes exp(x - M) / S with
evict-first hints so the output stream does not push the row being re-read out of L2.
Rows in flight x 256 KB must stay well under the 50 MB L2 for pass 2 to hit: large NUM_WARPS keeps
the number of resident programs per SM low (the default 32 warps allows at most 2).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 8192
NUM_WARPS = 32   # 1024 threads: at most 2 rows per SM in flight, so a row is still in L2 for pass 2

KGEN_TUNABLE = {
    "BLOCK_SIZE": [1024, 2048, 4096, 8192],
    "NUM_WARPS": [4, 8, 16, 32],
}

_NEG_BIG = -3.0e38  # finite "minus infinity": keeps (-inf) - (-inf) NaNs out of masked lanes


@triton.jit
def _softmax_online_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    offs = tl.arange(0, BLOCK_SIZE)

    m = tl.full([BLOCK_SIZE], -3.0e38, tl.float32)
    s = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        d = x - m
        gt = d > 0
        e = tl.exp(tl.where(gt, -d, d))
        s = tl.where(gt, s * e + 1.0, s + e)
        m = tl.where(gt, x, m)

    row_max = tl.max(m, axis=0)
    row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)
    inv = 1.0 / row_sum

    n_chunks = tl.cdiv(n_cols, BLOCK_SIZE)
    for i in range(0, n_chunks):
        cols = (n_chunks - 1 - i) * BLOCK_SIZE + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        y = tl.exp(x - row_max) * inv
        tl.store(y_row + cols, y, mask=mask, eviction_policy="evict_first")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.contiguous()
        assert x2.dim() == 2, "softmax starter handles 2-D input, dim=1"
        rows, cols = x2.shape
        y = torch.empty_like(x2)
        if rows == 0 or cols == 0:
            return y
        _softmax_online_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0),
                                        BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)
        return y
