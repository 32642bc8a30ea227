"""Off-device checks of problems/starters/layernorm/cuda_persistent_xtma.py (no GPU needed):

1. the work split and indexing: blocks x chunks x threads x items cover every float4 column of a row exactly
   once, each chunk is one contiguous TMA copy in shared and global memory, the bias head (shared memory) and
   tail (registers) cover the bias slice, the L2 prefetch (first PF chunks before the barrier, the rest after)
   covers every chunk once, the producer issues every chunk's copy once per row for any LAG, shared memory fits;
2. the mbarrier protocol of one block (full[k] / empty[k] per chunk, one phase per row, parity waits), in a
   randomized interleaving of 16 warps and the producer (thread 0, inside warp 0): no chunk is overwritten
   before every warp read it, every read sees its own row's bytes, no wait ever falls two phases behind (a
   parity wait would then hang), no deadlock;
3. the numerics: the kernel's fp32 one-pass shifted statistics in its exact order (per thread: pivot = mean of
   its first float4, two accumulators, the fma chain), fp64 (A, B) per thread, the tagged slots' 36-bit
   rounding, fp64 combine, fp32 normalize, against a float64 reference, on rows of the full size (4M) at x1,
   x100, +30 and +1000 offsets and with random weight/bias; STATS=1 (two-pass) beside it.

    python benchmarks/ln5_emulate.py [--rows 2]
"""
import argparse
import random

import numpy as np

NT, MV, BH = 512, 16, 12
N = 64 * 256 * 256
N4 = N // 4


def split(n4, sms):
    s4 = (n4 + sms - 1) // sms
    g = (n4 + s4 - 1) // s4
    return s4, g


