"""Softmax over dim 1, CUDA C++ for sm_90: one row per thread-block CLUSTER, row staged in SHARED memory.

x is read from HBM exactly once and y written once (0.71 ms floor at 4096x65536 fp32 on ~3 TB/s).

Cluster path (cols % 4 == 0, 16-byte aligned, slice fits shared memory):
  * CTA `rank` of the cluster for row `row` owns float4 slice [rank*SL4, (rank+1)*SL4) of the row
    (SL4 = ceil(cols/4 / CLUSTER)); thread 0 pulls it into dynamic shared memory with the Hopper bulk
    copy engine (cp.async.bulk global->shared, completion on an mbarrier): the whole 32-128 KB slice
    is in flight at once, no registers tied up.
  * pass 1: local max m_c (float4 reads of shared memory);  pass 2: e = expf(x - m_c), written back
    to shared memory, and s_c = sum(e)  -> one expf per element in total.
  * (m_c, s_c) is published in shared memory; barrier.cluster; every thread reads the CLUSTER pairs
    through distributed shared memory (cluster.map_shared_rank) and forms M = max m_r,
    S = sum s_r * expf(m_r - M); barrier.cluster.arrive (peers may now exit once we are done).
  * pass 3: y = e * (expf(m_c - M) / S), float4 streaming stores (__stcs); barrier.cluster.wait.
  Several clusters are co-resident per SM group (CLUSTER=4: 64 KB per CTA, 3 CTAs per SM), so one
  CTA's bulk load overlaps other CTAs' compute and stores.
Fallback (cols % 4 != 0, misaligned, rows longer than CLUSTER * max shared memory, or no cluster can be
placed): one block per row, online (max, sum) pass + normalize pass (x read twice, second read
mostly from L2 for short rows).  Every KGEN_TUNABLE combination is valid for every shape.
"""
import hashlib

import torch
import torch.nn as nn

KGEN_TUNABLE = {
    "CLUSTER": [1, 2, 4, 8],
    "THREADS": [128, 256, 512, 1024],
    "COPY_CHUNK_KB": [8, 16, 32],
}

