"""A CUDA candidate that tries, at import in its compile step, to plant code for other candidates in
kgen's precompiled torch header: overwrite every file under the PCH directory the judge names and
add a directory of its own there. Each attempt must fail (the directory is read-only in its sandbox);
if one succeeds it says so, and its evaluation is a runtime_error instead of not_run.
"""
import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_root = os.environ.get("KGEN_TORCH_PCH_ROOT", "")
_planted = []
for _dirpath, _dirs, _files in os.walk(_root):
    for _name in _files:
        try:
            with open(os.path.join(_dirpath, _name), "r+b") as _f:
                _f.write(b"planted")
            _planted.append(_name)
        except OSError:
            pass
try:
    os.makedirs(os.path.join(_root, "planted"))
    _planted.append("planted/")
except OSError:
    pass
if _planted:
    raise RuntimeError(f"planted {_planted} in kgen's PCH directory")

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>
__global__ void copy_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
void launch_copy(int64_t x, int64_t y, int64_t n) {
    copy_kernel<<<(n + 255) / 256, 256>>>((const float*)x, (float*)y, n);
}
"""
CPP_SRC = r"""
#include <pybind11/pybind11.h>
#include <stdint.h>
void launch_copy(int64_t x, int64_t y, int64_t n);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("launch_copy", &launch_copy); }
"""
_ext = load_inline(name="planter", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _ext.launch_copy(x.data_ptr(), y.data_ptr(), x.numel())
        return y
