"""LayerNorm over the trailing dims, CUDA C++ for sm_90: persistent cooperative kernel whose row statistics
run ONE ROW AHEAD of the normalize, so no grid barrier is ever waited on with HBM idle: x is read from HBM
once into registers for the statistics and re-read from L2 for the normalize one step later.

Target: 16 rows of N = 64*256*256 = 4M fp32.  HBM floor 570 MB = 0.190 ms at 3.0 TB/s: per row x_r in +
y_r out = 33.5 MB = 11.2 us, plus 11.2 us once for weight/bias.  The l2ahead family (best: judged 0.2367 ms,
14.8 us per row) waits on each row's barrier with the row in registers: the barrier's chain of L2 round
trips (~3-4 us, see cuda_persistent_tagbar) and the row's own reload sit on the critical path, and HBM only
has the L2 prefetch (PF_PCT 50: 8.4 MB) to read meanwhile.

Here block g (one per SM, G = 132, slice S4 = 7944 float4 = 124 KB of every row, as l2ahead) runs step s:
  1. issue the loads of x_s's slice into registers (THREADS x 16 float4 at 512: 124 KB per SM in flight, the
     whole row: 16.8 MB queued at HBM), first read, kept in L2 (KEEP 1: normal priority; 2: evict_last;
     0: evict-first, the control: the re-read then misses)
  2. wait for row s-1's statistics: its tagged slots (cuda_persistent_tagbar's one-round-trip format) were
     stored at the end of step s-1, so this wait overlaps the HBM time of step 1 (5.6 us at 3 TB/s)
  3. normalize x_{s-1}: re-read from L2 (evict-first hint: last use), GROUP float4 per thread at a time,
     weight from shared memory, bias from shared memory (first 12 items per thread) and registers (the
     last 4, loaded once per call), y stored evict-first; PF_PCT > 0 also bulk-prefetches the start of
     x_{s+1} into L2 here
  4. statistics of x_s (now landed): exact thread mean, squared deviations, fp64 block reduction,
     publish the tagged slot of row s.
The barrier is a full step ahead of its wait, so the per-step critical path is the HBM time of x_s's
loads (which also drains y_{s-1}'s dirty lines) plus the L2 re-read and stores of the normalize:
  HBM per step: 16.8 MB read + 16.8 MB written = 11.2 us;  SM path: step 3 re-reads 124 KB from L2 per SM
  (~1.5-2 us at ~70 GB/s per SM) while step 1's loads are in flight, step 4 ~0.3 us.
Expected ~0.19-0.20 ms IF L2 keeps x_{s-1} (16.8 MB) from its first read to its re-read one step later;
L2 is 50 MB, and at the re-read it holds x_{s-1} (going) and x_s (arriving): up to ~33 MB of x, the y
stream evict-first.  If L2 drops it, the re-read goes to HBM (805 MB in all: ~0.27 ms).  l2ahead's PF_PCT
100 (a 16.8 MB normal-priority row in L2) was slower than 50 there (0.2528 vs 0.2381): the sweep's KEEP
0/1/2 rows show which way L2 goes here.  Shared memory: weight slice + 6144-float4 bias head (as l2ahead,
TMA fill overlapping row 0's loads); registers: x_s (64), the re-read group (16), the bias tail (16).
Tag, epoch and determinism as cuda_persistent_tagbar (fixed-order sums: repeats are bitwise equal).
Tunables are runtime arguments: one build covers the grid (THREADS picks one of two instantiations).
Fallback (N % 4 != 0, misaligned, slice too large for registers, no cooperative launch, many rows):
three plain kernels (chunk partials, per-row combine, elementwise normalize; x read twice).

ptxas (nvcc 13.0, -O3, sm_90a and sm_90 alike): THREADS 512 (x 16 float4): 128 registers, no spill;
THREADS 1024 (x 8): 64 registers, 216 bytes spill stores.  Static shared memory 640 B + dynamic
(7944 + 6144) x 16 = 225 KB.  One block per SM.  Checked off the device: nvcc builds CUDA_SRC whole,
g++ parses CPP_SRC against the torch headers.  Measured: not yet on a GPU (benchmarks/ln3_gpu.sh).
"""
import hashlib

