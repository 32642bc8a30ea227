"""Where layernorm's last 17% goes (issue 25): ceilings for the bytes layernorm must move, timed the way
benchmarks/sweep.py times starters (triton.testing.do_bench, median, L2 flushed by do_bench before every run),
on the problem's full size (16 samples of 64x256x256 fp32, weight and bias of one sample's shape).

    python3 benchmarks/ln_ceiling.py [--json PATH] [--skip-cuda]         (on the GPU: the table)
    python3 benchmarks/ln_ceiling.py --build                              (the two CUDA builds, in parallel)
    python3 benchmarks/ln_ceiling.py                                      (no GPU: small size, interpreter:
                                                                           the exact-formula rows checked)

Every row prints ms, GB/s of the bytes it must move, and % of the issue's floor (0.190 ms = 570 MB at 3.0 TB/s):
  a1 copy        y.copy_(x): torch's copy, 537 MB (x in, y out): what HBM gives a plain read+write stream
  a2 affine      Triton y = x * w + b, w/b broadcast over the sample shape, each program loads its w/b block once
                 and loops over the 16 samples: 570 MB, layernorm's exact bytes with no statistics at all
  a3 read        Triton sum of x (per-program partials): 268 MB read only
  a4 write       y.fill_(1.0): 268 MB written only
  b1 givenstats  Triton y = (x - m[s]) * r[s] * w + b with m, r precomputed: 570 MB, the ceiling of any
                 normalize pass (a one-pass-over-x layernorm can do no better than this without the barrier)
  c1 xtma        problems/starters/layernorm/cuda_persistent_xtma.py as written (its own build)
  c2 diag        xtma's CUDA source patched (PATCHES below) and built under another extension name; the
                 patches are keyed on bits of POLL_NS that the starter never uses (it clamps POLL_NS <= 1e6,
                 so these bits are only set here): with none set the patched kernel is xtma (checked correct)
  c3 nobar       0x10000: the grid barrier's poll skipped (each block uses zeros for the row sums): the
                 per-sample wait removed, blocks drift freely across rows.  OUTPUT WRONG, TIMING ONLY
  c4 nostats     0x20000: the statistics pass reads nothing from the shared buffer (it still waits for each
                 chunk's TMA); the barrier kept.  OUTPUT WRONG, TIMING ONLY
  c5 stream      0x30000: both: xtma's streaming pattern alone (TMA in, normalize from shared, evict-first
                 stores out, refill of freed chunks).  OUTPUT WRONG, TIMING ONLY
  c6 noy         0x40000: every row's y stored onto row 0's lines (17 MB GPU-wide, rewritten in L2), so HBM
                 sees x in + weight/bias once + ~one row of y (~319 MB); barrier and stats kept: the read side
                 of xtma alone (a skipped store instead made ptxas spill).  OUTPUT WRONG, TIMING ONLY
So c1 - c3 is what the per-sample barrier waits cost, c3 - c5 what the statistics pass costs with no barrier,
c5 - a2 what xtma's streaming pattern (one CTA per SM, one row buffer, TMA chunks) loses to a plain
many-CTA stream of the same bytes, and a2 / a1 what the layernorm byte mix can reach at all.
Expected (not measured yet; H100 SXM, 3.0 TB/s for a 1 GiB copy): a1 ~0.18 ms (537 MB), a2 and b1 0.19-0.20
(570 MB, if a many-CTA Triton stream keeps the copy's rate with w/b loaded once per program), a3 and a4 ~0.09,
c1 0.225-0.230 (xtma's 0.2305 in the seventh session's sweep).  Reading it: c5 near a2 means the pattern can
stream and the 40 us are the per-row barrier + statistics (then c3 vs c4 says which); c5 near c1 means one
CTA per SM with one row buffer cannot keep HBM busy even with no barrier (then the fix is more bytes in flight
per SM, not a better barrier); c6 near a3 says the read side alone is fine and the writes are what stall.
The patched kernel compiles (nvcc 13.0, -O3, sm_90a) to 128 registers, 0 spills, like xtma (a predicated-off
y store instead of c6's redirect spilled 8 bytes, hence the redirect).
x is random once per run (no kernel here branches on values; do_bench flushes L2 before every run).
Trusted diagnostic code, not a starter: it imports kgen for the problem's sizes and weights.
"""
import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

GPU = torch.cuda.is_available()
if not GPU:  # off the device: small size, Triton's interpreter, wall-clock "timing"
    os.environ["TRITON_INTERPRET"] = "1"
DEVICE = "cuda" if GPU else "cpu"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kgen.harness.runner import copy_weights  # noqa: E402
from kgen.problems.problem import load_problem  # noqa: E402

XTMA = os.path.join(ROOT, "problems", "starters", "layernorm", "cuda_persistent_xtma.py")
FLOOR_MS = 0.190
NOBAR, NOSTATS, NOY = 0x10000, 0x20000, 0x40000

