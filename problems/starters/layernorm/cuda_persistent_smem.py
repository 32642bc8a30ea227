"""LayerNorm over the last three dims, CUDA C++: persistent cooperative kernel, x read ONCE.

The grid is exactly as many blocks as fit on the GPU at once (cooperative launch, sized with the
occupancy API).  Block c owns the same column slice [c*S, c*S+S) of every row, S = N / grid
(~128 KB at 16x4M on 132 SMs: it fits in shared memory).  For each row:
  1. load the slice into shared memory (float4, __ldcs streaming) and reduce its exact mean and
     M2 = sum((x - mean_c)^2) (second pass over shared memory, not HBM);
  2. publish (mean_c, M2_c) to global memory and meet the other blocks at a grid barrier
     (monotonic atomic counter, zeroed per launch);
  3. every block merges all the partial pairs in float64 (Chan's formula) -> mean, rstd;
  4. normalize the slice straight from shared memory, weight/bias through L2 (they are the same
     addresses for every row, so they stay L2-resident while x/y stream with evict-first hints),
     store y with __stcs.
HBM traffic ~ read x + write y + weight/bias once (the 0.19 ms floor), against two reads of x for a
stats-then-normalize design.  When the slice does not fit shared memory the same kernel re-reads x
from global memory for the normalize step (template CACHED=false), so any shape works.
"""
import hashlib

import torch
import torch.nn as nn

KGEN_TUNABLE = {
    "THREADS": [256, 512, 1024],
    "BLOCKS_PER_SM": [1, 2, 3, 4],
}

