"""Hang: ignores SIGTERM, SIGINT, SIGHUP, SIGALRM, SIGUSR1/2 and blocks them, then sleeps for an
hour inside forward(). An honest judge: `timeout`, returned within its timeout plus a margin."""
import signal
import time

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
        sigs = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2]
        for s in sigs:
            signal.signal(s, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
        triton_softmax(x)
        time.sleep(3600)
        return triton_softmax(x)
