"""One starter's forward under Nsight Compute, with the sections a kernel writer reads (speed of light,
compute and memory workload, warp states, occupancy): the detail kgen's own profile line (kgen.judge.ncu_profile)
condenses. Not sandboxed: for our own starters on the GPU machine only.

    ncu --profile-from-start off --section ... python benchmarks/ncu_starter.py PROBLEM STARTER.py

(benchmarks/ncu_starters.sh runs it for several starters). Full size, fresh random inputs, the
parameters copied from the reference Model as the judge does; two forwards to compile and warm, then one
between cudaProfilerStart and cudaProfilerStop.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kgen.problems.problem import load_problem


def main() -> None:
    problem_name, starter = sys.argv[1], Path(sys.argv[2])
    problem = load_problem(problem_name, "full")
    reference = problem.make_model(1, "cuda")
    spec = importlib.util.spec_from_file_location("starter", starter)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.ModelNew(*problem.init_inputs()).cuda()
    model.load_state_dict(reference.state_dict(), strict=False)
    inputs = problem.make_inputs(7, "cuda")
    with torch.no_grad():
        for _ in range(2):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    print(f"profiled {problem_name} {starter.name}", flush=True)


if __name__ == "__main__":
    main()
