"""An honest fp32 Triton L1 normalization for KernelBench level1/38_L1Norm_ (x / mean(|x|, dim=1)): used by
benchmarks/host_reference_gpu.sh to check that the judge can judge a file whose float64 reference does not
fit beside the inputs on an 80 GiB GPU (32768 x 65535 fp32 = 8.6 GB; float64 temporaries ~50 GB)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def _l1norm_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.abs(tl.load(base + cols, mask=cols < n_cols, other=0.0))
    mean = tl.sum(acc, axis=0) / n_cols
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=0.0)
        tl.store(y_ptr + row * stride + cols, x / mean, mask=cols < n_cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        _l1norm_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=BLOCK)
        return y
