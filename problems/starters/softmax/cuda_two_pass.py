"""Softmax over dim 1, CUDA C++: one thread block per row, two reads of the row.

Pass 1: every thread streams float4s of the row (UNROLL loads in flight per thread) and keeps an
online (max, sum-of-exp) pair with one expf per element (if x > m: s = s*exp(m-x) + 1, m = x;
else s += exp(x-m)); pairs are merged with warp shuffles and shared memory.
Pass 2 walks the row backwards (the tail read last in pass 1 is the likeliest to still be in L2),
loads with __ldcs and stores with __stcs (evict-first streaming) and writes exp(x - M) * (1/S).
Rows in flight x 256 KB should stay under the 50 MB L2 for pass 2 to hit; OCC_PAD_KB reserves unused
dynamic shared memory per block to cap the blocks per SM (120 -> 1 block per SM).
Rows whose length is not a multiple of 4 (or unaligned) take the scalar path of the same kernel.
expf is the accurate libdevice one (no --use_fast_math).
"""
import hashlib

import torch
import torch.nn as nn

KGEN_TUNABLE = {
    "THREADS": [256, 512, 1024],
    "UNROLL": [1, 2, 4, 8],
    "OCC_PAD_KB": [0, 64, 120],
}

CUDA_SRC = r"""
#ifndef KGEN_KERNELS_ONLY
#include <torch/extension.h>
#endif
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 1024
#define UNROLL 4
#define OCC_PAD_KB 0   // unused dynamic shared memory per block: caps blocks per SM (rows in flight vs L2)

#define NEG_BIG (-3.0e38f)

template <int V> struct VecIO;
template <> struct VecIO<4> {
    static __device__ __forceinline__ void ld(const float* p, float* r) {
        float4 t = __ldg(reinterpret_cast<const float4*>(p)); r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
    }
    static __device__ __forceinline__ void ld_cs(const float* p, float* r) {
        float4 t = __ldcs(reinterpret_cast<const float4*>(p)); r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
    }
    static __device__ __forceinline__ void st_cs(float* p, const float* r) {
        __stcs(reinterpret_cast<float4*>(p), make_float4(r[0], r[1], r[2], r[3]));
    }
};
template <> struct VecIO<1> {
    static __device__ __forceinline__ void ld(const float* p, float* r) { r[0] = __ldg(p); }
    static __device__ __forceinline__ void ld_cs(const float* p, float* r) { r[0] = __ldcs(p); }
    static __device__ __forceinline__ void st_cs(float* p, const float* r) { __stcs(p, r[0]); }
};

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

// Block-wide merge of (m, s); every thread gets the result.
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
    constexpr int NW = THREADS / 32;
    m = lane < NW ? sm_m[lane] : NEG_BIG;
    s = lane < NW ? sm_s[lane] : 0.f;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
}

template <int V>
__global__ void __launch_bounds__(THREADS)
softmax_two_pass_kernel(const float* __restrict__ x, float* __restrict__ y, int cols, int64_t sx, int64_t sy) {
    const int64_t row = blockIdx.x;
    const float* xr = x + row * sx;
    float* yr = y + row * sy;
    const int nv = cols / V;                    // whole vectors in the row (V divides cols)
    constexpr int STEP = THREADS * UNROLL;
    const int tid = threadIdx.x;

    float m = NEG_BIG, s = 0.f;
    for (int base = 0; base < nv; base += STEP) {
        float r[UNROLL][V];
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            int j = base + u * THREADS + tid;
            if (j < nv) VecIO<V>::ld(xr + (int64_t)j * V, r[u]);
            else {
                #pragma unroll
                for (int k = 0; k < V; ++k) r[u][k] = -INFINITY;
            }
        }
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            #pragma unroll
            for (int k = 0; k < V; ++k) online_add(m, s, r[u][k]);
    }
    block_merge(m, s);
    const float M = m;
    const float inv = 1.f / s;

    const int nsteps = (nv + STEP - 1) / STEP;
    for (int it = nsteps - 1; it >= 0; --it) {
        const int base = it * STEP;
        float r[UNROLL][V];
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            int j = base + u * THREADS + tid;
            if (j < nv) VecIO<V>::ld_cs(xr + (int64_t)j * V, r[u]);
        }
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            int j = base + u * THREADS + tid;
            if (j < nv) {
                #pragma unroll
                for (int k = 0; k < V; ++k) r[u][k] = expf(r[u][k] - M) * inv;
                VecIO<V>::st_cs(yr + (int64_t)j * V, r[u]);
            }
        }
    }
}

#ifndef KGEN_KERNELS_ONLY
torch::Tensor softmax_fwd(torch::Tensor x, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "float32 CUDA 2-D input expected");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int rows = (int)x.size(0), cols = (int)x.size(1);
    if (rows == 0 || cols == 0) return y;
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    const bool vec = (cols % 4 == 0) && (reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0)
                     && (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    const size_t pad = (size_t)OCC_PAD_KB * 1024;
    if (pad > 48 * 1024) {
        cudaFuncSetAttribute(softmax_two_pass_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pad);
        cudaFuncSetAttribute(softmax_two_pass_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pad);
    }
    if (vec)
        softmax_two_pass_kernel<4><<<rows, THREADS, pad, st>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols, x.stride(0), y.stride(0));
    else
        softmax_two_pass_kernel<1><<<rows, THREADS, pad, st>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols, x.stride(0), y.stride(0));
    TORCH_CHECK(cudaGetLastError() == cudaSuccess, "softmax kernel launch failed");
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
            name="kgen_softmax_two_pass_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
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