CUDA_SRC = r"""
#ifndef KGEN_KERNELS_ONLY
#include <torch/extension.h>
#endif
#include <cuda_runtime.h>
#include <stdint.h>
#include <algorithm>

#define THREADS 512
#define BLOCKS_PER_SM 2
#define SMEM_LIMIT (200 * 1024)

template <int V> struct VecIO;
template <> struct VecIO<4> {
    static __device__ __forceinline__ void ld_cs(const float* p, float* r) {
        float4 t = __ldcs(reinterpret_cast<const float4*>(p)); r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
    }
    static __device__ __forceinline__ void ld(const float* p, float* r) {
        float4 t = __ldg(reinterpret_cast<const float4*>(p)); r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
    }
    static __device__ __forceinline__ void st_cs(float* p, const float* r) {
        __stcs(reinterpret_cast<float4*>(p), make_float4(r[0], r[1], r[2], r[3]));
    }
    static __device__ __forceinline__ void st_sm(float* p, const float* r) {
        *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
    }
    static __device__ __forceinline__ void ld_sm(const float* p, float* r) {
        float4 t = *reinterpret_cast<const float4*>(p); r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
    }
};
template <> struct VecIO<1> {
    static __device__ __forceinline__ void ld_cs(const float* p, float* r) { r[0] = __ldcs(p); }
    static __device__ __forceinline__ void ld(const float* p, float* r) { r[0] = __ldg(p); }
    static __device__ __forceinline__ void st_cs(float* p, const float* r) { __stcs(p, r[0]); }
    static __device__ __forceinline__ void st_sm(float* p, const float* r) { p[0] = r[0]; }
    static __device__ __forceinline__ void ld_sm(const float* p, float* r) { r[0] = p[0]; }
};

template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();                       // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    constexpr int NW = THREADS / 32;
    v = lane < NW ? scratch[lane] : T(0);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;                              // every thread holds the block total
}

__device__ __forceinline__ void grid_barrier(unsigned int* counter, unsigned int target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1u);
        while (*reinterpret_cast<volatile unsigned int*>(counter) < target) __nanosleep(20);
        __threadfence();
    }
    __syncthreads();
}

// x, y: [rows, N]; w, b: [N] or null; partial: [rows, gridDim.x] float2 (mean_c, M2_c)
template <int V, bool CACHED>
__global__ void __launch_bounds__(THREADS)
layernorm_persistent_kernel(const float* __restrict__ x, float* __restrict__ y,
                            const float* __restrict__ w, const float* __restrict__ b,
                            float2* __restrict__ partial, unsigned int* counter,
                            int rows, int64_t N, int64_t S, double eps) {
    extern __shared__ __align__(16) float slice[];
    __shared__ float red_f[32];
    __shared__ double red_d[32];
    const int G = gridDim.x;
    const int c = blockIdx.x;
    const int64_t start = (int64_t)c * S;
    const int64_t n_c = start < N ? min(S, N - start) : 0;   // multiple of V
    const int nv = (int)(n_c / V);
    const int tid = threadIdx.x;

    for (int r = 0; r < rows; ++r) {
        const float* xr = x + (int64_t)r * N + start;
        float* yr = y + (int64_t)r * N + start;

        // 1. local sum (and stash the slice in shared memory)
        float s = 0.f;
        for (int j = tid; j < nv; j += THREADS) {
            float v[V];
            VecIO<V>::ld_cs(xr + (int64_t)j * V, v);
            if (CACHED) VecIO<V>::st_sm(slice + j * V, v);
            #pragma unroll
            for (int k = 0; k < V; ++k) s += v[k];
        }
        s = block_sum<float>(s, red_f);
        const float mu_c = n_c > 0 ? s / (float)n_c : 0.f;
        float q = 0.f;
        for (int j = tid; j < nv; j += THREADS) {
            float v[V];
            if (CACHED) VecIO<V>::ld_sm(slice + j * V, v); else VecIO<V>::ld(xr + (int64_t)j * V, v);
            #pragma unroll
            for (int k = 0; k < V; ++k) { float d = v[k] - mu_c; q = fmaf(d, d, q); }
        }
        q = block_sum<float>(q, red_f);
        if (tid == 0) partial[(int64_t)r * G + c] = make_float2(mu_c, q);

        // 2. wait for every block's partial of this row
        grid_barrier(counter, (unsigned int)(r + 1) * (unsigned int)G);

        // 3. merge the partials in float64
        const float2* pr = partial + (int64_t)r * G;
        double acc = 0.0;
        for (int i = tid; i < G; i += THREADS) {
            float2 p = __ldcg(pr + i);
            int64_t st = (int64_t)i * S;
            double n_i = st < N ? (double)min(S, N - st) : 0.0;
            acc += n_i * (double)p.x;
        }
        const double mean = block_sum<double>(acc, red_d) / (double)N;
        double acc2 = 0.0;
        for (int i = tid; i < G; i += THREADS) {
            float2 p = __ldcg(pr + i);
            int64_t st = (int64_t)i * S;
            double n_i = st < N ? (double)min(S, N - st) : 0.0;
            double dm = (double)p.x - mean;
            acc2 += (double)p.y + n_i * dm * dm;
        }
        const double var = block_sum<double>(acc2, red_d) / (double)N;
        const float meanf = (float)mean;
        const float rstd = (float)(1.0 / sqrt(var + eps));

        // 4. normalize the slice
        for (int j = tid; j < nv; j += THREADS) {
            float v[V], wv[V], bv[V];
            if (CACHED) VecIO<V>::ld_sm(slice + j * V, v); else VecIO<V>::ld_cs(xr + (int64_t)j * V, v);
            if (w != nullptr) VecIO<V>::ld(w + start + (int64_t)j * V, wv);
            if (b != nullptr) VecIO<V>::ld(b + start + (int64_t)j * V, bv);
            #pragma unroll
            for (int k = 0; k < V; ++k) {
                float o = (v[k] - meanf) * rstd;
                if (w != nullptr) o = o * wv[k];
                if (b != nullptr) o = o + bv[k];
                v[k] = o;
            }
            VecIO<V>::st_cs(yr + (int64_t)j * V, v);
        }
        // Next row reuses `slice` with the same element->thread mapping: no barrier needed.
    }
}

#ifndef KGEN_KERNELS_ONLY
template <int V, bool CACHED>
static void launch(int G, size_t smem, cudaStream_t st, void** args) {
    auto fn = layernorm_persistent_kernel<V, CACHED>;
    cudaError_t e = cudaLaunchCooperativeKernel((const void*)fn, dim3(G), dim3(THREADS), args, smem, st);
    TORCH_CHECK(e == cudaSuccess, "layernorm cooperative launch failed: ", cudaGetErrorString(e));
}

template <int V, bool CACHED>
static int blocks_per_sm(size_t smem) {
    auto fn = layernorm_persistent_kernel<V, CACHED>;
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute((const void*)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) { cudaGetLastError(); return 0; }
    }
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, THREADS, smem) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}

template <int V>
static void run(const float* xp, float* yp, const float* wp, const float* bp, int rows, int64_t N, double eps,
                const torch::Tensor& like, cudaStream_t st) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    int G = 0; int64_t S = 0; size_t smem = 0; bool cached = false;
    for (int bps = BLOCKS_PER_SM; bps >= 1 && !cached; --bps) {
        int g = sms * bps;
        int64_t s = ((N + g - 1) / g + 3) / 4 * 4;
        size_t sm = (size_t)s * sizeof(float);
        if (sm <= SMEM_LIMIT && blocks_per_sm<V, true>(sm) >= bps) { G = g; S = s; smem = sm; cached = true; }
    }
    if (!cached) {
        int bps = std::max(1, std::min(BLOCKS_PER_SM, blocks_per_sm<V, false>(0)));
        G = sms * bps;
        S = ((N + G - 1) / G + 3) / 4 * 4;
        smem = 0;
    }
    auto partial = torch::empty({(int64_t)rows * G * 2}, like.options());
    auto counter = torch::empty({1}, like.options().dtype(torch::kInt32));
    cudaMemsetAsync(counter.data_ptr<int>(), 0, sizeof(int), st);
    float2* pp = reinterpret_cast<float2*>(partial.data_ptr<float>());
    unsigned int* cp = reinterpret_cast<unsigned int*>(counter.data_ptr<int>());
    void* args[] = {(void*)&xp, (void*)&yp, (void*)&wp, (void*)&bp, (void*)&pp, (void*)&cp,
                    (void*)&rows, (void*)&N, (void*)&S, (void*)&eps};
    if (cached) launch<V, true>(G, smem, st, args);
    else launch<V, false>(G, smem, st, args);
}

torch::Tensor layernorm_fwd(torch::Tensor x, int64_t N, c10::optional<torch::Tensor> weight,
                            c10::optional<torch::Tensor> bias, double eps, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA input expected");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t rows = N > 0 ? x.numel() / N : 0;
    if (rows == 0 || N == 0) return y;
    torch::Tensor w, b;
    const float* wp = nullptr; const float* bp = nullptr;
    if (weight.has_value() && weight->defined()) { w = weight->contiguous(); wp = w.data_ptr<float>(); }
    if (bias.has_value() && bias->defined()) { b = bias->contiguous(); bp = b.data_ptr<float>(); }
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    auto al = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const bool vec = (N % 4 == 0) && al(x.data_ptr<float>()) && al(y.data_ptr<float>())
                     && (wp == nullptr || al(wp)) && (bp == nullptr || al(bp));
    if (vec) run<4>(x.data_ptr<float>(), y.data_ptr<float>(), wp, bp, (int)rows, N, eps, x, st);
    else run<1>(x.data_ptr<float>(), y.data_ptr<float>(), wp, bp, (int)rows, N, eps, x, st);
    return y;
}
#endif
"""

CPP_SRC = ("torch::Tensor layernorm_fwd(torch::Tensor x, int64_t N, c10::optional<torch::Tensor> weight, "
           "c10::optional<torch::Tensor> bias, double eps, int64_t stream);")

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
            name="kgen_layernorm_persistent_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
            functions=["layernorm_fwd"], extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"], verbose=False)
    return _MODULES[key]


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)  # parameter holder (weight, bias, eps)
        self._mod = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._mod is None:
            self._mod = _build()
        N = 1
        for s in self.ln.normalized_shape:
            N *= s
        return self._mod.layernorm_fwd(x, N, self.ln.weight, self.ln.bias, float(self.ln.eps),
                                       torch.cuda.current_stream(x.device).cuda_stream)
