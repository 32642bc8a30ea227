"""Judge one candidate through kgen's real evaluation stages (a local Ray cluster, kgen's evaluator actor on
this machine's GPU) and record what the driver's watchdog saw of the judge while it worked: each new step
its progress call reported (the step, its age, the candidate's charged seconds, the phases done), and the
result (outcome, message, phases, the judge's GPU memory plan and peaks). Run by benchmarks/watchdog_gpu.sh.

    python3 benchmarks/watchdog/watch_gpu.py PROBLEM CANDIDATE [--size full] [--timeout 90] --out FILE.json
"""
import argparse
import json
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem")
    parser.add_argument("candidate")
    parser.add_argument("--size", default="full")
    parser.add_argument("--timeout", type=float, default=90.0, help="the candidate's time limit (the harness's 90 s)")
    parser.add_argument("--sandbox", default="bwrap")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from kgen.core.records import EvalSettings
    from kgen.problems.problem import load_problem
    from kgen.search import cluster as ray_cluster
    from kgen.search.workers import Job, Stages

    problem = load_problem(args.problem, args.size)
    stages = Stages(ray_cluster.connect(None), str(problem.path), problem.size, problem.source_hash)
    device = stages.device()
    print(f"evaluator on {device.name}; {args.problem} ({args.size}); time limit {args.timeout:g} s", flush=True)
    settings = EvalSettings(device="cpu" if device.name == "cpu" else "cuda", size=args.size, timeout_s=args.timeout,
                            sandbox=args.sandbox, cuda_arch=device.cuda_arch)
    stages.prestart(args.sandbox, "triton")
    started = time.monotonic()
    stages.submit([Job(1, Path(args.candidate).read_text())], settings)
    seen, result, last_steps = [], None, None
    while stages.in_flight:
        for event in stages.poll():
            print(f"{time.monotonic() - started:7.1f} s  {event.kind} {event.note}", flush=True)
            if event.kind == "done":
                result = event.result
        for watch in list(stages._watches.values()):
            p = watch.progress
            if p is not None and p.steps != last_steps:
                last_steps = p.steps
                row = dict(t_s=round(time.monotonic() - started, 1), step=p.step, step_age_s=p.step_age_s,
                           step_limit_s=p.step_limit_s, charged_s=p.charged_s, elapsed_s=p.elapsed_s,
                           waited_s=p.waited_s, phases=list(p.phases), tensor_bytes=p.tensor_bytes)
                seen.append(row)
                print(f"{row['t_s']:7.1f} s  watchdog saw: {p.step} ({p.step_age_s:.1f} s in; charged "
                      f"{p.charged_s:.1f} s; phases {','.join(p.phases) or '-'})", flush=True)
    wall_s = round(time.monotonic() - started, 1)
    stages.close()
    details = result.details if result is not None else {}
    report = dict(outcome=result.outcome if result else None, message=result.message if result else None,
                  wall_s=wall_s, eval_s=result.eval_s if result else None,
                  runtime_ms=result.runtime_ms if result else None, phases=details.get("phases"),
                  gpu_memory_plan=details.get("gpu_memory_plan"), float64_reference=details.get("float64_reference"),
                  gpu_memory=details.get("gpu_memory"), steps=details.get("steps"), watchdog_saw=seen)
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: report[k] for k in ("outcome", "wall_s", "eval_s", "runtime_ms", "phases", "gpu_memory_plan",
                                             "float64_reference", "gpu_memory")}, indent=1, default=str))
    print(f"message: {report['message']}")
    return 0 if result is not None else 1


if __name__ == "__main__":
    sys.exit(main())
