"""Check the starter kernels in problems/starters/<problem>/ against their problem's Model.

    python benchmarks/check_starters.py                      # every problem, every starter, on CPU
    python benchmarks/check_starters.py softmax              # one problem
    python benchmarks/check_starters.py softmax triton_online.py
    python benchmarks/check_starters.py --device cuda        # on a GPU: full sizes, correctness + timing

On CPU (the default) problems are shrunk to their KGEN_SMALL sizes; Triton starters run under the
Triton interpreter (TRITON_INTERPRET=1, set before triton is imported) and CUDA starters (files that
define a module-level CUDA_SRC string) are only compiled with nvcc for sm_90 (object file, no run).
--kernels-only compiles CUDA sources with -DKGEN_KERNELS_ONLY (skips the torch host wrapper: seconds
instead of a minute each).

With --device cuda every starter is built (load_inline / Triton JIT), run at full size (or --small),
compared with a float64 run of the reference Model and timed with triton.testing.do_bench (median)
against eager Model (and torch.compile with --compile).

Accuracy: ||out - ref|| / ||ref|| <= 1e-5 (float64 reference) and allclose(rtol=1e-5,
atol=1e-6 * max|ref|), on randn inputs and on randn inputs scaled by 100.
"""
import argparse
import ast
import copy
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBLEMS = os.path.join(ROOT, "problems")
STARTERS = os.path.join(PROBLEMS, "starters")
ORDER = ["softmax", "layernorm", "matmul", "conv2d", "conv_relu_maxpool"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("problem", nargs="?", help="problem name (default: all)")
    p.add_argument("starter", nargs="?", help="starter file name inside problems/starters/<problem>/ (default: all)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--small", action="store_true", help="use KGEN_SMALL sizes on cuda too")
    p.add_argument("--kernels-only", action="store_true", help="CPU: nvcc-compile CUDA kernels without the torch host wrapper")
    p.add_argument("--load-inline", action="store_true",
                   help="CPU: build CUDA starters with their own load_inline call (pybind glue included); with a CPU torch "
                        "the final link fails only for lack of libc10_cuda/libtorch_cuda, which counts as a pass")
    p.add_argument("--no-nvcc", action="store_true", help="CPU: skip CUDA starters")
    p.add_argument("--compile", action="store_true", help="cuda: also time torch.compile(Model)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="NAME=INT",
                   help="override a tunable: module-level NAME = INT and '#define NAME INT' / 'constexpr int NAME = INT;' in CUDA_SRC")
    return p.parse_args()


ARGS = parse_args()
if ARGS.device == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402


def load_problem(name, small):
    """Exec the problem source; with small=True the top-level int constants named in KGEN_SMALL are replaced."""
    path = os.path.join(PROBLEMS, name + ".py")
    src = open(path).read()
    tree = ast.parse(src, path)
    overrides = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "KGEN_SMALL" for t in node.targets):
            overrides = ast.literal_eval(node.value)
    if small:
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id in overrides and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, int)):
                node.value = ast.copy_location(ast.Constant(overrides[node.targets[0].id]), node.value)
    ns = {"__name__": "kgen_problem_" + name, "__file__": path}
    exec(compile(tree, path, "exec"), ns)
    return ns


def apply_overrides(mod, sets):
    import re
    for item in sets:
        name, val = item.split("=")
        val = int(val)
        if hasattr(mod, name):
            setattr(mod, name, val)
        src = getattr(mod, "CUDA_SRC", None)
        if src is not None:
            src = re.sub(rf"(#define\s+{name}\s+)-?\d+", rf"\g<1>{val}", src)
            src = re.sub(rf"(constexpr\s+int\s+{name}\s*=\s*)-?\d+", rf"\g<1>{val}", src)
            mod.CUDA_SRC = src


def load_starter(path):
    name = "kgen_starter_" + hashlib.sha1(path.encode()).hexdigest()[:10]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    apply_overrides(mod, ARGS.set)
    return mod


def compare(out, ref):
    out = out.detach().to(torch.float64)
    ref = ref.detach().to(device=out.device, dtype=torch.float64)
    if out.shape != ref.shape:
        return False, float("inf"), f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if not torch.isfinite(out).all():
        return False, float("inf"), "non-finite values"
    rel = ((out - ref).norm() / ref.norm().clamp_min(1e-300)).item()
    atol = 1e-6 * ref.abs().max().item()
    close = torch.allclose(out, ref, rtol=1e-5, atol=atol)
    msg = ""
    if not close:
        bad = ((out - ref).abs() > atol + 1e-5 * ref.abs())
        msg = f"{int(bad.sum())} elements outside rtol/atol, max abs err {(out - ref).abs().max().item():.3e}"
    return rel <= 1e-5 and close, rel, msg


def nvcc_compile(src, tag, kernels_only):
    import sysconfig

    from torch.utils.cpp_extension import include_paths
    with tempfile.TemporaryDirectory() as d:
        cu = os.path.join(d, tag + ".cu")
        with open(cu, "w") as f:
            f.write(src)
        cmd = ["nvcc", "-c", "-O3", "-std=c++17", "-gencode=arch=compute_90,code=sm_90", "-Xptxas", "-v",
               "-Xcompiler", "-w", cu, "-o", os.path.join(d, tag + ".o")]
        if kernels_only:
            cmd.insert(1, "-DKGEN_KERNELS_ONLY")
        else:
            for inc in include_paths():
                cmd += ["-I", inc]
            cmd += ["-I", sysconfig.get_paths()["include"]]
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        dt = time.time() - t0
        lines = (r.stdout + r.stderr).splitlines()
        info = [l.strip() for l in lines if "registers" in l or ("spill" in l and "0 bytes spill" not in l)]
        errors = [l for l in lines if "error" in l]
        return r.returncode == 0, dt, errors, info


