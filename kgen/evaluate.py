"""Evaluate one candidate: static checks here, then compile, trace, verify and time in an isolated
child process (kgen.sandbox running kgen.eval_worker). Nothing the candidate does raises here; only
bad input to kgen (an unknown problem, a bad device) raises KgenError.

Outcomes: static_reject, compile_error, runtime_error, timeout, incorrect, correct, suspicious (a
correct candidate faster than the roofline floor: physically impossible, kept off the leaderboard),
and not_run: a CUDA candidate on a machine whose torch has no CUDA compiles with nvcc (so compile
errors are still caught and reported as compile_error) but is not loaded, run, verified or timed;
it is never called correct, and its runtime_ms is null.

On the CPU, Triton kernels run in Triton's interpreter (TRITON_INTERPRET=1 in the child's
environment, before triton is imported) and no time is claimed.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional, Union

from kgen.errors import KgenError
from kgen.problems import Problem, load_problem
from kgen.records import EvalResult, EvalSettings
from kgen.sandbox import SandboxRun, run_worker
from kgen.static_checks import check_source, detect_language as _detect_language

STDERR_TAIL_CHARS = 2000


def detect_language(source: str) -> str:
    """'triton' | 'cuda' | 'unknown'."""
    return _detect_language(source)


def _problem(problem: Union[str, Problem], settings: EvalSettings) -> Problem:
    if isinstance(problem, Problem):
        return problem
    if not isinstance(problem, str):
        raise KgenError(f"not a problem: {problem!r}")
    return load_problem(problem, settings.size)


def _check_device(device: str) -> str:
    if device == "cpu":
        return device
    if not (device == "cuda" or device.startswith("cuda:")):
        raise KgenError(f"unknown device '{device}' (choose cuda or cpu)")
    import torch

    if not torch.cuda.is_available():
        raise KgenError("--device cuda: no CUDA GPU is available here (use --device cpu)")
    return device


def _child_env(device: str) -> dict[str, str]:
    env = {"TRITON_INTERPRET": "1"} if device == "cpu" else {}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _base_result(problem: Problem, settings: EvalSettings, language: str) -> EvalResult:
    return EvalResult(outcome="runtime_error", language=language if language != "unknown" else None,
                      device=settings.device, size=problem.size)


def _job(mode: str, problem: Problem, source: str, settings: EvalSettings) -> dict[str, Any]:
    return {"mode": mode, "problem_path": str(problem.path), "size": problem.size, "source": source,
            "device": settings.device, "rtol": settings.rtol, "trials": settings.trials,
            "min_timed_runs": settings.min_timed_runs, "min_timed_s": settings.min_timed_s,
            "cuda_arch": settings.cuda_arch}


def _failed_run(run: SandboxRun, result: EvalResult, timeout_s: float) -> EvalResult:
    """A child that timed out, crashed or sent no valid result."""
    if run.timed_out:
        result.outcome = "timeout"
        result.message = f"no result within the {timeout_s:g} s time limit (the process group was killed)"
    else:
        result.outcome = "runtime_error"
        stderr = run.stderr_tail.strip()[-STDERR_TAIL_CHARS:]
        result.message = (f"the evaluation process {run.exit_description()} without a result ({run.result_problem})"
                          + (f"; its stderr ended with:\n{stderr}" if stderr else ""))
    return result


def _device_name(device: str) -> str:
    if device == "cpu":
        return "cpu"
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def evaluate_candidate(problem: Union[str, Problem], source: str, settings: EvalSettings) -> EvalResult:
    """Compile, check, verify and (on a GPU) time one candidate against `problem`."""
    started = time.monotonic()
    problem = _problem(problem, settings)
    if not isinstance(source, str):
        raise KgenError("candidate source must be text")
    device = _check_device(settings.device)
    verdict = check_source(source)
    result = _base_result(problem, settings, verdict.language)
    if verdict.rejection is not None:
        result.outcome, result.message = "static_reject", verdict.rejection
        result.eval_s = time.monotonic() - started
        return result
    run = run_worker(_job("evaluate", problem, source, settings), settings.timeout_s, device, _child_env(device))
    result.details["sandbox"] = {"isolation": " ".join(run.isolation) or "none (unshare unavailable)",
                                 "wall_s": round(run.wall_s, 2)}
    if run.stdout_tail:
        result.details["stdout_tail"] = run.stdout_tail[-STDERR_TAIL_CHARS:]
    if run.stderr_tail:
        result.details["stderr_tail"] = run.stderr_tail[-STDERR_TAIL_CHARS:]
    if run.result is None:
        result = _failed_run(run, result, settings.timeout_s)
    else:
        _fill_from_worker(result, run.result)
    if device != "cpu":
        _fill_speed(result, problem, settings)
        result.device = _device_name(device)
    result.eval_s = time.monotonic() - started
    return result


def _fill_from_worker(result: EvalResult, sent: dict[str, Any]) -> None:
    from kgen.records import OUTCOMES, NOT_RUN

    outcome = sent.get("outcome")
    result.outcome = outcome if outcome in OUTCOMES or outcome == NOT_RUN else "runtime_error"
    result.message = str(sent.get("message") or "")
    for name in ("max_abs_err", "max_rel_err", "norm_rel_err", "atol", "rtol", "runtime_ms", "torch_version",
                 "triton_version", "cuda_version"):
        if sent.get(name) is not None:
            setattr(result, name, sent[name])
    details = sent.get("details") or {}
    result.torch_ops = list(details.pop("torch_ops", []) or [])
    result.details.update(details)
    if sent.get("worker_start") is not None:
        result.details["gpu_start"], result.details["gpu_end"] = sent["worker_start"], sent["worker_end"]
    if result.outcome != "correct":
        result.runtime_ms = None


def _fill_speed(result: EvalResult, problem: Problem, settings: EvalSettings) -> None:
    """Speedups and roofline %; a correct time below the roofline floor is `suspicious`."""
    result.eager_ms, result.compile_ms = settings.baseline_eager_ms, settings.baseline_compile_ms
    if result.outcome != "correct" or not result.runtime_ms:
        return
    if result.eager_ms:
        result.speedup_eager = result.eager_ms / result.runtime_ms
    if result.compile_ms:
        result.speedup_compile = result.compile_ms / result.runtime_ms
    floor = settings.floor_ms
    if floor is None:
        from kgen.roofline import compute_roofline, device_ceilings

        floor = compute_roofline(problem).floor_ms(device_ceilings(), settings.rtol)
    if floor:
        result.roofline_pct = floor / result.runtime_ms * 100.0
        result.details["floor_ms"] = floor
        if result.runtime_ms < floor:
            result.outcome = "suspicious"
            result.message = (f"measured {result.runtime_ms:.4g} ms, below the roofline floor of {floor:.4g} ms "
                              "(the least time the bytes and FLOPs need on this device): physically impossible, "
                              "so the timing cannot be trusted; kept off the leaderboard")


def prebuild(problem: Union[str, Problem], source: str, settings: EvalSettings,
             info: Optional[dict[str, Any]] = None) -> Optional[EvalResult]:
    """The CPU-side stage before the GPU: static checks, then CUDA sources built into the shared
    build cache (a child process; the cache is locked per key, so prebuilds may run in parallel).
    Returns a static_reject / compile_error result, or None when the candidate may go on. Triton
    kernels are JIT-compiled at their first launch in the GPU stage (compiling them ahead needs the
    launch's argument types), so a Triton candidate that passes the static checks goes on.
    `info`, when given, receives the stage's seconds and the builds it made."""
    started = time.monotonic()
    info = info if info is not None else {}
    problem = _problem(problem, settings)
    verdict = check_source(source)
    result = _base_result(problem, settings, verdict.language)
    if verdict.rejection is not None:
        result.outcome, result.message = "static_reject", verdict.rejection
        result.compile_s = time.monotonic() - started
        return result
    if verdict.language != "cuda":
        return None
    env = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    run = run_worker(_job("prebuild", problem, source, settings), settings.timeout_s, "cpu", env)
    info["compile_s"] = round(time.monotonic() - started, 3)
    info["builds"] = (run.result or {}).get("builds") or []
    if run.result is None:
        info["problem"] = "timed out" if run.timed_out else run.exit_description()
    if run.result and run.result.get("build_error"):
        result.outcome = "compile_error"
        result.message = f"CUDA build failed:\n{run.result['build_error']}"
        result.compile_s = time.monotonic() - started
        return result
    return None
