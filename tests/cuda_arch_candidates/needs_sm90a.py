"""A CUDA softmax whose kernel uses Hopper-only PTX (`setmaxnreg`, `wgmma.fence`: sm_90a): it
compiles for an H100 (kgen's sm_90a target) and must fail, with a message that says which
architecture it needs, for an older GPU such as an A100 (sm_80). Light to compile (no torch headers).
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

__global__ void softmax_rows(const float* x, float* y, int n_cols) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    const float* xr = x + (size_t)blockIdx.x * n_cols;
    float* yr = y + (size_t)blockIdx.x * n_cols;
    float m = -INFINITY, sum = 0.f;
    for (int c = 0; c < n_cols; ++c) m = fmaxf(m, xr[c]);
    for (int c = 0; c < n_cols; ++c) sum += expf(xr[c] - m);
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) yr[c] = expf(xr[c] - m) / sum;
}

void launch_softmax(int64_t x, int64_t y, int rows, int n_cols, int64_t stream) {
    softmax_rows<<<rows, 128, 0, (cudaStream_t)stream>>>((const float*)x, (float*)y, n_cols);
}
"""

CPP_SRC = r"""
#include <pybind11/pybind11.h>
#include <stdint.h>
void launch_softmax(int64_t x, int64_t y, int rows, int n_cols, int64_t stream);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("launch_softmax", &launch_softmax); }
"""

_ext = load_inline(name="hopper_softmax", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, no_implicit_headers=True,
                   extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _ext.launch_softmax(x.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1],
                            torch.cuda.current_stream(x.device).cuda_stream)
        return y
