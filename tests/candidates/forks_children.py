"""Forks sleeping children through libc (no Python entry point to intercept), named kgen_stray, and
returns a correct result: the children must be noticed and must die with the evaluation."""
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


import ctypes
import time

_libc = ctypes.CDLL(None)


class ModelNew(nn.Module):
    def forward(self, x):
        for _ in range(3):
            if _libc.fork() == 0:
                _libc.prctl(15, b"kgen_stray", 0, 0, 0)
                while True:
                    time.sleep(1)
        return triton_softmax(x)
