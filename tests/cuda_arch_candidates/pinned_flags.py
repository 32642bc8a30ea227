"""A correct CUDA softmax that pins architectures the way LLM-written candidates do, every form at
once: `-arch=sm_70`, `-arch sm_80`, `-gencode arch=...` (two words), `--gpu-architecture=`, `-code=`,
`--generate-code ...` in one string, an arch flag among the C++ flags, and TORCH_CUDA_ARCH_LIST set at
import. CUDA 13's nvcc has no sm_70, so it compiles only because kgen replaces them all by the
evaluating GPU's target. Light to compile: the CUDA source includes only cuda_runtime.h and the
bindings are plain pybind11 (no_implicit_headers).
"""
import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

os.environ["TORCH_CUDA_ARCH_LIST"] = "7.0"

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

__global__ void softmax_rows(const float* x, float* y, int n_cols) {
    const float* xr = x + (size_t)blockIdx.x * n_cols;
    float* yr = y + (size_t)blockIdx.x * n_cols;
    __shared__ float red[256];
    float m = -INFINITY;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.f;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) sum += expf(xr[c] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float inv = 1.f / red[0];
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) yr[c] = expf(xr[c] - m) * inv;
}

void launch_softmax(int64_t x, int64_t y, int rows, int n_cols, int64_t stream) {
    softmax_rows<<<rows, 256, 0, (cudaStream_t)stream>>>((const float*)x, (float*)y, n_cols);
}
"""

CPP_SRC = r"""
#include <pybind11/pybind11.h>
#include <stdint.h>
void launch_softmax(int64_t x, int64_t y, int rows, int n_cols, int64_t stream);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("launch_softmax", &launch_softmax); }
"""

softmax_ext = load_inline(
    name="pinned_softmax", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, no_implicit_headers=True,
    extra_cflags=["-O3", "-arch=sm_70"],
    extra_cuda_cflags=["-O3", "-arch=sm_70", "-arch sm_80", "-gencode", "arch=compute_70,code=sm_70",
                       "--gpu-architecture=sm_75", "-code=sm_70",
                       "--generate-code arch=compute_80,code=[sm_80,compute_80] -lineinfo"])


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        stream = torch.cuda.current_stream(x.device).cuda_stream
        softmax_ext.launch_softmax(x.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], stream)
        return y
