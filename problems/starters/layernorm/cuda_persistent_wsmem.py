"""LayerNorm over the trailing dims, CUDA C++ for sm_90: persistent cooperative kernel, x in registers,
weight (and most of bias) in shared memory for the whole call.

Target: 16 rows of N = 64*256*256 = 4M fp32.  Floor 0.19 ms = x read once + y written once + weight/bias
read once.  The earlier persistent kernel (cuda_persistent_onchip, 0.39-0.43 ms) re-read weight/bias from
L2 for every row and ncu showed only a 29% L2 hit rate for them: the 33.5 MB of weight+bias plus the
streaming x/y did not stay in the 50 MB L2, so most of the re-reads went to HBM.  Here they never leave
the SM: block g (one per SM, cooperative launch) owns the float4 columns [g*S4, (g+1)*S4) of every row
(S4 = ceil(N/4 / #SMs), ~124 KB) and, once per call, copies its weight slice (124 KB) and as much of its
bias slice as fits (the rest of 227 KB, ~80% of it) into shared memory.  Only the bias tail is re-read
per row (evict_last L2 hint; ~3.5 MB in all, it stays in L2).

Per row (x slice in registers: MAXV float4 per thread, all loads issued at once, __ldcs streaming):
  exact chunk mean / M2 (block reductions in float64) -> thread 0 publishes (mean_c, M2_c), __threadfence,
  atomicAdd(counter[row]); optionally prefetches the first PREFETCH4 float4 of its next-row slice into L2
  (prefetch.global.L2) so HBM keeps streaming during the wait; spins (ld.acquire.gpu, bounded) until all
  blocks arrived; warp 0 combines the G partials in float64 (Chan) -> mean, rstd; normalize from
  registers and shared memory, y stored with __stcs (streaming).
Scratch per call: counters [rows] (zeroed), partials [rows][G] double2.  Nothing is kept between calls.

Fallback (N % 4 != 0, misaligned, slice too large for registers, no cooperative launch, many rows):
three plain kernels (chunk partials, per-row Chan combine, elementwise normalize; x read twice).

Measured: not yet on a GPU (written 2026-11-25; figures come from benchmarks/ln_gpu.sh).  nvcc 13.0,
sm_90, ptxas -v: THREADS 512 / MAXV 16: 128 registers, 64 bytes spilled; 1024 / 8: 64 registers, 8 bytes.
"""
import hashlib

import torch
import torch.nn as nn

KGEN_TUNABLE = {
    "THREADS": [512, 1024],           # MAXV follows: the slice must fit THREADS * MAXV float4
    "MAXV": [8, 16],
    "BIAS_SMEM": [0, 1],              # 1: the bias slice's head in shared memory too
    "PREFETCH4": [0, 1024, 2048, 4096],
}