def load_inline_build(mod):
    """Run the starter's own _build() (load_inline) on a CPU-only torch: compile main.cpp + cuda.cu for real."""
    from torch.utils import cpp_extension
    if cpp_extension.CUDA_HOME is None:
        for cand in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
            if cand and os.path.exists(os.path.join(cand, "bin", "nvcc")):
                cpp_extension.CUDA_HOME = cand
                break
    t0 = time.time()
    try:
        mod._build()
        return True, time.time() - t0, [], ["built and loaded"]
    except Exception as e:  # noqa: BLE001
        text = str(e)
        lines = text.splitlines()
        link_only = ("cannot find -lc10_cuda" in text or "cannot find -ltorch_cuda" in text) and \
            not any("error" in l.lower() and "ld returned" not in l and "cannot find" not in l and "FAILED" not in l
                    for l in lines if "-o " not in l)
        return link_only, time.time() - t0, lines, ["compiled; link needs CUDA torch libraries"]


def make_inputs(prob, device, scale):
    inputs = [t * scale if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in prob["get_inputs"]()]
    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]


def check_one(problem, path, device, small):
    fname = os.path.basename(path)
    row = {"problem": problem, "starter": fname}
    mod = load_starter(path)
    cuda_src = getattr(mod, "CUDA_SRC", None)
    if device == "cpu" and cuda_src is not None:
        if ARGS.no_nvcc:
            row["status"] = "skipped (CUDA)"
            return row
        if ARGS.load_inline:
            ok, dt, errors, info = load_inline_build(mod)
            row["status"] = ("load_inline OK (up to link)" if ok else "load_inline FAILED") + f" {dt:.0f}s"
            row["detail"] = "\n".join(errors[-30:] if not ok else info)
            return row
        ok, dt, errors, info = nvcc_compile(cuda_src, os.path.splitext(fname)[0], ARGS.kernels_only)
        row["status"] = ("nvcc OK" if ok else "nvcc FAILED") + (" (kernels only)" if ARGS.kernels_only else "") + f" {dt:.0f}s"
        row["detail"] = "\n".join(errors[:20] if not ok else info)
        return row

    prob = load_problem(problem, small)
    torch.manual_seed(ARGS.seed)
    model = prob["Model"](*prob["get_init_inputs"]())
    # Perturb parameters away from their defaults (e.g. LayerNorm's ones/zeros) so they matter.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    new = mod.ModelNew(*prob["get_init_inputs"]())
    new.load_state_dict(model.state_dict())
    model = model.to(device).eval()
    new = new.to(device).eval()
    ref64 = copy.deepcopy(model).double()          # float64 reference, on the same device
    worst = 0.0
    ok_all = True
    msgs = []
    for scale in (1.0, 100.0):
        torch.manual_seed(ARGS.seed + 1)
        inputs = make_inputs(prob, device, scale)
        with torch.no_grad():
            t0 = time.time()
            out = new(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            dt = time.time() - t0
            ref = ref64(*[t.double() if isinstance(t, torch.Tensor) else t for t in inputs])
        ok, rel, msg = compare(out, ref)
        del out, ref
        worst = max(worst, rel)
        ok_all &= ok
        if msg:
            msgs.append(f"x{scale:g}: {msg}")
    row["status"] = "OK" if ok_all else "WRONG"
    row["rel_err"] = f"{worst:.2e}"
    row["detail"] = "; ".join(msgs)
    if device == "cpu":
        row["time"] = f"{dt:.1f}s (interp)"
    if device == "cuda":
        import triton.testing
        torch.manual_seed(ARGS.seed + 1)
        inputs = make_inputs(prob, device, 1.0)
        with torch.no_grad():
            t_new = triton.testing.do_bench(lambda: new(*inputs), return_mode="median")
            t_ref = triton.testing.do_bench(lambda: model(*inputs), return_mode="median")
            row["time"] = f"{t_new:.3f} ms"
            row["eager"] = f"{t_ref:.3f} ms"
            row["speedup"] = f"{t_ref / t_new:.2f}x"
            if ARGS.compile:
                cm = torch.compile(model)
                cm(*inputs)
                t_c = triton.testing.do_bench(lambda: cm(*inputs), return_mode="median")
                row["compile"] = f"{t_c:.3f} ms"
    return row


def main():
    problems = [ARGS.problem] if ARGS.problem else ORDER
    small = ARGS.device == "cpu" or ARGS.small
    rows = []
    for problem in problems:
        d = os.path.join(STARTERS, problem)
        files = [ARGS.starter] if ARGS.starter else sorted(f for f in os.listdir(d) if f.endswith(".py") and not f.startswith("_"))
        for f in files:
            path = os.path.join(d, f)
            print(f"--- {problem}/{f}", flush=True)
            try:
                row = check_one(problem, path, ARGS.device, small)
            except Exception as e:  # report and continue with the next starter
                row = {"problem": problem, "starter": f, "status": f"ERROR {type(e).__name__}",
                       "detail": "".join(traceback.format_exception(e))[-3000:]}
            rows.append(row)
            print("    " + "  ".join(f"{k}={v}" for k, v in row.items() if k not in ("problem", "starter", "detail")), flush=True)
            if row.get("detail"):
                print("    " + row["detail"].replace("\n", "\n    "), flush=True)
    cols = ["problem", "starter", "status", "rel_err", "time", "eager", "compile", "speedup"]
    cols = [c for c in cols if any(c in r for r in rows)]
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    print()
    print("  ".join(c.ljust(widths[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols))
    bad = [r for r in rows if not (r["status"].startswith("OK") or r["status"].startswith("nvcc OK")
                                   or r["status"].startswith("load_inline OK") or r["status"].startswith("skipped"))]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
