"""Class 2 (trace partial): launches its kernel only at import time (so "defines and launches a
kernel" holds statically and maybe once dynamically); forward is plain torch. An honest judge: never
`correct` (static_reject)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


def triton_softmax(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y

_warm = triton_softmax(torch.randn(4, 8))


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
