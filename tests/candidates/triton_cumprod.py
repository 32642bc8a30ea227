"""An honest fp32 cumulative product along dim 1 (KernelBench level 1 90_cumprod): on the judge's ×100
trial fp32 overflows to Inf where float64 is still finite, for torch and for this kernel alike, so it
must be `correct`, and the evaluation must say that torch itself overflowed."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _times(a, b):
    return a * b


@triton.jit
def cumprod_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=1.0)
    tl.store(y_ptr + row * n_cols + cols, tl.associative_scan(x, 0, _times), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cumprod_rows[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
