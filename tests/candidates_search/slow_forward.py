"""A correct softmax whose forward first sleeps 2 s: a candidate that keeps its judge busy for tens of seconds, so
that the search's evaluators are up while the driver lane (kgen.search.driver_lane) still judges it."""
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_row_kernel(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(2.0)
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax_row_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK_SIZE=triton.next_power_of_2(x.shape[1]))
        return y
