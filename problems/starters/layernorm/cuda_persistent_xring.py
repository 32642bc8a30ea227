"""LayerNorm over the trailing dims, CUDA C++ for sm_90: cuda_persistent_xtma with the x buffer made a RING of
R = nch + LEAD chunk slots, so the next row's statistics (and its grid barrier) finish LEAD - LAG chunks BEFORE
this row's normalize ends, instead of after it: no per-row bubble on the SMs' critical path.

Target: 16 rows of N = 64*256*256 = 4M fp32.  HBM floor 570 MB = 0.190 ms at 3.0 TB/s; per row x in + y out
= 33.5 MB = 11.2 us.  xtma (PF_SLIDE 0) is judged 0.229 ms, kernel 224 us = 14 us per row; ncu: DRAM 73%
(2.45 TB/s), 549 MB moved (x once, y once: no re-reads), 25% occupancy, no eligible warp 77%.  So HBM is not
doing extra work; it idles ~2-3 us per row.  Where: xtma refills chunk k of x_{r+1} as chunk k of x_r is
normalized, so x_{r+1}'s last chunk is only requested at the END of normalize(r); then its landing (~0.5-1 us,
an L2 hit at best), the stats of the last chunk, the block reduction and the tagged-slot barrier (~1-1.5 us: one
L2 round trip after the slowest SM) all sit between the last y store of row r and the first of row r+1.  In
that window the SMs store nothing and request nothing new (x_{r+2} only as an L2 prefetch of PF_PCT %), and y's
dirty lines leave L2 only as new lines come in: HBM drains (hypothesis; consistent with every design at
2.4-2.5 TB/s: l2ahead, tagbar, xtma all had this per-row serial tail).

Here the x chunks of all rows form ONE stream c = row * nch + k (nch = 16 chunks of 512 float4 = 8 KB per SM),
and slot c % R holds chunk c.  Per normalize step c (row r, chunk k):
  normalize chunk c from its slot (y evict-first) -> each warp arrives on empty[slot] ->
  thread 0 refills the slot of chunk c - LAG with chunk c - LAG + R (= chunk k - LAG + LEAD of row r+1,
  or of row r+2 near the row's end) by TMA, and bulk-prefetches chunk c - LAG + R + PFD into L2 ->
  statistics of chunk c + nch + SAHEAD (all threads wait on its full mbarrier; it was requested
  LEAD - LAG - SAHEAD steps ago) -> if that was a row's last chunk: fp64 block reduction, tagged slot.
So row r+1's slot is published SAHEAD steps before normalize(r) ends, and the poll at the row's start finds
it (one L2 round trip, no wait on the slowest SM's tail unless the skew exceeds SAHEAD steps).  HBM always
has the TMA stream (LEAD - LAG chunks = 24-40 KB per SM in flight) + PFD chunks of L2 prefetch ahead of it,
crossing row boundaries without a gap, beside y's stores.  At HBM pace a step is ~0.7 us (1 MB in + 1 MB out
GPU-wide), so LEAD 4 with LAG 1 leaves e.g. 1 step for landing and 2 (SAHEAD 2, ~1.4 us) for the barrier.
Expected: ~16 x 11.2 + ~11 (weight/bias + row 0 start) + ~2 (last row) = ~0.195-0.205 ms kernel if the
bubble was the gap; if it does not move, the limit is the steady mixed stream itself (then try 2 CTAs/SM).

Shared memory is the price: ring R x 8 KB + bias head BH x 8 KB = 28 x 8 KB = 224 KB (+896 B static), so each
ring slot beyond a row costs one bias chunk: LEAD 3 / 4 / 6 = BH 9 / 8 / 6, and bias items [BH, 12) per thread
(LEAD x 1 MB GPU-wide per row) are re-read from L2 every row (evict_last, as tagbar's 3.4 MB tail, loaded at
their use: one item ahead in registers spilled 56-120 bytes).  Registers: the weight slice (16 float4, 64
registers) and bias items 12..15 (16 registers), as xtma.  Numerics: xtma's one-pass shifted sums (pivot = the
mean of the thread's first float4 of the row), fp64 block / grid sums, fixed order: repeats bitwise equal; the
same error as xtma (benchmarks/ln5_emulate.py: 4.0e-8 at x1, 5.9e-8 at x100).
Memory ordering (as xtma): a slot's readers (stats a row earlier, then normalize) precede their warp's
mbarrier.arrive on empty[slot] (release); thread 0's wait on empty (acquire) + fence.proxy.async precede the
TMA that overwrites it; fill n of a slot completes phase n of full[slot] (parity (c / R) & 1), and every
waited chunk was issued earlier by thread 0 in program order (SAHEAD is clamped to LEAD - LAG), so no wait
can precede its issue: no deadlock.  Grid barrier, slot format, epoch and departure counter: tagbar's.
Tunables are runtime arguments (LEAD picks one of three instantiations; one build covers the grid).
Fallback (N % 4 != 0, misaligned, slice too large for registers, no cooperative launch, many rows): three
plain kernels (chunk partials, per-row combine, elementwise normalize; x read twice).

ptxas (nvcc 13.0, -O3, sm_90a): 128 registers (512 threads, 1 block per SM, 25% occupancy); LEAD 3 and 4:
4 bytes spill stores/loads (8-byte stack), LEAD 6: 8 bytes.  Shared memory: 229,376 B dynamic + 896 B static.
Checked off the device: nvcc builds CUDA_SRC whole (kgen eval on a CPU compiles it: not_run); the stream /
parity / clamp protocol was written to xtma's, not emulated.
Measured on the H100 (2026-11-26, benchmarks/round7_gpu.sh, RESULTS.md seventh session): correct (5.3e-8) but
SLOWER than xtma: as written 0.3029 ms swept, best PFD 0 0.2761 (judged 0.2868) against xtma's 0.2305 in the same
call; all 13 settings 0.276-0.383. The bias re-read from L2 each row and the per-chunk ring bookkeeping cost more
than the barrier bubble they were meant to hide.
"""

