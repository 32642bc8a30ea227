"""Where one trial's judge work goes (issue 26): the pieces the Judge runs for every verification trial, every
checked timed run and each ablation call, timed one by one with kgen's own functions on a problem's inputs.

    python3 benchmarks/judge_work.py [--problem softmax] [--size full] [--reps 5] [--json OUT.json]

On an H200 a softmax trial (4096 x 65536 fp32) cost the judge ~0.11 s (each trial's step in
benchmarks/results/h200x2_2026-11-26b/scaling/bench-1gpu.db), ~14 times per candidate (6 trials, ~6 checked
timed runs, the ablation's calls): this says which of make_inputs, the float64 reference, torch's own forward,
own_error, compare and the unchanged-inputs check take it. Trusted code only; no sandbox, no runner:
the candidate's output is torch's own (what a correct candidate returns), so compare does its full work.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from kgen.judge import verify
from kgen.problems.problem import load_problem


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, reps: int) -> tuple[float, object]:
    """The median ms of `reps` calls after one warm-up, and the last call's value."""
    value = fn()
    times = []
    for _ in range(reps):
        _sync(device)
        started = time.perf_counter()
        value = fn()
        _sync(device)
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="softmax")
    parser.add_argument("--size", default=None, help="full with a GPU, small without (default)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    problem = load_problem(args.problem, args.size or ("full" if device.type == "cuda" else "small"))
    model = problem.make_model(1, device)
    model64 = problem.make_model(1, device).to(torch.float64)
    ms: dict[str, float] = {}
    ms["make_inputs"], inputs = timed(lambda: problem.make_inputs(2, device), device, args.reps)
    ms["float64_reference"], refs = timed(lambda: verify.float64_outputs_fitting(model64, inputs), device, args.reps)
    ms["own_forward"], owns = timed(lambda: verify.dtype_outputs(model, inputs), device, args.reps)
    ms["own_error"], own = timed(lambda: verify.own_error(owns[0], refs[0]), device, args.reps)
    ms["reference_and_own_error"], _ = timed(lambda: verify.reference_and_own_error(model, model64, inputs), device,
                                             args.reps)
    out = owns[0].clone()
    rtol = verify.default_rtol(out.dtype)
    ms["compare"], comparison = timed(lambda: verify.compare(out, refs[0], out.dtype, rtol, own=own), device,
                                      args.reps)
    copies = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    ms["same_tensors_inputs"], _ = timed(lambda: verify.same_tensors(copies, inputs), device, args.reps)
    per_trial = ms["make_inputs"] + ms["reference_and_own_error"] + ms["compare"] + ms["same_tensors_inputs"]
    report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "problem": problem.name, "size": problem.size,
              "output_elements": int(out.numel()), "compare_ok": bool(comparison.ok), "median_ms": ms,
              "per_trial_ms": round(per_trial, 2),
              "errors_share": round((ms["own_error"] + ms["compare"]) / per_trial, 3)}
    for name, value in ms.items():
        print(f"  {name:24s} {value:9.2f} ms")
    print(f"  one trial's judge work ~{per_trial:.1f} ms (inputs, reference and torch's own error, compare, "
          f"inputs unchanged); own_error + compare {report['errors_share']:.0%} of it; compare ok: {comparison.ok}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
