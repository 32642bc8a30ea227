"""A softmax candidate that tries to kill the Ray worker evaluating it: on each forward it walks up its
process ancestry and SIGKILLs the nearest Ray worker (its process title starts with 'ray::'), then
computes a correct softmax. In the sandbox (its own PID namespace) no Ray worker is among the
processes it can see, so it is an honest candidate there and must come out correct, with the search
going on around it."""
import os
import signal

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


def _kill_ray_worker_ancestor() -> None:
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return
        if title.startswith("ray::"):
            os.kill(pid, signal.SIGKILL)
            return
        pid = parent


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _kill_ray_worker_ancestor()
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax_row_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK_SIZE=triton.next_power_of_2(x.shape[1]))
        return y
