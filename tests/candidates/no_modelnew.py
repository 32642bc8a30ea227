"""Defines a kernel but no ModelNew."""
import torch
import triton
import triton.language as tl


@triton.jit
def copy_rows(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class Model(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        copy_rows[(1,)](x, y, x.numel(), BLOCK=1024)
        return y