import torch
import torch.nn as nn

THREADS = 512         # 512: 16 float4 of x per thread (128 registers, no spill); 1024: 8 (spills)
KEEP = 1              # L2 policy of x's first read: 1 normal, 2 evict_last, 0 evict-first (control)
GROUP = 4             # float4 per thread re-read from L2 at once in the normalize (<= 4)
PF_PCT = 0            # % of the next row's slice bulk-prefetched into L2 during the normalize
WB_TMA = 1            # 1: weight/bias copied into shared memory by TMA, overlapping row 0
POLL_NS = 0           # __nanosleep between polls of the slots

KGEN_TUNABLE = {
    "THREADS": [512, 1024],
    "KEEP": [0, 1, 2],
    "GROUP": [1, 2, 4],
    "PF_PCT": [0, 25, 50],
    "WB_TMA": [0, 1],
    "POLL_NS": [0, 64, 256],
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

// ---------------------------------------------------------------- tagged partial slots (BAR=1)
// A slot is 16 bytes: (sum x, sum x^2) of one block's slice of one row, each fp64 rounded to a 36-bit
// mantissa whose low 16 bits carry the call's tag.  Each 8-byte half is single-copy atomic, so a reader
// that sees the tag in BOTH halves has the complete value of this call: the data is its own flag (no
// release/acquire pair, no arrival counter, no second load of the partials).
__device__ __forceinline__ unsigned long long tag_pack(double d, unsigned tag) {
    const unsigned long long u = (unsigned long long)__double_as_longlong(d);
    return ((u + 0x8000ull) & ~0xFFFFull) | (unsigned long long)tag;   // round to nearest at bit 16, then tag
}
__device__ __forceinline__ double tag_value(unsigned long long u) {
    return __longlong_as_double((long long)(u & ~0xFFFFull));
}
__device__ __forceinline__ void st_slot(double2* p, unsigned long long a, unsigned long long b) {
    asm volatile("st.relaxed.gpu.global.v2.b64 [%0], {%1, %2};" :: "l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ ulonglong2 ld_slot(const double2* p) {
    ulonglong2 v;
    asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned ld_relaxed_u32(const unsigned* p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned atom_add_acq_rel(unsigned* p, unsigned v) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

// x's first read: kept in L2 for its second read one step later (policy per KEEP)
__device__ __forceinline__ float4 ld_first(const float4* p, int keep) {
    float4 v;
    if (keep == 2)
        asm volatile("{\n\t.reg .b64 pol;\n\t"
            "createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
            "ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], pol;\n\t}"
            : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    else if (keep == 1)
        asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    else
        asm volatile("ld.global.cs.v4.f32 {%0, %1, %2, %3}, [%4];"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}
// x's second read (last use): evict-first, and lines kept with evict_last are demoted by the hint
__device__ __forceinline__ float4 ld_last(const float4* p) {
    float4 v;
    asm volatile("{\n\t.reg .b64 pol;\n\t"
        "createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
        "ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], pol;\n\t}"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

struct LNParams {
    const float4* x; float4* y; const float4* w; const float4* b;
    double2* slots;            // [rows][G] tagged partials (persistent buffer, zeroed once)
    unsigned* sync;            // [1] departures, [2] call epoch (the tag's source)
    int64_t N4; int rows; int G; int S4; int SB4; float eps;
    int keep, group, pf4, wb_tma, poll_ns;
};

// ---------------------------------------------------------------- persistent kernel
// Step s (0..rows): issue the loads of x_s (all MV items, HBM) -> wait for row s-1's statistics (its slots
// were published at the end of step s-1, so the barrier runs while x_s is in flight) -> normalize x_{s-1},
// re-read from L2 in groups of GROUP items -> statistics of x_s (now in registers) -> publish row s's slot.
template <int NT, int MV>
__global__ void __launch_bounds__(NT, 1) ln_lag1_kernel(const LNParams p) {
    constexpr int KT = MV - 6144 / NT;       // items whose bias stays in registers (the rest: shared memory)
    extern __shared__ __align__(128) float4 smem[];   // [S4] weight slice, then [SB4] head of the bias slice
    __shared__ __align__(8) uint64_t wb_bar;
    __shared__ double2 red[NT / 32];
    __shared__ double2 red2[NT / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = blockIdx.x;
    const int64_t c0 = (int64_t)g * p.S4;
    const int cnt4 = (int)min((int64_t)p.S4, p.N4 - c0);    // > 0: the host makes G = ceil(N4 / S4)
    const int sb4 = min(p.SB4, cnt4);
    const int nv = tid < cnt4 ? min(MV, (cnt4 - tid + NT - 1) / NT) : 0;   // this thread's valid float4
    const float nf = 4.f * (float)nv;
    float4* ws = smem;
    float4* bs = smem + p.S4;
    const bool tma = p.wb_tma && p.w != nullptr && p.b != nullptr;
    const int pf4 = min(p.pf4, cnt4);
    const unsigned tag = 0x8000u | (ld_relaxed_u32(p.sync + 2) & 0x7FFFu);
    const double Nd = 4.0 * (double)p.N4;

    if (tma && tid == 0) {                   // weight slice + bias head into shared memory, asynchronously
        mbar_init(&wb_bar, 1);
        mbar_arrive_expect_tx(&wb_bar, (uint32_t)(cnt4 + sb4) * 16u);
        constexpr int PER = WB_CHUNK / 16;
        for (int i = 0; i < cnt4; i += PER) bulk_g2s(ws + i, p.w + c0 + i, (uint32_t)min(PER, cnt4 - i) * 16u, &wb_bar);
        for (int i = 0; i < sb4; i += PER) bulk_g2s(bs + i, p.b + c0 + i, (uint32_t)min(PER, sb4 - i) * 16u, &wb_bar);
    }
    if (!tma) {                              // plain fill: each thread fills the positions it reads itself
        for (int k = 0; k < MV; ++k) {
            const int j = tid + k * NT;
            if (j < cnt4) ws[j] = p.w ? __ldg(p.w + c0 + j) : make_float4(1.f, 1.f, 1.f, 1.f);
            if (j < sb4) bs[j] = __ldg(p.b + c0 + j);
        }
    }
    float4 bt[KT];                           // bias of the last KT items: registers for the whole call
    #pragma unroll
    for (int k = MV - KT; k < MV; ++k) {
        const int j = tid + k * NT;
        bt[k - (MV - KT)] = p.b && j < cnt4 ? __ldg(p.b + c0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }

    float4 v[MV];
    for (int s = 0; s <= p.rows; ++s) {
        const float4* xs = p.x + (int64_t)s * p.N4 + c0;
        if (s < p.rows) {                    // x_s: the whole slice in flight at once (first read, kept in L2)
            #pragma unroll
            for (int k = 0; k < MV; ++k) {
                const int j = tid + k * NT;
                v[k] = j < cnt4 ? ld_first(xs + j, p.keep) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
        if (s > 0) {
            const int r = s - 1;
            // row r's statistics: its slots were stored one step ago; warps 0..ceil(G/32)-1 poll
            if (warp * 32 < p.G) {
                const int i = warp * 32 + lane;
                const double2* sp = p.slots + (int64_t)r * p.G + min(i, p.G - 1);
                double2 q = make_double2(0.0, 0.0);
                bool ok = i >= p.G;
                unsigned spins = 0;
                while (true) {
                    if (!ok) {
                        const ulonglong2 u = ld_slot(sp);
                        if ((((unsigned)u.x ^ tag) & 0xFFFFu) == 0 && (((unsigned)u.y ^ tag) & 0xFFFFu) == 0) {
                            q = make_double2(tag_value(u.x), tag_value(u.y));
                            ok = true;
                        }
                    }
                    if (__all_sync(0xffffffffu, ok) || ++spins >= MAX_SPIN) break;
                    if (p.poll_ns) __nanosleep((unsigned)p.poll_ns);
                }
                #pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    q.x += __shfl_xor_sync(0xffffffffu, q.x, o);
                    q.y += __shfl_xor_sync(0xffffffffu, q.y, o);
                }
                if (lane == 0) red2[warp] = q;
            }
            __syncthreads();                 // red2 is rewritten only after the next step's first barrier
            if (r == 0 && tma) mbar_wait(&wb_bar, 0);
            // optional L2 prefetch of the start of x_{s+1}, so HBM keeps reading during this normalize
            if (pf4 > 0 && s + 1 < p.rows) {
                constexpr int PER = PF_CHUNK / 16;
                const float4* nx = xs + p.N4;
                for (int i = tid; i * PER < pf4; i += NT)
                    bulk_prefetch_l2(nx + (int64_t)i * PER, (uint32_t)min(PER, pf4 - i * PER) * 16u, false);
            }
            float mean, rstd;
            {
                double a = 0.0, b = 0.0;
                for (int w = 0; w * 32 < p.G; ++w) { const double2 q = red2[w]; a += q.x; b += q.y; }
                const double dmean = a / Nd;
                const double var = fmax(b / Nd - dmean * dmean, 0.0);
                mean = (float)dmean;
                rstd = (float)(1.0 / sqrt(var + (double)p.eps));
            }
            const float4* xr = p.x + (int64_t)r * p.N4 + c0;
            float4* yr = p.y + (int64_t)r * p.N4 + c0;
            // x_r again, from L2, GROUP (<= 4) items at a time: 16 registers beside v[]
            for (int k0 = 0; k0 < MV; k0 += p.group) {
                float4 u[4];
                #pragma unroll
                for (int d = 0; d < 4; ++d) {
                    const int k = k0 + d, j = tid + k * NT;
                    u[d] = d < p.group && k < MV && j < cnt4 ? ld_last(xr + j) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
                #pragma unroll
                for (int d = 0; d < 4; ++d) {
                    const int k = k0 + d, j = tid + k * NT;
                    if (d < p.group && k < MV && j < cnt4) {
                        const float4 w = ws[j];
                        float4 b = make_float4(0.f, 0.f, 0.f, 0.f);
                        if (k >= MV - KT) {
                            #pragma unroll
                            for (int t = 0; t < KT; ++t) if (k == MV - KT + t) b = bt[t];
                        } else if (p.b) {
                            b = bs[j];
                        }
                        float4 o;
                        o.x = fmaf((u[d].x - mean) * rstd, w.x, b.x);
                        o.y = fmaf((u[d].y - mean) * rstd, w.y, b.y);
                        o.z = fmaf((u[d].z - mean) * rstd, w.z, b.z);
                        o.w = fmaf((u[d].w - mean) * rstd, w.w, b.w);
                        st_stream(yr + j, o);
                    }
                }
            }
        }
        if (s < p.rows) {
            // statistics of x_s: this thread's exact mean, its squared deviations, fp64 block sums
            float s4[4] = {0.f, 0.f, 0.f, 0.f};
            #pragma unroll
            for (int k = 0; k < MV; ++k) s4[k & 3] += (v[k].x + v[k].y) + (v[k].z + v[k].w);
            const float sm = (s4[0] + s4[1]) + (s4[2] + s4[3]);
            const float m = nv > 0 ? sm / nf : 0.f;
            float q4[4] = {0.f, 0.f, 0.f, 0.f};
            #pragma unroll
            for (int k = 0; k < MV; ++k) {
                if (k < nv) {
                    const float a = v[k].x - m, b = v[k].y - m, c = v[k].z - m, d = v[k].w - m;
                    q4[k & 3] += (a * a + b * b) + (c * c + d * d);
                }
            }
            double A = (double)sm;
            double B = (double)((q4[0] + q4[1]) + (q4[2] + q4[3]))
                       + (double)m * (2.0 * (double)sm - (double)nf * (double)m);
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                A += __shfl_xor_sync(0xffffffffu, A, o);
                B += __shfl_xor_sync(0xffffffffu, B, o);
            }
            if (lane == 0) red[warp] = make_double2(A, B);
            __syncthreads();
            if (warp == 0) {
                double2 t = lane < NT / 32 ? red[lane] : make_double2(0.0, 0.0);
                #pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    t.x += __shfl_xor_sync(0xffffffffu, t.x, o);
                    t.y += __shfl_xor_sync(0xffffffffu, t.y, o);
                }
                if (lane == 0) st_slot(p.slots + (int64_t)s * p.G + g, tag_pack(t.x, tag), tag_pack(t.y, tag));
            }
        }
    }
    // departure (see cuda_persistent_tagbar): the last block out resets the counter and moves the epoch
    if (tid == 0) {
        const unsigned old = atom_add_acq_rel(p.sync + 1, 1u);
        if (old == (unsigned)p.G - 1) {
            atomicExch(p.sync + 1, 0u);
            atomicAdd(p.sync + 2, 1u);
        }
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
template __global__ void ln_lag1_kernel<1024, 8>(const LNParams);
template __global__ void ln_lag1_kernel<512, 16>(const LNParams);
#endif

#ifndef KGEN_KERNELS_ONLY
static int64_t fb_chunks(int64_t N) { return (N + FB_THREADS * FB_ITEMS - 1) / (FB_THREADS * FB_ITEMS); }

// scratch (fp64 words) the fallback needs: partials + stats
int64_t ln_scratch_doubles(int64_t rows, int64_t N) { return rows * (2 * fb_chunks(N) + 1); }

template <int NT, int MV>
static bool try_persistent(LNParams p, int64_t rows, int64_t N, int pf_pct, int64_t slot_cap, cudaStream_t st) {
    auto al = [](const void* q) { return q == nullptr || reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    if (N % 4 != 0 || !al(p.x) || !al(p.y) || !al(p.w) || !al(p.b)) return false;
    if (rows > MAX_PERSISTENT_ROWS || N < (1 << 16) || p.slots == nullptr) return false;
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
    if (rows * G > slot_cap) return false;
    // bias head in shared memory: items [0, MV - KT) of every thread; the last KT items live in registers
    const int64_t SB4 = p.b ? std::min<int64_t>(S4, (int64_t)(6144 / NT) * NT) : 0;
    if ((S4 + SB4) * 16 > (int64_t)optin - SMEM_RESERVE) return false;
    const size_t smem = (size_t)(S4 + SB4) * 16;
    auto kern = ln_lag1_kernel<NT, MV>;
    if (cudaFuncSetAttribute((const void*)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)
            != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NT, smem) != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    if ((int64_t)per_sm * sms < G || G > NT) return false;    // co-residency: the spin barrier needs it
    p.N4 = N4; p.rows = (int)rows; p.G = G; p.S4 = (int)S4; p.SB4 = (int)SB4;
    p.pf4 = (int)((S4 * std::max(0, std::min(100, pf_pct)) + 99) / 100);
    void* args[] = {(void*)&p};
    KGEN_CUDA_CHECK(cudaLaunchCooperativeKernel((const void*)kern, dim3(G), dim3(NT), args, smem, st));
    KGEN_CUDA_CHECK(cudaGetLastError());
    return true;
}

// returns 1 when the persistent kernel ran, 0 for the fallback
int ln_launch(const float* xp, float* yp, const float* wp, const float* bp, int64_t rows, int64_t N, double eps,
              double* scratch, unsigned* sync, double* slots, int64_t slot_cap, int threads, int keep, int group,
              int pf_pct, int wb_tma, int poll_ns, int64_t stream) {
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    LNParams p;
    p.x = reinterpret_cast<const float4*>(xp); p.y = reinterpret_cast<float4*>(yp);
    p.w = reinterpret_cast<const float4*>(wp); p.b = reinterpret_cast<const float4*>(bp);
    p.slots = reinterpret_cast<double2*>(slots); p.sync = sync; p.eps = (float)eps;
    p.keep = std::max(0, std::min(keep, 2)); p.group = std::max(1, std::min(group, 4)); p.wb_tma = wb_tma;
    p.poll_ns = std::max(0, std::min(poll_ns, 1000000));
    const bool ran = threads == 512 ? try_persistent<512, 16>(p, rows, N, pf_pct, slot_cap, st)
                                    : try_persistent<1024, 8>(p, rows, N, pf_pct, slot_cap, st);
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
              double* scratch, unsigned* sync, double* slots, int64_t slot_cap, int threads, int keep, int group,
              int pf_pct, int wb_tma, int poll_ns, int64_t stream);

torch::Tensor layernorm_fwd(torch::Tensor x, int64_t N, c10::optional<torch::Tensor> weight,
                            c10::optional<torch::Tensor> bias, double eps, torch::Tensor sync, torch::Tensor slots,
                            int64_t threads, int64_t keep, int64_t group, int64_t pf_pct, int64_t wb_tma,
                            int64_t poll_ns, int64_t stream) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "float32 CUDA input expected");
    TORCH_CHECK(sync.is_cuda() && sync.scalar_type() == torch::kInt32 && sync.numel() >= 4, "sync: 4 int32 zeros");
    TORCH_CHECK(slots.is_cuda() && slots.scalar_type() == torch::kFloat64 && slots.is_contiguous(), "slots: fp64");
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
              reinterpret_cast<unsigned*>(sync.data_ptr<int>()), slots.data_ptr<double>(), slots.numel() / 2,
              (int)threads, (int)keep, (int)group, (int)pf_pct, (int)wb_tma, (int)poll_ns, stream);
    return y;
}
"""

_MODULES = {}
SLOTS_PER_ROW = 1024  # double2 slots per row in the persistent buffer (one per block: G <= the SM count)


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
            name="kgen_layernorm_lag1_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
            functions=["layernorm_fwd"], extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"], verbose=False)
    return _MODULES[key]


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)   # parameter holder (weight, bias, eps)
        self._mod = None
        self._sync = {}     # device -> 4 int32: [1] departures (0 between calls), [2] epoch (the slots' tag)
        self._slots = {}    # device -> tagged partial slots, zeroed once, grown with the row count

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._mod is None:
            self._mod = _build()
        N = 1
        for s in self.ln.normalized_shape:
            N *= int(s)
        sync = self._sync.get(x.device)
        if sync is None:
            sync = self._sync[x.device] = torch.zeros(4, dtype=torch.int32, device=x.device)
        rows = max(1, x.numel() // N)
        slots = self._slots.get(x.device)
        if slots is None or slots.numel() < 2 * rows * SLOTS_PER_ROW:
            slots = self._slots[x.device] = torch.zeros(2 * rows * SLOTS_PER_ROW, dtype=torch.float64,
                                                        device=x.device)
        return self._mod.layernorm_fwd(x, N, self.ln.weight, self.ln.bias, float(self.ln.eps), sync, slots,
                                       THREADS, KEEP, GROUP, PF_PCT, WB_TMA, POLL_NS,
                                       torch.cuda.current_stream(x.device).cuda_stream)
