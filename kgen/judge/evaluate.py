"""Evaluate one candidate: static checks here, then the judge (kgen.judge.judge, trusted, in this process)
with the candidate in sandboxed processes of its own (kgen.harness, under kgen.judge.sandbox). Nothing the
candidate does raises here; only bad input to kgen (an unknown problem, a bad device, no sandbox)
raises KgenError, and a fault of kgen's own becomes the outcome `harness_error`.

Outcomes: static_reject, compile_error, runtime_error, timeout, incorrect, correct, suspicious (a
correct candidate faster than writing its outputs once allows, or whose reported time the judge's clock does not
bear out), harness_error, and not_run: a CUDA candidate on a machine whose torch has no CUDA compiles
with nvcc (so compile errors are still caught and reported as compile_error) but is not loaded, run,
verified or timed; it is never called correct, and its runtime_ms is null.

On the CPU, Triton kernels run in Triton's interpreter at the problem's small size and no time is
claimed.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Optional, Union

from kgen.core.errors import KgenError
from kgen.core.records import NOT_RUN, OUTCOMES, EvalResult, EvalSettings, Outcome
from kgen.judge.sandbox import SandboxMode, check_sandbox
from kgen.judge.static_checks import check_source
from kgen.judge.static_checks import detect_language as _detect_language
from kgen.problems.problem import Problem, load_problem


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


def sandbox_mode(settings: EvalSettings) -> SandboxMode:
    try:
        return SandboxMode(settings.sandbox)
    except ValueError:
        raise KgenError(f"unknown sandbox '{settings.sandbox}' (choose bwrap or none)") from None


def _base_result(problem: Problem, settings: EvalSettings, language: str) -> EvalResult:
    return EvalResult(outcome=Outcome.RUNTIME_ERROR.value, language=language if language != "unknown" else None,
                      device=settings.device, size=problem.size)


def _device_name(device: str) -> str:
    if device == "cpu":
        return "cpu"
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def _versions() -> dict[str, Optional[str]]:
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"torch_version": torch.__version__, "triton_version": triton_version, "cuda_version": torch.version.cuda}


def evaluate_candidate(problem: Union[str, Problem], source: str, settings: EvalSettings,
                       spares: Any = None, on_phase: Optional[Callable[[str, float], None]] = None,
                       heartbeat: Any = None) -> EvalResult:
    """Compile, check, verify and (on a GPU) time one candidate against `problem`. `spares`
    (kgen.judge.spares.SpareRunners) keeps a started sandbox ready for the next call; `on_phase(name,
    seconds)` is told each of the judge's phases as it ends; `heartbeat` (kgen.judge.heartbeat.Heartbeat)
    each step as it starts, for a watchdog in another thread."""
    started = time.monotonic()
    problem = _problem(problem, settings)
    if not isinstance(source, str):
        raise KgenError("candidate source must be text")
    device = _check_device(settings.device)
    mode = sandbox_mode(settings)
    check_sandbox(mode)
    verdict = check_source(source)
    result = _base_result(problem, settings, verdict.language)
    result.details["sandbox"] = {"kind": str(mode)}
    if verdict.rejection is not None:
        result.outcome, result.message = Outcome.STATIC_REJECT.value, verdict.rejection
        result.eval_s = time.monotonic() - started
        return result
    from kgen.judge.judge import Judge
    from kgen.judge.verdict import HarnessFault

    try:
        sent = Judge(problem, source, verdict.language, settings, mode, spares, on_phase, heartbeat).run()
    except HarnessFault as e:
        sent = {"outcome": Outcome.HARNESS_ERROR.value, "message": f"kgen's harness failed, not the candidate: {e}"}
    except Exception as e:  # noqa: BLE001 - a bug of ours is never the candidate's outcome
        sent = {"outcome": Outcome.HARNESS_ERROR.value,
                "message": f"kgen's judge failed, not the candidate: {type(e).__name__}: {e}\n"
                           + "".join(traceback.format_exc().splitlines(keepends=True)[-12:])}
    _fill_from_judge(result, sent)
    if not result.torch_version:
        for name, value in _versions().items():
            setattr(result, name, value)
    if device != "cpu":
        _fill_speed(result, problem, settings)
        result.device = _device_name(device)
    result.eval_s = time.monotonic() - started
    return result


def evaluate_one(problem: Problem, source: str, settings: EvalSettings, *,
                 baselines: Optional[Callable[..., Optional[tuple]]] = None,
                 on_phase: Optional[Callable[[str, float], None]] = None, spares: Any = None,
                 before_judge: Optional[Callable[[], None]] = None) -> EvalResult:
    """`kgen eval`: one candidate, with the fixed costs cut. The static checks come first: a candidate
    they reject starts nothing (no baselines, no reference, no sandbox, nothing on the GPU). Then the
    sandboxes this one evaluation takes all start at once (with no spares beyond them), and on a GPU the
    baselines (eager and torch.compile, unless `baselines` is None: `baselines(problem, device,
    max_autotune=False)` gives them, as kgen.store.baselines.get_baselines_at does from a results DB, where
    they are timed once per problem, device and versions, then read back) are compiled and timed in a
    thread beside the judge: the GPU's timing lock (kgen.judge.gpu_lock) keeps their timed runs and the
    candidate's apart, so only those wait for each other. `details["breakdown"]` holds where the seconds
    went: static_s, baselines_s (beside the judge), baselines_wait_s (after it, waiting for them), close_s
    (stopping the sandboxes left over), then the judge's phases; `on_phase(name, seconds)` hears each of
    those as it ends (the baselines' when they are in). `spares`: a kgen.judge.spares.SpareRunners (depth 0)
    whose sandboxes began to start earlier (kgen.judge.spares.start_early); what it lacks is started here, and
    it is closed here. `before_judge()`: called once the baselines started, before the judge (`kgen eval` waits there
    for its judge's one-time GPU work, done beside the problem's load), its seconds kept as `warm_wait_s`."""
    started = time.monotonic()
    verdict = check_source(source)
    static_s = round(time.monotonic() - started, 3)
    if verdict.rejection is not None:  # nothing else is checked or started, the device included
        result = _base_result(problem, settings, verdict.language)
        result.outcome, result.message = Outcome.STATIC_REJECT.value, verdict.rejection
        result.eval_s = static_s
        result.details["breakdown"] = {"static_s": static_s}
        return result
    from kgen.judge.spares import SpareRunners, processes_per_evaluation, spare_key

    device = _check_device(settings.device)
    mode = sandbox_mode(settings)
    check_sandbox(mode)
    if spares is None or spares.mode is not mode:
        if spares is not None:
            spares.close()
        spares = SpareRunners(mode, depth=0)
    breakdown: dict[str, Any] = {"static_s": static_s}
    timed: dict[str, Any] = {}
    thread = None
    try:
        spares.prestart(spare_key(device), processes_per_evaluation(verdict.language, device))
        if baselines is not None and device != "cpu":
            def time_them() -> None:
                mark = time.monotonic()
                try:
                    timed["times"] = baselines(problem, device, max_autotune=False)
                except BaseException as e:  # noqa: BLE001 - raised in the caller's thread, below
                    timed["error"] = e
                timed["seconds"] = round(time.monotonic() - mark, 3)
                if on_phase is not None:
                    with contextlib.suppress(Exception):
                        on_phase("baselines_s", timed["seconds"])

            thread = threading.Thread(target=time_them, daemon=True, name="kgen-eval-baselines")
            thread.start()
        if before_judge is not None:
            mark = time.monotonic()
            before_judge()
            breakdown["warm_wait_s"] = round(time.monotonic() - mark, 3)
        result = evaluate_candidate(problem, source, settings, spares, on_phase)
        if thread is not None:
            mark = time.monotonic()
            thread.join()
            breakdown["baselines_s"], breakdown["baselines_wait_s"] = timed.get("seconds"), round(
                time.monotonic() - mark, 3)
            if "error" in timed:
                raise timed["error"]
            if timed.get("times") is not None:
                settings.baseline_eager_ms, settings.baseline_compile_ms = timed["times"][0], timed["times"][1]
                result.set_baselines(settings.baseline_eager_ms, settings.baseline_compile_ms)
    finally:
        closing = time.monotonic()
        spares.close()
    breakdown["close_s"] = round(time.monotonic() - closing, 3)  # the sandboxes left over, stopped
    phases = result.details.get("phases")
    breakdown.update(phases if isinstance(phases, dict) else {})
    result.details["breakdown"] = breakdown
    return result


def _fill_from_judge(result: EvalResult, sent: dict[str, Any]) -> None:
    outcome = sent.get("outcome")
    result.outcome = outcome if outcome in OUTCOMES or outcome == NOT_RUN else Outcome.RUNTIME_ERROR.value
    result.message = str(sent.get("message") or "")
    for name in ("max_abs_err", "max_rel_err", "norm_rel_err", "atol", "rtol", "runtime_ms", "torch_version",
                 "triton_version", "cuda_version"):
        if sent.get(name) is not None:
            setattr(result, name, sent[name])
    details = dict(sent.get("details") or {})
    result.torch_ops = list(details.pop("torch_ops", []) or [])
    result.details.update(details)
    if result.outcome not in (Outcome.CORRECT.value, Outcome.SUSPICIOUS.value):
        result.runtime_ms = None


def _fill_speed(result: EvalResult, problem: Problem, settings: EvalSettings) -> None:
    """Speedups and roofline %; a correct time below the time its outputs take to write is `suspicious`, one
    below the reference's roofline floor only marked as less work than the reference (kgen.problems.roofline)."""
    result.set_baselines(settings.baseline_eager_ms, settings.baseline_compile_ms)
    if result.outcome != Outcome.CORRECT.value or not result.runtime_ms:
        return
    floor, impossible, roof, ceilings = settings.floor_ms, settings.impossible_ms, None, None
    if floor is None:
        from kgen.problems.roofline import compute_roofline, device_ceilings

        roof, ceilings = compute_roofline(problem), device_ceilings()
        floor, impossible = roof.floor_ms(ceilings, settings.rtol), roof.impossible_ms(ceilings)
    if floor:
        result.roofline_pct = floor / result.runtime_ms * 100.0
        result.details["floor_ms"] = floor
        if impossible and result.runtime_ms < impossible:
            result.outcome = Outcome.SUSPICIOUS.value
            result.message = (f"measured {result.runtime_ms:.4g} ms, less than writing the outputs once takes on "
                              f"this device ({impossible:.4g} ms at the measured bandwidth): physically impossible, "
                              "so the timing cannot be trusted; kept off the leaderboard")
        elif result.runtime_ms < floor:
            result.details["less_work_than_reference"] = True
            result.message = (f"faster than the reference's roofline floor ({floor:.4g} ms, its bytes and FLOPs "
                              "as the reference computes them): the kernel does less work than the reference (an "
                              "algebraic shortcut, or input it need not read); its outputs matched on every trial")
    _fill_achieved(result, problem, settings, roof, ceilings)


def _fill_achieved(result: EvalResult, problem: Problem, settings: EvalSettings, roof=None, ceilings=None) -> None:
    """The kernel profile's achieved bandwidth and FLOP rate (kgen.judge.kernel_profile), from the roofline
    and ceilings `_fill_speed` worked out (or worked out here, where the settings brought the floor):
    advisory, so any failure to work them out leaves them out."""
    profile = result.details.get("kernel_profile")
    if not isinstance(profile, dict):
        return
    try:
        from kgen.judge import kernel_profile
        from kgen.problems.roofline import compute_roofline, device_ceilings

        if roof is None:
            roof, ceilings = compute_roofline(problem), device_ceilings(measure=False)
        kernel_profile.add_achieved(profile, roof.bytes_moved, roof.flops, result.runtime_ms,
                                    ceilings.bandwidth_bytes_per_s if ceilings else None,
                                    roof.compute_rate(ceilings, settings.rtol) if ceilings else None)
    except Exception:  # noqa: BLE001
        return


def prebuild(problem: Union[str, Problem], source: str, settings: EvalSettings,
             info: Optional[dict[str, Any]] = None) -> Optional[EvalResult]:
    """The CPU-side stage before the GPU: static checks, then a CUDA source's extensions built (in the
    sandbox, by the compile step) into its build directory, where the GPU's compile step finds them.
    Returns a static_reject / compile_error result, or None when the candidate may go on. `info`,
    when given, receives the stage's seconds and the builds it made."""
    started = time.monotonic()
    info = info if info is not None else {}
    problem = _problem(problem, settings)
    verdict = check_source(source)
    result = _base_result(problem, settings, verdict.language)
    if verdict.rejection is not None:
        result.outcome, result.message = Outcome.STATIC_REJECT.value, verdict.rejection
        result.compile_s = time.monotonic() - started
        return result
    if verdict.language != "cuda":
        return None
    from kgen.judge.judge import prebuild_cuda
    from kgen.judge.verdict import HarnessFault

    try:
        outcome, message, builds = prebuild_cuda(problem, source, settings, sandbox_mode(settings))
    except HarnessFault as e:
        info["problem"] = str(e)
        return None  # the GPU's compile step builds it instead
    info["compile_s"] = round(time.monotonic() - started, 3)
    info["builds"] = builds
    if outcome == Outcome.COMPILE_ERROR.value:
        result.outcome, result.message = outcome, message
        result.compile_s = time.monotonic() - started
        return result
    return None
