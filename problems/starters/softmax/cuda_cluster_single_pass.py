"""Softmax over dim 1, CUDA C++ for sm_90: one thread-block CLUSTER per row, the row read ONCE.

A row of 65536 fp32 (256 KB) does not fit one SM, but it fits the registers of a cluster of
CLUSTER blocks: each thread holds ITEMS float4s (CLUSTER*THREADS*ITEMS*4 >= cols).  Each block
loads its slice into registers, reduces an online (max, sum-of-exp) pair, publishes it in shared
memory, and after cluster.sync() every block reads its peers' pairs through distributed shared
memory (cluster.map_shared_rank), then writes exp(x - M) / S straight from registers.
HBM traffic is one read + one write (the 0.71 ms floor at 4096x65536), versus two reads for the
chunked two-pass design.  Rows that do not fit (or cols % 4 != 0 / unaligned) fall back to a
two-pass one-block-per-row kernel in the same module, so every tunable combination is correct.
"""
import hashlib

import torch
import torch.nn as nn

KGEN_TUNABLE = {
    "CLUSTER": [2, 4, 8],
    "THREADS": [256, 512, 1024],
    "ITEMS": [4, 8],
}

CUDA_SRC = r"""
#ifndef KGEN_KERNELS_ONLY
#include <torch/extension.h>
#endif
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <stdint.h>

namespace cg = cooperative_groups;

#define CLUSTER 2
#define THREADS 1024
#define ITEMS 8
#define FB_THREADS 1024

#define NEG_BIG (-3.0e38f)

__device__ __forceinline__ void online_add(float& m, float& s, float x) {
    float d = x - m;
    bool gt = d > 0.f;
    float e = expf(gt ? -d : d);
    s = gt ? fmaf(s, e, 1.f) : s + e;
    m = gt ? x : m;
}

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    float M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

template <int NT>
__device__ __forceinline__ void block_merge(float& m, float& s) {
    __shared__ float sm_m[32], sm_s[32];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { sm_m[warp] = m; sm_s[warp] = s; }
    __syncthreads();
    constexpr int NW = NT / 32;
    m = lane < NW ? sm_m[lane] : NEG_BIG;
    s = lane < NW ? sm_s[lane] : 0.f;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
}

// ---- single pass: row in the registers of a cluster --------------------------------------
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
softmax_cluster_kernel(const float* __restrict__ x, float* __restrict__ y, int cols, int64_t sx, int64_t sy) {
    __shared__ float2 blk_stat;
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int64_t row = blockIdx.x / CLUSTER;
    const float4* xr = reinterpret_cast<const float4*>(x + row * sx);
    float4* yr = reinterpret_cast<float4*>(y + row * sy);
    const int n4 = cols >> 2;
    const int tid = threadIdx.x;

    float4 v[ITEMS];
    #pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        int j = (i * CLUSTER + rank) * THREADS + tid;
        v[i] = j < n4 ? __ldcs(xr + j) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
    float m = NEG_BIG, s = 0.f;
    #pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        online_add(m, s, v[i].x); online_add(m, s, v[i].y);
        online_add(m, s, v[i].z); online_add(m, s, v[i].w);
    }
    block_merge<THREADS>(m, s);
    if (tid == 0) blk_stat = make_float2(m, s);
    cluster.sync();                                   // every block's pair is published
    float M = NEG_BIG, S = 0.f;
    #pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
        float2 p = *cluster.map_shared_rank(&blk_stat, r);
        merge(M, S, p.x, p.y);
    }
    cluster.sync();                                   // no block exits while a peer still reads it
    const float inv = 1.f / S;
    #pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        int j = (i * CLUSTER + rank) * THREADS + tid;
        if (j < n4) {
            float4 o;
            o.x = expf(v[i].x - M) * inv; o.y = expf(v[i].y - M) * inv;
            o.z = expf(v[i].z - M) * inv; o.w = expf(v[i].w - M) * inv;
            __stcs(yr + j, o);
        }
    }
}

// ---- fallback: two passes, one block per row, scalar loads ---------------------------------
__global__ void __launch_bounds__(FB_THREADS)
softmax_fallback_kernel(const float* __restrict__ x, float* __restrict__ y, int cols, int64_t sx, int64_t sy) {
    const int64_t row = blockIdx.x;
    const float* xr = x + row * sx;
    float* yr = y + row * sy;
    float m = NEG_BIG, s = 0.f;
    for (int j = threadIdx.x; j < cols; j += FB_THREADS) online_add(m, s, __ldg(xr + j));
    block_merge<FB_THREADS>(m, s);
    const float inv = 1.f / s;
    for (int j = threadIdx.x; j < cols; j += FB_THREADS) __stcs(yr + j, expf(__ldcs(xr + j) - m) * inv);
}

#ifndef KGEN_KERNELS_ONLY
torch::Tensor softmax_fwd(torch::Tensor x, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "float32 CUDA 2-D input expected");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int rows = (int)x.size(0), cols = (int)x.size(1);
    if (rows == 0 || cols == 0) return y;
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    const bool fits = (cols % 4 == 0) && ((int64_t)cols <= (int64_t)CLUSTER * THREADS * ITEMS * 4)
                      && (reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0)
                      && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0)
                      && ((int64_t)rows * CLUSTER < 2147483647LL);
    bool done = false;
    if (fits) {
        softmax_cluster_kernel<<<rows * CLUSTER, THREADS, 0, st>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols, x.stride(0), y.stride(0));
        done = cudaGetLastError() == cudaSuccess;     // e.g. a cluster shape the GPU cannot place
    }
    if (!done) {
        softmax_fallback_kernel<<<rows, FB_THREADS, 0, st>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols, x.stride(0), y.stride(0));
        TORCH_CHECK(cudaGetLastError() == cudaSuccess, "softmax kernel launch failed");
    }
    return y;
}
#endif
"""

CPP_SRC = "torch::Tensor softmax_fwd(torch::Tensor x, int64_t stream);"

_MODULES = {}


def _build():
    src = CUDA_SRC
    arch = "90"
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        arch = f"{major}{minor}"
    key = hashlib.sha1((src + arch).encode()).hexdigest()[:12]
    if key not in _MODULES:
        from torch.utils.cpp_extension import load_inline
        _MODULES[key] = load_inline(
            name="kgen_softmax_cluster_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
            functions=["softmax_fwd"], extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"], verbose=False)
    return _MODULES[key]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._mod = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._mod is None:
            self._mod = _build()
        return self._mod.softmax_fwd(x, torch.cuda.current_stream(x.device).cuda_stream)
