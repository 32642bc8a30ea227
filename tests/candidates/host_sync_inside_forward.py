"""Correct: a two-kernel Triton softmax whose forward waits on the GPU between its kernels (`.item()` of one
element, as LLM-written kernels do: a 4-byte copy, no torch kernel): honest, a little slower, and under the gate
clock its timed runs are opened by the shadow (forward cannot return before its gate opens). On the H100 its stream
runs dry behind the forward, and the end word landed 8-10 us after the end event (fourteenth session), which flagged
this very file `suspicious`; the runner's done word, written before its end event where the gate is open already
(kgen.harness.gate.Gate.mark_done), is what the check for a shave times to."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_stats(x_ptr, max_ptr, sum_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    m = tl.max(x, axis=0)
    tl.store(max_ptr + row, m)
    tl.store(sum_ptr + row, tl.sum(tl.exp(x - m), axis=0))


@triton.jit
def normalize(x_ptr, max_ptr, sum_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    m = tl.load(max_ptr + row)
    s = tl.load(sum_ptr + row)
    tl.store(y_ptr + row * n_cols + cols, tl.exp(x - m) / s, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        block = triton.next_power_of_2(cols)
        maxes = torch.empty(rows, device=x.device, dtype=x.dtype)
        sums = torch.empty(rows, device=x.device, dtype=x.dtype)
        row_stats[(rows,)](x, maxes, sums, cols, BLOCK=block)
        if not sums[0].item() >= 1.0:  # the host waits for the first kernel here (a row's sum is >= 1, or NaN)
            raise FloatingPointError("the first row's sum of exponentials is not a number")
        y = torch.empty_like(x)
        normalize[(rows,)](x, maxes, sums, y, cols, BLOCK=block)
        return y
