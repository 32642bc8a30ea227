"""LayerNorm over the trailing dims, CUDA C++ for sm_90: cuda_persistent_l2ahead's layout (x in registers,
weight + bias head in shared memory, the next row prefetched into L2 by TMA) with a ONE-round-trip grid
barrier: each block's partial (sum x, sum x^2) is published as a 16-byte TAGGED SLOT that is its own arrival
flag, and the blocks poll the slots themselves, so the arrival counter, its release fence and the second L2
round trip for the partials leave the per-row critical path.

Target: 16 rows of N = 64*256*256 = 4M fp32.  HBM floor 570 MB (x read once 268, y written once 268,
weight+bias read once 33.5) = 0.190 ms at 3.0 TB/s: per row x_r in + y_r out = 33.5 MB = 11.2 us, plus
11.2 us once for weight/bias (overlapped with row 0).  l2ahead (THREADS=512 PF_PCT=50) is judged 0.2367 ms
(sweep 0.2381) = 14.8 us per row: 3.6 us per row above HBM time.  ncu: DRAM 71% busy (2.38 TB/s), 84% of
scheduler cycles without an eligible warp, i.e. the SMs wait and HBM idles ~29% of the kernel.

Where l2ahead's 3.6 us go: every row waits on a chain of dependent L2 round trips (RT; ~1 us each under
this load, the latency of an L2 hit behind 2.4 TB/s of streaming traffic):
  the last block's partial store, then red.release.gpu on the counter (the release waits for the store's
  ack: 1 RT; the red itself reaches L2: +0.5 RT)  ->  thread 0's ld.acquire poll returns the final count
  (+0.5-1 RT)  ->  __syncthreads  ->  warps 0..4 load the 132 partials (+1 RT)  ->  __syncthreads.
  ~3-3.5 RT = 3-4 us between the slowest block's reduction and the first y store of the row.
Here (BAR=1) the chain is: the slowest block's 16-byte slot store lands in L2 (0.5 RT) -> the next poll
of warps 0..4 (one slot per lane, ld.relaxed.gpu.v2.b64, reissued as soon as the last returns) brings
it back (0.5-1 RT) -> shuffle sum -> __syncthreads.  ~1-1.5 RT: saves ~2 us per row, 16 x 2 = ~32 us:
expected ~0.205 ms judged (0.20-0.22; the HBM floor is 0.190), if the poll traffic (132 SMs x 5 warps x
512 B per RT on 17 L2 lines, about what l2ahead's 132 pollers put on its one counter line) does not slow
the streams (POLL_NS > 0 backs off).
The slot format: (sum x, sum x^2), each fp64 rounded to a 36-bit mantissa whose low 16 bits hold the call's
tag (0x8000 | epoch mod 32768); a reader takes the slot only when BOTH 8-byte halves carry this call's tag
(each half is single-copy atomic, so a torn 16-byte read is never accepted).  The rounding is 2^-37
relative per block partial: var = B/N - mean^2 is off by ~1e-11 x (1 + mean^2/var), far inside 1e-5.
The epoch lives in device memory (sync[2]): every block reads it at launch; the last block out (departure
counter, atom.acq_rel) adds 1, so the next call's tag differs and the slots are never reset (no memset;
the slot buffer is zeroed once per device and grown with the rows; tag 0 never matches).  A slot can only
be mistaken for this call's if it was written exactly 32768 calls ago with the same row count pattern.
Sums are fixed-order (lane order, then warp order) whatever the arrival order: repeats are bitwise equal.
BAR=0 keeps l2ahead's counter barrier (same build) for an A/B in one sweep.

PF_REST=1: once the barrier is through, the rest of row r+1's slice (100 - PF_PCT %) is bulk-prefetched
into L2 as well, so HBM reads it during this row's normalize instead of after it (l2ahead issues those
loads only when the next row's register loads miss).  L2 then holds up to one full row only for the
length of the normalize (~1-2 us), not across the barrier (PF_PCT 100 lost in l2ahead: 0.2528 ms).

Per row r (as l2ahead otherwise): loads of the slice into registers (L2 hits where prefetched) -> thread
stats (exact local mean, squared deviations) -> PF_EARLY prefetch of PF_PCT % of row r+1 -> fp64 block
reduction -> warp 0 lane 0 publishes the slot -> bias-tail loads (L2, evict_last) -> warps 0..4 poll ->
__syncthreads -> PF_REST prefetch -> mean, rstd in fp64 -> normalize from registers and shared memory,
y evict-first.  Tunables are runtime arguments: one build covers the grid (THREADS picks one of two
compiled instantiations).
Fallback (N % 4 != 0, misaligned, slice too large for registers, no cooperative launch, many rows):
three plain kernels (chunk partials, per-row combine, elementwise normalize; x read twice).

ptxas (nvcc 13.0, -O3, sm_90a and sm_90 alike): THREADS 512 (x 16 float4): 125 registers, no spill;
THREADS 1024 (x 8): 64 registers (the cap), 12 bytes spill stores.  Static shared memory 640 B (512) /
1.1 KB (1024) + dynamic (7944 + 6144) x 16 = 225 KB (512) / (7944 + 6144) x 16 (1024).  One block per SM.
The CUDA file has no torch header (nvcc ~3 s here); the torch wrapper is CPP_SRC.  Checked off the device:
nvcc builds CUDA_SRC whole (host + device), g++ parses CPP_SRC against the torch headers, and a numpy
emulation of the slot rounding + fp64 combine at the full size gives the same normwise error as exact
slots (4.7e-8 at x1, 5.4e-8 at x100, 2.7e-7 with a +30 mean offset).
Measured: not yet on a GPU (benchmarks/ln3_gpu.sh).
"""
import hashlib

