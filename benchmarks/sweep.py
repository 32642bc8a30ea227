"""Sweep a starter's tunables on the GPU, in one process: every combination checked and timed.

    python benchmarks/sweep.py matmul triton_3xtf32_presplit.py --grid BLOCK_K=32,64 --grid NUM_STAGES=3,4
    python benchmarks/sweep.py conv2d triton_implicit_gemm.py --grid BLOCK_N=32,128 --json $OUT/conv2d.json
    python benchmarks/sweep.py conv2d triton_3xfp16_s2d.py --combo MODE=2,BLOCK_M=64,NUM_WARPS=4 --combo MODE=3

Each combination is the starter's source with the tunables rewritten the way the offline proposer
rewrites them (kgen.proposers.offline.apply_changes), exec'd as a fresh module, run on fresh random
inputs and compared with the reference Model run in float64 (normwise relative error, and the scaled
x100 inputs), then timed with triton.testing.do_bench (median, L2 flushed between runs) next to eager.
This is an exploration tool for starter authors, trusted code only: it does not sandbox, trace or
poison like `kgen eval`, whose verdict is the one the search records. A CUDA starter is rebuilt per
combination (load_inline), so keep its grid small.
"""
import argparse
import importlib.util
import itertools
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

GPU = torch.cuda.is_available()
if not GPU:  # a dry run of the sweep itself: small size, Triton's interpreter, wall-clock "timing"
    os.environ["TRITON_INTERPRET"] = "1"
DEVICE = "cuda" if GPU else "cpu"

import triton  # noqa: E402

from kgen.harness.runner import copy_weights  # noqa: E402
from kgen.problems.problem import load_problem, problems_dir  # noqa: E402
from kgen.proposers.offline import apply_changes, find_tunables  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("problem")
    p.add_argument("starter", help="file name inside problems/starters/<problem>/, or a path")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2",
                   help="values to try for one tunable (others keep the source's value)")
    p.add_argument("--extra", action="append", default=[], metavar="'NAME=V NAME=V'",
                   help="one more combination after the grid's (tunables it does not name keep the source's value)")
    p.add_argument("--combo", action="append", default=[], metavar="NAME=V[,NAME=V...]",
                   help="one explicit setting (repeatable), tried on top of each --grid combination")
    p.add_argument("--size", default="full", choices=["full", "small"])
    p.add_argument("--tol", type=float, default=1e-5, help="normwise relative error allowed")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--budget-s", type=float, default=1e9, help="stop starting new combinations after this long")
    return p.parse_args()


def bench_ms(fn):
    if GPU:
        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def normwise(out, ref):
    out = out.double()
    return float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))


def load_variant(source, path, tag):
    spec = importlib.util.spec_from_loader(f"kgen_sweep_{tag}", loader=None, origin=path)
    mod = importlib.util.module_from_spec(spec)
    mod.__file__ = path
    exec(compile(source, path, "exec"), mod.__dict__)
    return mod


def matched_model_new(mod, problem, ref_model):
    torch.manual_seed(0)
    with torch.device(DEVICE):
        new = mod.ModelNew(*problem.init_inputs())
    copy_weights(new, ref_model.state_dict())  # the harness's rule: by name, else by position, else where names agree
    return new.eval()


def main():
    args = parse_args()
    problem = load_problem(args.problem, args.size if GPU else "small")
    path = args.starter if os.path.sep in args.starter else str(problems_dir() / "starters" / args.problem / args.starter)
    source = open(path).read()
    tunables = {t.name: t for t in find_tunables(source)}
    grid = []
    for item in args.grid:
        name, _, values = item.partition("=")
        if name not in tunables:
            sys.exit(f"sweep: {name} is not a tunable of {path} (tunables: {', '.join(tunables)})")
        grid.append((tunables[name], [int(v) for v in values.split(",")]))
    explicit = []
    for item in args.combo:
        setting = {}
        for pair in item.split(","):
            name, _, value = pair.partition("=")
            if name not in tunables:
                sys.exit(f"sweep: {name} is not a tunable of {path} (tunables: {', '.join(tunables)})")
            setting[name] = int(value)
        explicit.append(setting)

    model = problem.make_model(seed=0, device=DEVICE)
    ref64 = problem.make_model(seed=0, device=DEVICE).double()
    input_sets = [problem.make_inputs(seed, device=DEVICE, scale=scale) for seed, scale in ((1, 1.0), (2, 100.0))]
    with torch.no_grad():
        refs = [ref64(*[x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in xs])
                for xs in input_sets]
        eager_ms = bench_ms(lambda: model(*input_sets[0]))
    print(f"{args.problem} {os.path.basename(path)} on {torch.cuda.get_device_name() if GPU else 'CPU (interpreter)'}: eager {eager_ms:.4f} ms",
          flush=True)

    rows = []

    def write_json():  # after every row too: a sweep killed by its caller's timeout keeps what it measured
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"problem": args.problem, "starter": os.path.basename(path),
                           "device": torch.cuda.get_device_name() if GPU else "cpu",
                           "torch": torch.__version__, "triton": triton.__version__, "eager_ms": eager_ms,
                           "rows": rows}, f, indent=1)

    started = time.time()
    combos = [{**{t.name: v for (t, _), v in zip(grid, combo)}, **extra}
              for combo in (list(itertools.product(*[values for _, values in grid])) or [()])
              for extra in (explicit or [{}])]
    for item in args.extra:  # single combinations after the grid's (tunables not named keep the source's value)
        setting = {}
        for pair in item.split():
            name, _, value = pair.partition("=")
            if name not in tunables:
                sys.exit(f"sweep: {name} is not a tunable of {path} (tunables: {', '.join(tunables)})")
            setting[name] = int(value)
        combos.append(setting)
    for i, setting in enumerate(combos):
        if time.time() - started > args.budget_s:
            print(f"budget spent: {len(combos) - i} combinations not run", flush=True)
            break
        row = {"setting": setting}
        try:
            mod = load_variant(apply_changes(source, [(tunables[k], v) for k, v in setting.items()]), path, i)
            new = matched_model_new(mod, problem, model)
            with torch.no_grad():
                errs = []
                for xs, ref in zip(input_sets, refs):
                    out = new(*[x.clone() if torch.is_tensor(x) else x for x in xs])
                    if GPU:
                        torch.cuda.synchronize()
                    errs.append(normwise(out, ref))
                row["err"] = max(errs)
                row["ms"] = bench_ms(lambda: new(*input_sets[0]))
            row["ok"] = row["err"] <= args.tol
            row["speedup_eager"] = eager_ms / row["ms"]
        except Exception as exc:  # one bad combination (no resources, compile error) must not end the sweep
            row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ''}"
            traceback.print_exc(limit=1)
        rows.append(row)
        shown = " ".join(f"{k}={v}" for k, v in setting.items()) or "(as written)"
        if "ms" in row:
            print(f"  {shown:60s} {row['ms']:8.4f} ms  err {row['err']:.2e} {'ok' if row['ok'] else 'WRONG'}"
                  f"  {row['speedup_eager']:.2f}x eager", flush=True)
        else:
            print(f"  {shown:60s} failed: {row['error']}", flush=True)
        write_json()

    good = sorted((r for r in rows if r.get("ok")), key=lambda r: r["ms"])
    if good:
        print(f"best: {good[0]['setting']} {good[0]['ms']:.4f} ms ({good[0]['speedup_eager']:.2f}x eager {eager_ms:.4f})")
    write_json()

if __name__ == "__main__":
    main()
