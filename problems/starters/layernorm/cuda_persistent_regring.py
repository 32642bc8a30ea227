"""LayerNorm over the trailing dims, CUDA C++ for sm_90: persistent cooperative kernel, the next row's HEAD
loaded into registers (double-buffered) and its TAIL prefetched into L2 before each grid barrier wait.

Target: 16 rows of N = 64*256*256 = 4M fp32.  HBM floor 570 MB (x read once 268, y written once 268,
weight+bias read once 33.5) = 0.190 ms at 3.0 TB/s.  cuda_persistent_wsmem (x slice in registers, w and
most of b in shared memory, one grid barrier per row) runs 0.291 ms at 1.95 TB/s: HBM idles during each
row's reduce + barrier + combine.  Registers + shared memory hold 484 KB per SM; a row slice is 124 KB and
the weight + bias slices 248 KB, so "w, b and two rows on chip" does not fit, but "w, b, one row and a
third of the next" does: that third is requested before the wait and keeps HBM busy through it with no
reliance on L2 capacity; the rest of the next row is prefetched into L2 (TMA bulk prefetch, PF_TAIL=1), a
working set of 10-14 MB instead of the full 16 MB that cuda_persistent_l2ahead keeps there.

Layout: block g (one per SM, cooperative launch, G = 132) owns float4 columns [g*S4, g*S4 + cnt4) of
every row (S4 = 7944 float4 = 124 KB).  Thread tid's item k is column j = tid + k*THREADS, k < MAXV
(THREADS x MAXV = 256 x 32 or 512 x 16 >= S4).  Items [0, HEAD) are the head, [HEAD, MAXV) the tail.
Registers: hc[HEAD] (this row's head), t[MAXV-HEAD] (this row's tail), hn[HEAD] (next row's head); hc and
hn swap roles every row, so the row loop is unrolled by two and every register index is static.
Shared memory: the weight slice (124 KB) and the first 6144-6400 float4 of the bias slice, filled once by
TMA (cp.async.bulk, overlapping row 0); the bias of the last KT items per thread (KT = 4 of 16 / 7 of
32, ~3 MB in all) is re-read per row from L2 (evict_last) before the barrier wait.
Per row r (in hc + t):
  thread stats (exact local mean, squared deviations, two passes over registers)
  -> loads of row r+1's head into hn (HBM, HEAD/MAXV of the row: 31% at 256 x 10) and a
     cp.async.bulk.prefetch.L2 of its tail (8 KB TMA requests)
  -> one fp64 block reduction of (sum x, sum x^2 rebuilt as M2_t + s_t^2/n_t); lane 0 of warp 0
     publishes partial[r][g], red.release.gpu add on the arrival counter
  -> bias-tail loads; thread 0 spins (ld.acquire.gpu) until the counter reaches (r+1)*G; warps 0..4
     load the 132 partials, one per lane (one L2 round trip); every thread forms mean and rstd in fp64
  -> normalize hc + t (y evict-first), then loads of row r+1's tail into t (L2 hits once prefetched).
The arrival counter is never reset between rows; a departure counter lets the last block out reset both
to 0 (no memset kernel per call; ModelNew allocates the two int32 zeroed once per device, and calls must
stay ordered on one stream).  Fixed-order sums: repeats are bitwise equal.

Cost per row: HBM 32 MB (x_{r+1} in, y_r out) = 10.7 us.  At the wait, HEAD/MAXV of x_{r+1} is in flight
to registers (5 MB at 256 x 10: ~1.7 us of HBM) plus the tail prefetch (11 MB) plus y_{r-1}'s draining
stores, which covers the ~2-3 us of reduce + barrier + combine; the tail loads after the normalize hit
L2.  Expected ~0.20-0.22 ms; without the L2 prefetch (PF_TAIL=0) the head alone keeps HBM busy through
the barrier and the tail loads queue behind y's stores (between wsmem and the target).

Tunables are runtime arguments (one build covers the grid): THREADS x HEAD picks one of six compiled
instantiations, 512 x {2, 3, 4} and 256 x {6, 8, 10}; any other pair takes the fallback (correct, slow).
Fallback (N % 4 != 0, misaligned, slice too large for registers, no cooperative launch, many rows):
three plain kernels (chunk partials, per-row combine, elementwise normalize; x read twice).

ptxas (nvcc 13.0, sm_90a and sm_90, -O3): 256 x 32: HEAD 10: 254 registers, HEAD 8: 252, HEAD 6: 246,
no spill; 512 x 16: HEAD 2: 128, no spill; HEAD 3: 128, 24 bytes spill stores; HEAD 4: 128, 48 bytes.
Shared memory: static 1 KB + dynamic (7944 + 6400) x 16 = 224 KB (256) / (7944 + 6144) x 16 = 220 KB
(512).  One block per SM: 8 warps (256) or 16 (512).  The CUDA file has no torch header (nvcc ~15 s for
the six instantiations); the torch wrapper is CPP_SRC.  Measured: not yet on a GPU (benchmarks/ln2_gpu.sh).
"""
import hashlib