def check_indexing(n4, sms, optin=232448, reserve=2048, bias=True):
    """None where the host takes the fallback (slice too large for the registers or shared memory)."""
    s4, g = split(n4, sms)
    sb4 = min(s4, BH * NT) if bias else 0
    smem = (s4 + sb4) * 16
    if s4 > NT * MV or smem > optin - reserve:
        return None
    nch_full = (s4 + NT - 1) // NT
    covered = np.zeros(n4, np.int32)
    for blk in range(g):
        c0 = blk * s4
        cnt4 = min(s4, n4 - c0)
        assert cnt4 > 0, "empty block"
        nch = (cnt4 + NT - 1) // NT
        assert nch <= MV
        # chunks: contiguous [k*NT, k*NT + bytes/16) of the slice; thread items j = tid + k*NT
        chunk_cols = []
        for k in range(nch):
            nbytes = min(NT, cnt4 - k * NT) * 16
            assert nbytes > 0 and nbytes % 16 == 0
            chunk_cols.append(range(k * NT, k * NT + nbytes // 16))
        items = set()
        for tid in range(NT):
            nv = min(MV, (cnt4 - tid + NT - 1) // NT) if tid < cnt4 else 0
            valid = [k for k in range(MV) if tid + k * NT < cnt4]
            assert valid == list(range(nv)), (blk, tid, nv, valid)   # nv = the thread's items 0..nv-1
            for k in valid:
                j = tid + k * NT
                assert j in chunk_cols[k]       # item k of every thread lands in chunk k
                if k < BH:
                    assert not bias or j < min(sb4, cnt4)   # bias from shared memory
                items.add(j)
        assert items == set(range(cnt4))
        covered[c0:c0 + cnt4] += 1
        for pf_pct in (0, 25, 50, 75, 100):
            pfc = min((nch_full * pf_pct + 99) // 100, nch)
            pf = list(range(pfc)) + list(range(pfc, nch))   # before the barrier (slide or after), PF_REST after
            assert sorted(pf) == list(range(nch))
        for lag in (0, 1, 2, 4, 16, 20):
            issued = [k - lag for k in range(nch) if k >= lag] + list(range(max(0, nch - lag), nch))
            assert sorted(issued) == list(range(nch)), (lag, issued)
    assert (covered == 1).all(), "every column once"
    return s4, g, smem


class MBar:
    """mbarrier: expected arrivals per phase, pending arrivals, transaction bytes, completed phase count."""

    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self, expect_tx=0):
        self.tx += expect_tx
        self.pending -= 1
        assert self.pending >= 0
        self._maybe_complete()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._maybe_complete()

    def try_wait_parity(self, parity):
        # true once the phase with this parity completed, i.e. the current (incomplete) phase has the other
        # parity; a waiter two phases behind would see false forever: assert it never happens
        return (self.phase & 1) != parity


def simulate_block(rows, nch, lag, seed):
    """Random interleaving of warps 0..15 (warp 0 carries the producer) through rows x (stats, normalize)."""
    rng = random.Random(seed)
    nw = NT // 32
    full = [MBar(1) for _ in range(nch)]
    empty = [MBar(nw) for _ in range(nch)]
    buf = [None] * nch          # the row whose bytes chunk k holds (None: not landed)
    inflight = []               # (k, row) TMA copies issued, not landed
    for k in range(nch):        # prologue: row 0, every chunk
        full[k].arrive(expect_tx=1)
        inflight.append((k, 0))

    def warp_program(w):
        for r in range(rows):
            par = r & 1
            for k in range(nch):                     # stats: wait full[k], read
                while True:
                    ok = full[k].try_wait_parity(par)
                    assert full[k].phase <= r + 1, "waiter two phases behind"
                    if ok:
                        break
                    yield "wait"
                assert buf[k] == r, f"warp {w} row {r} chunk {k} sees row {buf[k]}"
                yield "read"
            yield "barrier"                          # grid barrier (all warps of every block; here: a point)
            for k in range(nch):                     # normalize: read, arrive; warp 0's producer
                assert buf[k] == r, f"normalize: warp {w} row {r} chunk {k} sees row {buf[k]}"
                yield "read"
                empty[k].arrive()
                if w == 0 and r + 1 < rows:
                    kks = [k - lag] if k >= lag else []
                    if k == nch - 1:
                        kks += list(range(max(0, nch - lag), nch))
                    for kk in kks:
                        while True:
                            ok = empty[kk].try_wait_parity(par)
                            assert empty[kk].phase <= r + 1, "producer two phases behind"
                            if ok:
                                break
                            yield "wait"
                        full[kk].arrive(expect_tx=1)
                        inflight.append((kk, r + 1))
                        buf[kk] = ("overwriting", r + 1)   # the copy may land any time from here on
                        yield "issue"

    progs = [warp_program(w) for w in range(nw)]
    alive = set(range(nw))
    at_barrier = set()
    stalls = 0
    while alive:
        if inflight and rng.random() < 0.3:          # a TMA copy lands
            k, row = inflight.pop(rng.randrange(len(inflight)))
            buf[k] = row
            full[k].complete_tx(1)
            continue
        runnable = [w for w in alive if w not in at_barrier]
        if not runnable:                             # every live warp at the grid barrier: release
            at_barrier.clear()
            continue
        w = rng.choice(runnable)
        try:
            ev = next(progs[w])
        except StopIteration:
            alive.discard(w)
            continue
        if ev == "barrier":
            at_barrier.add(w)
        stalls = stalls + 1 if ev == "wait" else 0
        assert stalls < 100000, "deadlock"
    assert not inflight, "a copy was issued and never waited for"


def tag_round(d):
    u = np.asarray(d, np.float64).view(np.uint64)
    return ((u + np.uint64(0x8000)) & ~np.uint64(0xFFFF)).view(np.float64)


def f32(x):
    return np.asarray(x, np.float32)


def fma32(a, b, c):
    # a*b exact in fp64 for fp32 a, b; one fp64 rounding then fp32: the fp32 fma up to rare double rounding
    return f32(a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64))


def emulate_row(x, w, b, sms=132, two_pass=False, eps=1e-5):
    """y for one row (N fp32) the way the kernel computes it."""
    s4, g = split(N4, sms)
    # [block][k][tid][4] with column j = tid + k*NT of the block's slice; invalid items are absent (mask)
    xs = np.zeros((g, MV * NT * 4), np.float32)
    for blk in range(g):
        c0 = blk * s4
        cnt4 = min(s4, N4 - c0)
        xs[blk, :cnt4 * 4] = x[c0 * 4:(c0 + cnt4) * 4]
    v = xs.reshape(g, MV, NT, 4)
    valid = np.zeros((g, MV, NT), bool)
    for blk in range(g):
        cnt4 = min(s4, N4 - blk * s4)
        j = np.arange(NT)[None, :] + NT * np.arange(MV)[:, None]
        valid[blk] = j < cnt4
    nv = valid.sum(axis=1)                      # [g][NT]
    nf = f32(4 * nv)
    zero = np.zeros((g, NT), np.float32)
    s2 = [zero.copy(), zero.copy()]
    q2 = [zero.copy(), zero.copy()]
    if two_pass:
        kpiv = zero
    else:
        v0 = v[:, 0]
        kpiv = f32(f32(0.25) * f32(f32(v0[..., 0] + v0[..., 1]) + f32(v0[..., 2] + v0[..., 3])))
    for k in range(MV):
        m = valid[:, k]
        a, bb, c, d = (f32(v[:, k, :, i] - kpiv) for i in range(4))
        s_new = f32(s2[k & 1] + f32(f32(a + bb) + f32(c + d)))
        q_new = fma32(a, a, fma32(bb, bb, fma32(c, c, fma32(d, d, q2[k & 1]))))
        s2[k & 1] = np.where(m, s_new, s2[k & 1])
        q2[k & 1] = np.where(m, q_new, q2[k & 1])
    s = f32(s2[0] + s2[1])
    has = nv > 0
    inv_n = np.where(has, 1.0 / np.maximum(nf.astype(np.float64), 1.0), 0.0)
    if not two_pass:
        q = f32(q2[0] + q2[1])
        A = np.where(has, nf.astype(np.float64) * kpiv.astype(np.float64) + s.astype(np.float64), 0.0)
        m2 = np.where(has, np.maximum(q.astype(np.float64) - s.astype(np.float64) ** 2 * inv_n, 0.0), 0.0)
        B = np.where(has, m2 + A * A * inv_n, 0.0)
    else:
        m = np.where(has, f32(s / np.maximum(nf, 1)), f32(0))
        t2 = [zero.copy(), zero.copy()]
        for k in range(MV):
            mk = valid[:, k]
            a, bb, c, d = (f32(v[:, k, :, i] - m) for i in range(4))
            t_new = f32(t2[k & 1] + f32(f32(f32(a * a) + f32(bb * bb)) + f32(f32(c * c) + f32(d * d))))
            t2[k & 1] = np.where(mk, t_new, t2[k & 1])
        A = s.astype(np.float64)
        B = f32(t2[0] + t2[1]).astype(np.float64) + m.astype(np.float64) * (
            2.0 * s.astype(np.float64) - nf.astype(np.float64) * m.astype(np.float64))
    blockA, blockB = tag_round(A.sum(axis=1)), tag_round(B.sum(axis=1))
    inv_N = 1.0 / (4.0 * N4)
    dmean = blockA.sum() * inv_N
    var = max(blockB.sum() * inv_N - dmean * dmean, 0.0)
    mean32, rstd32 = np.float32(dmean), np.float32(1.0 / np.sqrt(var + eps))
    y = fma32(f32(f32(x - mean32) * rstd32), w, b)
    return y


def reference(x, w, b, eps=1e-5):
    xd = x.astype(np.float64)
    mu = xd.mean()
    var = ((xd - mu) ** 2).mean()
    return (xd - mu) / np.sqrt(var + eps) * w.astype(np.float64) + b.astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--sims", type=int, default=40)
    args = ap.parse_args()
    # 1. indexing: the H100's 132 SMs (the judged shape), other SM counts, a last block with a partial chunk
    for n4, sms in ((N4, 132), (N4, 128), (N4, 114), (N4, 78), (1 << 14, 132), (40000, 132), (75001, 132)):
        res = check_indexing(n4, sms)
        if res is None:
            print(f"N4 {n4}, {sms} SMs: the slice does not fit: the host takes the fallback (three plain kernels)")
            continue
        s4, g, smem = res
        print(f"indexing ok: N4 {n4}, {sms} SMs: S4 {s4}, G {g}, chunks {(s4 + NT - 1) // NT}, last slice "
              f"{n4 - (g - 1) * s4} float4, dynamic shared memory {smem} B")
    # 2. protocol
    for i in range(args.sims):
        nch = [16, 16, 15, 3, 1][i % 5]
        lag = [0, 1, 2, 4, 20][(i // 5) % 5]
        simulate_block(rows=4, nch=nch, lag=lag, seed=i)
    print(f"mbarrier protocol ok: {args.sims} random interleavings (chunks 1-16, LAG 0-20, 4 rows)")
    # 3. numerics on full-size rows
    rng = np.random.default_rng(0)
    ones, zeros = np.ones(N, np.float32), np.zeros(N, np.float32)
    wr, br = f32(rng.standard_normal(N)), f32(rng.standard_normal(N))
    cases = [("x1", 1.0, 0.0, ones, zeros), ("x100", 100.0, 0.0, ones, zeros), ("+30", 1.0, 30.0, ones, zeros),
             ("+1000", 1.0, 1000.0, ones, zeros), ("x100 w,b random", 100.0, 0.0, wr, br)]
    for name, scale, off, w, b in cases:
        errs = {0: [], 1: []}
        for _ in range(args.rows):
            x = f32(rng.standard_normal(N) * scale + off)
            ref = reference(x, w, b)
            for tp in (0, 1):
                y = emulate_row(x, w, b, two_pass=bool(tp))
                errs[tp].append(np.linalg.norm(y - ref) / np.linalg.norm(ref))
        print(f"numerics {name:16s}: normwise error one-pass (STATS=0) {max(errs[0]):.2e}, "
              f"two-pass (STATS=1) {max(errs[1]):.2e}  (bar 1e-5)")
        # the one-pass statistics cost nothing visible: the error is the fp32 normalize's (x - (float)mean,
        # as torch's fp32 forward and tagbar: at +1000 the mean itself rounds by ~3e-5 of sigma)
        assert max(errs[0]) <= 1.05 * max(errs[1]) + 1e-9
        if off == 0.0:
            assert max(errs[0]) < 1e-6


if __name__ == "__main__":
    main()
