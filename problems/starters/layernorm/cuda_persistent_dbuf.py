"""LayerNorm over the trailing dims, CUDA C++ for sm_90: a TRUE double buffer for x.  Row r+1's slice is copied
by TMA (cp.async.bulk global -> shared, completion on an mbarrier) into a shared-memory buffer while row r sits
in registers and is reduced, waited on (tagged-slot grid barrier, as cuda_persistent_tagbar) and normalized;
nothing about x depends on L2 keeping a prefetched row.  The price: the bias and the weight tail no longer fit
on chip and are re-read from L2 every row (evict_last, 21 MB resident).

Target: 16 rows of N = 64*256*256 = 4M fp32.  HBM floor 570 MB (x once 268, y once 268, weight+bias once 33.5)
= 0.190 ms at 3.0 TB/s; per row x_{r+1} in + y_r out = 33.5 MB = 11.2 us.  tagbar (PF_PCT 75, PF_REST 1) is
judged 0.232 ms = ~14.5 us per row: ~3.3 us per row with HBM idle.  Its rows start with 124 KB per SM loaded
from L2 into registers; those loads pass through L1, of which only ~28 KB is left beside a 225 KB shared-memory
carve-out, so at most ~28 KB per SM is in flight: 124 KB needs ~4-5 L2 round trips (~0.6-1 us each under the
streaming load) = ~3-4 us per row on the SM's critical path before the next row's prefetch can even be issued,
and the prefetched row must survive in L2 (PF_PCT 100 lost: L2 evicts).  TMA bypasses L1 and the register file:
the whole 124 KB slice is in flight at once and lands in shared memory.

On-chip budget per SM (registers 256 KB + shared 227 KB): x_r in registers (512 threads x 16 float4 = 128 KB,
64 of 128 registers), x_{r+1} in shared memory (S4 = 7944 float4 = 124.1 KB), weight items 0..11 of each
thread in shared memory (6144 float4 = 96 KB, filled once by TMA beside row 0): 220 KB dynamic + 640 B static.
Weight items 12..15 (32 KB per SM, 4.2 MB over the GPU) and the whole bias slice (124 KB per SM, 16.8 MB) come
from L2 each row: 21 MB resident with evict_last (tagbar keeps 3.4 MB of bias there; x streams evict_first,
y evict-first), 21 MB per row of L2 -> SM reads (~3 us of L2 bandwidth per row, beside ~50 MB/row of other L2
traffic).  Those loads are issued PD items ahead of their use in the normalize (the first PD before the
barrier wait, so it hides their latency), reusing the registers the stored items free.

Per row r (block g, one per SM, owns float4 columns [g*S4, g*S4 + cnt4) of every row):
  wait on the x mbarrier (phase r & 1)  ->  copy the slice shared -> registers (0.5 us: 124 KB at 128 B/clk)
  ->  __syncthreads  ->  thread 0: fence.proxy.async, TMA of row r+1's slice into the same buffer (16 KB
  requests, evict_first): from here HBM has the next row's 16.8 MB queued for the whole of this row
  ->  thread stats (exact local mean, squared deviations)  ->  fp64 block reduction  ->  tagged slot
  ->  first PD items' weight-tail/bias loads  ->  poll the 132 slots (warps 0..4)  ->  mean, rstd (fp64)
  ->  normalize from registers, weight from shared memory / L2, bias from L2, y stored evict-first.
SM path per row ~ 0.5 (copy) + 0.3 (stats) + 1-1.5 (barrier) + ~2-3 (normalize: 160 KB of L2 loads per SM
through ~28 KB of L1) = ~4-5 us, under the 11.2 us of HBM per row, and HBM always holds a full row of reads
(issued a row ahead) plus the y write-backs: expected ~16 x 11.5 + ~8 us (start: row 0 + weight head + bias
first touch, 51 MB) = ~0.195-0.205 ms IF L2 keeps the 21 MB of weight tail + bias; each 10% of it that L2
drops per row costs ~0.7 us per row of HBM (WB_PF=1 re-prefetches the slice into L2 at each row's start,
off the critical path: a no-op in L2 where it still hits).  If L2 keeps none of it: +21 MB per row, ~0.31 ms.

Memory ordering: the x buffer's readers (generic proxy) finish before the __syncthreads that precedes thread
0's fence.proxy.async + TMA (WAR across proxies); the TMA's bytes are visible to a thread once its mbarrier
wait on that phase returns (one phase per row: parity r & 1; the arrive.expect_tx for row r+1 is issued only
after every thread passed row r's wait).  Every TMA issued is waited for before the kernel ends.  The grid
barrier, slot format, call epoch (sync[2]) and departure counter (sync[1]) are tagbar's: slots never reset,
fixed-order sums (repeats bitwise equal), fp64 statistics (var = B/N - mean^2 from fp64 sums of per-thread
exact two-pass partials).
Tunables are runtime arguments (PD picks one of two compiled instantiations): one build covers the grid.
Fallback (N % 4 != 0, misaligned, slice too large for registers, no cooperative launch, many rows): three
plain kernels (chunk partials, per-row combine, elementwise normalize; x read twice).

ptxas (nvcc 13.0, -O3, sm_90a and sm_90): PD 3: 128 registers, no spill; PD 4: 128 registers, 24 bytes spill.
Static shared memory 640 B + dynamic (7944 + 6144) x 16 = 220 KB.  One block per SM.  Checked off the device:
nvcc builds CUDA_SRC whole (host + device), g++ parses CPP_SRC against the torch headers.
Measured: not yet on a GPU (benchmarks/ln4_gpu.sh).
"""
import hashlib