import hashlib

import torch
import torch.nn as nn

LEAD = 4              # ring slots beyond one row (3, 4 or 6: picks the build; costs LEAD bias chunks from L2)
LAG = 1               # thread 0 refills the slot of chunk c - LAG after normalizing chunk c (0 or 1)
SAHEAD = 2            # statistics of the next row run SAHEAD chunks ahead of the normalize (<= LEAD - LAG)
PFD = 8               # L2 prefetch distance in chunks ahead of the TMA stream (0: none)
X_EF = 1              # 1: x copied by TMA with an L2 evict_first policy (read once); 0: normal priority
POLL_NS = 0           # __nanosleep between barrier polls (0: poll again as soon as the last poll returns)

KGEN_TUNABLE = {
    "LEAD": [3, 4, 6],
    "LAG": [0, 1],
    "SAHEAD": [0, 1, 2, 3, 5],
    "PFD": [0, 4, 8, 16],
    "X_EF": [0, 1],
    "POLL_NS": [0, 64],
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
#define WB_CHUNK 16384              // bytes per bulk copy of the bias head
#define MAX_SPIN (1u << 22)         // polls before giving up: broken co-residency gives wrong output, not a hang

// ---------------------------------------------------------------- PTX helpers (sm_90)
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {        // release.cta: prior reads are performed
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_u32(bar)) : "memory");
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
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}
// x chunks by TMA (global -> shared, completion on an mbarrier), optional evict_first L2 policy
__device__ __forceinline__ void bulk_g2s_x(void* dst, const void* src, uint32_t bytes, uint64_t* bar, bool ef) {
    if (ef)
        asm volatile("{\n\t.reg .b64 pol;\n\t"
                     "createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
                     "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                     " [%0], [%1], %2, [%3], pol;\n\t}"
                     :: "r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
    else
        bulk_g2s(dst, src, bytes, bar);
}
__device__ __forceinline__ void bulk_prefetch_l2(const void* p, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}
// bias items [BH, 12): re-read every row, kept in L2 (evict_last)
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

// ---------------------------------------------------------------- tagged partial slots (as cuda_persistent_tagbar)
// A slot is 16 bytes: (sum x, sum x^2) of one block's slice of one row, each fp64 rounded to a 36-bit
// mantissa whose low 16 bits carry the call's tag.  Each 8-byte half is single-copy atomic, so a reader
// that sees the tag in BOTH halves has the complete value of this call: the data is its own flag.
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

