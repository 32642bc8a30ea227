"""LayerNorm over the trailing dims, CUDA C++ for sm_90: cuda_persistent_xtma with TWO co-resident blocks per SM
(BLOCKS_PER_SM = 2: grid 2 x 132 = 264 blocks of 256 threads, each owning half of what an xtma block owns).
Everything else is xtma's, unchanged: x through shared memory by TMA chunk by chunk, weight in registers, bias
head in shared memory + tail in registers, one-pass shifted sums with an fp64 fixed-order combine, tagged-slot
grid barrier, empty/full mbarrier protocol, evict-first stores, L2 prefetch of the next row.  xtma's docstring
(kept below) is the design; this header says only what the second block changes.

Why (issue 25): xtma (judged 0.230 ms, floor 0.190) moves the minimum bytes (~549 MB, Nsight Compute) but at
2.45 TB/s where a copy reaches 3.0: 512 threads, 128 registers, ONE block per SM (220 KB of shared memory),
achieved occupancy 25%, no eligible warp 77% of cycles.  Per SM one block means one serial chain per row:
stats wait on the last chunk -> block reduce -> slot -> poll -> normalize -> refill; while a block sits in its
barrier poll, its SM issues no loads and the chunk refills of the next row wait for its normalize.  With two
blocks per SM (same registers per SM: 2 x 256 x 128 = 64K; same shared memory: 2 x 111 KB), each block has
half the chunks (16 chunks of 4 KB instead of 16 of 8 KB), the two blocks' chains are independent (the other
block can be normalizing / refilling while one polls), the TMA stream has twice the independent mbarrier
queues per SM, and the barrier has 264 arrivals (one more 32-slot group to poll: lane l of warp w polls slots
32w + l and 32w + l + 256).  If ln_ceiling.py's c5 (xtma's stream with no barrier) is near c1, the one-block
pattern itself is the limit and this is the fix; if c5 is near a2, the barrier is, and this helps only by
overlapping the two blocks' waits.  Cost: the barrier's slot count doubles (264 x 16 B per row: nothing), and
each block's poll covers 9 groups with 8 warps (lanes 0..7 of warp 0 poll a second slot).
Per block (BLOCKS_PER_SM = 2, N4 = 1,048,576 float4 per row): S4 = ceil(N4 / 264) = 3972 float4 (62.1 KB
of x); 256 threads x MV 16 = 4096 >= S4, so each thread still holds 16 float4 of weight (64 registers) and the
bias of items 12..15 (16 registers) as in xtma; bias head 12 x 256 = 3072 float4 (48 KB) in shared memory.
Dynamic shared memory (3972 + 3072) x 16 = 112,704 B + 640 B static + 1 KB reserved per block = 114,368 B;
two blocks 228,736 B <= 233,472 B (228 KB per SM).  The host asks for the max-shared carveout and checks the
occupancy query (>= 2 per SM) before the cooperative launch, else it runs xtma's one-block configuration.
ptxas (nvcc 13.0, -O3, sm_90a): ln_xtma_kernel<256,16,12,2> 128 registers (the cap of 256 threads x 2 blocks),
0 bytes stack, 0 spills; <512,16,12,1> (BLOCKS_PER_SM = 1, xtma's kernel) 128 registers, 0 spills.  A poll
holding both slots' values apart (double2 x 2) spilled 8 bytes; the lane now adds them as they arrive
(0 + a + b == 0 + b + a exactly in fp64, so every block still gets the same bits).
Expected: if the second block hides the per-row serial chain, HBM near a copy's 2.9-3.0 TB/s: ~0.20-0.21 ms
judged (549 MB / 2.9 TB/s = 189 us + row 0's start and the last row's tail).  Not measured yet
(benchmarks/ln8_gpu.sh sweeps BLOCKS_PER_SM=2,1 on one build and judges the faster).
Checked off the device: nvcc builds CUDA_SRC whole, ruff clean, `kgen eval layernorm` on a CPU box compiles
it (not_run).

---- cuda_persistent_xtma's docstring (the design this file keeps) ----
LayerNorm over the trailing dims, CUDA C++ for sm_90: x goes through SHARED MEMORY by TMA, one row buffer
refilled chunk by chunk while the previous row is normalized out of it; the weight lives in REGISTERS and the
bias in shared memory + registers, so weight and bias are read from HBM once per call and never from L2 again.

Target: 16 rows of N = 64*256*256 = 4M fp32.  HBM floor 570 MB (x once 268, y once 268, weight+bias once 33.5)
= 0.190 ms at 3.0 TB/s; per row x_{r+1} in + y_r out = 33.5 MB = 11.2 us.

Why tagbar (judged 0.231-0.233, kernel 230 us = 14.4 us per row: 3.2 us per row above HBM time) stops there:
its slice of each row (124 KB per SM) is loaded into registers through L1, and with a 228 KB shared-memory
carve-out only ~28 KB of L1 is left to land loads in: 124 KB takes ~4-5 L2 round trips (~0.6-0.8 us each
under the streaming load) = ~3 us per row in which the SMs pull a row that is already in L2 and HBM has
nothing queued (the next row's L2 prefetch is issued only when this row is in registers: L2 cannot hold two
rows; l2ahead's PF_PCT 100 lost to 50, lag1's re-read missed).  If L2 write-back is lazy (dirty y lines leave
when new lines need room: assumed), no fills also means no write-backs: that window, ~3 us of idle HBM per row,
matches the gap (an inference from the sweeps and ncu's DRAM 71% / no eligible warp 84%, not profiled per
phase).  The grid barrier is not the main cost any more (tagged slots vs counter: 0.25 us
per row); 1024 threads (8 float4 each, spills) lost.
Why dbuf (0.286 judged, 280 us kernel) lost: it put x_{r+1} in shared memory by TMA (the right idea: TMA
lands bytes without L1, a whole slice in flight) but paid with the weight tail + the whole bias (160 KB per
SM, 21 MB GPU-wide) re-read from L2 every row through the same ~28 KB of L1.  L2 does not keep 21 MB beside
33.6 MB/row of streaming (evict_last did not protect it: WB_LAST=0 was no worse, 0.288), so most of it came
from HBM again: 570 + 15 x 21 = 885 MB = 0.295 ms at 3.0 TB/s, and the L1-limited loads put HBM latency on
each row's path (X_EF=0, x filling L2 at normal priority, evicted even more of it: 0.357).

This kernel keeps both wins and neither loss.  Per SM (block g, one per SM, G = 132, owns float4 columns
[g*S4, g*S4 + cnt4) of every row, S4 = 7944):
  registers: the weight slice, 16 float4 per thread (64 registers) + the bias of items 12..15 (16 registers),
             loaded once (512 threads x 16 float4 = 8192 >= S4);
  shared:    ONE x row buffer (S4 float4 = 124.1 KB) + the bias of items 0..11 (6144 float4 = 96 KB), 220 KB.
Thread tid's item k is column j = tid + k*512, so "chunk k" (item k of every thread) is 8 KB contiguous both
in shared memory and in global memory: one TMA bulk copy per chunk, one full[k] and one empty[k] mbarrier.
Per row r:
  stats:      for k: wait full[k] (parity r & 1), read item k from shared memory, one-pass SHIFTED sums in fp32
              (pivot = the mean of the thread's first float4: sum (x - K), sum (x - K)^2, 2 accumulators);
              PF_SLIDE: as chunk k of x_r lands, chunk k of x_{r+1} (k < PF chunks) is bulk-prefetched into L2,
              so HBM gets the next row's first chunks while the last chunks of this one still land (no gap)
  -> per-thread (sum x, sum x^2) in fp64 (A = nK + s, B = (q - s^2/n) + A^2/n), fp64 block reduction, one
     tagged slot (cuda_persistent_tagbar's one-round-trip grid barrier, unchanged), poll (warps 0..4)
  -> PF_REST: chunks >= PF of x_{r+1} bulk-prefetched into L2 (HBM reads the whole next row from here on)
  -> normalize: for k: y = (x - mean) * rstd * w + b from shared memory + registers, stored evict-first;
     each warp arrives on empty[k] once its lanes read item k; thread 0, LAG items behind, waits on empty[k]
     and issues the TMA of x_{r+1}'s chunk k into the freed chunk (evict_first: read once).
So the next row's bytes are requested (L2 prefetch, then TMA) while this row is reduced, waited on and
normalized, and they land without L1 and without a separate load phase: the per-row SM path (stats as
chunks land ~0.3 us after the last, reduce 0.2, barrier ~1-1.5, normalize 220 KB of shared reads + 124 KB of
stores ~1-1.5 us) is ~3-3.5 us, under the 11.2 us of HBM, and HBM always has the next row queued.
L2 holds at most ~one row of x (PF_PCT of the next row + chunks in flight: what tagbar already relied on) +
y's evict-first dirty lines; nothing is re-read from L2 (tagbar re-read 3.4 MB of bias tail per row).
Statistics: the buffer is read twice per row from shared memory (stats, normalize) instead of x staying in
registers, so the stats are one pass (STATS=0); the pivot keeps them exact to fp32 rounding for any offset
(benchmarks/ln5_emulate.py emulates this exact fp32 order on full-size rows: normwise error of y 4.0e-8 at
x1, 5.9e-8 at x100, 4.1e-8 with random weight/bias, identical to the two-pass's; with +30 / +1000 offsets
9.1e-7 / 2.9e-5 for both, which is the fp32 normalize's (x - (float)mean), as in tagbar and torch's fp32).
STATS=1: exact two-pass (a second read of the buffer after the last chunk lands, ~0.5 us per row), an A/B.
Memory ordering: every read of chunk k by a warp precedes its lane 0's mbarrier.arrive (release, after
__syncwarp); thread 0's try_wait on empty[k] acquires them, then fence.proxy.async orders them before the
async proxy's TMA write (the CUTLASS consumer_release / producer_acquire pattern).  One phase per row on each
full[k] and empty[k] (parity r & 1); the producer never runs more than one phase ahead (it waits for row r's
reads before issuing row r+1's copy, which row r+1's readers wait for).  Every TMA issued is waited for by
the next row's stats; the last row issues none.  Grid barrier, slot format, call epoch (sync[2]) and
departure counter (sync[1]) are tagbar's (no memset, slots never reset, fixed-order sums: repeats are
bitwise equal; MAX_SPIN bounds every poll, so broken co-residency gives wrong output, never a hang; the
grid is sized from the occupancy query and the launch is cooperative).
Expected: HBM-bound at ~11.2 us per row IF HBM reaches 3.0 TB/s on the mixed stream: 570 MB / 3.0 = 190 us,
plus what is not overlapped: row 0's start (first chunk latency, ~1 us), the last row's barrier and
normalize with no next row behind them (~2 us), ~0.3-0.5 us per row where the last chunk's L2 -> SM leg
meets no queued HBM work (x 16) = ~200 us kernel, ~0.20-0.21 ms judged.  If L2 drops half of the prefetched
chunks (as in l2ahead at PF_PCT 100), PF_PCT 25-50 with PF_REST 0 still leaves the TMA itself fetching
from HBM a row ahead: ~0.21-0.22.  Not measured yet (benchmarks/ln5_gpu.sh).
Tunables are runtime arguments (one build covers the grid).
Fallback (N % 4 != 0, misaligned, slice too large for registers, no cooperative launch, many rows): three
plain kernels (chunk partials, per-row combine, elementwise normalize; x read twice).

ptxas (nvcc 13.0, -O3, -arch=sm_90a and sm_90 alike): 128 registers (the cap of 512 threads x 1 block), 0 bytes
stack, 0 spill stores/loads (two stats accumulators, not four: four spilled 4 bytes; fp64 divisions replaced by
reciprocals computed once: their slow-path call took an 8-byte stack frame).  Shared memory: static 896 B
(33 mbarriers, two reduction arrays) + dynamic (7944 + 6144) x 16 = 225,408 B = 220.1 KB (limit 227 KB); one
block per SM.  Checked off the device: nvcc builds CUDA_SRC whole (host + device), g++ parses CPP_SRC against
the torch headers, `kgen eval` on a CPU box compiles it (not_run), and benchmarks/ln5_emulate.py checks the
work split (every column once, chunks contiguous, bias head/tail, prefetch ranges, every chunk's TMA issued
once per row for LAG 0-20), the mbarrier protocol (random interleavings of 16 warps + the producer: no chunk
overwritten before all warps read it, no parity wait two phases behind, no deadlock) and the numerics.
Measured: not yet on a GPU (benchmarks/ln5_gpu.sh).
"""
import hashlib

