"""CPU emulation (float32 arithmetic where the kernels use it) of the index math and statistics combine of
problems/starters/layernorm/cuda_persistent_onchip.py and problems/starters/softmax/cuda_cluster_onepass.py.
    python benchmarks/emulate_advanced_starters.py
"""
import numpy as np
import torch


def ln_persistent(x, w, b, eps, G=132, THREADS=512, REGV=4):
    rows, N = x.shape
    N4 = N // 4
    S4 = -(-N4 // G)
    x4 = x.reshape(rows, N4, 4)
    out = np.empty_like(x)
    for r in range(rows):
        parts = []
        for c in range(G):
            st = c * S4
            cnt4 = max(0, min(S4, N4 - st))
            if cnt4 == 0:
                parts.append((0.0, 0.0, 0.0)); continue
            sl = x4[r, st:st + cnt4]                       # float4 positions j = 0..cnt4-1
            tid_of = np.arange(cnt4) % THREADS             # owner thread of position j (regs or smem part)
            piv = np.zeros(THREADS, np.float32)
            piv[:min(THREADS, cnt4)] = sl[:min(THREADS, cnt4), 0]
            d = (sl - piv[tid_of][:, None]).astype(np.float32)
            s_t = np.zeros(THREADS, np.float32); n_t = np.zeros(THREADS)
            np.add.at(s_t, tid_of, d.sum(1, dtype=np.float32)); np.add.at(n_t, tid_of, 4)
            tot = float(np.sum(piv.astype(np.float64) * n_t + s_t.astype(np.float64)))
            mc = np.float32(tot / (4.0 * cnt4))
            q = float(np.sum(((sl - mc) ** 2).astype(np.float32), dtype=np.float32))
            parts.append((4.0 * cnt4, float(mc), q))
        n = mean = m2 = 0.0
        for nb, mb, qb in parts:                            # Chan, float64
            if nb <= 0: continue
            if n <= 0: n, mean, m2 = nb, mb, qb; continue
            nn = n + nb; dd = mb - mean
            mean += dd * (nb / nn); m2 += qb + dd * dd * (n * nb / nn); n = nn
        meanf = np.float32(mean); rstd = np.float32(1.0 / np.sqrt(m2 / n + eps))
        out[r] = ((x[r] - meanf) * rstd) * w + b
    return out


def softmax_cluster(x, CLUSTER=4):
    rows, cols = x.shape
    n4 = cols // 4
    SL4 = -(-n4 // CLUSTER)
    y = np.empty_like(x)
    for r in range(rows):
        stats, es = [], []
        for k in range(CLUSTER):
            a, e = k * SL4 * 4, min(cols, (k + 1) * SL4 * 4)
            sl = x[r, a:e] if e > a else np.zeros(0, np.float32)
            m = sl.max() if sl.size else -np.inf
            mref = np.float32(0) if m == -np.inf else m
            ex = np.exp(sl - mref).astype(np.float32)
            stats.append((mref, np.float32(ex.sum(dtype=np.float32)))); es.append((a, e, ex))
        M = max(m for m, s in stats if s > 0)
        S = np.float32(sum(np.float32(s * np.exp(np.float32(m - M))) for m, s in stats if s > 0))
        for (a, e, ex), (m, s) in zip(es, stats):
            scale = np.float32(np.exp(np.float32(m - M)) / S) if s > 0 else np.float32(0)
            y[r, a:e] = ex * scale
    return y


def rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    for shape, G in [((4, 8 * 16 * 24), 132), ((3, 4000), 132), ((2, 64 * 256 * 256), 132), ((5, 1000 * 4 + 8), 7)]:
        for scale, off in [(1, 0), (100, 0), (1, 1000)]:
            x = (rng.standard_normal(shape) * scale + off).astype(np.float32)
            w = rng.standard_normal(shape[1]).astype(np.float32); b = rng.standard_normal(shape[1]).astype(np.float32)
            ref = torch.nn.functional.layer_norm(torch.from_numpy(x).double(), (shape[1],), torch.from_numpy(w).double(),
                                                 torch.from_numpy(b).double(), 1e-5).numpy()
            print(f"layernorm {shape} G={G} scale={scale} offset={off}: rel err {rel(ln_persistent(x, w, b, 1e-5, G), ref):.2e}")
    for shape, C in [((64, 1000), 4), ((8, 65536), 4), ((8, 65536), 8), ((3, 12), 8), ((4, 4004), 2)]:
        for scale in (1, 100):
            x = (rng.standard_normal(shape) * scale).astype(np.float32)
            ref = torch.softmax(torch.from_numpy(x).double(), 1).numpy()
            print(f"softmax {shape} CLUSTER={C} scale={scale}: rel err {rel(softmax_cluster(x, C), ref):.2e}")