CUDA_SRC = r"""
#ifndef KGEN_KERNELS_ONLY
// No torch header in the CUDA source: nvcc compiles it in seconds instead of most of a minute (torch's
// headers are what cost the time). The torch-facing wrapper is in CPP_SRC, built by the host compiler;
// errors cross over as C++ exceptions, which torch turns into Python RuntimeErrors. The current stream
// comes from Python (torch.cuda.current_stream().cuda_stream).
#include <stdexcept>
#include <string>
#define KGEN_CUDA_CHECK(expr) do { cudaError_t e_ = (expr); if (e_ != cudaSuccess) \
    throw std::runtime_error(std::string(#expr ": ") + cudaGetErrorString(e_)); } while (0)
#define KGEN_LAUNCH_CHECK() KGEN_CUDA_CHECK(cudaGetLastError())
#endif
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <stdint.h>
#include <math.h>

namespace cg = cooperative_groups;

#define CLUSTER 4
#define THREADS 256
#define FB_THREADS 512
#define COPY_CHUNK_KB 16

#define STATIC_SMEM_RESERVE 1024

// ---------------------------------------------------------------- PTX helpers (sm_90)
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done) {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
    }
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

template <int NT>
__device__ __forceinline__ float block_max(float v, float* scratch) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < NT / 32 ? scratch[lane] : -INFINITY;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <int NT>
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < NT / 32 ? scratch[lane] : 0.f;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---------------------------------------------------------------- cluster one-pass kernel
// grid.x = rows * CLUSTER, cluster dims (CLUSTER,1,1) given at launch; dynamic smem = SL4 * 16 bytes.
// Register cap so that 1536 threads (3 x 512, 6 x 256, ...) fit an SM: <= 40 registers per thread.
#define CL_MIN_BLOCKS ((THREADS) >= 1024 ? 1 : 1536 / (THREADS))
__global__ void __launch_bounds__(THREADS, CL_MIN_BLOCKS)
softmax_cluster_smem_kernel(const float* __restrict__ x, float* __restrict__ y, int n4, int SL4) {
    extern __shared__ __align__(128) float4 buf[];
    __shared__ __align__(8) uint64_t bar;
    __shared__ float2 stat;
    __shared__ float red[32];

    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int64_t row = (int64_t)(blockIdx.x / CLUSTER);
    const int tid = threadIdx.x;
    const int begin4 = rank * SL4;
    const int cnt4 = max(0, min(SL4, n4 - begin4));
    const float4* src = reinterpret_cast<const float4*>(x) + row * n4 + begin4;
    float4* dst = reinterpret_cast<float4*>(y) + row * n4 + begin4;

    if (cnt4 > 0) {
        if (tid == 0) { mbar_init(&bar, 1); mbar_fence_init(); }
        __syncthreads();
        if (tid == 0) {
            const uint32_t total = (uint32_t)cnt4 * 16u;
            mbar_arrive_expect_tx(&bar, total);
            const uint32_t chunk = COPY_CHUNK_KB * 1024u;
            for (uint32_t off = 0; off < total; off += chunk) {
                const uint32_t b = min(chunk, total - off);
                bulk_g2s(reinterpret_cast<char*>(buf) + off, reinterpret_cast<const char*>(src) + off, b, &bar);
            }
        }
        mbar_wait(&bar, 0);
    }

    // pass 1: local max
    float m = -INFINITY;
    for (int j = tid; j < cnt4; j += THREADS) {
        float4 v = buf[j];
        m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    }
    m = block_max<THREADS>(m, red);
    const float mref = (m == -INFINITY) ? 0.f : m;     // empty / all -inf slice: e = 0, s = 0
    // pass 2: e = exp(x - m) kept in shared memory, local sum
    float s = 0.f;
    for (int j = tid; j < cnt4; j += THREADS) {
        float4 v = buf[j];
        v.x = expf(v.x - mref); v.y = expf(v.y - mref); v.z = expf(v.z - mref); v.w = expf(v.w - mref);
        buf[j] = v;
        s += (v.x + v.y) + (v.z + v.w);
    }
    s = block_sum<THREADS>(s, red);
    if (tid == 0) stat = make_float2(mref, s);
    cluster.sync();                                    // every CTA's (m, s) is published

    float M = -INFINITY;
    #pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
        float2 p = *cluster.map_shared_rank(&stat, r);
        if (p.y > 0.f) M = fmaxf(M, p.x);
    }
    float S = 0.f;
    #pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
        float2 p = *cluster.map_shared_rank(&stat, r);
        if (p.y > 0.f) S += p.y * expf(p.x - M);
    }
    cluster_arrive();                                  // done reading peers' shared memory

    const float scale = (s > 0.f) ? expf(mref - M) / S : 0.f;
    for (int j = tid; j < cnt4; j += THREADS) {
        float4 v = buf[j];
        v.x *= scale; v.y *= scale; v.z *= scale; v.w *= scale;
        __stcs(dst + j, v);
    }
    cluster_wait();                                    // no CTA exits while a peer may still read it
}

// ---------------------------------------------------------------- fallback: one block per row
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    if (M == -INFINITY) return;                        // both empty
    s = (m == -INFINITY ? 0.f : s * expf(m - M)) + (m2 == -INFINITY ? 0.f : s2 * expf(m2 - M));
    m = M;
}

__global__ void __launch_bounds__(FB_THREADS)
softmax_rowblock_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float sm_m[32], sm_s[32];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float m = -INFINITY, s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += FB_THREADS) {
        const float v = xr[j];
        if (v > m) { s = (m == -INFINITY ? 0.f : s * expf(m - v)) + 1.f; m = v; }
        else if (v != -INFINITY) s += expf(v - m);
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, m2, s2);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { sm_m[warp] = m; sm_s[warp] = s; }
    __syncthreads();
    m = lane < FB_THREADS / 32 ? sm_m[lane] : -INFINITY;
    s = lane < FB_THREADS / 32 ? sm_s[lane] : 0.f;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, m2, s2);
    }
    const float inv = 1.f / s;
    for (int64_t j = threadIdx.x; j < cols; j += FB_THREADS) __stcs(yr + j, expf(xr[j] - m) * inv);
}

#ifndef KGEN_KERNELS_ONLY
static bool launch_cluster(const float* xp, float* yp, int64_t rows, int64_t cols, cudaStream_t st) {
    if (cols % 4 != 0 || (reinterpret_cast<uintptr_t>(xp) % 16) || (reinterpret_cast<uintptr_t>(yp) % 16)) return false;
    if (rows * CLUSTER >= 2147483647LL || cols / 4 >= 2147483647LL) return false;
    const int n4 = (int)(cols / 4);
    const int SL4 = (n4 + CLUSTER - 1) / CLUSTER;
    const size_t smem = (size_t)SL4 * 16;
    int dev = 0, optin = 0;
    KGEN_CUDA_CHECK(cudaGetDevice(&dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem + STATIC_SMEM_RESERVE > (size_t)optin) return false;
    auto fn = softmax_cluster_smem_kernel;
    if (cudaFuncSetAttribute((const void*)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(rows * CLUSTER));
    cfg.blockDim = dim3(THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int nclusters = 0;
    if (cudaOccupancyMaxActiveClusters(&nclusters, (const void*)fn, &cfg) != cudaSuccess || nclusters < 1) {
        (void)cudaGetLastError(); return false;
    }
    KGEN_CUDA_CHECK(cudaLaunchKernelEx(&cfg, fn, xp, yp, n4, SL4));
    KGEN_LAUNCH_CHECK();
    return true;
}

void softmax_launch(const float* xp, float* yp, int64_t rows, int64_t cols, int64_t stream) {
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    if (!launch_cluster(xp, yp, rows, cols, st)) {
        if (rows >= 2147483647LL) throw std::runtime_error("too many rows");
        softmax_rowblock_kernel<<<(unsigned)rows, FB_THREADS, 0, st>>>(xp, yp, cols);
        KGEN_LAUNCH_CHECK();
    }
}
#endif
"""

CPP_SRC = r"""
void softmax_launch(const float* xp, float* yp, int64_t rows, int64_t cols, int64_t stream);

torch::Tensor softmax_fwd(torch::Tensor x, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 2, "float32 CUDA 2-D input expected");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0), cols = x.size(1);
    if (rows == 0 || cols == 0) return y;
    softmax_launch(x.data_ptr<float>(), y.data_ptr<float>(), rows, cols, stream);
    return y;
}
"""

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
            name="kgen_softmax_cluster_onepass_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
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