import torch
import torch.nn as nn

PF_PCT = 50           # % of the next row's chunks bulk-prefetched into L2 before the barrier (sliding / after)
PF_SLIDE = 0          # H100 sweep best (0.2307 vs 0.2475 ms); 1: chunk k of x_{r+1} prefetched as chunk k of x_r
                      # lands, 0: once the whole row landed
PF_REST = 1           # 1: the other chunks prefetched into L2 once the barrier is through
LAG = 1               # thread 0 issues chunk k's TMA after normalizing item k + LAG (0: right after item k)
X_EF = 1              # 1: x copied by TMA with an L2 evict_first policy (read once); 0: normal priority
STATS = 0             # 0: one-pass shifted sums (one read of the buffer); 1: exact two-pass (a second read)
POLL_NS = 0           # __nanosleep between barrier polls (0: poll again as soon as the last poll returns)
BLOCKS_PER_SM = 2     # 2: 2 x SMs blocks of 256 threads, half a slice each; 1: xtma (512 threads, one per SM)

KGEN_TUNABLE = {
    "PF_PCT": [0, 25, 50, 75, 100],
    "PF_SLIDE": [0, 1],
    "PF_REST": [0, 1],
    "LAG": [0, 1, 2, 4],
    "X_EF": [0, 1],
    "STATS": [0, 1],
    "POLL_NS": [0, 64],
    "BLOCKS_PER_SM": [1, 2],
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
    int pfc;                   // chunks of the next row prefetched into L2 before the barrier
    int pf_slide, pf_rest, lag, x_ef, two_pass, poll_ns;
};

