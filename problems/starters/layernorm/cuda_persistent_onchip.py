"""LayerNorm over the trailing dims, CUDA C++ for sm_90: persistent cooperative kernel, TWO rows on chip.

Target: 16 rows of N = 64*256*256 = 4M fp32 (16 MB each).  x is read from HBM once, y written once;
weight/bias (2 x 16 MB) are read once per row but stay L2-resident (x/y use evict-first .cs accesses).

Grid = one block per SM (cooperative launch: all blocks co-resident).  Block c owns the float4 column
slice [c*S4, (c+1)*S4) of EVERY row (S4 = ceil(N/4 / G), ~124 KB per row at 4M/132).  A slice is kept
on chip split in two parts: the first REGV*THREADS float4s in registers (REGV float4 per thread), the
rest in dynamic shared memory.  Two buffers (NB = 2) when 2 slices fit (registers + <= 227 KB shared),
otherwise one (NB = 1).  Each thread only ever touches its own float4 positions (j = tid + k*THREADS),
so no block barrier is needed around the buffers.

Schedule (NB = 2; rows r, r+1 resident):
    prologue: load row 0 -> buf0, partial stats, arrive(0); load row 1 -> buf1, partial, arrive(1)
    for r: wait(r)  (per-row arrival counter reaches G; the arrival happened one full step earlier, so the
                     grid barrier's latency is hidden behind the previous row's normalize+load)
           combine the G partials (mean_c, M2_c) in float64 with Chan's formula (one warp) -> mean, rstd
           fused loop over the slice: y = (x - mean) * rstd * w + b -> __stcs,   and in the same loop
           issue the loads of row r+NB (__ldcs) into the freed slot (registers / shared memory)
           partial stats of row r+NB from on-chip data: exact two-pass mean_c, M2_c = sum (x - mean_c)^2
           publish (mean_c, M2_c) as double2, __threadfence, atomicAdd(counter[r+NB])
HBM bytes ~ 268 MB (x) + 268 MB (y) + 33.5 MB (w, b once, if L2 keeps them) -> ~0.19 ms floor.

Fallbacks (any shape): N % 4 != 0 / misaligned / slice too large for 2x or 1x on-chip / no cooperative
launch / very many rows -> three plain kernels: per-chunk (mean, M2) partials, per-row Chan combine,
elementwise normalize (x read twice).  Every KGEN_TUNABLE combination is valid for every shape.
"""
import hashlib

import torch
import torch.nn as nn

KGEN_TUNABLE = {
    "THREADS": [256, 512],          # 1024 caps registers at 64/thread: spills
    "REGV": [0, 1, 2, 4],
    "UNROLL": [1, 2, 4],
    "WB_EVICT_LAST": [0, 1],
    "PAIR": [0, 1],                 # 1: normalize two rows per weight/bias read
}