# (anchor in xtma's CUDA_SRC, replacement): each anchor must occur exactly once
PATCHES = [
    ("p.poll_ns = std::max(0, std::min(poll_ns, 1000000));",            # the flag bits reach the kernel
     "p.poll_ns = poll_ns;"),
    ("if (p.poll_ns) __nanosleep((unsigned)p.poll_ns);",                # the sleep is the low 16 bits only
     "if (p.poll_ns & 0xFFFF) __nanosleep((unsigned)(p.poll_ns & 0xFFFF));"),
    ("bool ok = i >= p.G;",                                             # NOBAR: no slot polled
     "bool ok = i >= p.G || (p.poll_ns & 0x10000) != 0;"),
    ("                if (j < cnt4) {\n                    const float4 v = xs[j];\n"
     "                    if (k == 0 && !p.two_pass) K = ",             # NOSTATS: no read of the buffer
     "                if (j < cnt4 && (p.poll_ns & 0x20000) == 0) {\n                    const float4 v = xs[j];\n"
     "                    if (k == 0 && !p.two_pass) K = "),
    ("float4* yr = p.y + (int64_t)r * p.N4 + c0;",                       # NOY: every row's y onto row 0's
     "float4* yr = p.y + ((p.poll_ns & 0x40000) ? (int64_t)0 : (int64_t)r) * p.N4 + c0;"),  # lines (in L2)
]


def load_module(path, source=None, tag="xtma"):
    if source is None:
        with open(path) as f:
            source = f.read()
    spec = importlib.util.spec_from_loader(f"kgen_ln_ceiling_{tag}", loader=None, origin=path)
    mod = importlib.util.module_from_spec(spec)
    mod.__file__ = path
    exec(compile(source, path, "exec"), mod.__dict__)
    return mod


def patched_cuda_src(src):
    for old, new in PATCHES:
        n = src.count(old)
        if n != 1:
            raise RuntimeError(f"ln_ceiling: xtma patch anchor found {n} times (expected 1): {old[:60]!r}")
        src = src.replace(old, new)
    return src


def build_xtma():
    return load_module(XTMA)._build()


def build_diag():
    """The patched copy, its own extension name (never the starter's)."""
    mod = load_module(XTMA)
    src = patched_cuda_src(mod.CUDA_SRC)
    arch = "90"
    if GPU:
        major, minor = torch.cuda.get_device_capability()
        arch = f"{major}{minor}"
    key = hashlib.sha1((src + mod.CPP_SRC + arch).encode()).hexdigest()[:12]
    from torch.utils.cpp_extension import load_inline
    return load_inline(name="kgen_ln_ceiling_xtma_diag_" + key, cpp_sources=mod.CPP_SRC, cuda_sources=src,
                       functions=["layernorm_fwd"], extra_cflags=["-O3"],
                       extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"], verbose=False)


# ---------------------------------------------------------------- Triton kernels (exact formulas)
@triton.jit
def _affine_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, ROWS, BLOCK: tl.constexpr):
    # one column block, every sample: w and b read once, x and y streamed
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    for r in range(ROWS):
        x = tl.load(x_ptr + r * N + offs, mask=mask, other=0.0, eviction_policy="evict_first")
        tl.store(y_ptr + r * N + offs, x * w + b, mask=mask, eviction_policy="evict_first")