// ---------------------------------------------------------------- persistent kernel
// NT threads, MV float4 items per thread (NT * MV >= S4), BH items of the bias in shared memory (the rest,
// MV - BH, in registers).  Chunk k = item k of every thread = float4 [k*NT, (k+1)*NT) of the slice.
template <int NT, int MV, int BH, int MINB>
__global__ void __launch_bounds__(NT, MINB) ln_xtma_kernel(const LNParams p) {
    constexpr int KT = MV - BH;
    constexpr int PG = NT >= 512 ? 1 : 2;               // slots polled per lane: G <= PG * NT (host-checked)
    extern __shared__ __align__(128) float4 smem[];   // [S4] x row buffer, then [SB4] head of the bias slice
    __shared__ __align__(8) uint64_t full[MV];         // chunk k of the row landed (TMA complete_tx)
    __shared__ __align__(8) uint64_t empty[MV];        // chunk k read by all NT/32 warps (normalize)
    __shared__ __align__(8) uint64_t wb_bar;           // bias head landed
    __shared__ double2 red[NT / 32];
    __shared__ double2 red2[NT / 32];                  // one fixed-order sum per warp's PG x 32 slots
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = blockIdx.x;
    const int64_t c0 = (int64_t)g * p.S4;
    const int cnt4 = (int)min((int64_t)p.S4, p.N4 - c0);    // > 0: the host makes G = ceil(N4 / S4)
    const int nch = (cnt4 + NT - 1) / NT;                    // chunks of this slice (<= MV)
    const int sb4 = min(p.SB4, cnt4);
    const int nv = tid < cnt4 ? min(MV, (cnt4 - tid + NT - 1) / NT) : 0;   // this thread's valid float4
    const float nf = 4.f * (float)nv;
    float4* xs = smem;
    float4* bs = smem + p.S4;
    const bool has_b = p.b != nullptr;
    const int pfc = min(p.pfc, nch);
    // this call's tag: the epoch only changes after every block of this launch has left (see the end)
    const unsigned tag = 0x8000u | (ld_relaxed_u32(p.sync + 2) & 0x7FFFu);
    auto chunk_bytes = [&](int k) -> uint32_t { return (uint32_t)min(NT, cnt4 - k * NT) * 16u; };

    if (tid == 0) {
        #pragma unroll
        for (int k = 0; k < MV; ++k) { mbar_init(&full[k], 1); mbar_init(&empty[k], NT / 32); }
        mbar_init(&wb_bar, 1);
        mbar_init_fence();
        for (int k = 0; k < nch; ++k) {      // row 0, every chunk in flight at once
            mbar_arrive_expect_tx(&full[k], chunk_bytes(k));
            bulk_g2s_x(xs + k * NT, p.x + c0 + k * NT, chunk_bytes(k), &full[k], p.x_ef != 0);
        }
        if (sb4 > 0) {                       // bias head, behind row 0 (needed only by its normalize)
            mbar_arrive_expect_tx(&wb_bar, (uint32_t)sb4 * 16u);
            constexpr int PER = WB_CHUNK / 16;
            for (int i = 0; i < sb4; i += PER)
                bulk_g2s(bs + i, p.b + c0 + i, (uint32_t)min(PER, sb4 - i) * 16u, &wb_bar);
        }
    }
    // weight slice and bias tail into registers, once (plain loads beside the TMA; first used by row 0's normalize)
    float4 wr[MV], bt[KT];
    #pragma unroll
    for (int k = 0; k < MV; ++k) {
        const int j = tid + k * NT;
        wr[k] = j < cnt4 ? (p.w ? __ldg(p.w + c0 + j) : make_float4(1.f, 1.f, 1.f, 1.f))
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    #pragma unroll
    for (int k = 0; k < KT; ++k) {
        const int j = tid + (BH + k) * NT;
        bt[k] = has_b && j < cnt4 ? __ldg(p.b + c0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __syncthreads();                         // the mbarrier inits are visible to every waiting thread

    const double inv_N = 1.0 / (4.0 * (double)p.N4);
    const double inv_n = nv > 0 ? 1.0 / (double)nf : 0.0;   // fp64 reciprocals: 1 ulp, once per call
    for (int r = 0; r < p.rows; ++r) {
        const uint32_t par = (uint32_t)r & 1u;
        const bool more = r + 1 < p.rows;
        const float4* xn = p.x + (int64_t)(r + 1) * p.N4 + c0;   // next row's slice (used only when more)
        // ---- statistics of row r, chunk by chunk as the TMA lands them
        float K = 0.f;
        float s2[2] = {0.f, 0.f}, q2[2] = {0.f, 0.f};
        #pragma unroll
        for (int k = 0; k < MV; ++k) {
            if (k < nch) {                   // block-uniform
                mbar_wait(&full[k], par);
                // sliding prefetch: x_{r+1}'s chunk k into L2 as soon as x_r's chunk k is on chip
                if (p.pf_slide && more && k < pfc && tid == (k % (NT / 32)) * 32)
                    bulk_prefetch_l2(xn + k * NT, chunk_bytes(k));
                const int j = tid + k * NT;
                if (j < cnt4) {
                    const float4 v = xs[j];
                    if (k == 0 && !p.two_pass) K = 0.25f * ((v.x + v.y) + (v.z + v.w));   // the thread's pivot
                    const float a = v.x - K, b = v.y - K, c = v.z - K, d = v.w - K;
                    s2[k & 1] += (a + b) + (c + d);
                    q2[k & 1] = fmaf(a, a, fmaf(b, b, fmaf(c, c, fmaf(d, d, q2[k & 1]))));
                }
            }
        }
        double A, B;
        {
            const float s = s2[0] + s2[1];
            if (!p.two_pass) {
                // one pass about the pivot K: sum x = nK + s, M2 = q - s^2/n, sum x^2 = M2 + (sum x)^2/n (fp64)
                const float q = q2[0] + q2[1];
                A = nv > 0 ? (double)nf * (double)K + (double)s : 0.0;
                const double m2 = nv > 0 ? fmax((double)q - (double)s * (double)s * inv_n, 0.0) : 0.0;
                B = nv > 0 ? m2 + A * A * inv_n : 0.0;
            } else {
                // exact two-pass: the local mean, then squared deviations (a second read of the buffer)
                const float m = nv > 0 ? s / nf : 0.f;
                float t2[2] = {0.f, 0.f};
                #pragma unroll
                for (int k = 0; k < MV; ++k) {
                    const int j = tid + k * NT;
                    if (k < nv) {
                        const float4 v = xs[j];
                        const float a = v.x - m, b = v.y - m, c = v.z - m, d = v.w - m;
                        t2[k & 1] += (a * a + b * b) + (c * c + d * d);
                    }
                }
                A = (double)s;
                B = (double)(t2[0] + t2[1]) + (double)m * (2.0 * (double)s - (double)nf * (double)m);
            }
        }
        // the whole row landed (for this thread's chunks): prefetch the next row's first chunks into L2
        if (!p.pf_slide && more)
            for (int k = tid; k < pfc; k += NT) bulk_prefetch_l2(xn + k * NT, chunk_bytes(k));
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            A += __shfl_xor_sync(0xffffffffu, A, o);
            B += __shfl_xor_sync(0xffffffffu, B, o);
        }
        if (lane == 0) red[warp] = make_double2(A, B);
        __syncthreads();
        if (warp == 0) {                     // block total -> publish: the tagged slot is the arrival
            double2 t = lane < NT / 32 ? red[lane] : make_double2(0.0, 0.0);
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                t.x += __shfl_xor_sync(0xffffffffu, t.x, o);
                t.y += __shfl_xor_sync(0xffffffffu, t.y, o);
            }
            if (lane == 0) st_slot(p.slots + (int64_t)r * p.G + g, tag_pack(t.x, tag), tag_pack(t.y, tag));
        }
        // warps 0..ceil(G/32)-1 poll one slot per lane until all G carry this call's tag: one L2 round trip
        // after the last block's store lands.  Fixed-order sums: every block gets the same bits.
        // (two blocks per SM at 256 threads: 8 warps for up to 9 x 32 slots, so lane l of warp w polls slots
        // i = 32w + l and i + NT, added as they arrive: 0 + a + b == 0 + b + a exactly, so every block still
        // gets the same bits; one double2 per lane, not two: two spilled)
        if (warp * 32 < p.G) {
            const double2* sp = p.slots + (int64_t)r * p.G + warp * 32 + lane;   // slot i; slot i + NT is sp + NT
            double2 q = make_double2(0.0, 0.0);
            bool ok[PG];
            #pragma unroll
            for (int m = 0; m < PG; ++m) ok[m] = warp * 32 + lane + m * NT >= p.G;
            unsigned spins = 0;
            while (true) {
                bool all = true;
                #pragma unroll
                for (int m = 0; m < PG; ++m) {
                    if (!ok[m]) {
                        const ulonglong2 u = ld_slot(sp + m * NT);
                        if ((((unsigned)u.x ^ tag) & 0xFFFFu) == 0 && (((unsigned)u.y ^ tag) & 0xFFFFu) == 0) {
                            q.x += tag_value(u.x);
                            q.y += tag_value(u.y);
                            ok[m] = true;
                        }
                    }
                    all = all && ok[m];
                }
                if (__all_sync(0xffffffffu, all) || ++spins >= MAX_SPIN) break;
                if (p.poll_ns) __nanosleep((unsigned)p.poll_ns);
            }
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                q.x += __shfl_xor_sync(0xffffffffu, q.x, o);
                q.y += __shfl_xor_sync(0xffffffffu, q.y, o);
            }
            if (lane == 0) red2[warp] = q;
        }
        __syncthreads();                     // red/red2 are rewritten only after the next row's first barrier
        // the rest of the next row into L2 now: HBM reads it during this normalize, ahead of its TMA
        if (p.pf_rest && more)
            for (int k = pfc + tid; k < nch; k += NT) bulk_prefetch_l2(xn + k * NT, chunk_bytes(k));
        if (r == 0 && sb4 > 0) mbar_wait(&wb_bar, 0);
        float mean, rstd;
        {                                    // every thread: mean, rstd from the (G + 31) / 32 warp sums, fp64
            double a = 0.0, b = 0.0;
            for (int w = 0; w < NT / 32 && w * 32 < p.G; ++w) { const double2 q = red2[w]; a += q.x; b += q.y; }
            const double dmean = a * inv_N;
            const double var = fmax(b * inv_N - dmean * dmean, 0.0);
            mean = (float)dmean;
            rstd = (float)(1.0 / sqrt(var + (double)p.eps));
        }
        // ---- normalize row r out of the buffer; thread 0 refills chunk k - LAG with row r + 1
        float4* yr = p.y + (int64_t)r * p.N4 + c0;
        #pragma unroll
        for (int k = 0; k < MV; ++k) {
            if (k < nch) {                   // block-uniform
                const int j = tid + k * NT;
                if (j < cnt4) {
                    const float4 v = xs[j];
                    const float4 w = wr[k];
                    const float4 b = k >= BH ? bt[k >= BH ? k - BH : 0]
                                             : (has_b ? bs[j] : make_float4(0.f, 0.f, 0.f, 0.f));
                    float4 o;
                    o.x = fmaf((v.x - mean) * rstd, w.x, b.x);
                    o.y = fmaf((v.y - mean) * rstd, w.y, b.y);
                    o.z = fmaf((v.z - mean) * rstd, w.z, b.z);
                    o.w = fmaf((v.w - mean) * rstd, w.w, b.w);
                    st_stream(yr + j, o);
                }
                __syncwarp();
                if (lane == 0) mbar_arrive(&empty[k]);
                if (tid == 0 && more && k >= p.lag) {
                    const int kk = k - p.lag;
                    mbar_wait(&empty[kk], par);      // every warp has read chunk kk of row r
                    fence_proxy_async_smem();        // ... before the async proxy writes it
                    mbar_arrive_expect_tx(&full[kk], chunk_bytes(kk));
                    bulk_g2s_x(xs + kk * NT, xn + kk * NT, chunk_bytes(kk), &full[kk], p.x_ef != 0);
                }
            }
        }
        if (tid == 0 && more) {              // the last LAG chunks
            for (int kk = max(0, nch - p.lag); kk < nch; ++kk) {
                mbar_wait(&empty[kk], par);
                fence_proxy_async_smem();
                mbar_arrive_expect_tx(&full[kk], chunk_bytes(kk));
                bulk_g2s_x(xs + kk * NT, xn + kk * NT, chunk_bytes(kk), &full[kk], p.x_ef != 0);
            }
        }
    }
    // departure: past its last wait (every thread passed the last __syncthreads, so every read of the
    // epoch and every poll of this launch is done in this block); the last block out resets the counter
    // and moves the epoch, so the next call's slots carry a new tag and stale ones never match
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
template __global__ void ln_xtma_kernel<512, 16, 12, 1>(const LNParams);
template __global__ void ln_xtma_kernel<256, 16, 12, 2>(const LNParams);
#endif

#ifndef KGEN_KERNELS_ONLY
static int64_t fb_chunks(int64_t N) { return (N + FB_THREADS * FB_ITEMS - 1) / (FB_THREADS * FB_ITEMS); }

// scratch (fp64 words) the fallback needs: partials + stats
int64_t ln_scratch_doubles(int64_t rows, int64_t N) { return rows * (2 * fb_chunks(N) + 1); }

template <int NT, int MV, int BH, int MINB>
static bool try_persistent(LNParams p, int64_t rows, int64_t N, int pf_pct, int64_t slot_cap, cudaStream_t st) {
    auto al = [](const void* q) { return q == nullptr || reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    if (N % 4 != 0 || !al(p.x) || !al(p.y) || !al(p.w) || !al(p.b)) return false;
    if (rows > MAX_PERSISTENT_ROWS || N < (1 << 16)) return false;
    if (p.slots == nullptr) return false;
    int dev = 0, sms = 0, optin = 0, coop = 0;
    KGEN_CUDA_CHECK(cudaGetDevice(&dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    KGEN_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop || sms <= 0 || sms > 1024) return false;
    const int64_t N4 = N / 4;
    const int64_t S4 = (N4 + (int64_t)sms * MINB - 1) / ((int64_t)sms * MINB);   // MINB blocks per SM
    if (S4 > (int64_t)NT * MV) return false;                  // the slice must fit the weight registers
    const int G = (int)((N4 + S4 - 1) / S4);                  // <= sms, no empty block
    constexpr int PG = NT >= 512 ? 1 : 2;
    if (rows * G > slot_cap || G > PG * NT) return false;      // slots; the combine polls PG slots per thread
    // x row buffer + the bias of items [0, BH) of every thread in shared memory
    const int64_t SB4 = p.b ? std::min<int64_t>(S4, (int64_t)BH * NT) : 0;
    if ((S4 + SB4) * 16 > (int64_t)optin - SMEM_RESERVE) return false;
    const size_t smem = (size_t)(S4 + SB4) * 16;
    auto kern = ln_xtma_kernel<NT, MV, BH, MINB>;
    if (cudaFuncSetAttribute((const void*)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)
            != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    // all of the SM's shared memory as shared (not L1): two blocks of ~111 KB need the largest carveout
    (void)cudaFuncSetAttribute((const void*)kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                               (int)cudaSharedmemCarveoutMaxShared);
    (void)cudaGetLastError();
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NT, smem) != cudaSuccess) {
        (void)cudaGetLastError(); return false;
    }
    if ((int64_t)per_sm * sms < G) return false;              // co-residency is what the spin barrier needs
    p.N4 = N4; p.rows = (int)rows; p.G = G; p.S4 = (int)S4; p.SB4 = (int)SB4;
    const int64_t nch = (S4 + NT - 1) / NT;
    p.pfc = (int)((nch * std::max(0, std::min(100, pf_pct)) + 99) / 100);
    void* args[] = {(void*)&p};
    KGEN_CUDA_CHECK(cudaLaunchCooperativeKernel((const void*)kern, dim3(G), dim3(NT), args, smem, st));
    KGEN_CUDA_CHECK(cudaGetLastError());
    return true;
}

// returns the persistent kernel's blocks per SM (2 or 1), 0 for the fallback
int ln_launch(const float* xp, float* yp, const float* wp, const float* bp, int64_t rows, int64_t N, double eps,
              double* scratch, unsigned* sync, double* slots, int64_t slot_cap, int pf_pct, int pf_slide,
              int pf_rest, int lag, int x_ef, int two_pass, int poll_ns, int blocks_per_sm, int64_t stream) {
    cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    LNParams p;
    p.x = reinterpret_cast<const float4*>(xp); p.y = reinterpret_cast<float4*>(yp);
    p.w = reinterpret_cast<const float4*>(wp); p.b = reinterpret_cast<const float4*>(bp);
    p.slots = reinterpret_cast<double2*>(slots);
    p.sync = sync; p.eps = (float)eps;
    p.pf_slide = pf_slide ? 1 : 0; p.pf_rest = pf_rest ? 1 : 0; p.lag = std::max(0, std::min(lag, 64));
    p.x_ef = x_ef ? 1 : 0; p.two_pass = two_pass ? 1 : 0; p.poll_ns = std::max(0, std::min(poll_ns, 1000000));
    // two blocks per SM (half a slice each, 256 threads, the same 16 float4 of weight per thread); if that
    // cannot be placed, one block per SM (xtma's exact configuration)
    if (blocks_per_sm >= 2 && try_persistent<256, 16, 12, 2>(p, rows, N, pf_pct, slot_cap, st)) return 2;
    if (try_persistent<512, 16, 12, 1>(p, rows, N, pf_pct, slot_cap, st)) return 1;
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
              double* scratch, unsigned* sync, double* slots, int64_t slot_cap, int pf_pct, int pf_slide,
              int pf_rest, int lag, int x_ef, int two_pass, int poll_ns, int blocks_per_sm, int64_t stream);

torch::Tensor layernorm_fwd(torch::Tensor x, int64_t N, c10::optional<torch::Tensor> weight,
                            c10::optional<torch::Tensor> bias, double eps, torch::Tensor sync, torch::Tensor slots,
                            int64_t pf_pct, int64_t pf_slide, int64_t pf_rest, int64_t lag, int64_t x_ef,
                            int64_t two_pass, int64_t poll_ns, int64_t blocks_per_sm, int64_t stream) {
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
              (int)pf_pct, (int)pf_slide, (int)pf_rest, (int)lag, (int)x_ef, (int)two_pass, (int)poll_ns,
              (int)blocks_per_sm, stream);
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
            name="kgen_layernorm_xtma2_" + key, cpp_sources=CPP_SRC, cuda_sources=src,
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
                                       PF_PCT, PF_SLIDE, PF_REST, LAG, X_EF, STATS, POLL_NS, BLOCKS_PER_SM,
                                       torch.cuda.current_stream(x.device).cuda_stream)
