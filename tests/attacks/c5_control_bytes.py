"""Class 5 (logs are data): writes NUL bytes, invalid UTF-8, terminal escape sequences (clear screen,
OSC 52 clipboard write, title change) and a 4 MB line without a newline to stdout and stderr, then
returns an honest softmax. An honest judge: `correct`; the stored result stays small, JSON-safe and
carries no raw escape sequence."""
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

JUNK = b"\x00\xff\xfe\xc0\x80" + b"\x1b[2J\x1b[H" + b"\x1b]52;c;Y2FuYXJ5\x07" + b"\x1b]0;pwned\x07" + b"\r\x08" * 10


class ModelNew(nn.Module):
    def forward(self, x):
        for fd in (1, 2):
            for _ in range(3):
                try:
                    os.write(fd, JUNK)
                except OSError:
                    pass
            try:
                os.write(fd, b"A" * (4 << 20))
            except OSError:
                pass
        return triton_softmax(x)