import torch
import torch.nn as nn

X_EF = 1              # 1: x rows copied with an L2 evict_first policy (read once); 0: normal
WB_LAST = 1           # 1: weight tail + bias loaded with L2 evict_last (re-read every row); 0: plain .nc loads
WB_PF = 0             # 1: each row re-prefetches the weight tail + bias slice into L2 (TMA bulk, no registers)
PD = 3                # weight-tail / bias L2 loads issued this many items ahead (3: no spill; 4: 24 B)
POLL_NS = 0           # __nanosleep between barrier polls (0: poll again as soon as the last poll returns)

KGEN_TUNABLE = {
    "X_EF": [0, 1],
    "WB_LAST": [0, 1],
    "WB_PF": [0, 1],
    "PD": [3, 4],
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
#define PF_CHUNK 8192               // bytes per bulk prefetch request
#define X_CHUNK 16384               // bytes per bulk copy (x rows, weight head)
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

// x rows by TMA (cp.async.bulk global -> shared, completion on an mbarrier), optional L2 policy
__device__ __forceinline__ void bulk_g2s_hint(void* dst, const void* src, uint32_t bytes, uint64_t* bar, bool ef) {
    if (ef)
        asm volatile("{\n\t.reg .b64 pol;\n\t"
                     "createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
                     "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                     " [%0], [%1], %2, [%3], pol;\n\t}"
                     :: "r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
    else
        bulk_g2s(dst, src, bytes, bar);
}
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// weight tail / bias: re-read every row from L2; evict_last keeps them there, or a plain .nc load
__device__ __forceinline__ float4 ld_wb(const float4* p, bool keep) {
    return keep ? ld_keep(p) : __ldg(p);
}

struct LNParams {
    const float4* x; float4* y; const float4* w; const float4* b;
    double2* slots;            // [rows][G] tagged partials (persistent buffer, zeroed once)
    unsigned* sync;            // [1] departures, [2] call epoch (the tag's source)
    int64_t N4; int rows; int G; int S4; float eps;
    int x_ef, wb_last, wb_pf, poll_ns;
};

// issue L2 bulk prefetches of float4 [0, n4) from src, spread over the block's threads
template <int NT>
__device__ __forceinline__ void prefetch_span(const float4* src, int n4, int tid, bool keep) {
    constexpr int PER = PF_CHUNK / 16;
    if (n4 <= 0) return;
    const int nops = (n4 + PER - 1) / PER;
    for (int i = tid; i < nops; i += NT)
        bulk_prefetch_l2(src + (int64_t)i * PER, (uint32_t)min(PER, n4 - i * PER) * 16u, keep);
}

// thread 0: this block's slice of row r into the shared-memory x buffer (the mbarrier's next phase)
__device__ __forceinline__ void issue_row(const LNParams& p, float4* xs, int64_t c0, int cnt4, int r, uint64_t* bar) {
    constexpr int PER = X_CHUNK / 16;
    mbar_arrive_expect_tx(bar, (uint32_t)cnt4 * 16u);
    const float4* src = p.x + (int64_t)r * p.N4 + c0;
    for (int i = 0; i < cnt4; i += PER)
        bulk_g2s_hint(xs + i, src + i, (uint32_t)min(PER, cnt4 - i) * 16u, bar, p.x_ef != 0);
}

// ---------------------------------------------------------------- persistent kernel
// Block g owns float4 columns [g*S4, g*S4 + cnt4) of every row.  Row r's slice sits in shared memory (TMA,
// issued when row r-1 began) -> copied into registers -> the buffer is handed straight to row r+1's TMA ->
// statistics, tagged-slot barrier, normalize from registers (weight head in shared memory, weight tail and
// bias from L2, loaded PD items ahead of their use).
template <int NT, int MV, int PD>          // PD: items whose weight tail / bias loads are in flight ahead of use
__global__ void __launch_bounds__(NT, 1) ln_dbuf_kernel(const LNParams p) {
    constexpr int WK = MV - 4;               // items k < WK: weight from shared memory; the last 4 from L2
    extern __shared__ __align__(128) float4 smem[];   // [S4] x buffer, then [(MV - 4) * NT] head of the weight slice
    __shared__ __align__(8) uint64_t x_bar;
    __shared__ __align__(8) uint64_t w_bar;
    __shared__ double2 red[NT / 32];
    __shared__ double2 red2[NT / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = blockIdx.x;
    const int64_t c0 = (int64_t)g * p.S4;
    const int cnt4 = (int)min((int64_t)p.S4, p.N4 - c0);    // > 0: the host makes G = ceil(N4 / S4)
    const int nv = tid < cnt4 ? min(MV, (cnt4 - tid + NT - 1) / NT) : 0;   // this thread's valid float4
    const float nf = 4.f * (float)nv;
    float4* xs = smem;
    float4* ws = smem + p.S4;
    const int sw4 = p.w ? min(cnt4, WK * NT) : 0;   // weight positions [0, sw4) in shared memory
    const bool keep = p.wb_last != 0;
    const float4* wg = p.w ? p.w + c0 : nullptr;
    const float4* bg = p.b ? p.b + c0 : nullptr;
    const unsigned tag = 0x8000u | (ld_relaxed_u32(p.sync + 2) & 0x7FFFu);

    if (tid == 0) {
        mbar_init(&x_bar, 1);
        mbar_init(&w_bar, 1);
        issue_row(p, xs, c0, cnt4, 0, &x_bar);                   // row 0 first: it gates everything
        if (sw4 > 0) {
            constexpr int PER = X_CHUNK / 16;
            mbar_arrive_expect_tx(&w_bar, (uint32_t)sw4 * 16u);
            for (int i = 0; i < sw4; i += PER) bulk_g2s(ws + i, wg + i, (uint32_t)min(PER, sw4 - i) * 16u, &w_bar);
        }
    }
    // the L2-resident part (weight tail, bias) fetched once now, beside row 0
    if (bg) prefetch_span<NT>(bg, cnt4, tid, keep);
    if (wg) prefetch_span<NT>(wg + sw4, cnt4 - sw4, tid, keep);
    __syncthreads();                         // the mbarrier inits are visible to every waiter

    const double Nd = 4.0 * (double)p.N4;
    for (int r = 0; r < p.rows; ++r) {
        mbar_wait(&x_bar, (uint32_t)(r & 1));
        float4 v[MV];
        #pragma unroll
        for (int k = 0; k < MV; ++k) {
            const int j = tid + k * NT;
            v[k] = j < cnt4 ? xs[j] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        __syncthreads();                     // every thread has its items: the buffer takes row r+1 now
        if (tid == 0 && r + 1 < p.rows) {
            fence_proxy_async_smem();        // generic reads of the buffer before the async proxy's writes
            issue_row(p, xs, c0, cnt4, r + 1, &x_bar);
        }
        if (p.wb_pf && r > 0) {              // re-fetch whatever L2 dropped of the weight tail / bias
            if (bg) prefetch_span<NT>(bg, cnt4, tid, keep);
            if (wg) prefetch_span<NT>(wg + sw4, cnt4 - sw4, tid, keep);
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
        // fp64: A = sum x, B = sum x^2 = M2_t + m (2 s - n m)
        double A = (double)s;
        double B = (double)((q4[0] + q4[1]) + (q4[2] + q4[3])) + (double)m * (2.0 * (double)s - (double)nf * (double)m);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            A += __shfl_xor_sync(0xffffffffu, A, o);
            B += __shfl_xor_sync(0xffffffffu, B, o);
        }
        if (lane == 0) red[warp] = make_double2(A, B);
        __syncthreads();
        if (warp == 0) {                     // block total -> the tagged slot is the arrival
            double2 t = lane < NT / 32 ? red[lane] : make_double2(0.0, 0.0);
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                t.x += __shfl_xor_sync(0xffffffffu, t.x, o);
                t.y += __shfl_xor_sync(0xffffffffu, t.y, o);
            }
            if (lane == 0) st_slot(p.slots + (int64_t)r * p.G + g, tag_pack(t.x, tag), tag_pack(t.y, tag));
        }
        // the first PD items' weight tail / bias from L2, issued before the wait, which hides their latency
        float4 bq[MV], wq[MV];             // each item's registers live from its load to its use only
        #pragma unroll
        for (int k = 0; k < PD && k < MV; ++k) {
            const int j = tid + k * NT;
            bq[k] = bg && j < cnt4 ? ld_wb(bg + j, keep) : make_float4(0.f, 0.f, 0.f, 0.f);
            if (k >= WK) wq[k] = wg && j < cnt4 && j >= sw4 ? ld_wb(wg + j, keep) : make_float4(1.f, 1.f, 1.f, 1.f);
        }
        // warps 0..ceil(G/32)-1 poll one slot per lane until all G carry this call's tag (tagbar's barrier)
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
        __syncthreads();                     // red2 is rewritten only after the next row's first barrier
        if (r == 0 && sw4 > 0) mbar_wait(&w_bar, 0);
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
            if (k + PD < MV) {               // item k+PD's L2 loads go out before item k is stored
                const int jn = tid + (k + PD) * NT;
                bq[k + PD] = bg && jn < cnt4 ? ld_wb(bg + jn, keep) : make_float4(0.f, 0.f, 0.f, 0.f);
                if (k + PD >= WK)
                    wq[k + PD] = wg && jn < cnt4 && jn >= sw4 ? ld_wb(wg + jn, keep) : make_float4(1.f, 1.f, 1.f, 1.f);
            }
            const int j = tid + k * NT;
            if (j < cnt4) {
                const float4 w = k < WK ? (j < sw4 ? ws[j] : make_float4(1.f, 1.f, 1.f, 1.f)) : wq[k];
                const float4 b = bq[k];
                float4 o;
                o.x = fmaf((v[k].x - mean) * rstd, w.x, b.x);
                o.y = fmaf((v[k].y - mean) * rstd, w.y, b.y);
                o.z = fmaf((v[k].z - mean) * rstd, w.z, b.z);
                o.w = fmaf((v[k].w - mean) * rstd, w.w, b.w);
                st_stream(yr + j, o);
            }
        }
    }
    // departure: the last block out moves the epoch, so the next call's slots carry a new tag
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


#ifdef KGEN_KERNELS_ONLY   // the host code instantiates it; without it, ptxas -v must still see it
template __global__ void ln_dbuf_kernel<512, 16, 3>(const LNParams);
template __global__ void ln_dbuf_kernel<512, 16, 4>(const LNParams);
#endif

#ifndef KGEN_KERNELS_ONLY
static int64_t fb_chunks(int64_t N) { return (N + FB_THREADS * FB_ITEMS - 1) / (FB_THREADS * FB_ITEMS); }

// scratch (fp64 words) the fallback needs: partials + stats
int64_t ln_scratch_doubles(int64_t rows, int64_t N) { return rows * (2 * fb_chunks(N) + 1); }

template <int NT, int MV, int PD>
static bool try_persistent(LNParams p, int64_t rows, int64_t N, int64_t slot_cap, cudaStream_t st) {
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
    if (rows * G > slot_cap || G > NT) return false;
    // shared memory: the x buffer (one slice), then items [0, MV - 4) of the weight slice
    const int64_t room4 = ((int64_t)optin - SMEM_RESERVE) / 16 - S4;
    if (room4 < 0) return false;
    const int64_t SW4 = p.w ? std::min<int64_t>(S4, (int64_t)(MV - 4) * NT) : 0;   // the kernel's WK items
    if (SW4 > room4) return false;
    const size_t smem = (size_t)(S4 + SW4) * 16;
    auto kern = ln_dbuf_kernel<NT, MV, PD>;
    if (cudaFuncSetAttribute((const void*)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)
            != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NT, smem) != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    if ((int64_t)per_sm * sms < G) return false;              // co-residency is what the spin barrier needs
    p.N4 = N4; p.rows = (int)rows; p.G = G; p.S4 = (int)S4;
    void* args[] = {(void*)&p};
    KGEN_CUDA_CHECK(cudaLaunchCooperativeKernel((const void*)kern, dim3(G), dim3(NT), args, smem, st));
    KGEN_CUDA_CHECK(cudaGetLastError());
    return true;
}

// returns 1 when the persistent kernel ran, 0 for the fallback
int ln_launch(const float* xp, float* yp, const float* wp, const float* bp, int64_t rows, int64_t N, double eps,
              double* scratch, unsigned* sync, double* slots, int64_t slot_cap, int x_ef, int wb_last,
              int wb_pf, int poll_ns, int pd, int64_t stream) {
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    LNParams p;
    p.x = reinterpret_cast<const float4*>(xp); p.y = reinterpret_cast<float4*>(yp);
    p.w = reinterpret_cast<const float4*>(wp); p.b = reinterpret_cast<const float4*>(bp);
    p.slots = reinterpret_cast<double2*>(slots);
    p.sync = sync; p.eps = (float)eps;
    p.x_ef = x_ef; p.wb_last = wb_last; p.wb_pf = wb_pf; p.poll_ns = std::max(0, std::min(poll_ns, 1000000));
    if (slots != nullptr && (pd == 4 ? try_persistent<512, 16, 4>(p, rows, N, slot_cap, st)
                                     : try_persistent<512, 16, 3>(p, rows, N, slot_cap, st))) return 1;
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
              double* scratch, unsigned* sync, double* slots, int64_t slot_cap, int x_ef, int wb_last,
              int wb_pf, int poll_ns, int pd, int64_t stream);

torch::Tensor layernorm_fwd(torch::Tensor x, int64_t N, c10::optional<torch::Tensor> weight,
                            c10::optional<torch::Tensor> bias, double eps, torch::Tensor sync, torch::Tensor slots,
                            int64_t x_ef, int64_t wb_last, int64_t wb_pf, int64_t poll_ns, int64_t pd,
                            int64_t stream) {
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
              (int)x_ef, (int)wb_last, (int)wb_pf, (int)poll_ns, (int)pd, stream);
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
            name="kgen_layernorm_dbuf_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
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
                                       X_EF, WB_LAST, WB_PF, POLL_NS, PD,
                                       torch.cuda.current_stream(x.device).cuda_stream)