CUDA_SRC = r"""
#ifndef KGEN_KERNELS_ONLY
#include <torch/extension.h>
// no c10/cuda headers: the current stream comes from Python (torch.cuda.current_stream().cuda_stream)
#define KGEN_CUDA_CHECK(expr) do { cudaError_t e_ = (expr); \
    TORCH_CHECK(e_ == cudaSuccess, #expr, ": ", cudaGetErrorString(e_)); } while (0)
#endif
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

#define THREADS 1024
#define MAXV 8
#define BIAS_SMEM 1
#define PREFETCH4 2048
#define FB_THREADS 256
#define FB_ITEMS 8
#define MAX_PERSISTENT_ROWS 1024
#define SMEM_RESERVE 2048
#define MAX_SPIN (1u << 20)   // polls before giving up (~1 s): a broken co-residency gives wrong output, not a hang

__device__ __forceinline__ float4 ld_keep(const float4* p) {     // L2 evict_last: re-read every row
    float4 v;
    asm volatile("{\n\t.reg .b64 pol;\n\t"
                 "createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
                 "ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], pol;\n\t}"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" :: "l"(p)); }
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
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

__device__ __forceinline__ void chan_merge(double& n, double& mean, double& m2, double nb, double meanb, double m2b) {
    if (nb <= 0.0) return;
    if (n <= 0.0) { n = nb; mean = meanb; m2 = m2b; return; }
    const double nn = n + nb;
    const double d = meanb - mean;
    mean += d * (nb / nn);
    m2 += m2b + d * d * (n * nb / nn);
    n = nn;
}

struct LNParams {
    const float4* x; float4* y; const float4* w; const float4* b;
    double2* partial;          // [rows][G]  (mean_c, M2_c)
    unsigned int* counter;     // [rows], zeroed before launch
    int rows; int G; int64_t N4; int S4; int SB4; float eps;
};

// ------------------------------------------------------------------ persistent kernel
__global__ void __launch_bounds__(THREADS, 1) ln_persistent_kernel(LNParams p) {
    extern __shared__ float4 smem[];       // [S4] weight slice, then [SB4] head of the bias slice
    __shared__ double red[32];
    __shared__ float stat[2];
    const int tid = threadIdx.x, g = blockIdx.x;
    const int64_t c0 = (int64_t)g * p.S4;
    const int cnt4 = (int)min((int64_t)p.S4, p.N4 - c0);      // > 0: the host makes G = ceil(N4 / S4)
    const int sb4 = min(p.SB4, cnt4);
    float4* ws = smem;
    float4* bs = smem + p.S4;
    // once per call: weight slice (and bias head) into shared memory.  Thread tid only ever touches
    // positions j = tid + k*THREADS (the same as its registers), so no block barrier is needed.
    #pragma unroll
    for (int k = 0; k < MAXV; ++k) {
        const int j = tid + k * THREADS;
        if (j < cnt4) ws[j] = p.w ? __ldg(p.w + c0 + j) : make_float4(1.f, 1.f, 1.f, 1.f);
        if (j < sb4) bs[j] = p.b ? __ldg(p.b + c0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const double Nd = 4.0 * (double)p.N4;
    for (int r = 0; r < p.rows; ++r) {
        const float4* xr = p.x + (int64_t)r * p.N4 + c0;
        float4* yr = p.y + (int64_t)r * p.N4 + c0;
        float4 v[MAXV];
        #pragma unroll
        for (int k = 0; k < MAXV; ++k) {       // every load of the slice in flight at once
            const int j = tid + k * THREADS;
            v[k] = j < cnt4 ? __ldcs(xr + j) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float s = 0.f;
        #pragma unroll
        for (int k = 0; k < MAXV; ++k) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        const double tot = block_sum<THREADS, double>((double)s, red);
        const float mc = (float)(tot / (4.0 * (double)cnt4));
        float q = 0.f;
        #pragma unroll
        for (int k = 0; k < MAXV; ++k) {
            if (tid + k * THREADS < cnt4) {
                const float a = v[k].x - mc, b = v[k].y - mc, c = v[k].z - mc, d = v[k].w - mc;
                q += (a * a + b * b) + (c * c + d * d);
            }
        }
        const double m2 = block_sum<THREADS, double>((double)q, red);
        if (tid == 0) {                        // arrive: publish, then count
            p.partial[(int64_t)r * p.G + g] = make_double2((double)mc, m2);
            __threadfence();
            atomicAdd(p.counter + r, 1u);
        }
        if (PREFETCH4 > 0 && r + 1 < p.rows) { // keep HBM busy during the wait: next row's head into L2
            const int lim = min(PREFETCH4, cnt4);
            for (int j = tid * 8; j < lim; j += THREADS * 8) prefetch_l2(xr + p.N4 + j);   // 8 float4 = 128 B
        }
        if (tid == 0) {
            unsigned spins = 0;
            while (ld_acquire(p.counter + r) < (unsigned)p.G && spins < MAX_SPIN) ++spins;
            __threadfence();
        }
        __syncthreads();
        if (tid < 32) {                        // combine the G partials in float64 (read at L2), two passes:
            const double2* pr = p.partial + (int64_t)r * p.G;   // mean = sum n_i m_i / N,
            double a = 0.0;                                     // M2 = sum M2_i + n_i (m_i - mean)^2
            for (int i = tid; i < p.G; i += 32)
                a += 4.0 * (double)min((int64_t)p.S4, p.N4 - (int64_t)i * p.S4) * __ldcg(&pr[i].x);
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
            const double mean = a / Nd;
            double mm = 0.0;
            for (int i = tid; i < p.G; i += 32) {
                const double2 pq = __ldcg(pr + i);
                const double d = pq.x - mean;
                mm += pq.y + 4.0 * (double)min((int64_t)p.S4, p.N4 - (int64_t)i * p.S4) * d * d;
            }
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) mm += __shfl_xor_sync(0xffffffffu, mm, o);
            if (tid == 0) { stat[0] = (float)mean; stat[1] = (float)(1.0 / sqrt(mm / Nd + (double)p.eps)); }
        }
        __syncthreads();
        const float mean = stat[0], rstd = stat[1];
        #pragma unroll
        for (int k = 0; k < MAXV; ++k) {
            const int j = tid + k * THREADS;
            if (j < cnt4) {
                const float4 w = ws[j];
                float4 b = make_float4(0.f, 0.f, 0.f, 0.f);
                if (j < sb4) b = bs[j];
                else if (p.b) b = ld_keep(p.b + c0 + j);
                float4 o;
                o.x = fmaf((v[k].x - mean) * rstd, w.x, b.x);
                o.y = fmaf((v[k].y - mean) * rstd, w.y, b.y);
                o.z = fmaf((v[k].z - mean) * rstd, w.z, b.z);
                o.w = fmaf((v[k].w - mean) * rstd, w.w, b.w);
                __stcs(yr + j, o);
            }
        }
        // stat is rewritten next row only after block_sum's two __syncthreads
    }
}

// ------------------------------------------------------------------ fallback: three plain kernels (any shape)
__global__ void __launch_bounds__(FB_THREADS)
ln_chunk_stats_kernel(const float* __restrict__ x, double2* __restrict__ partial, int64_t rows, int64_t N,
                      int64_t nch) {
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
        const double qq = block_sum<FB_THREADS, double>((double)q, red_d);
        if (threadIdx.x == 0) partial[task] = make_double2((double)mc, qq);
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

#ifndef KGEN_KERNELS_ONLY
static bool try_persistent(const float* xp, float* yp, const float* wp, const float* bp, int64_t rows, int64_t N,
                           float eps, const torch::Tensor& like, cudaStream_t st) {
    auto al = [](const void* q) { return q == nullptr || reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    if (N % 4 != 0 || !al(xp) || !al(yp) || !al(wp) || !al(bp)) return false;
    if (rows > MAX_PERSISTENT_ROWS || N < (1 << 16)) return false;
    int dev = 0, sms = 0, optin = 0, coop = 0;
    KGEN_CUDA_CHECK(cudaGetDevice(&dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop || sms <= 0) return false;
    const int64_t N4 = N / 4;
    const int64_t S4 = (N4 + sms - 1) / sms;
    if (S4 > (int64_t)THREADS * MAXV) return false;           // the slice must fit the registers
    const int G = (int)((N4 + S4 - 1) / S4);                  // <= sms, no empty block
    const int64_t room = (int64_t)optin - SMEM_RESERVE - S4 * 16;
    if (room < 0) return false;
    const int64_t SB4 = BIAS_SMEM && bp ? std::min<int64_t>(S4, room / 16) : 0;
    const size_t smem = (size_t)(S4 + SB4) * 16;
    if (cudaFuncSetAttribute((const void*)ln_persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess) { (void)cudaGetLastError(); return false; }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ln_persistent_kernel, THREADS, smem) != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    if ((int64_t)per_sm * sms < G) return false;              // co-residency is what the spin barrier needs
    auto partial = torch::empty({rows * G * 2}, like.options().dtype(torch::kFloat64));
    auto counter = torch::zeros({rows}, like.options().dtype(torch::kInt32));   // on `st`: the current stream
    LNParams p;
    p.x = reinterpret_cast<const float4*>(xp); p.y = reinterpret_cast<float4*>(yp);
    p.w = reinterpret_cast<const float4*>(wp); p.b = reinterpret_cast<const float4*>(bp);
    p.partial = reinterpret_cast<double2*>(partial.data_ptr<double>());
    p.counter = reinterpret_cast<unsigned int*>(counter.data_ptr<int>());
    p.rows = (int)rows; p.G = G; p.N4 = N4; p.S4 = (int)S4; p.SB4 = (int)SB4; p.eps = eps;
    void* args[] = {(void*)&p};
    KGEN_CUDA_CHECK(cudaLaunchCooperativeKernel((const void*)ln_persistent_kernel, dim3(G), dim3(THREADS), args,
                                                smem, st));
    KGEN_CUDA_CHECK(cudaGetLastError());
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
    KGEN_CUDA_CHECK(cudaGetLastError());
    ln_row_combine_kernel<<<(unsigned)std::min<int64_t>(rows, 1 << 20), 32, 0, st>>>(pp, sp, rows, N, nch, eps);
    KGEN_CUDA_CHECK(cudaGetLastError());
    const int64_t blocks = std::min<int64_t>((rows * N + FB_THREADS - 1) / FB_THREADS, 132 * 32);
    ln_normalize_kernel<<<(unsigned)blocks, FB_THREADS, 0, st>>>(xp, yp, wp, bp, sp, rows, N);
    KGEN_CUDA_CHECK(cudaGetLastError());
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
    const float* wp = nullptr;
    const float* bp = nullptr;
    if (weight.has_value() && weight->defined()) {
        w = weight->contiguous();
        TORCH_CHECK(w.numel() == N && w.scalar_type() == torch::kFloat32);
        wp = w.data_ptr<float>();
    }
    if (bias.has_value() && bias->defined()) {
        b = bias->contiguous();
        TORCH_CHECK(b.numel() == N && b.scalar_type() == torch::kFloat32);
        bp = b.data_ptr<float>();
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
            name="kgen_layernorm_wsmem_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
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
