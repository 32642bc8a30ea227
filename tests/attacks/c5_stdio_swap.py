"""Class 5 (logs): dup2()s a fresh pipe nobody reads over stdout and stderr and fills it until it
would block (so any output after is lost), closes the originals, then returns an honest softmax.
An honest judge: `correct` (or runtime_error), returned in time, no hang."""
import fcntl
import os

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
        r, w = os.pipe()
        fcntl.fcntl(w, fcntl.F_SETFL, os.O_NONBLOCK)
        os.dup2(w, 1)
        os.dup2(w, 2)
        try:
            while True:
                os.write(w, b"x" * 65536)
        except OSError:
            pass
        return triton_softmax(x)
