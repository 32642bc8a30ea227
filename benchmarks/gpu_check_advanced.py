"""GPU check + timing of the advanced starters (softmax cuda_cluster_onepass, layernorm cuda_persistent_onchip)
and some tunable variants, against float64 references; also times eager torch and the basic starters.
    python benchmarks/gpu_check_advanced.py [--quick]
"""
import importlib.util
import multiprocessing as mp
import os
import re
import sys
import time
import traceback

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SM = os.path.join(ROOT, "problems/starters/softmax/cuda_cluster_onepass.py")
LN = os.path.join(ROOT, "problems/starters/layernorm/cuda_persistent_onchip.py")
SM_BASIC = os.path.join(ROOT, "problems/starters/softmax/cuda_cluster_single_pass.py")
LN_BASIC = os.path.join(ROOT, "problems/starters/layernorm/cuda_persistent_smem.py")
QUICK = "--quick" in sys.argv

SM_VARIANTS = [{}, {"THREADS": 128}, {"THREADS": 512}, {"CLUSTER": 2, "THREADS": 512}, {"CLUSTER": 8}]
LN_VARIANTS = [{}, {"PAIR": 0}, {"UNROLL": 1}, {"REGV": 4, "UNROLL": 1}, {"WB_EVICT_LAST": 1}, {"THREADS": 256, "REGV": 4},
               {"REGV": 0}, {"PAIR": 0, "REGV": 4}]
if QUICK:
    SM_VARIANTS, LN_VARIANTS = SM_VARIANTS[:1], LN_VARIANTS[:1]


def load(path, sets=None, tag=""):
    name = "adv_" + os.path.basename(path)[:-3] + tag
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for k, v in (sets or {}).items():
        mod.CUDA_SRC = re.sub(rf"(#define\s+{k}\s+)-?\d+", rf"\g<1>{v}", mod.CUDA_SRC)
    return mod


def build(job):
    path, sets = job
    t = time.time()
    try:
        load(path, sets)._build()
        return path, sets, time.time() - t, ""
    except Exception as e:  # noqa: BLE001
        return path, sets, time.time() - t, str(e)[-3000:]


def load_problem(name):
    ns = {}
    exec(open(os.path.join(ROOT, "problems", name + ".py")).read(), ns)
    return ns


def compare(out, ref):
    out = out.double(); ref = ref.double()
    if not torch.isfinite(out).all():
        return False, float("inf")
    rel = ((out - ref).norm() / ref.norm()).item()
    close = torch.allclose(out, ref, rtol=1e-5, atol=1e-6 * ref.abs().max().item())
    return rel <= 1e-5 and close, rel


def poison(numel):
    t = torch.full((numel,), float("nan"), device="cuda"); del t


