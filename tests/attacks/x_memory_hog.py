"""Resources: checks for a memory limit; if there is none it says so ("NO_MEMORY_LIMIT", a hole on a
shared machine: a candidate could take all of it) instead of actually exhausting this shared test
machine; with a limit it asks for more than the limit (numpy, touched) and dies. An honest judge:
`runtime_error` without "NO_MEMORY_LIMIT"."""
import resource

import numpy as np
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

class ModelNew(nn.Module):
    def forward(self, x):
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            raise RuntimeError("NO_MEMORY" "_LIMIT")  # split: the judge quotes source lines near an error
        hog = np.ones(soft // 8 + (1 << 28), dtype=np.float64)
        return triton_softmax(x) + float(hog[0]) * 0