@triton.jit
def _givenstats_kernel(x_ptr, w_ptr, b_ptr, m_ptr, r_ptr, y_ptr, N, ROWS, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    for r in range(ROWS):
        m = tl.load(m_ptr + r)
        rs = tl.load(r_ptr + r)
        x = tl.load(x_ptr + r * N + offs, mask=mask, other=0.0, eviction_policy="evict_first")
        tl.store(y_ptr + r * N + offs, (x - m) * rs * w + b, mask=mask, eviction_policy="evict_first")


@triton.jit
def _read_kernel(x_ptr, out_ptr, N, ROWS, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(ROWS):
        acc += tl.load(x_ptr + r * N + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))


CONFIGS = [(1024, 4), (2048, 4), (4096, 8), (8192, 8)] if GPU else [(1024, 4)]


def bench_ms(fn):
    if GPU:
        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def normwise(out, ref):
    return float(torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--build", action="store_true", help="build xtma and the patched copy (two processes) and exit")
    ap.add_argument("--build-one", choices=["xtma", "diag"], help=argparse.SUPPRESS)
    ap.add_argument("--skip-cuda", action="store_true", help="the a/b rows only")
    ap.add_argument("--print-patched", help="write the patched CUDA source here and exit (offline checks)")
    args = ap.parse_args()
    if args.print_patched:
        with open(args.print_patched, "w") as f:
            f.write(patched_cuda_src(load_module(XTMA).CUDA_SRC))
        return
    if args.build_one:
        t = time.time()
        (build_xtma if args.build_one == "xtma" else build_diag)()
        print(f"built {args.build_one} in {time.time() - t:.1f}s", flush=True)
        return
    if args.build:
        me = os.path.abspath(__file__)
        procs = [subprocess.Popen([sys.executable, me, "--build-one", k]) for k in ("xtma", "diag")]
        sys.exit(max(p.wait() for p in procs))

    problem = load_problem("layernorm", "full" if GPU else "small")
    model = problem.make_model(seed=0, device=DEVICE)
    ref64 = problem.make_model(seed=0, device=DEVICE).double()
    w = model.ln.weight.detach().contiguous()
    b = model.ln.bias.detach().contiguous()
    eps = float(model.ln.eps)
    inputs = {scale: problem.make_inputs(seed, device=DEVICE, scale=scale)[0].contiguous()
              for seed, scale in ((1, 1.0), (2, 100.0))}
    x = inputs[1.0]
    N = w.numel()
    rows = x.numel() // N
    y = torch.empty_like(x)
    fb = 4  # bytes per fp32
    xb, wbb = x.numel() * fb, 2 * N * fb
    dev_name = torch.cuda.get_device_name() if GPU else "CPU (interpreter, small size: timings meaningless)"
    print(f"layernorm ceilings on {dev_name}: {rows} samples x {N} fp32, x {xb / 1e6:.1f} MB, w+b {wbb / 1e6:.1f} MB; "
          f"floor {FLOOR_MS} ms", flush=True)
    out_rows = []

    def add(name, what, ms, nbytes, err=None, note="", extra=None):
        row = {"row": name, "what": what, "ms": ms, "bytes": nbytes, "gbs": nbytes / (ms * 1e-3) / 1e9 if ms else None,
               "pct_floor": 100 * FLOOR_MS / ms if ms else None, "err": err, "note": note, **(extra or {})}
        out_rows.append(row)
        e = "" if err is None else f" err {err:.1e}"
        print(f"{name:11s} {what:52s} {ms:8.4f} ms {row['gbs']:7.0f} GB/s {row['pct_floor']:5.1f}% floor{e} {note}",
              flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": dev_name, "torch": torch.__version__, "triton": triton.__version__,
                           "floor_ms": FLOOR_MS, "rows": out_rows}, f, indent=1)

    def fail(name, what, exc):
        out_rows.append({"row": name, "what": what, "error": f"{type(exc).__name__}: {str(exc)[-300:]}"})
        last = str(exc).strip().splitlines()[-1][:160] if str(exc).strip() else ""
        print(f"{name:11s} {what:52s} FAILED {type(exc).__name__}: {last}", flush=True)

    with torch.no_grad():
        refs = {s: ref64(xx.double()) for s, xx in inputs.items()}
        # ---- a1, a4: torch's copy and fill
        add("a1_copy", "y.copy_(x) (torch)", bench_ms(lambda: y.copy_(x)), 2 * xb)
        add("a4_write", "y.fill_(1.0) (torch), write only", bench_ms(lambda: y.fill_(1.0)), xb)

        # ---- a2, a3, b1: Triton, a few block shapes each, the best shown (all in the JSON)
        def tri(name, what, launch, nbytes, check):
            best = None
            for block, warps in CONFIGS:
                try:
                    grid = (triton.cdiv(N, block),)
                    err = check(block, warps, grid)
                    ms = bench_ms(lambda block=block, warps=warps, grid=grid: launch(block, warps, grid, x, y))
                    if best is None or ms < best[0]:
                        best = (ms, err, block, warps)
                    out_rows.append({"row": name + "_cfg", "block": block, "num_warps": warps, "ms": ms, "err": err})
                except Exception as exc:  # noqa: BLE001 -- a config that does not compile must not end the table
                    fail(f"{name}[{block},{warps}]", what, exc)
            if best:
                add(name, what, best[0], nbytes, best[1], f"BLOCK {best[2]} warps {best[3]}")

        def affine(block, warps, grid, xx, yy):
            _affine_kernel[grid](xx, w, b, yy, N, rows, BLOCK=block, num_warps=warps)

        def affine_check(block, warps, grid):
            errs = []
            for xx in inputs.values():
                yy = torch.empty_like(xx)
                affine(block, warps, grid, xx, yy)
                ref = xx.double().view(rows, N) * w.double().view(N) + b.double().view(N)
                errs.append(normwise(yy.view(rows, N), ref))
            return max(errs)

        tri("a2_affine", "Triton y = x*w + b (w,b once): layernorm's bytes", affine, 2 * xb + wbb, affine_check)

        part = torch.empty(triton.cdiv(N, CONFIGS[0][0]), device=DEVICE, dtype=torch.float32)

        def read(block, warps, grid, xx, yy):
            _read_kernel[grid](xx, part, N, rows, BLOCK=block, num_warps=warps)

        def read_check(block, warps, grid):
            read(block, warps, grid, x, y)
            ref = x.double().sum()
            return float(abs(part[:grid[0]].double().sum() - ref) / x.double().abs().sum())

        tri("a3_read", "Triton sum of x, read only", read, xb, read_check)

        xd = {s: xx.double().view(rows, N) for s, xx in inputs.items()}
        stats = {}
        for s in inputs:
            m64 = xd[s].mean(dim=1)
            r64 = 1.0 / torch.sqrt(xd[s].var(dim=1, unbiased=False) + eps)
            stats[s] = (m64.float().contiguous(), r64.float().contiguous())

        def givenstats(block, warps, grid, xx, yy, s=1.0):
            m, r = stats[s]
            _givenstats_kernel[grid](xx, w, b, m, r, yy, N, rows, BLOCK=block, num_warps=warps)

        def givenstats_check(block, warps, grid):
            errs = []
            for s, xx in inputs.items():
                yy = torch.empty_like(xx)
                givenstats(block, warps, grid, xx, yy, s)
                m, r = stats[s]
                exact = (xd[s] - m.double()[:, None]) * r.double()[:, None] * w.double().view(N) + b.double().view(N)
                errs.append(normwise(yy.view(rows, N), exact))            # the formula, exactly
                errs.append(normwise(yy, refs[s]))                         # and as layernorm (fp32 stats)
            return max(errs)

        tri("b1_givenstats", "Triton (x - m[s]) * r[s] * w + b, stats given", givenstats, 2 * xb + wbb,
            givenstats_check)

        # ---- c: xtma and its patched copy
        if args.skip_cuda or not GPU:
            print("c rows skipped" + ("" if GPU else " (no GPU: the patches are checked by --print-patched + nvcc)"),
                  flush=True)
            try:
                patched_cuda_src(load_module(XTMA).CUDA_SRC)
                print("xtma patch anchors: each found once", flush=True)
            except RuntimeError as exc:
                print(exc, flush=True)
            return
        mods = {}
        for tag, builder in (("xtma", build_xtma), ("diag", build_diag)):
            try:
                t = time.time()
                mods[tag] = builder()
                print(f"({tag} build ready in {time.time() - t:.1f}s)", flush=True)
            except Exception as exc:  # noqa: BLE001 -- a failed build leaves the other rows
                fail(tag, "build", exc)
        starter = load_module(XTMA)

        def new_model(ext):
            torch.manual_seed(0)
            with torch.device(DEVICE):
                m = starter.ModelNew(*problem.init_inputs())
            copy_weights(m, model.state_dict())
            m._mod = ext
            return m.eval()

        variants = [("c1_xtma", "xtma as written", "xtma", 0, "correct"),
                    ("c2_diag", "patched copy, no flag (= xtma)", "diag", 0, "correct"),
                    ("c3_nobar", "no grid barrier wait", "diag", NOBAR, "WRONG OUTPUT, timing only"),
                    ("c4_nostats", "no statistics reads (barrier kept)", "diag", NOSTATS, "WRONG OUTPUT, timing only"),
                    ("c5_stream", "no barrier, no stats: the streaming pattern", "diag", NOBAR | NOSTATS,
                     "WRONG OUTPUT, timing only"),
                    ("c6_noy", "y rows all onto row 0 (x in + w/b + 1 row of y)", "diag", NOY,
                     "WRONG OUTPUT, timing only")]
        for name, what, tag, flags, note in variants:
            if tag not in mods:
                continue
            try:
                m = new_model(mods[tag])
                starter.POLL_NS = starter.POLL_NS | flags if flags else starter.POLL_NS & 0xFFFF
                errs = []
                for s, xx in inputs.items():
                    out = m(xx)
                    torch.cuda.synchronize()
                    errs.append(normwise(out, refs[s]))
                ms = bench_ms(lambda m=m: m(x))
                nbytes = xb + wbb + xb // rows if flags & NOY else 2 * xb + wbb
                if note == "correct":
                    note = "correct" if max(errs) <= 1e-5 else "NOT CORRECT (should be)"
                add(name, what, ms, nbytes, max(errs), note, {"flags": flags})
            except Exception as exc:  # noqa: BLE001 -- one failed variant leaves the others
                fail(name, what, exc)
            finally:
                starter.POLL_NS = starter.POLL_NS & 0xFFFF
    print("rows: a1/a4 torch copy/fill; a2 Triton x*w+b (layernorm's bytes, no stats); a3 read only; "
          "b1 normalize with given stats; c xtma and its patched (timing-only) copies", flush=True)


if __name__ == "__main__":
    main()
