"""Where a sandboxed runner's start and `kgen eval`'s load spend their seconds, piece by piece, each in a fresh
process (issue 26: `kgen eval` with the baselines in the DB waits for its runner's start, 10-11 s of imports
on the H100 box against ~4 s on the 2-core box).

    python3 benchmarks/start_parts.py [REPEATS]

Prints one line per variant and repeat: the seconds of each step in order. Variants:
- runner: the runner's _start_up steps (torch, triton, kgen's harness, cpp_extension, OpTrace's first use) and
  _warm_gpu's (CUDA context, Triton warm-up kernel, the profiler's first session), as kgen.harness.runner does them;
- runner-parallel: the same, three at once (the runner, the compile step, the parent start together in kgen eval);
- parent: `kgen eval`'s parent imports (kgen.judge.evaluate) and the judge's warm-up (kgen.cli.evaluate._warm_judge);
- dynamo: what imports torch._dynamo (a TorchDispatchMode's first dispatch, torch.profiler's first session).
"""
from __future__ import annotations

import subprocess
import sys
import time

# each variant's seconds, step by step: mark(name) after each
MARKS = r"""
import os, sys, time, contextlib
marks = []
t = time.perf_counter()
def mark(name):
    global t
    now = time.perf_counter(); marks.append(f"{name} {now - t:.2f}"); t = now
"""

RUNNER = MARKS + r"""import torch; mark("torch")
import triton; mark("triton")
import kgen.harness.cuda_build, kgen.harness.gate, kgen.harness.pins, kgen.harness.trace; mark("kgen")
import torch.utils.cpp_extension; mark("cpp_extension")
from kgen.harness.trace import OpTrace
with OpTrace():
    torch.ones(2).add(1)
mark("optrace"); marks.append(f"dynamo={'torch._dynamo' in sys.modules}")
if torch.cuda.is_available():
    probe = torch.zeros(1, device="cuda"); mark("cuda")
    from kgen.harness.runner import _triton_warm_up, _warm_profiler
    _triton_warm_up(torch.device("cuda")); mark("triton_warm")
    _warm_profiler(probe); mark("profiler")
    marks.append(f"dynamo={'torch._dynamo' in sys.modules} inductor={'torch._inductor' in sys.modules}")
print(" ".join(marks))
"""

PARENT = MARKS + r"""
import kgen.cli.evaluate; mark("cli")
from kgen.judge.evaluate import evaluate_one; mark("judge_imports")
from kgen.problems.problem import load_problem
load_problem("softmax", "full"); mark("problem")
import torch
if torch.cuda.is_available():
    kgen.cli.evaluate._warm_judge("cuda"); mark("warm_judge")
marks.append(f"dynamo={'torch._dynamo' in sys.modules}")
print(" ".join(marks))
"""

DYNAMO = r"""
import sys, time, traceback, torch
from torch.utils._python_dispatch import TorchDispatchMode
print("torch", torch.__version__, "skip flag:", hasattr(TorchDispatchMode, "_should_skip_dynamo"))
class Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
t = time.perf_counter()
with Mode():
    torch.ones(2).add(1)
print(f"a dispatch mode's first use: {time.perf_counter() - t:.2f} s, dynamo={'torch._dynamo' in sys.modules}")
if torch.cuda.is_available():
    x = torch.zeros(1, device="cuda")
    t = time.perf_counter()
    with torch.autograd.profiler.profile(use_kineto=True, use_cpu=False, use_device="cuda"):
        x.add_(0); torch.cuda.synchronize()
    print(f"autograd profiler's first session: {time.perf_counter() - t:.2f} s, "
          f"inductor={'torch._inductor' in sys.modules}")
    t = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        x.add_(0); torch.cuda.synchronize()
    print(f"torch.profiler's session after it: {time.perf_counter() - t:.2f} s, "
          f"inductor={'torch._inductor' in sys.modules}")
"""


def run(label: str, code: str, copies: int = 1) -> None:
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(copies)]
    for p in procs:
        out = p.communicate()[0].strip().splitlines()
        print(f"{label}: {out[-1] if out else '(no output)'}", flush=True)
        for line in out[:-1]:
            if "USDT" not in line:
                print(f"  {line}")
    print(f"  ({label}: {time.perf_counter() - started:.2f} s wall)", flush=True)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    run("dynamo", DYNAMO)
    for _ in range(repeats):
        run("runner", RUNNER)
        run("parent", PARENT)
    run("runner-parallel", RUNNER, copies=3)


if __name__ == "__main__":
    main()
