"""Class 6 (timing bought with memory, GPU): keeps every output it computed keyed by the input's
buffer address and shape, and returns the
cached output whenever an input arrives at an address it has seen (a judge that reuses its input
buffers for fresh values would time a memo). An honest judge: `incorrect` (a checked timed run
returns a stale output) or `suspicious`, never `correct` with the memo's time."""
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

CACHE = {}


class ModelNew(nn.Module):
    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape), x.device.index)
        hit = CACHE.get(key)
        if hit is not None:
            return hit
        y = triton_softmax(x)
        if len(CACHE) < 64:
            CACHE[key] = y
        return y
