"""A CUDA-style candidate (load_inline, a __global__ kernel) whose import reads address 0: the process
dies of SIGSEGV in the judge's compile step, before anything is built. The crash is the candidate's
runtime_error, never a failure of kgen's judge."""
import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""

ctypes.string_at(0)

ext = load_inline(name="never_built", cpp_sources="", cuda_sources=CUDA_SRC, functions=["scale"])


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        ext.scale(x, y, x.numel())
        return y