struct LNParams {
    const float4* x; float4* y; const float4* w; const float4* b;
    double2* slots;            // [rows][G] tagged partials (persistent buffer, zeroed once)
    unsigned* sync;            // [1] departures, [2] call epoch (the tag's source)
    int64_t N4; int rows; int G; int S4; int SB4; float eps;
    int lag, sahead, pfd, x_ef, poll_ns;
};

// ---------------------------------------------------------------- persistent kernel
// NT threads, MV float4 items per thread (NT * MV >= S4).  Chunk k of a row = item k of every thread =
// float4 [k*NT, (k+1)*NT) of the slice.  The x chunks of all rows form ONE stream (c = row * nch + k) that
// flows through a ring of R chunk slots (R > nch: a row plus LEAD = R - nch chunks of the next one).
// Bias: items [0, BH) in shared memory, [BH, 12) re-read from L2 every row (evict_last), [12, MV) in registers.
template <int NT, int MV, int BH, int R>
__global__ void __launch_bounds__(NT, 1) ln_xring_kernel(const LNParams p) {
    constexpr int BR = 12;                             // bias items >= BR live in registers
    constexpr int KT = MV - BR;
    extern __shared__ __align__(128) float4 smem[];   // [R * NT] x ring, then [SB4] head of the bias slice
    __shared__ __align__(8) uint64_t full[R];          // slot s holds its chunk (TMA complete_tx)
    __shared__ __align__(8) uint64_t empty[R];         // slot s read by all NT/32 warps (normalize)
    __shared__ __align__(8) uint64_t wb_bar;           // bias head landed
    __shared__ double2 red[NT / 32];
    __shared__ double2 red2[NT / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = blockIdx.x;
    const int64_t c0 = (int64_t)g * p.S4;
    const int cnt4 = (int)min((int64_t)p.S4, p.N4 - c0);    // > 0: the host makes G = ceil(N4 / S4)
    const int nch = (cnt4 + NT - 1) / NT;                    // chunks of this slice (<= MV)
    const int total = p.rows * nch;                          // chunks of the stream
    const int sb4 = min(p.SB4, cnt4);
    const int nv = tid < cnt4 ? min(MV, (cnt4 - tid + NT - 1) / NT) : 0;   // this thread's valid float4
    const float nf = 4.f * (float)nv;
    float4* xs = smem;
    float4* bs = smem + R * NT;
    const bool has_b = p.b != nullptr;
    // statistics of stream chunk c are taken SAH chunks after the normalize of chunk c - nch (the same
    // column chunk one row earlier); SAH <= R - nch - lag keeps every waited chunk already issued
    const int sah = max(0, min(p.sahead, min(R - nch - p.lag, nch - 1)));   // < nch: one row boundary at most
    const unsigned tag = 0x8000u | (ld_relaxed_u32(p.sync + 2) & 0x7FFFu);
    auto chunk_bytes = [&](int k) -> uint32_t { return (uint32_t)min(NT, cnt4 - k * NT) * 16u; };
    auto src = [&](int c) -> const float4* {
        const int r = c / nch;
        return p.x + (int64_t)r * p.N4 + c0 + (int64_t)(c - r * nch) * NT;
    };
    auto issue = [&](int c) {                // thread 0: stream chunk c into slot c % R
        const int s = c % R;
        const uint32_t nb = chunk_bytes(c % nch);
        mbar_arrive_expect_tx(&full[s], nb);
        bulk_g2s_x(xs + s * NT, src(c), nb, &full[s], p.x_ef != 0);
    };
    auto prefetch = [&](int c) { if (c < total) bulk_prefetch_l2(src(c), chunk_bytes(c % nch)); };

    if (tid == 0) {
        #pragma unroll
        for (int s = 0; s < R; ++s) { mbar_init(&full[s], 1); mbar_init(&empty[s], NT / 32); }
        mbar_init(&wb_bar, 1);
        mbar_init_fence();
        for (int c = 0; c < min(R, total); ++c) issue(c);    // row 0 and the first LEAD chunks of row 1
        for (int c = R; c < R + p.pfd; ++c) prefetch(c);     // the L2 prefetch runs pfd chunks ahead of the TMA
        if (sb4 > 0) {                       // bias head, behind row 0 (needed only by its normalize)
            mbar_arrive_expect_tx(&wb_bar, (uint32_t)sb4 * 16u);
            constexpr int PER = WB_CHUNK / 16;
            for (int i = 0; i < sb4; i += PER)
                bulk_g2s(bs + i, p.b + c0 + i, (uint32_t)min(PER, sb4 - i) * 16u, &wb_bar);
        }
    }
    // weight slice and bias tail into registers, once
    float4 wr[MV], bt[KT];
    #pragma unroll
    for (int k = 0; k < MV; ++k) {
        const int j = tid + k * NT;
        wr[k] = j < cnt4 ? (p.w ? __ldg(p.w + c0 + j) : make_float4(1.f, 1.f, 1.f, 1.f))
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    #pragma unroll
    for (int k = 0; k < KT; ++k) {
        const int j = tid + (BR + k) * NT;
        bt[k] = has_b && j < cnt4 ? __ldg(p.b + c0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __syncthreads();                         // the mbarrier inits are visible to every waiting thread

    const double inv_N = 1.0 / (4.0 * (double)p.N4);
    const double inv_n = nv > 0 ? 1.0 / (double)nf : 0.0;
    // one-pass shifted sums of the row being gathered (pivot K = the mean of the thread's first float4)
    float K = 0.f, sa = 0.f, qa = 0.f;
    auto stats_chunk = [&](int c, int k) {   // block-uniform c < total, k = c % nch
        const int s = c % R;
        mbar_wait(&full[s], (uint32_t)(c / R) & 1u);
        if (k == 0) { sa = 0.f; qa = 0.f; }
        if (tid + k * NT < cnt4) {
            const float4 v = xs[s * NT + tid];
            if (k == 0) K = 0.25f * ((v.x + v.y) + (v.z + v.w));
            const float a = v.x - K, b = v.y - K, cc = v.z - K, d = v.w - K;
            sa += (a + b) + (cc + d);
            qa = fmaf(a, a, fmaf(b, b, fmaf(cc, cc, fmaf(d, d, qa))));
        }
    };
    auto publish = [&](int row) {            // block-uniform: the row's last chunk was just accumulated
        double A = nv > 0 ? (double)nf * (double)K + (double)sa : 0.0;
        const double m2 = nv > 0 ? fmax((double)qa - (double)sa * (double)sa * inv_n, 0.0) : 0.0;
        double B = nv > 0 ? m2 + A * A * inv_n : 0.0;
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
            if (lane == 0) st_slot(p.slots + (int64_t)row * p.G + g, tag_pack(t.x, tag), tag_pack(t.y, tag));
        }
    };
    // statistics of row 0 and of the first sah chunks of row 1 before the first normalize
    int sc = 0;                              // next stream chunk whose statistics are taken
    for (; sc < min(total, nch + sah); ++sc) {
        const int k = sc < nch ? sc : sc - nch;
        stats_chunk(sc, k);
        if (k == nch - 1) publish(sc / nch);
    }
    for (int r = 0; r < p.rows; ++r) {
        // ---- wait for row r's grid statistics (published one row ago, SAH chunks before this row started)
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
        __syncthreads();                     // red2 is rewritten only after the next publish's __syncthreads
        if (r == 0 && sb4 > 0) mbar_wait(&wb_bar, 0);
        float mean, rstd;
        {
            double a = 0.0, b = 0.0;
            for (int w = 0; w * 32 < p.G; ++w) { const double2 q = red2[w]; a += q.x; b += q.y; }
            const double dmean = a * inv_N;
            const double var = fmax(b * inv_N - dmean * dmean, 0.0);
            mean = (float)dmean;
            rstd = (float)(1.0 / sqrt(var + (double)p.eps));
        }
        float4* yr = p.y + (int64_t)r * p.N4 + c0;
        // ---- normalize row r chunk by chunk; refill the freed slots (LAG behind) with the stream R ahead,
        //      and take the statistics of chunk c + nch + SAH (the next row, or the first chunks of the one after)
        // bias items [BH, BR) come from L2 at their use (loaded one item ahead into registers spilled 56-120
        // bytes, prefetched into L1 one item ahead 24-48 bytes; at the use: 4-8)
        #pragma unroll
        for (int k = 0; k < MV; ++k) {
            if (k < nch) {                   // block-uniform
                const int c = r * nch + k;   // stream chunk being normalized
                const int s = c % R;
                const int j = tid + k * NT;
                if (j < cnt4) {
                    const float4 v = xs[s * NT + tid];
                    const float4 w = wr[k];
                    float4 b;
                    if (k >= BR) b = bt[k >= BR ? k - BR : 0];
                    else if (k >= BH) b = has_b ? ld_keep(p.b + c0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
                    else b = has_b ? bs[j] : make_float4(0.f, 0.f, 0.f, 0.f);
                    float4 o;
                    o.x = fmaf((v.x - mean) * rstd, w.x, b.x);
                    o.y = fmaf((v.y - mean) * rstd, w.y, b.y);
                    o.z = fmaf((v.z - mean) * rstd, w.z, b.z);
                    o.w = fmaf((v.w - mean) * rstd, w.w, b.w);
                    st_stream(yr + j, o);
                }
                __syncwarp();
                if (lane == 0) mbar_arrive(&empty[s]);
                if (tid == 0) {
                    const int cp = c - p.lag;
                    if (cp >= 0 && cp + R < total) {
                        mbar_wait(&empty[cp % R], (uint32_t)(cp / R) & 1u);   // every warp read chunk cp
                        fence_proxy_async_smem();                             // ... before the TMA writes it
                        issue(cp + R);
                        if (p.pfd > 0) prefetch(cp + R + p.pfd);
                    }
                }
                const int sc = c + nch + sah;   // its statistics: chunk k + sah of row r + 1 (or of row r + 2)
                if (sc < total) {            // block-uniform
                    const int ks = k + sah < nch ? k + sah : k + sah - nch;
                    stats_chunk(sc, ks);
                    if (ks == nch - 1) publish(k + sah < nch ? r + 1 : r + 2);
                }
            }
        }
    }
    // departure: as cuda_persistent_tagbar (the last block out moves the epoch)
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

#ifdef KGEN_KERNELS_ONLY   // the host code instantiates them; without it, ptxas -v must still see them
template __global__ void ln_xring_kernel<512, 16, 9, 19>(const LNParams);
template __global__ void ln_xring_kernel<512, 16, 8, 20>(const LNParams);
template __global__ void ln_xring_kernel<512, 16, 6, 22>(const LNParams);
#endif

#ifndef KGEN_KERNELS_ONLY
static int64_t fb_chunks(int64_t N) { return (N + FB_THREADS * FB_ITEMS - 1) / (FB_THREADS * FB_ITEMS); }

// scratch (fp64 words) the fallback needs: partials + stats
int64_t ln_scratch_doubles(int64_t rows, int64_t N) { return rows * (2 * fb_chunks(N) + 1); }

template <int NT, int MV, int BH, int R>
static bool try_persistent(LNParams p, int64_t rows, int64_t N, int64_t slot_cap, cudaStream_t st) {
    auto al = [](const void* q) { return q == nullptr || reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    if (N % 4 != 0 || !al(p.x) || !al(p.y) || !al(p.w) || !al(p.b)) return false;
    if (rows > MAX_PERSISTENT_ROWS || N < (1 << 16)) return false;
    if (p.slots == nullptr) return false;
    if (p.lag > R - MV) return false;                         // sahead's clamp needs R >= nch + lag
    if ((int64_t)rows * MV >= (1LL << 30)) return false;      // stream chunk indices are int
    int dev = 0, sms = 0, optin = 0, coop = 0;
    KGEN_CUDA_CHECK(cudaGetDevice(&dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop || sms <= 0 || sms > 1024) return false;
    const int64_t N4 = N / 4;
    const int64_t S4 = (N4 + sms - 1) / sms;
    if (S4 > (int64_t)NT * MV) return false;                  // the slice must fit the weight registers
    const int G = (int)((N4 + S4 - 1) / S4);                  // <= sms, no empty block
    if (rows * G > slot_cap || G > NT) return false;
    // x ring (R chunk slots) + the bias of items [0, BH) of every thread in shared memory
    const int64_t SB4 = p.b ? std::min<int64_t>(S4, (int64_t)BH * NT) : 0;
    const size_t smem = (size_t)((int64_t)R * NT + SB4) * 16;
    if ((int64_t)smem > (int64_t)optin - SMEM_RESERVE) return false;
    auto kern = ln_xring_kernel<NT, MV, BH, R>;
    if (cudaFuncSetAttribute((const void*)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)
            != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NT, smem) != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    if ((int64_t)per_sm * sms < G) return false;              // co-residency is what the spin barrier needs
    p.N4 = N4; p.rows = (int)rows; p.G = G; p.S4 = (int)S4; p.SB4 = (int)SB4;
    void* args[] = {(void*)&p};
    KGEN_CUDA_CHECK(cudaLaunchCooperativeKernel((const void*)kern, dim3(G), dim3(NT), args, smem, st));
    KGEN_CUDA_CHECK(cudaGetLastError());
    return true;
}

// returns 1 when the persistent kernel ran, 0 for the fallback
int ln_launch(const float* xp, float* yp, const float* wp, const float* bp, int64_t rows, int64_t N, double eps,
              double* scratch, unsigned* sync, double* slots, int64_t slot_cap, int lead, int lag, int sahead,
              int pfd, int x_ef, int poll_ns, int64_t stream) {
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    LNParams p;
    p.x = reinterpret_cast<const float4*>(xp); p.y = reinterpret_cast<float4*>(yp);
    p.w = reinterpret_cast<const float4*>(wp); p.b = reinterpret_cast<const float4*>(bp);
    p.slots = reinterpret_cast<double2*>(slots);
    p.sync = sync; p.eps = (float)eps;
    p.lag = std::max(0, std::min(lag, 2)); p.sahead = std::max(0, sahead); p.pfd = std::max(0, std::min(pfd, 64));
    p.x_ef = x_ef ? 1 : 0; p.poll_ns = std::max(0, std::min(poll_ns, 1000000));
    bool ran = false;
    if (lead <= 3) ran = try_persistent<512, 16, 9, 19>(p, rows, N, slot_cap, st);
    else if (lead <= 5) ran = try_persistent<512, 16, 8, 20>(p, rows, N, slot_cap, st);
    else ran = try_persistent<512, 16, 6, 22>(p, rows, N, slot_cap, st);
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
              double* scratch, unsigned* sync, double* slots, int64_t slot_cap, int lead, int lag, int sahead,
              int pfd, int x_ef, int poll_ns, int64_t stream);

torch::Tensor layernorm_fwd(torch::Tensor x, int64_t N, c10::optional<torch::Tensor> weight,
                            c10::optional<torch::Tensor> bias, double eps, torch::Tensor sync, torch::Tensor slots,
                            int64_t lead, int64_t lag, int64_t sahead, int64_t pfd, int64_t x_ef,
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
              (int)lead, (int)lag, (int)sahead, (int)pfd, (int)x_ef, (int)poll_ns, stream);
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
            name="kgen_layernorm_xring_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
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
        N = 1
        for s in self.ln.normalized_shape:
            N *= int(s)
        if self._mod is None:
            self._mod = _build()
        sync = self._sync.get(x.device)
        if sync is None:
            sync = self._sync[x.device] = torch.zeros(4, dtype=torch.int32, device=x.device)
        rows = max(1, x.numel() // N)
        slots = self._slots.get(x.device)
        if slots is None or slots.numel() < 2 * rows * SLOTS_PER_ROW:
            slots = self._slots[x.device] = torch.zeros(2 * rows * SLOTS_PER_ROW, dtype=torch.float64,
                                                        device=x.device)
        return self._mod.layernorm_fwd(x, N, self.ln.weight, self.ln.bias, float(self.ln.eps), sync, slots,
                                       LEAD, LAG, SAHEAD, PFD, X_EF, POLL_NS,
                                       torch.cuda.current_stream(x.device).cuda_stream)