CUDA_SRC = r"""
#ifndef KGEN_KERNELS_ONLY
#include <torch/extension.h>
// c10/cuda headers are avoided so that the source also compiles against a CPU-only torch (check_starters
// --load-inline); the current stream comes from Python (torch.cuda.current_stream().cuda_stream).
#define KGEN_CUDA_CHECK(expr) do { cudaError_t e_ = (expr); TORCH_CHECK(e_ == cudaSuccess, #expr, ": ", cudaGetErrorString(e_)); } while (0)
#define KGEN_LAUNCH_CHECK() KGEN_CUDA_CHECK(cudaGetLastError())
#endif
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

#define THREADS 512
#define REGV 2
#define UNROLL 2
#define WB_EVICT_LAST 0
#define PAIR 1
#define FB_THREADS 256
#define FB_ITEMS 8
#define MAX_PERSISTENT_ROWS 4096
#define SMEM_RESERVE 2048

#define REGV_ALLOC ((REGV) > 0 ? (REGV) : 1)

// ------------------------------------------------------------------ small helpers
__device__ __forceinline__ float4 ld_stream(const float4* p) { return __ldcs(p); }
__device__ __forceinline__ void st_stream(float4* p, float4 v) { __stcs(p, v); }
// weight / bias: read every row -> ask L2 to keep them (evict_last) while x / y stream through
__device__ __forceinline__ float4 ld_keep(const float4* p) {
#if WB_EVICT_LAST
    float4 v;
    asm volatile("{\n\t.reg .b64 pol;\n\t"
                 "createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
                 "ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], pol;\n\t}"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
#else
    return __ldg(p);
#endif
}

template <int NT, typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();                       // scratch may still be read by the previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < NT / 32 ? scratch[lane] : T(0);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;                              // every thread holds the block total
}

// Chan's parallel combine of (count, mean, M2) in float64
__device__ __forceinline__ void chan_merge(double& n, double& mean, double& m2, double nb, double meanb, double m2b) {
    if (nb <= 0.0) return;
    if (n <= 0.0) { n = nb; mean = meanb; m2 = m2b; return; }
    const double nn = n + nb;
    const double d = meanb - mean;
    mean += d * (nb / nn);
    m2 += m2b + d * d * (n * nb / nn);
    n = nn;
}

__device__ __forceinline__ float4 affine(float4 v, float mean, float rstd, const float4* w, const float4* b, int64_t k) {
    float4 o;
    o.x = (v.x - mean) * rstd; o.y = (v.y - mean) * rstd; o.z = (v.z - mean) * rstd; o.w = (v.w - mean) * rstd;
    if (w != nullptr) { const float4 g = ld_keep(w + k); o.x *= g.x; o.y *= g.y; o.z *= g.z; o.w *= g.w; }
    if (b != nullptr) { const float4 h = ld_keep(b + k); o.x += h.x; o.y += h.y; o.z += h.z; o.w += h.w; }
    return o;
}

struct LNParams {
    const float4* x; float4* y; const float4* w; const float4* b;
    double2* partial;          // [rows][G]  (mean_c, M2_c)
    unsigned int* counter;     // [rows], zeroed before launch
    int rows; int64_t N4; int S4; int SM4; float eps;
};

struct LNShared {
    double red_d[32];
    float red_f[32];
    float stat[4];             // (mean, rstd) of the current row(s): slot 0, slot 1
};

// ------------------------------------------------------------------ persistent kernel pieces
// partial (mean_c, M2_c) of the slice held in (R, sb); publish and arrive on counter[r]
__device__ __forceinline__ void slice_partial(const LNParams& p, int r, int cnt4, const float4 (&R)[REGV_ALLOC],
                                              const float4* sb, LNShared& sh) {
    const int tid = threadIdx.x;
    // per-thread pivot (its first element) keeps the fp32 partial sums small for offset data;
    // the block total is formed in float64
    float piv = 0.f;
    if (tid < cnt4) piv = (REGV > 0) ? R[0].x : sb[tid].x;
    float s = 0.f;
    int nt = 0;
    #pragma unroll
    for (int i = 0; i < REGV; ++i) {
        if (i * THREADS + tid < cnt4) {
            const float4 v = R[i]; s += ((v.x - piv) + (v.y - piv)) + ((v.z - piv) + (v.w - piv)); nt += 4;
        }
    }
    for (int j = REGV * THREADS + tid; j < cnt4; j += THREADS) {
        const float4 v = sb[j - REGV * THREADS]; s += ((v.x - piv) + (v.y - piv)) + ((v.z - piv) + (v.w - piv)); nt += 4;
    }
    const double tot = block_sum<THREADS, double>((double)piv * (double)nt + (double)s, sh.red_d);
    const float mc = cnt4 > 0 ? (float)(tot / (4.0 * (double)cnt4)) : 0.f;
    float q = 0.f;
    #pragma unroll
    for (int i = 0; i < REGV; ++i) {
        if (i * THREADS + tid < cnt4) {
            const float4 v = R[i];
            float d;
            d = v.x - mc; q = fmaf(d, d, q); d = v.y - mc; q = fmaf(d, d, q);
            d = v.z - mc; q = fmaf(d, d, q); d = v.w - mc; q = fmaf(d, d, q);
        }
    }
    for (int j = REGV * THREADS + tid; j < cnt4; j += THREADS) {
        const float4 v = sb[j - REGV * THREADS];
        float d;
        d = v.x - mc; q = fmaf(d, d, q); d = v.y - mc; q = fmaf(d, d, q);
        d = v.z - mc; q = fmaf(d, d, q); d = v.w - mc; q = fmaf(d, d, q);
    }
    q = block_sum<THREADS, float>(q, sh.red_f);
    if (tid == 0) {
        p.partial[(int64_t)r * gridDim.x + blockIdx.x] = make_double2((double)mc, (double)q);
        __threadfence();
        atomicAdd(p.counter + r, 1u);
    }
}

// wait until every block has published row r, then combine -> sh.stat (mean, rstd)
__device__ __forceinline__ void row_stats(const LNParams& p, int r, LNShared& sh, int slot = 0) {
    __syncthreads();                       // everyone has read the previous row's sh.stat
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        const unsigned int G = gridDim.x;
        if (lane == 0) {
            volatile unsigned int* c = p.counter + r;
            while (*c < G) __nanosleep(32);
            __threadfence();
        }
        __syncwarp();
        double n = 0.0, mean = 0.0, m2 = 0.0;
        for (int i = lane; i < (int)G; i += 32) {
            const int64_t st = (int64_t)i * p.S4;
            const int64_t c4 = st < p.N4 ? min((int64_t)p.S4, p.N4 - st) : 0;
            const double2 q = __ldcg(p.partial + (int64_t)r * G + i);
            chan_merge(n, mean, m2, 4.0 * (double)c4, q.x, q.y);
        }
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const double nb = __shfl_xor_sync(0xffffffffu, n, o);
            const double mb = __shfl_xor_sync(0xffffffffu, mean, o);
            const double qb = __shfl_xor_sync(0xffffffffu, m2, o);
            chan_merge(n, mean, m2, nb, mb, qb);
        }
        if (lane == 0) {
            const double var = n > 0.0 ? m2 / n : 0.0;
            sh.stat[2 * slot] = (float)mean;
            sh.stat[2 * slot + 1] = (float)(1.0 / sqrt(var + (double)p.eps));
        }
    }
    __syncthreads();
}

// prologue: load row r of this block's slice into (R, sb)
__device__ __forceinline__ void slice_load(const LNParams& p, int r, int64_t start4, int cnt4,
                                           float4 (&R)[REGV_ALLOC], float4* sb) {
    const int tid = threadIdx.x;
    const float4* xr = p.x + (int64_t)r * p.N4 + start4;
    #pragma unroll
    for (int i = 0; i < REGV; ++i) {
        const int j = i * THREADS + tid;
        if (j < cnt4) R[i] = ld_stream(xr + j);
    }
    for (int j0 = REGV * THREADS + tid; j0 < cnt4; j0 += THREADS * UNROLL) {
        float4 t[UNROLL];
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) { const int j = j0 + u * THREADS; if (j < cnt4) t[u] = ld_stream(xr + j); }
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) { const int j = j0 + u * THREADS; if (j < cnt4) sb[j - REGV * THREADS] = t[u]; }
    }
}

// one row: wait for its stats, normalize it from (R, sb), refill (R, sb) with row r+NB, publish its partial
template <int NB>
__device__ __forceinline__ void ln_step(const LNParams& p, int r, int64_t start4, int cnt4,
                                        float4 (&R)[REGV_ALLOC], float4* sb, LNShared& sh) {
    row_stats(p, r, sh);
    const float mean = sh.stat[0], rstd = sh.stat[1];
    const int tid = threadIdx.x;
    const bool has_next = r + NB < p.rows;
    float4* yr = p.y + (int64_t)r * p.N4 + start4;
    const float4* xn = p.x + (int64_t)(r + NB) * p.N4 + start4;
    const float4* w = p.w ? p.w + start4 : nullptr;
    const float4* b = p.b ? p.b + start4 : nullptr;
    #pragma unroll
    for (int i = 0; i < REGV; ++i) {
        const int j = i * THREADS + tid;
        if (j < cnt4) {
            st_stream(yr + j, affine(R[i], mean, rstd, w, b, j));
            if (has_next) R[i] = ld_stream(xn + j);
        }
    }
    for (int j0 = REGV * THREADS + tid; j0 < cnt4; j0 += THREADS * UNROLL) {
        float4 t[UNROLL];
        if (has_next) {
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) { const int j = j0 + u * THREADS; if (j < cnt4) t[u] = ld_stream(xn + j); }
        }
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int j = j0 + u * THREADS;
            if (j < cnt4) st_stream(yr + j, affine(sb[j - REGV * THREADS], mean, rstd, w, b, j));
        }
        if (has_next) {
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) { const int j = j0 + u * THREADS; if (j < cnt4) sb[j - REGV * THREADS] = t[u]; }
        }
    }
    if (has_next) slice_partial(p, r + NB, cnt4, R, sb, sh);
}

// two rows at once (both buffers): weight/bias are read ONCE per row pair (they do not stay in L2: 33.5 MB,
// partly duplicated across the two L2 halves, does not fit next to the x/y stream).  Refills both buffers with
// rows r+2, r+3 and publishes their partials; the grid barrier of r+2 is then met right away (exposed once per pair).
__device__ __forceinline__ float4 norm4(float4 v, float mean, float rstd) {
    return make_float4((v.x - mean) * rstd, (v.y - mean) * rstd, (v.z - mean) * rstd, (v.w - mean) * rstd);
}
__device__ __forceinline__ float4 affine_wb(float4 o, const float4* w, const float4* b, float4 g, float4 h) {
    if (w != nullptr) { o.x *= g.x; o.y *= g.y; o.z *= g.z; o.w *= g.w; }
    if (b != nullptr) { o.x += h.x; o.y += h.y; o.z += h.z; o.w += h.w; }
    return o;
}
__device__ __forceinline__ void ln_pair_step(const LNParams& p, int r, int64_t start4, int cnt4,
                                             float4 (&R0)[REGV_ALLOC], float4* sb0,
                                             float4 (&R1)[REGV_ALLOC], float4* sb1, LNShared& sh) {
    row_stats(p, r, sh, 0);
    row_stats(p, r + 1, sh, 1);
    const float mean0 = sh.stat[0], rstd0 = sh.stat[1], mean1 = sh.stat[2], rstd1 = sh.stat[3];
    const int tid = threadIdx.x;
    const bool nx0 = r + 2 < p.rows, nx1 = r + 3 < p.rows;
    float4* y0 = p.y + (int64_t)r * p.N4 + start4;
    float4* y1 = y0 + p.N4;
    const float4* x2 = p.x + (int64_t)(r + 2) * p.N4 + start4;
    const float4* x3 = x2 + p.N4;
    const float4* w = p.w ? p.w + start4 : nullptr;
    const float4* b = p.b ? p.b + start4 : nullptr;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    #pragma unroll
    for (int i = 0; i < REGV; ++i) {
        const int j = i * THREADS + tid;
        if (j < cnt4) {
            const float4 g = w ? ld_keep(w + j) : zero, h = b ? ld_keep(b + j) : zero;
            st_stream(y0 + j, affine_wb(norm4(R0[i], mean0, rstd0), w, b, g, h));
            st_stream(y1 + j, affine_wb(norm4(R1[i], mean1, rstd1), w, b, g, h));
            if (nx0) R0[i] = ld_stream(x2 + j);
            if (nx1) R1[i] = ld_stream(x3 + j);
        }
    }
    for (int j0 = REGV * THREADS + tid; j0 < cnt4; j0 += THREADS * UNROLL) {
        float4 t0[UNROLL], t1[UNROLL], g[UNROLL], h[UNROLL];
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int j = j0 + u * THREADS;
            if (j < cnt4) {
                g[u] = w ? ld_keep(w + j) : zero; h[u] = b ? ld_keep(b + j) : zero;
                if (nx0) t0[u] = ld_stream(x2 + j);
                if (nx1) t1[u] = ld_stream(x3 + j);
            }
        }
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int j = j0 + u * THREADS;
            if (j < cnt4) {
                const int k = j - REGV * THREADS;
                st_stream(y0 + j, affine_wb(norm4(sb0[k], mean0, rstd0), w, b, g[u], h[u]));
                st_stream(y1 + j, affine_wb(norm4(sb1[k], mean1, rstd1), w, b, g[u], h[u]));
                if (nx0) sb0[k] = t0[u];
                if (nx1) sb1[k] = t1[u];
            }
        }
    }
    if (nx0) slice_partial(p, r + 2, cnt4, R0, sb0, sh);
    if (nx1) slice_partial(p, r + 3, cnt4, R1, sb1, sh);
}

template <int NB>
__global__ void __launch_bounds__(THREADS, 1)
layernorm_persistent_kernel(LNParams p) {
    extern __shared__ __align__(16) float4 dyn[];
    __shared__ LNShared sh;
    const int c = blockIdx.x;
    const int64_t start4 = (int64_t)c * p.S4;
    const int cnt4 = start4 < p.N4 ? (int)min((int64_t)p.S4, p.N4 - start4) : 0;
    float4* sb0 = dyn;
    float4* sb1 = dyn + p.SM4;
    float4 R0[REGV_ALLOC], R1[REGV_ALLOC];
    #pragma unroll
    for (int i = 0; i < REGV_ALLOC; ++i) { R0[i] = make_float4(0.f, 0.f, 0.f, 0.f); R1[i] = R0[i]; }

    if (NB == 2 && PAIR) {
        slice_load(p, 0, start4, cnt4, R0, sb0);
        if (p.rows > 1) slice_load(p, 1, start4, cnt4, R1, sb1);
        slice_partial(p, 0, cnt4, R0, sb0, sh);
        if (p.rows > 1) slice_partial(p, 1, cnt4, R1, sb1, sh);
        int r = 0;
        for (; r + 1 < p.rows; r += 2) ln_pair_step(p, r, start4, cnt4, R0, sb0, R1, sb1, sh);
        if (r < p.rows) ln_step<2>(p, r, start4, cnt4, R0, sb0, sh);   // odd row count: last row sits in buffer 0
        return;
    }
    slice_load(p, 0, start4, cnt4, R0, sb0);
    slice_partial(p, 0, cnt4, R0, sb0, sh);
    if (NB == 2 && p.rows > 1) {
        slice_load(p, 1, start4, cnt4, R1, sb1);
        slice_partial(p, 1, cnt4, R1, sb1, sh);
    }
    for (int r = 0; r < p.rows; r += NB) {
        ln_step<NB>(p, r, start4, cnt4, R0, sb0, sh);
        if (NB == 2 && r + 1 < p.rows) ln_step<NB>(p, r + 1, start4, cnt4, R1, sb1, sh);
    }
}

// ------------------------------------------------------------------ fallback: three plain kernels (any shape)
__global__ void __launch_bounds__(FB_THREADS)
ln_chunk_stats_kernel(const float* __restrict__ x, double2* __restrict__ partial, int64_t rows, int64_t N, int64_t nch) {
    __shared__ float red[32];
    __shared__ double red_d[32];
    constexpr int CH = FB_THREADS * FB_ITEMS;
    for (int64_t task = blockIdx.x; task < rows * nch; task += gridDim.x) {
        const int64_t row = task / nch, ch = task - row * nch;
        const int64_t base = ch * CH;
        const int cnt = (int)min((int64_t)CH, N - base);
        const float* xr = x + row * N + base;
        float v[FB_ITEMS];
        float s = 0.f;
        #pragma unroll
        for (int k = 0; k < FB_ITEMS; ++k) {
            const int j = k * FB_THREADS + threadIdx.x;
            v[k] = j < cnt ? xr[j] : 0.f;
            s += v[k];
        }
        const double tot = block_sum<FB_THREADS, double>((double)s, red_d);
        const float mc = (float)(tot / (double)cnt);
        float q = 0.f;
        #pragma unroll
        for (int k = 0; k < FB_ITEMS; ++k) {
            const int j = k * FB_THREADS + threadIdx.x;
            if (j < cnt) { const float d = v[k] - mc; q = fmaf(d, d, q); }
        }
        q = block_sum<FB_THREADS, float>(q, red);
        if (threadIdx.x == 0) partial[task] = make_double2((double)mc, (double)q);
    }
}

__global__ void ln_row_combine_kernel(const double2* __restrict__ partial, float2* __restrict__ stats,
                                      int64_t rows, int64_t N, int64_t nch, float eps) {
    constexpr int CH = FB_THREADS * FB_ITEMS;
    const int lane = threadIdx.x;           // one warp per row
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        double n = 0.0, mean = 0.0, m2 = 0.0;
        for (int64_t ch = lane; ch < nch; ch += 32) {
            const double2 q = partial[row * nch + ch];
            chan_merge(n, mean, m2, (double)min((int64_t)CH, N - ch * CH), q.x, q.y);
        }
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const double nb = __shfl_xor_sync(0xffffffffu, n, o);
            const double mb = __shfl_xor_sync(0xffffffffu, mean, o);
            const double qb = __shfl_xor_sync(0xffffffffu, m2, o);
            chan_merge(n, mean, m2, nb, mb, qb);
        }
        if (lane == 0) stats[row] = make_float2((float)mean, (float)(1.0 / sqrt(m2 / n + (double)eps)));
    }
}

__global__ void __launch_bounds__(FB_THREADS)
ln_normalize_kernel(const float* __restrict__ x, float* __restrict__ y, const float* __restrict__ w,
                    const float* __restrict__ b, const float2* __restrict__ stats, int64_t rows, int64_t N) {
    const int64_t total = rows * N;
    for (int64_t i = (int64_t)blockIdx.x * FB_THREADS + threadIdx.x; i < total; i += (int64_t)gridDim.x * FB_THREADS) {
        const int64_t row = i / N, col = i - row * N;
        const float2 st = stats[row];
        float o = (x[i] - st.x) * st.y;
        if (w != nullptr) o *= w[col];
        if (b != nullptr) o += b[col];
        y[i] = o;
    }
}

#ifdef KGEN_KERNELS_ONLY
template __global__ void layernorm_persistent_kernel<1>(LNParams);
template __global__ void layernorm_persistent_kernel<2>(LNParams);
#else
template <int NB>
static int persistent_occupancy(size_t smem) {
    auto fn = layernorm_persistent_kernel<NB>;
    if (cudaFuncSetAttribute((const void*)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
        (void)cudaGetLastError(); return 0;
    }
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, THREADS, smem) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    return n;
}

static bool try_persistent(const float* xp, float* yp, const float* wp, const float* bp, int64_t rows, int64_t N,
                           float eps, const torch::Tensor& like, cudaStream_t st) {
    auto al = [](const void* q) { return q == nullptr || reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    if (N % 4 != 0 || !al(xp) || !al(yp) || !al(wp) || !al(bp)) return false;
    if (rows > MAX_PERSISTENT_ROWS) return false;
    int dev = 0, sms = 0, optin = 0, coop = 0;
    KGEN_CUDA_CHECK(cudaGetDevice(&dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop || sms <= 0) return false;
    const int G = sms;                      // one block per SM
    const int64_t N4 = N / 4;
    const int64_t S4 = (N4 + G - 1) / G;
    const int64_t SM4 = S4 > (int64_t)REGV * THREADS ? S4 - (int64_t)REGV * THREADS : 0;
    int NB = 0;
    size_t smem = 0;
    if ((size_t)(2 * SM4) * 16 + SMEM_RESERVE <= (size_t)optin && persistent_occupancy<2>((size_t)(2 * SM4) * 16) >= 1) {
        NB = 2; smem = (size_t)(2 * SM4) * 16;
    } else if ((size_t)SM4 * 16 + SMEM_RESERVE <= (size_t)optin && persistent_occupancy<1>((size_t)SM4 * 16) >= 1) {
        NB = 1; smem = (size_t)SM4 * 16;
    } else {
        return false;
    }
    auto partial = torch::empty({rows * G * 2}, like.options().dtype(torch::kFloat64));
    auto counter = torch::zeros({rows}, like.options().dtype(torch::kInt32));   // zeroed on `st` (current stream)
    LNParams p;
    p.x = reinterpret_cast<const float4*>(xp); p.y = reinterpret_cast<float4*>(yp);
    p.w = reinterpret_cast<const float4*>(wp); p.b = reinterpret_cast<const float4*>(bp);
    p.partial = reinterpret_cast<double2*>(partial.data_ptr<double>());
    p.counter = reinterpret_cast<unsigned int*>(counter.data_ptr<int>());
    p.rows = (int)rows; p.N4 = N4; p.S4 = (int)S4; p.SM4 = (int)SM4; p.eps = eps;
    void* args[] = {(void*)&p};
    const void* fn = NB == 2 ? (const void*)layernorm_persistent_kernel<2> : (const void*)layernorm_persistent_kernel<1>;
    KGEN_CUDA_CHECK(cudaLaunchCooperativeKernel(fn, dim3(G), dim3(THREADS), args, smem, st));
    KGEN_LAUNCH_CHECK();
    return true;
}

static void run_fallback(const float* xp, float* yp, const float* wp, const float* bp, int64_t rows, int64_t N,
                         float eps, const torch::Tensor& like, cudaStream_t st) {
    constexpr int64_t CH = FB_THREADS * FB_ITEMS;
    const int64_t nch = (N + CH - 1) / CH;
    auto partial = torch::empty({rows * nch * 2}, like.options().dtype(torch::kFloat64));
    auto stats = torch::empty({rows * 2}, like.options());
    double2* pp = reinterpret_cast<double2*>(partial.data_ptr<double>());
    float2* sp = reinterpret_cast<float2*>(stats.data_ptr<float>());
    const int64_t tasks = rows * nch;
    ln_chunk_stats_kernel<<<(unsigned)std::min<int64_t>(tasks, 1 << 20), FB_THREADS, 0, st>>>(xp, pp, rows, N, nch);
    KGEN_LAUNCH_CHECK();
    ln_row_combine_kernel<<<(unsigned)std::min<int64_t>(rows, 1 << 20), 32, 0, st>>>(pp, sp, rows, N, nch, eps);
    KGEN_LAUNCH_CHECK();
    const int64_t blocks = std::min<int64_t>((rows * N + FB_THREADS - 1) / FB_THREADS, 132 * 32);
    ln_normalize_kernel<<<(unsigned)blocks, FB_THREADS, 0, st>>>(xp, yp, wp, bp, sp, rows, N);
    KGEN_LAUNCH_CHECK();
}

torch::Tensor layernorm_fwd(torch::Tensor x, int64_t N, c10::optional<torch::Tensor> weight,
                            c10::optional<torch::Tensor> bias, double eps, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA input expected");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    TORCH_CHECK(N > 0 && x.numel() % N == 0, "normalized size does not divide the input");
    const int64_t rows = x.numel() / N;
    if (rows == 0) return y;
    torch::Tensor w, b;
    const float* wp = nullptr; const float* bp = nullptr;
    if (weight.has_value() && weight->defined()) {
        w = weight->contiguous(); TORCH_CHECK(w.numel() == N && w.scalar_type() == torch::kFloat32); wp = w.data_ptr<float>();
    }
    if (bias.has_value() && bias->defined()) {
        b = bias->contiguous(); TORCH_CHECK(b.numel() == N && b.scalar_type() == torch::kFloat32); bp = b.data_ptr<float>();
    }
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    if (!try_persistent(x.data_ptr<float>(), y.data_ptr<float>(), wp, bp, rows, N, (float)eps, x, st))
        run_fallback(x.data_ptr<float>(), y.data_ptr<float>(), wp, bp, rows, N, (float)eps, x, st);
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
            name="kgen_layernorm_onchip_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
            functions=["layernorm_fwd"], extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"], verbose=False)
    return _MODULES[key]


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)   # parameter holder (weight, bias, eps)
        self._mod = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._mod is None:
            self._mod = _build()
        N = 1
        for s in self.ln.normalized_shape:
            N *= int(s)
        return self._mod.layernorm_fwd(x, N, self.ln.weight, self.ln.bias, float(self.ln.eps),
                                       torch.cuda.current_stream(x.device).cuda_stream)
