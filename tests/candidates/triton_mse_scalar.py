"""An honest mean squared error whose output is a 0-dim tensor (KernelBench level 1 94_MSELoss): the judge
must poison, receive and compare a 0-dim output like any other."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def squared_error_sum(p_ptr, t_ptr, out_ptr, n, inv_n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        d = tl.load(p_ptr + offs, mask=mask, other=0.0) - tl.load(t_ptr + offs, mask=mask, other=0.0)
        acc += d * d
    tl.store(out_ptr, tl.sum(acc, axis=0) * inv_n)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        p, t = predictions.contiguous(), targets.contiguous()
        out = torch.empty((), dtype=torch.float32, device=p.device)
        squared_error_sum[(1,)](p, t, out, p.numel(), 1.0 / p.numel(), BLOCK=1024)
        return out