import torch
import torch.nn as nn

THREADS = 256         # 256: 32 float4 of a row per thread (255-register cap); 512: 16 (128 cap)
HEAD = 10             # float4 items of the next row loaded into registers before the barrier wait
PF_TAIL = 1           # 1: the next row's tail prefetched into L2 at the same time
PF_BULK = 0           # 1: cp.async.bulk.prefetch.L2 (TMA); 0: one prefetch.global.L2 per 128-byte line
PF_LAST = 0           # 1: tail prefetched with evict_last, demoted to evict_normal once read
WB_TMA = 1            # 1: weight/bias copied into shared memory by TMA, overlapping row 0

KGEN_TUNABLE = {
    "THREADS": [256, 512],
    "HEAD": [2, 3, 4, 6, 8, 10],     # compiled: 512 x {2, 3, 4}, 256 x {6, 8, 10}; other pairs: fallback
    "PF_TAIL": [0, 1],
    "PF_BULK": [0, 1],
    "PF_LAST": [0, 1],
    "WB_TMA": [0, 1],
}

CUDA_SRC = r"""
#ifndef KGEN_KERNELS_ONLY
// No torch header here: the torch-facing wrapper is CPP_SRC (built by the host compiler in parallel);
// errors cross over as C++ exceptions.  The stream comes from Python.
#include <algorithm>
#include <stdexcept>
#include <string>
#define KGEN_CUDA_CHECK(expr) do { cudaError_t e_ = (expr); if (e_ != cudaSuccess) \
    throw std::runtime_error(std::string(#expr ": ") + cudaGetErrorString(e_)); } while (0)
#endif
#include <cuda_runtime.h>
#include <stdint.h>
#include <math.h>

#define FB_THREADS 256
#define FB_ITEMS 8
#define MAX_PERSISTENT_ROWS 1024
#define SMEM_RESERVE 2048
#define PF_CHUNK 8192               // bytes per bulk prefetch request
#define WB_CHUNK 16384              // bytes per bulk weight/bias copy
#define MAX_SPIN (1u << 22)         // polls before giving up: broken co-residency gives wrong output, not a hang

// ---------------------------------------------------------------- PTX helpers (sm_90)
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
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
__device__ __forceinline__ void bulk_prefetch_l2(const void* p, uint32_t bytes, bool keep) {
    if (keep)
        asm volatile("{\n\t.reg .b64 pol;\n\t"
                     "createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
                     "cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, pol;\n\t}"
                     :: "l"(p), "r"(bytes) : "memory");
    else
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}
__device__ __forceinline__ void line_prefetch_l2(const void* p, bool keep) {
    if (keep) asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(p));
    else asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
}
__device__ __forceinline__ void demote_line(const void* p) {     // evict_last -> evict_normal once read
    asm volatile("applypriority.global.L2::evict_normal [%0], 128;" :: "l"(p) : "memory");
}
__device__ __forceinline__ float4 ld_stream(const float4* p) {   // x: read once into registers (evict-first)
    float4 v;
    asm volatile("ld.global.cs.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}
// bias tail: re-read every row, kept in L2 (evict_last)
__device__ __forceinline__ float4 ld_keep(const float4* p) {
    float4 v;
    asm volatile("{\n\t.reg .b64 pol;\n\t"
        "createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
        "ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], pol;\n\t}"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ void st_stream(float4* p, float4 v) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

struct LNParams {
    const float4* x; float4* y; const float4* w; const float4* b;
    double2* partial;          // [rows][G]: (sum x, sum x^2) of each block's slice, fp64
    unsigned* sync;            // [0] arrivals, [1] departures: 0 at launch, reset to 0 by the last block out
    int64_t N4; int rows; int G; int S4; int SB4; float eps;
    int pf_tail;               // 1: the next row's tail is prefetched into L2 while its head goes to registers
    int pf_bulk, pf_last, wb_tma;
};

// issue the L2 prefetch of float4 [0, n4) of a slice
template <int NT>
__device__ __forceinline__ void prefetch_slice(const LNParams& p, const float4* src, int n4, int tid) {
    if (p.pf_bulk) {
        constexpr int PER = PF_CHUNK / 16;
        const int nops = (n4 + PER - 1) / PER;
        for (int i = tid; i < nops; i += NT)
            bulk_prefetch_l2(src + (int64_t)i * PER, (uint32_t)min(PER, n4 - i * PER) * 16u, p.pf_last);
    } else {
        for (int i = tid * 8; i < n4; i += NT * 8) line_prefetch_l2(src + i, p.pf_last);
    }
}

// ---------------------------------------------------------------- persistent kernel
// Item k of a thread is float4 column j = tid + k*NT of its block's slice.  Items [0, HD) are the head,
// [HD, MV) the tail.  The current row lives in (hc, t); the next row's head goes into hn before the
// barrier wait, its tail into t once the current row is normalized.  hc/hn swap every row, so the row
// loop is unrolled by two and every register index stays static.
template <int NT, int K0, int K1, int CAP>
__device__ __forceinline__ void load_items(float4 (&d)[CAP], const float4* src, int tid, int cnt4) {
    #pragma unroll
    for (int k = K0; k < K1; ++k) {
        const int j = tid + k * NT;
        d[k - K0] = j < cnt4 ? ld_stream(src + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

struct Ctx {
    int tid, lane, warp, g, cnt4, sb4, nv;
    int64_t c0;
    bool tma, demote;
    float4* ws; float4* bs; double2* red; double2* red2; uint64_t* bar;
};

template <int NT, int MV, int HD, int HDA, int TLA>
__device__ __forceinline__ void ring_step(const LNParams& p, const Ctx& c, const int r,
                                          float4 (&hc)[HDA], float4 (&hn)[HDA], float4 (&t)[TLA]) {
    constexpr int KT = MV - 6400 / NT;       // items whose bias is read from L2 (the rest: shared memory)
    const float4* xr = p.x + (int64_t)r * p.N4 + c.c0;
    const int tail0 = HD * NT;               // first float4 of the tail
    // this thread's exact mean, then its squared deviations (invalid items are zeros: skip them in q)
    float s4[4] = {0.f, 0.f, 0.f, 0.f};
    #pragma unroll
    for (int k = 0; k < MV; ++k) {
        const float4 a = k < HD ? hc[k < HD ? k : 0] : t[k < HD ? 0 : k - HD];
        s4[k & 3] += (a.x + a.y) + (a.z + a.w);
    }
    const float s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    const float nf = 4.f * (float)c.nv;
    const float m = c.nv > 0 ? s / nf : 0.f;
    float q4[4] = {0.f, 0.f, 0.f, 0.f};
    #pragma unroll
    for (int k = 0; k < MV; ++k) {
        if (k < c.nv) {
            const float4 x4 = k < HD ? hc[k < HD ? k : 0] : t[k < HD ? 0 : k - HD];
            const float a = x4.x - m, b = x4.y - m, cc = x4.z - m, d = x4.w - m;
            q4[k & 3] += (a * a + b * b) + (cc * cc + d * d);
        }
    }
    double A = (double)s;
    double B = (double)((q4[0] + q4[1]) + (q4[2] + q4[3])) + (double)m * (2.0 * (double)s - (double)nf * (double)m);
    if (c.demote && r > 0)                   // this row's prefetched tail was read: back to evict_normal
        for (int l = tail0 / 8 + c.tid; l * 8 < c.cnt4; l += NT) demote_line(xr + l * 8);
    if (r + 1 < p.rows) {                    // next row: head into registers, tail into L2, both before the wait
        load_items<NT, 0, HD, HDA>(hn, xr + p.N4, c.tid, c.cnt4);
        if (p.pf_tail && c.cnt4 > tail0) prefetch_slice<NT>(p, xr + p.N4 + tail0, c.cnt4 - tail0, c.tid);
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        A += __shfl_xor_sync(0xffffffffu, A, o);
        B += __shfl_xor_sync(0xffffffffu, B, o);
    }
    if (c.lane == 0) c.red[c.warp] = make_double2(A, B);
    __syncthreads();
    if (c.warp == 0) {                       // block total -> publish, then arrive (release orders the two)
        double2 tt = c.lane < NT / 32 ? c.red[c.lane] : make_double2(0.0, 0.0);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            tt.x += __shfl_xor_sync(0xffffffffu, tt.x, o);
            tt.y += __shfl_xor_sync(0xffffffffu, tt.y, o);
        }
        if (c.lane == 0) {
            p.partial[(int64_t)r * p.G + c.g] = tt;
            red_release_add(p.sync, 1u);
        }
    }
    if (r == 0 && !c.tma) {                  // plain fill, overlapping the barrier; each thread fills the
        #pragma unroll 4                     // positions it will read itself, so no block barrier is needed
        for (int k = 0; k < MV; ++k) {
            const int j = c.tid + k * NT;
            if (j < c.cnt4) c.ws[j] = p.w ? __ldg(p.w + c.c0 + j) : make_float4(1.f, 1.f, 1.f, 1.f);
            if (j < c.sb4) c.bs[j] = __ldg(p.b + c.c0 + j);   // sb4 > 0 only with a bias
        }
    }
    // bias of the last KT items from L2 (evict_last): issued before the wait, which hides their latency
    float4 bt[KT];
    #pragma unroll
    for (int k = MV - KT; k < MV; ++k) {
        const int j = c.tid + k * NT;
        bt[k - (MV - KT)] = p.b && j < c.cnt4 ? ld_keep(p.b + c.c0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (c.tid == 0) {                        // wait for row r's G arrivals
        const unsigned target = (unsigned)(r + 1) * (unsigned)p.G;
        unsigned spins = 0;
        while (ld_acquire(p.sync) < target && ++spins < MAX_SPIN) { }
    }
    __syncthreads();
    if (c.warp * 32 < p.G) {                 // combine: one partial per lane, all loads in flight at once
        const int i = c.warp * 32 + c.lane;
        double2 q = i < p.G ? __ldcg(p.partial + (int64_t)r * p.G + i) : make_double2(0.0, 0.0);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            q.x += __shfl_xor_sync(0xffffffffu, q.x, o);
            q.y += __shfl_xor_sync(0xffffffffu, q.y, o);
        }
        if (c.lane == 0) c.red2[c.warp] = q;
    }
    __syncthreads();                         // red2 is rewritten only after the next row's first barrier
    if (r == 0 && c.tma) mbar_wait(c.bar, 0);
    float2 st;
    {                                        // every thread: mean, rstd from the (G + 31) / 32 warp sums, fp64
        double a = 0.0, b = 0.0;
        for (int w = 0; w * 32 < p.G; ++w) { const double2 q = c.red2[w]; a += q.x; b += q.y; }
        const double Nd = 4.0 * (double)p.N4;
        const double mean = a / Nd;
        const double var = fmax(b / Nd - mean * mean, 0.0);
        st = make_float2((float)mean, (float)(1.0 / sqrt(var + (double)p.eps)));
    }
    float4* yr = p.y + (int64_t)r * p.N4 + c.c0;
    #pragma unroll
    for (int k = 0; k < MV; ++k) {
        const int j = c.tid + k * NT;
        if (j < c.cnt4) {
            const float4 x4 = k < HD ? hc[k < HD ? k : 0] : t[k < HD ? 0 : k - HD];
            const float4 w = c.ws[j];
            const float4 b = k >= MV - KT ? bt[k >= MV - KT ? k - (MV - KT) : 0]
                                          : (p.b ? c.bs[j] : make_float4(0.f, 0.f, 0.f, 0.f));
            float4 o;
            o.x = fmaf((x4.x - st.x) * st.y, w.x, b.x);
            o.y = fmaf((x4.y - st.x) * st.y, w.y, b.y);
            o.z = fmaf((x4.z - st.x) * st.y, w.z, b.z);
            o.w = fmaf((x4.w - st.x) * st.y, w.w, b.w);
            st_stream(yr + j, o);
        }
    }
    if (r + 1 < p.rows) load_items<NT, HD, MV, TLA>(t, xr + p.N4, c.tid, c.cnt4);   // next row's tail
}

template <int NT, int MV, int HD>
__global__ void __launch_bounds__(NT, 1) ln_regring_kernel(const LNParams p) {
    constexpr int HDA = HD, TLA = MV - HD;
    static_assert(HD >= 1 && MV - HD >= 1, "head and tail must both be non-empty");
    extern __shared__ __align__(128) float4 smem[];   // [S4] weight slice, then [SB4] head of the bias slice
    __shared__ __align__(8) uint64_t wb_bar;
    __shared__ double2 red[NT / 32];
    __shared__ double2 red2[NT / 32];
    Ctx c;
    c.tid = threadIdx.x; c.lane = c.tid & 31; c.warp = c.tid >> 5; c.g = blockIdx.x;
    c.c0 = (int64_t)c.g * p.S4;
    c.cnt4 = (int)min((int64_t)p.S4, p.N4 - c.c0);    // > 0: the host makes G = ceil(N4 / S4)
    c.sb4 = min(p.SB4, c.cnt4);
    c.nv = c.tid < c.cnt4 ? min(MV, (c.cnt4 - c.tid + NT - 1) / NT) : 0;
    c.ws = smem; c.bs = smem + p.S4; c.red = red; c.red2 = red2; c.bar = &wb_bar;
    c.tma = p.wb_tma && p.w != nullptr && p.b != nullptr;
    c.demote = p.pf_tail && p.pf_last && c.cnt4 > HD * NT && ((reinterpret_cast<uintptr_t>(p.x + c.c0) & 127) == 0)
               && ((p.N4 * 16) % 128 == 0) && ((HD * NT) % 8 == 0);
    if (c.tma && c.tid == 0) {               // weight slice + bias head into shared memory, asynchronously
        mbar_init(&wb_bar, 1);
        mbar_arrive_expect_tx(&wb_bar, (uint32_t)(c.cnt4 + c.sb4) * 16u);
        constexpr int PER = WB_CHUNK / 16;
        for (int i = 0; i < c.cnt4; i += PER)
            bulk_g2s(c.ws + i, p.w + c.c0 + i, (uint32_t)min(PER, c.cnt4 - i) * 16u, &wb_bar);
        for (int i = 0; i < c.sb4; i += PER)
            bulk_g2s(c.bs + i, p.b + c.c0 + i, (uint32_t)min(PER, c.sb4 - i) * 16u, &wb_bar);
    }
    float4 h0[HDA], h1[HDA], t[TLA];
    load_items<NT, 0, HD, HDA>(h0, p.x + c.c0, c.tid, c.cnt4);      // row 0: whole slice in flight at once
    load_items<NT, HD, MV, TLA>(t, p.x + c.c0, c.tid, c.cnt4);
    for (int r = 0; r < p.rows; r += 2) {
        ring_step<NT, MV, HD, HDA, TLA>(p, c, r, h0, h1, t);
        if (r + 1 < p.rows) ring_step<NT, MV, HD, HDA, TLA>(p, c, r + 1, h1, h0, t);
    }
    if (c.tid == 0) {                        // past its last wait: nobody polls sync[0] after the last departure
        const unsigned old = atomicAdd(p.sync + 1, 1u);
        if (old == (unsigned)p.G - 1) { atomicExch(p.sync, 0u); atomicExch(p.sync + 1, 0u); }
    }
}

// ---------------------------------------------------------------- fallback: three plain kernels (any shape)
template <int NT, typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < NT / 32 ? scratch[lane] : T(0);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
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

#ifdef KGEN_KERNELS_ONLY   // the host code instantiates these; without it, ptxas -v must still see them
template __global__ void ln_regring_kernel<512, 16, 2>(const LNParams);
template __global__ void ln_regring_kernel<512, 16, 3>(const LNParams);
template __global__ void ln_regring_kernel<512, 16, 4>(const LNParams);
template __global__ void ln_regring_kernel<256, 32, 6>(const LNParams);
template __global__ void ln_regring_kernel<256, 32, 8>(const LNParams);
template __global__ void ln_regring_kernel<256, 32, 10>(const LNParams);
#endif

#ifndef KGEN_KERNELS_ONLY
static int64_t fb_chunks(int64_t N) { return (N + FB_THREADS * FB_ITEMS - 1) / (FB_THREADS * FB_ITEMS); }

// scratch (fp64 words) either path needs: persistent [rows][G <= 1024] double2, fallback partials + stats
int64_t ln_scratch_doubles(int64_t rows, int64_t N) { return rows * (2 * std::max<int64_t>(fb_chunks(N), 1024) + 1); }

template <int NT, int MV, int HD>
static bool try_persistent(LNParams p, int64_t rows, int64_t N, cudaStream_t st) {
    auto al = [](const void* q) { return q == nullptr || reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    if (N % 4 != 0 || !al(p.x) || !al(p.y) || !al(p.w) || !al(p.b)) return false;
    if (rows > MAX_PERSISTENT_ROWS || N < (1 << 16)) return false;
    int dev = 0, sms = 0, optin = 0, coop = 0;
    KGEN_CUDA_CHECK(cudaGetDevice(&dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop || sms <= 0 || sms > 1024) return false;
    const int64_t N4 = N / 4;
    const int64_t S4 = (N4 + sms - 1) / sms;
    if (S4 > (int64_t)NT * MV) return false;                  // the slice must fit the registers
    const int G = (int)((N4 + S4 - 1) / S4);                  // <= sms, no empty block
    // bias head in shared memory: items [0, MV - KT) of every thread; the last KT items come from L2
    const int64_t SB4 = p.b ? std::min<int64_t>(S4, (int64_t)(6400 / NT) * NT) : 0;
    if ((S4 + SB4) * 16 > (int64_t)optin - SMEM_RESERVE) return false;
    const size_t smem = (size_t)(S4 + SB4) * 16;
    auto kern = ln_regring_kernel<NT, MV, HD>;
    if (cudaFuncSetAttribute((const void*)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)
            != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NT, smem) != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    // co-residency is what the spin barrier needs; the combine takes a warp per 32 blocks
    if ((int64_t)per_sm * sms < G || G > NT) return false;
    p.N4 = N4; p.rows = (int)rows; p.G = G; p.S4 = (int)S4; p.SB4 = (int)SB4;
    void* args[] = {(void*)&p};
    KGEN_CUDA_CHECK(cudaLaunchCooperativeKernel((const void*)kern, dim3(G), dim3(NT), args, smem, st));
    KGEN_CUDA_CHECK(cudaGetLastError());
    return true;
}

// returns 1 when the persistent kernel ran, 0 for the fallback
int ln_launch(const float* xp, float* yp, const float* wp, const float* bp, int64_t rows, int64_t N, double eps,
              double* scratch, unsigned* sync, int threads, int head, int pf_tail, int pf_bulk, int pf_last,
              int wb_tma, int64_t stream) {
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    LNParams p;
    p.x = reinterpret_cast<const float4*>(xp); p.y = reinterpret_cast<float4*>(yp);
    p.w = reinterpret_cast<const float4*>(wp); p.b = reinterpret_cast<const float4*>(bp);
    p.partial = reinterpret_cast<double2*>(scratch); p.sync = sync; p.eps = (float)eps;
    p.pf_tail = pf_tail; p.pf_bulk = pf_bulk; p.pf_last = pf_last; p.wb_tma = wb_tma;
    // the compiled (THREADS, HEAD) pairs; any other pair takes the fallback (correct, slow)
    bool ran = false;
    if (threads == 512 && head == 2) ran = try_persistent<512, 16, 2>(p, rows, N, st);
    else if (threads == 512 && head == 3) ran = try_persistent<512, 16, 3>(p, rows, N, st);
    else if (threads == 512 && head == 4) ran = try_persistent<512, 16, 4>(p, rows, N, st);
    else if (threads == 256 && head == 6) ran = try_persistent<256, 32, 6>(p, rows, N, st);
    else if (threads == 256 && head == 8) ran = try_persistent<256, 32, 8>(p, rows, N, st);
    else if (threads == 256 && head == 10) ran = try_persistent<256, 32, 10>(p, rows, N, st);
    if (ran) return 1;
    const int64_t nch = fb_chunks(N);
    double2* pp = reinterpret_cast<double2*>(scratch);
    float2* sp = reinterpret_cast<float2*>(scratch + 2 * rows * nch);
    const int64_t tasks = rows * nch;
    ln_chunk_stats_kernel<<<(unsigned)std::min<int64_t>(tasks, 1 << 20), FB_THREADS, 0, st>>>(xp, pp, rows, N, nch);
    KGEN_CUDA_CHECK(cudaGetLastError());
    ln_row_combine_kernel<<<(unsigned)std::min<int64_t>(rows, 1 << 20), 32, 0, st>>>(pp, sp, rows, N, nch, (float)eps);
    KGEN_CUDA_CHECK(cudaGetLastError());
    const int64_t blocks = std::min<int64_t>((rows * N + FB_THREADS - 1) / FB_THREADS, 132 * 32);
    ln_normalize_kernel<<<(unsigned)blocks, FB_THREADS, 0, st>>>(xp, yp, wp, bp, sp, rows, N);
    KGEN_CUDA_CHECK(cudaGetLastError());
    return 0;
}
#endif
"""

