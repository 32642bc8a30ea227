"""LayerNorm over the last three dims as LLMs write CUDA candidates in KernelBench's format: kernels
and host wrapper in one `.cu` source that includes torch/extension.h, a C++ declaration,
`functions=[...]`, `-O3` for both compilers and an architecture pinned in the gencode form
(`-gencode arch=compute_80,code=sm_80`; kgen replaces it by the evaluating GPU's target).
A block of partial sums per (row, chunk) with atomics into a float accumulator, then one
normalize-scale-shift pass.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layernorm_source = r"""
#include <torch/extension.h>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void row_stats_kernel(const float* __restrict__ x, float* __restrict__ stats, int64_t n) {
    __shared__ float s_sum[256], s_sq[256];
    const float* xr = x + (int64_t)blockIdx.y * n;
    float sum = 0.f, sq = 0.f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = xr[i];
        sum += v;
        sq += v * v;
    }
    s_sum[threadIdx.x] = sum;
    s_sq[threadIdx.x] = sq;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            s_sum[threadIdx.x] += s_sum[threadIdx.x + s];
            s_sq[threadIdx.x] += s_sq[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(&stats[2 * blockIdx.y], s_sum[0]);
        atomicAdd(&stats[2 * blockIdx.y + 1], s_sq[0]);
    }
}

__global__ void normalize_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ b, const float* __restrict__ stats,
                                 float* __restrict__ y, int64_t n, float eps) {
    const int64_t row = blockIdx.y;
    const float mean = stats[2 * row] / n;
    const float var = fmaxf(stats[2 * row + 1] / n - mean * mean, 0.f);
    const float inv = rsqrtf(var + eps);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        y[row * n + i] = (x[row * n + i] - mean) * inv * w[i] + b[i];
    }
}

torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0);
    const int64_t n = xc.numel() / rows;
    auto stats = torch::zeros({rows, 2}, xc.options());
    auto y = torch::empty_like(xc);
    dim3 grid(256, rows);
    row_stats_kernel<<<grid, 256>>>(xc.data_ptr<float>(), stats.data_ptr<float>(), n);
    normalize_kernel<<<grid, 256>>>(xc.data_ptr<float>(), weight.contiguous().data_ptr<float>(),
                                    bias.contiguous().data_ptr<float>(), stats.data_ptr<float>(),
                                    y.data_ptr<float>(), n, (float)eps);
    return y;
}
"""

layernorm_cpp_source = ("torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, "
                        "double eps);")

layernorm_ext = load_inline(
    name="layernorm_ext",
    cpp_sources=layernorm_cpp_source,
    cuda_sources=layernorm_source,
    functions=["layernorm_cuda"],
    verbose=False,
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3", "-gencode", "arch=compute_80,code=sm_80"],
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_ext.layernorm_cuda(x, self.ln.weight, self.ln.bias, self.ln.eps)