def bench(fn):
    from triton.testing import do_bench
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def main():
    torch.manual_seed(0)
    jobs = [(SM, v) for v in SM_VARIANTS] + [(LN, v) for v in LN_VARIANTS] + [(SM_BASIC, {}), (LN_BASIC, {})]
    t0 = time.time()
    ctx = mp.get_context("spawn")
    with ctx.Pool(min(len(jobs), 14)) as pool:
        res = pool.map(build, jobs)
    print(f"built {len(jobs)} modules in {time.time() - t0:.0f} s")
    for path, sets, dt, err in res:
        if err:
            print("BUILD FAIL", os.path.basename(path), sets, err)
    rows = []
    # ---------------- softmax
    smp = load_problem("softmax")
    sm_shapes = [(4096, 65536), (64, 1000), (63, 999), (5, 300000), (7, 65540), (1, 4), (3, 65536 * 2), (129, 2052)]
    for v in SM_VARIANTS:
        mod = load(SM, v)
        model = mod.ModelNew().cuda()
        for shp in sm_shapes:
            for scale in (1.0, 100.0):
                x = torch.randn(*shp, device="cuda") * scale
                poison(x.numel())
                try:
                    y = model(x); torch.cuda.synchronize()
                    ok, rel = compare(y, torch.softmax(x.double(), 1))
                except Exception:  # noqa: BLE001
                    ok, rel = False, float("nan"); print(traceback.format_exc()[-1500:])
                if not ok or shp == (4096, 65536):
                    print(f"softmax {v} {shp} x{scale:g}: {'OK' if ok else 'FAIL'} rel {rel:.2e}")
        x = torch.randn(4096, 65536, device="cuda")
        rows.append(("softmax onepass " + str(v), bench(lambda: model(x))))
        del x
    x = torch.randn(4096, 65536, device="cuda")
    rows.append(("softmax eager torch", bench(lambda: torch.softmax(x, 1))))
    try:
        mb = load(SM_BASIC).ModelNew().cuda()
        ok, rel = compare(mb(x), torch.softmax(x.double(), 1))
        rows.append((f"softmax basic cluster_single_pass (ok={ok})", bench(lambda: mb(x))))
    except Exception:  # noqa: BLE001
        print(traceback.format_exc()[-1000:])
    rows.append(("softmax copy x->y (floor)", bench(lambda: torch.empty_like(x).copy_(x))))
    del x
    torch.cuda.empty_cache()
    # ---------------- layernorm
    ln_cases = [((64, 256, 256), (16, 64, 256, 256)), ((8, 16, 24), (4, 8, 16, 24)), ((5, 7, 9), (3, 5, 7, 9)),
                ((1000,), (2, 3, 1000)), ((64, 256, 256), (1, 64, 256, 256)), ((64,), (5000, 64)),
                ((4 * 33 * 1024 + 4,), (3, 4 * 33 * 1024 + 4)), ((300, 1000), (3, 300, 1000)), ((4, 4096, 4096), (2, 4, 4096, 4096))]
    for v in LN_VARIANTS:
        mod = load(LN, v)
        for nshape, xshape in ln_cases:
            model = mod.ModelNew(nshape).cuda()
            with torch.no_grad():
                model.ln.weight.copy_(torch.randn(nshape)); model.ln.bias.copy_(torch.randn(nshape))
            for scale in (1.0, 100.0):
                x = torch.randn(*xshape, device="cuda") * scale
                poison(x.numel())
                try:
                    with torch.no_grad():
                        y = model(x); torch.cuda.synchronize()
                        ref = torch.nn.functional.layer_norm(x.double(), nshape, model.ln.weight.double(),
                                                             model.ln.bias.double(), model.ln.eps)
                    ok, rel = compare(y, ref)
                except Exception:  # noqa: BLE001
                    ok, rel = False, float("nan"); print(traceback.format_exc()[-1500:])
                if not ok or xshape == (16, 64, 256, 256):
                    print(f"layernorm {v} {xshape} x{scale:g}: {'OK' if ok else 'FAIL'} rel {rel:.2e}")
            del model
        model = mod.ModelNew((64, 256, 256)).cuda()
        x = torch.randn(16, 64, 256, 256, device="cuda")
        with torch.no_grad():
            rows.append(("layernorm onchip " + str(v), bench(lambda: model(x))))
        del x, model
        torch.cuda.empty_cache()
    x = torch.randn(16, 64, 256, 256, device="cuda")
    ref_model = torch.nn.LayerNorm((64, 256, 256)).cuda()
    with torch.no_grad():
        rows.append(("layernorm eager torch", bench(lambda: ref_model(x))))
        try:
            mb = load(LN_BASIC).ModelNew((64, 256, 256)).cuda()
            rows.append(("layernorm basic persistent_smem", bench(lambda: mb(x))))
        except Exception:  # noqa: BLE001
            print(traceback.format_exc()[-1000:])
        rows.append(("layernorm copy x->y (floor w/o params)", bench(lambda: torch.empty_like(x).copy_(x))))
    print()
    print(f"{'variant':60s} {'ms':>8s}")
    for name, ms in rows:
        print(f"{name:60s} {ms:8.4f}")


if __name__ == "__main__":
    main()
