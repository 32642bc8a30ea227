"""Evaluate candidates on the GPU through the real judge and sandbox, one after another with a spare
runner kept (as a search's evaluator does), and record what each cost: outcome, phases, time, the
judge's clock against the runner's, peak GPU memory. Writes a markdown table and JSON.

    python benchmarks/judge_gpu.py --out DIR PROBLEM:CANDIDATE.py [PROBLEM:CANDIDATE.py ...]

CANDIDATE may be a path or a starter name (problems/starters/<problem>/<name>.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _candidate(problem: str, name: str) -> Path:
    path = Path(name)
    if path.is_file():
        return path
    starter = REPO / "problems" / "starters" / problem / (name if name.endswith(".py") else f"{name}.py")
    if starter.is_file():
        return starter
    raise SystemExit(f"no candidate {name} for {problem}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("items", nargs="+")
    parser.add_argument("--out", default=".")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--no-sandbox", action="store_true")
    args = parser.parse_args()

    import torch

    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate
    from kgen.judge.sandbox import SandboxMode, check_sandbox
    from kgen.judge.spares import SpareRunners
    from kgen.problems.problem import load_problem

    mode = SandboxMode.NONE if args.no_sandbox else SandboxMode.BWRAP
    check_sandbox(mode)
    major, minor = torch.cuda.get_device_capability()
    spares = SpareRunners(mode)
    rows = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for item in args.items:
        problem_name, _, name = item.partition(":")
        path = _candidate(problem_name, name)
        problem = load_problem(problem_name, "full")
        settings = EvalSettings(device="cuda", size="full", timeout_s=args.timeout, cuda_arch=f"{major}.{minor}",
                                sandbox=str(mode))
        started = time.monotonic()
        r = evaluate_candidate(problem, path.read_text(), settings, spares)
        wall = time.monotonic() - started
        timing = r.details.get("timing") or {}
        row = {"problem": problem_name, "candidate": path.name, "outcome": r.outcome, "message": r.message[:300],
               "runtime_ms": r.runtime_ms, "roofline_pct": r.roofline_pct, "norm_rel_err": r.norm_rel_err,
               "eval_s": round(wall, 2), "phases": r.details.get("phases"), "timing": timing,
               "gpu_memory": r.details.get("gpu_memory"), "ablation": r.details.get("ablation"),
               "compile_step": r.details.get("compile_step"), "gpu_kernels": r.details.get("gpu_kernels"),
               "torch_work_share": r.details.get("torch_work_share"), "sandbox": r.details.get("sandbox"),
               "steps": r.details.get("steps"), "runner_start": r.details.get("runner_start"),
               "samples": {k: r.details.get(k) for k in ("samples_ms", "judge_wall_ms", "null_run_ms")},
               "stderr_tail": (r.details.get("stderr_tail") or "")[-1500:]}
        rows.append(row)
        with open(out / "judge_gpu.jsonl", "a") as f:  # each evaluation as it ends: a cut-off call keeps them
            f.write(json.dumps(row, default=str) + "\n")
        print(json.dumps({k: row[k] for k in ("problem", "candidate", "outcome", "message", "runtime_ms", "eval_s",
                                              "phases", "ablation", "compile_step")}, default=str), flush=True)
        if row["stderr_tail"] and r.outcome not in ("correct",):
            print(row["stderr_tail"], flush=True)
    spares.close()
    (out / "judge_gpu.json").write_text(json.dumps(rows, indent=1, default=str))
    lines = ["| problem | candidate | outcome | runtime ms | roofline % | eval s | judge wall − runner ms | "
             "checked timed runs | peak GPU GB (judge / runner / arena) |", "|" + " --- |" * 9]
    for row in rows:
        t, m = row["timing"] or {}, row["gpu_memory"] or {}
        gb = lambda b: f"{b / 1e9:.2f}" if b else "-"
        lines.append(f"| {row['problem']} | {row['candidate']} | {row['outcome']} | "
                     f"{row['runtime_ms'] and round(row['runtime_ms'], 4)} | "
                     f"{row['roofline_pct'] and round(row['roofline_pct'], 1)} | {row['eval_s']} | "
                     f"{t.get('unexplained_ms')} | {t.get('checked_runs')} | "
                     f"{gb(m.get('judge_peak_bytes'))} / {gb(m.get('runner_peak_bytes'))} / "
                     f"{gb(m.get('arena_bytes'))} |")
    evals = [row["eval_s"] for row in rows[1:]] or [rows[0]["eval_s"]]
    lines.append(f"\nmedian evaluation time after the first: {statistics.median(evals):.2f} s "
                 f"(torch {torch.__version__}, {torch.cuda.get_device_name()})")
    (out / "judge_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