import torch
import torch.nn as nn

THREADS = 512         # 512: 16 float4 of x per thread (128 registers, no spill); 1024: 8 (64-register cap)
BAR = 1               # 1: tagged-slot barrier (one L2 round trip); 0: l2ahead's arrival counter + partial loads
PF_PCT = 75           # % of the next row's slice prefetched into L2 before the barrier
PF_REST = 1           # 1: the other (100 - PF_PCT) % prefetched into L2 once the barrier is through
PF_EARLY = 1          # 1: prefetch as soon as this row is in registers; 0: after the arrival
PF_BULK = 1           # 1: cp.async.bulk.prefetch.L2 (TMA); 0: one prefetch.global.L2 per 128-byte line
PF_LAST = 0           # 1: prefetch with evict_last, demoted to evict_normal once read
WB_TMA = 1            # 1: weight/bias copied into shared memory by TMA, overlapping row 0
POLL_NS = 0           # __nanosleep between polls (0: poll again as soon as the last poll returns)

KGEN_TUNABLE = {
    "THREADS": [512, 1024],
    "BAR": [0, 1],
    "PF_PCT": [0, 25, 50, 75, 100],
    "PF_REST": [0, 1],
    "PF_EARLY": [0, 1],
    "PF_BULK": [0, 1],
    "PF_LAST": [0, 1],
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

struct LNParams {
    const float4* x; float4* y; const float4* w; const float4* b;
    double2* partial;          // BAR=0: [rows][G] (sum x, sum x^2) of each block's slice, fp64
    double2* slots;            // BAR=1: [rows][G] tagged partials (persistent buffer, zeroed once)
    unsigned* sync;            // [0] arrivals (BAR=0), [1] departures, [2] call epoch (the tag's source)
    int64_t N4; int rows; int G; int S4; int SB4; float eps;
    int pf4;                   // float4 of the next row's slice prefetched into L2 before the barrier
    int pf_early, pf_bulk, pf_last, pf_rest, wb_tma, bar, poll_ns;
};

// issue the L2 prefetch of float4 [0, n4) of a slice
template <int NT>
__device__ __forceinline__ void prefetch_slice(const LNParams& p, const float4* src, int n4, int tid, bool keep) {
    if (n4 <= 0) return;
    if (p.pf_bulk) {
        constexpr int PER = PF_CHUNK / 16;
        const int nops = (n4 + PER - 1) / PER;
        for (int i = tid; i < nops; i += NT)
            bulk_prefetch_l2(src + (int64_t)i * PER, (uint32_t)min(PER, n4 - i * PER) * 16u, keep);
    } else {
        for (int i = tid * 8; i < n4; i += NT * 8) line_prefetch_l2(src + i, keep);
    }
}

// ---------------------------------------------------------------- persistent kernel
template <int NT, int MV>
__global__ void __launch_bounds__(NT, 1) ln_tagbar_kernel(const LNParams p) {
    constexpr int KT = MV - 6400 / NT;       // items whose bias is read from L2 (the rest: shared memory)
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
    // a line is demoted only where the slice starts on a 128-byte line (true for this problem's size)
    const bool demote = p.pf_last && pf4 > 0 && ((reinterpret_cast<uintptr_t>(p.x + c0) & 127) == 0)
                        && ((p.N4 * 16) % 128 == 0);
    // this call's tag: the epoch only changes after every block of this launch has left (see the end)
    const unsigned tag = 0x8000u | (ld_relaxed_u32(p.sync + 2) & 0x7FFFu);

    float4 v[MV];
    #pragma unroll
    for (int k = 0; k < MV; ++k) {           // row 0: the whole slice in flight at once
        const int j = tid + k * NT;
        v[k] = j < cnt4 ? ld_stream(p.x + c0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if (tma && tid == 0) {                   // weight slice + bias head into shared memory, asynchronously
        mbar_init(&wb_bar, 1);
        mbar_arrive_expect_tx(&wb_bar, (uint32_t)(cnt4 + sb4) * 16u);
        constexpr int PER = WB_CHUNK / 16;
        for (int i = 0; i < cnt4; i += PER) bulk_g2s(ws + i, p.w + c0 + i, (uint32_t)min(PER, cnt4 - i) * 16u, &wb_bar);
        for (int i = 0; i < sb4; i += PER) bulk_g2s(bs + i, p.b + c0 + i, (uint32_t)min(PER, sb4 - i) * 16u, &wb_bar);
    }
    const double Nd = 4.0 * (double)p.N4;
    for (int r = 0; r < p.rows; ++r) {
        const float4* xr = p.x + (int64_t)r * p.N4 + c0;
        if (r > 0) {
            #pragma unroll
            for (int k = 0; k < MV; ++k) {   // from L2 where the prefetch landed
                const int j = tid + k * NT;
                v[k] = j < cnt4 ? ld_stream(xr + j) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
        // this thread's exact mean, then its squared deviations (invalid items are zeros: skip them in q)
        float s4[4] = {0.f, 0.f, 0.f, 0.f};
        #pragma unroll
        for (int k = 0; k < MV; ++k) s4[k & 3] += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        const float s = (s4[0] + s4[1]) + (s4[2] + s4[3]);
        const float m = nv > 0 ? s / nf : 0.f;
        float q4[4] = {0.f, 0.f, 0.f, 0.f};
        #pragma unroll
        for (int k = 0; k < MV; ++k) {
            if (k < nv) {
                const float a = v[k].x - m, b = v[k].y - m, c = v[k].z - m, d = v[k].w - m;
                q4[k & 3] += (a * a + b * b) + (c * c + d * d);
            }
        }
        // fp64: A = sum x, B = sum x^2 = M2_t + m (2 s - n m)  (= M2_t + s^2/n, exact to O(eps^2) in m)
        double A = (double)s;
        double B = (double)((q4[0] + q4[1]) + (q4[2] + q4[3])) + (double)m * (2.0 * (double)s - (double)nf * (double)m);
        if (demote && r > 0)                 // this row's prefetched lines were read: back to evict_normal
            for (int l = tid; l * 8 < pf4; l += NT) demote_line(xr + l * 8);
        if (p.pf_early && r + 1 < p.rows) prefetch_slice<NT>(p, xr + p.N4, pf4, tid, p.pf_last);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            A += __shfl_xor_sync(0xffffffffu, A, o);
            B += __shfl_xor_sync(0xffffffffu, B, o);
        }
        if (lane == 0) red[warp] = make_double2(A, B);
        __syncthreads();
        if (warp == 0) {                     // block total -> publish
            double2 t = lane < NT / 32 ? red[lane] : make_double2(0.0, 0.0);
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                t.x += __shfl_xor_sync(0xffffffffu, t.x, o);
                t.y += __shfl_xor_sync(0xffffffffu, t.y, o);
            }
            if (lane == 0) {
                if (p.bar) {                 // the tagged slot is the arrival
                    st_slot(p.slots + (int64_t)r * p.G + g, tag_pack(t.x, tag), tag_pack(t.y, tag));
                } else {                     // partial, then arrive (release orders the two)
                    p.partial[(int64_t)r * p.G + g] = t;
                    red_release_add(p.sync, 1u);
                }
            }
        }
        if (!p.pf_early && r + 1 < p.rows) prefetch_slice<NT>(p, xr + p.N4, pf4, tid, p.pf_last);
        if (r == 0 && !tma) {                // plain fill, overlapping the barrier; each thread fills the
            #pragma unroll 4                 // positions it will read itself, so no block barrier is needed
            for (int k = 0; k < MV; ++k) {
                const int j = tid + k * NT;
                if (j < cnt4) ws[j] = p.w ? __ldg(p.w + c0 + j) : make_float4(1.f, 1.f, 1.f, 1.f);
                if (j < sb4) bs[j] = __ldg(p.b + c0 + j);     // sb4 > 0 only with a bias
            }
        }
        // bias of the last KT items from L2 (evict_last): issued before the wait, which hides their latency
        float4 bt[KT];
        #pragma unroll
        for (int k = MV - KT; k < MV; ++k) {
            const int j = tid + k * NT;
            bt[k - (MV - KT)] = p.b && j < cnt4 ? ld_keep(p.b + c0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        if (p.bar) {
            // warps 0..ceil(G/32)-1 poll one slot per lane until all G carry this call's tag: one L2 round
            // trip after the last block's store lands.  Fixed-order sums: every block gets the same bits.
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
        } else {
            if (tid == 0) {                  // wait for row r's G arrivals
                const unsigned target = (unsigned)(r + 1) * (unsigned)p.G;
                unsigned spins = 0;
                while (ld_acquire(p.sync) < target && ++spins < MAX_SPIN) {
                    if (p.poll_ns) __nanosleep((unsigned)p.poll_ns);
                }
            }
            __syncthreads();
            if (warp * 32 < p.G) {           // combine: one partial per lane, all loads in flight at once
                const int i = warp * 32 + lane;
                double2 q = i < p.G ? __ldcg(p.partial + (int64_t)r * p.G + i) : make_double2(0.0, 0.0);
                #pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    q.x += __shfl_xor_sync(0xffffffffu, q.x, o);
                    q.y += __shfl_xor_sync(0xffffffffu, q.y, o);
                }
                if (lane == 0) red2[warp] = q;
            }
        }
        __syncthreads();                     // red2 is rewritten only after the next row's first barrier
        // the rest of row r+1's slice (normal priority: read right after this normalize, never demoted):
        // its prefetch starts now, so HBM reads it during this normalize
        if (p.pf_rest && r + 1 < p.rows) prefetch_slice<NT>(p, xr + p.N4 + pf4, cnt4 - pf4, tid, false);
        if (r == 0 && tma) mbar_wait(&wb_bar, 0);
        float mean, rstd;
        {                                    // every thread: mean, rstd from the (G + 31) / 32 warp sums, fp64
            double a = 0.0, b = 0.0;
            for (int w = 0; w * 32 < p.G; ++w) { const double2 q = red2[w]; a += q.x; b += q.y; }
            const double dmean = a / Nd;
            const double var = fmax(b / Nd - dmean * dmean, 0.0);
            mean = (float)dmean;
            rstd = (float)(1.0 / sqrt(var + (double)p.eps));
        }
        float4* yr = p.y + (int64_t)r * p.N4 + c0;
        #pragma unroll
        for (int k = 0; k < MV; ++k) {
            const int j = tid + k * NT;
            if (j < cnt4) {
                const float4 w = ws[j];
                const float4 b = k >= MV - KT ? bt[k >= MV - KT ? k - (MV - KT) : 0]
                                              : (p.b ? bs[j] : make_float4(0.f, 0.f, 0.f, 0.f));
                float4 o;
                o.x = fmaf((v[k].x - mean) * rstd, w.x, b.x);
                o.y = fmaf((v[k].y - mean) * rstd, w.y, b.y);
                o.z = fmaf((v[k].z - mean) * rstd, w.z, b.z);
                o.w = fmaf((v[k].w - mean) * rstd, w.w, b.w);
                st_stream(yr + j, o);
            }
        }
    }
    // departure: past its last wait (every thread passed the last __syncthreads, so every read of the
    // epoch and every poll of this launch is done in this block); the last block out resets the counters
    // and moves the epoch, so the next call's slots carry a new tag and stale ones never match
    if (tid == 0) {
        const unsigned old = atom_add_acq_rel(p.sync + 1, 1u);
        if (old == (unsigned)p.G - 1) {
            atomicExch(p.sync, 0u);
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
template __global__ void ln_tagbar_kernel<1024, 8>(const LNParams);
template __global__ void ln_tagbar_kernel<512, 16>(const LNParams);
#endif

#ifndef KGEN_KERNELS_ONLY
static int64_t fb_chunks(int64_t N) { return (N + FB_THREADS * FB_ITEMS - 1) / (FB_THREADS * FB_ITEMS); }

// scratch (fp64 words) either path needs: persistent [rows][G <= 1024] double2, fallback partials + stats
int64_t ln_scratch_doubles(int64_t rows, int64_t N) { return rows * (2 * std::max<int64_t>(fb_chunks(N), 1024) + 1); }

template <int NT, int MV>
static bool try_persistent(LNParams p, int64_t rows, int64_t N, int pf_pct, int64_t slot_cap, cudaStream_t st) {
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
    auto kern = ln_tagbar_kernel<NT, MV>;
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
    p.pf4 = (int)((S4 * std::max(0, std::min(100, pf_pct)) + 99) / 100);
    if (p.slots == nullptr || rows * G > slot_cap) p.bar = 0;  // the slot buffer is too small: counter barrier
    void* args[] = {(void*)&p};
    KGEN_CUDA_CHECK(cudaLaunchCooperativeKernel((const void*)kern, dim3(G), dim3(NT), args, smem, st));
    KGEN_CUDA_CHECK(cudaGetLastError());
    return true;
}

// returns 1 when the persistent kernel ran, 0 for the fallback
int ln_launch(const float* xp, float* yp, const float* wp, const float* bp, int64_t rows, int64_t N, double eps,
              double* scratch, unsigned* sync, double* slots, int64_t slot_cap, int threads, int pf_pct,
              int pf_early, int pf_bulk, int pf_last, int pf_rest, int wb_tma, int bar, int poll_ns,
              int64_t stream) {
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    LNParams p;
    p.x = reinterpret_cast<const float4*>(xp); p.y = reinterpret_cast<float4*>(yp);
    p.w = reinterpret_cast<const float4*>(wp); p.b = reinterpret_cast<const float4*>(bp);
    p.partial = reinterpret_cast<double2*>(scratch); p.slots = reinterpret_cast<double2*>(slots);
    p.sync = sync; p.eps = (float)eps;
    p.pf_early = pf_early; p.pf_bulk = pf_bulk; p.pf_last = pf_last; p.pf_rest = pf_rest; p.wb_tma = wb_tma;
    p.bar = bar ? 1 : 0; p.poll_ns = std::max(0, std::min(poll_ns, 1000000));
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
              double* scratch, unsigned* sync, double* slots, int64_t slot_cap, int threads, int pf_pct,
              int pf_early, int pf_bulk, int pf_last, int pf_rest, int wb_tma, int bar, int poll_ns,
              int64_t stream);

torch::Tensor layernorm_fwd(torch::Tensor x, int64_t N, c10::optional<torch::Tensor> weight,
                            c10::optional<torch::Tensor> bias, double eps, torch::Tensor sync, torch::Tensor slots,
                            int64_t threads, int64_t pf_pct, int64_t pf_early, int64_t pf_bulk, int64_t pf_last,
                            int64_t pf_rest, int64_t wb_tma, int64_t bar, int64_t poll_ns, int64_t stream) {
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
              (int)threads, (int)pf_pct, (int)pf_early, (int)pf_bulk, (int)pf_last, (int)pf_rest, (int)wb_tma,
              (int)bar, (int)poll_ns, stream);
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
            name="kgen_layernorm_tagbar_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
            functions=["layernorm_fwd"], extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"], verbose=False)
    return _MODULES[key]


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)   # parameter holder (weight, bias, eps)
        self._mod = None
        self._sync = {}     # device -> 4 int32: arrivals, departures (0 between calls), epoch (the slots' tag)
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
                                       THREADS, PF_PCT, PF_EARLY, PF_BULK, PF_LAST, PF_REST, WB_TMA, BAR,
                                       POLL_NS, torch.cuda.current_stream(x.device).cuda_stream)