CPP_SRC = r"""
int64_t ln_scratch_doubles(int64_t rows, int64_t N);
int ln_launch(const float* xp, float* yp, const float* wp, const float* bp, int64_t rows, int64_t N, double eps,
              double* scratch, unsigned* sync, int threads, int head, int pf_tail, int pf_bulk, int pf_last,
              int wb_tma, int64_t stream);

torch::Tensor layernorm_fwd(torch::Tensor x, int64_t N, c10::optional<torch::Tensor> weight,
                            c10::optional<torch::Tensor> bias, double eps, torch::Tensor sync, int64_t threads,
                            int64_t head, int64_t pf_tail, int64_t pf_bulk, int64_t pf_last, int64_t wb_tma,
                            int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA input expected");
    TORCH_CHECK(sync.is_cuda() && sync.scalar_type() == torch::kInt32 && sync.numel() >= 2, "sync: 2 int32 zeros");
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
    auto scratch = torch::empty({ln_scratch_doubles(rows, N)}, x.options().dtype(torch::kFloat64));
    ln_launch(x.data_ptr<float>(), y.data_ptr<float>(), wp, bp, rows, N, eps, scratch.data_ptr<double>(),
              reinterpret_cast<unsigned*>(sync.data_ptr<int>()), (int)threads, (int)head, (int)pf_tail,
              (int)pf_bulk, (int)pf_last, (int)wb_tma, stream);
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
    key = hashlib.sha1((src + CPP_SRC + arch).encode()).hexdigest()[:12]
    if key not in _MODULES:
        from torch.utils.cpp_extension import load_inline
        _MODULES[key] = load_inline(
            name="kgen_layernorm_regring_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
            functions=["layernorm_fwd"], extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"], verbose=False)
    return _MODULES[key]


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)   # parameter holder (weight, bias, eps)
        self._mod = None
        self._sync = {}     # device -> 2 int32 barrier counters, zero between calls (the kernel resets them)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._mod is None:
            self._mod = _build()
        sync = self._sync.get(x.device)
        if sync is None:
            sync = self._sync[x.device] = torch.zeros(2, dtype=torch.int32, device=x.device)
        N = 1
        for s in self.ln.normalized_shape:
            N *= int(s)
        return self._mod.layernorm_fwd(x, N, self.ln.weight, self.ln.bias, float(self.ln.eps), sync,
                                       THREADS, HEAD, PF_TAIL, PF_BULK, PF_LAST, WB_TMA,
                                       torch.cuda.current_stream(x.device).cuda_stream)
