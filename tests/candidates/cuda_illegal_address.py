"""GPU only: a CUDA kernel that writes far out of bounds (an illegal address): the CUDA context dies;
the evaluation process is thrown away and the outcome is runtime_error."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>
__global__ void scribble(float* y) { y[(size_t)threadIdx.x * 1000000000ull] = 1.f; }
void launch_scribble(int64_t y, int64_t stream) { scribble<<<1, 256, 0, (cudaStream_t)stream>>>((float*)y); }
"""
CPP_SRC = r"""
#include <pybind11/pybind11.h>
#include <stdint.h>
void launch_scribble(int64_t y, int64_t stream);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("launch_scribble", &launch_scribble); }
"""


class ModelNew(nn.Module):
    def forward(self, x):
        ext = load_inline(name="scribble", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, no_implicit_headers=True)
        y = torch.empty_like(x)
        ext.launch_scribble(y.data_ptr(), torch.cuda.current_stream(x.device).cuda_stream)
        torch.cuda.synchronize()
        return y
