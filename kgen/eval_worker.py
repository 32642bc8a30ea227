"""The child process of an evaluation: `python -m kgen.eval_worker`, started by kgen.sandbox.

It reads its job (JSON) from stdin and sends one signed result back through the descriptor the
sandbox gave it, then leaves with os._exit (no atexit hook of the candidate's runs). Jobs:

- evaluate: everything about the reference first (float64 outputs of every trial, its operator
  trace, fingerprints), then guards and launch counters installed, then the candidate imported,
  traced, verified and (on a GPU) timed; last, a check that nothing the checks relied on was swapped.
- prebuild: import the candidate and call its forward on meta tensors with the CUDA builders
  replaced, so its extensions build into the shared cache (or fail to compile) on a CPU worker.
- baseline: time the reference eager, under torch.compile and under torch.compile(max-autotune),
  with the same timing code (trusted code: no candidate here).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
import traceback
from typing import Any, Optional


def _result_sender(fd: int, nonce: str):
    """A closure over functions taken before any candidate code runs, so a candidate that patches
    json, os or hmac afterwards cannot rewrite the result it sends."""
    import hashlib
    import hmac

    dumps, lseek, ftruncate, write = json.dumps, os.lseek, os.ftruncate, os.write
    hmac_new, sha256 = hmac.new, hashlib.sha256
    key = nonce.encode()

    def send(result: dict[str, Any]) -> None:
        body = dumps(result, default=str)
        envelope = dumps({"body": body, "mac": hmac_new(key, body.encode(), sha256).hexdigest()}).encode()
        lseek(fd, 0, os.SEEK_SET)
        ftruncate(fd, 0)
        view = memoryview(envelope)
        while view:
            view = view[write(fd, view):]

    return send


def _tail_of_traceback(exc: BaseException, limit: int = 12) -> str:
    """The exception in one line, then the last lines of its traceback."""
    frames = "".join(traceback.format_tb(exc.__traceback__)).strip().splitlines()[-limit:]
    first = f"{type(exc).__name__}: {str(exc).strip()[:2000]}"
    return first + ("\n" + "\n".join(frames) if frames else "")


def _stray_processes() -> list[int]:
    """Processes the candidate left running: in our own PID namespace (a shell is 1, we are its
    child) every other process; else our own children."""
    me = os.getpid()
    try:
        if me <= 3 and os.path.exists("/proc/1"):
            return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        children = []
        for tid in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{tid}/children") as f:
                children += [int(p) for p in f.read().split()]
        return children
    except OSError:
        return []


def _kernel_body_error(exc: BaseException, candidate_file: str, kernel_names: list[str]) -> Optional[str]:
    """The kernel whose body raised `exc` (or the error it wraps) under Triton's interpreter, where a
    kernel body's compile errors surface as Python errors at its launch; None if no kernel did."""
    seen = 0
    while exc is not None and seen < 8:
        tb = exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename == candidate_file and code.co_name in kernel_names:
                return code.co_name
            tb = tb.tb_next
        if type(exc).__name__ == "InterpreterError" and kernel_names:
            return kernel_names[-1]
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


class Verdict(Exception):
    """A finished evaluation (any outcome), raised from deep inside to end it."""

    def __init__(self, outcome: str, message: str, **fields: Any):
        super().__init__(message)
        self.outcome = outcome
        self.message = message
        self.fields = fields


def _classify_candidate_error(exc: BaseException, stage: str, build_log, candidate_file: str = "",
                              kernel_names: Optional[list[str]] = None) -> Verdict:
    """What an exception raised by the candidate's code means."""
    from kgen.harness.cuda_build import CudaBuildError, CudaNotRunnable
    from kgen.harness.trace import ForbiddenUse
    from kgen.records import NOT_RUN

    if build_log.error is not None or isinstance(exc, CudaBuildError):
        return Verdict("compile_error", f"CUDA build failed:\n{build_log.error or exc}")
    if build_log.not_runnable is not None or isinstance(exc, CudaNotRunnable):
        return Verdict(NOT_RUN, build_log.not_runnable or str(exc))
    if isinstance(exc, ForbiddenUse):
        return Verdict("static_reject", str(exc).removeprefix("kgen: "))
    if _is_triton_compile_error(exc):
        return Verdict("compile_error", f"Triton kernel failed to compile ({stage}):\n{_tail_of_traceback(exc, 20)}")
    kernel = _kernel_body_error(exc, candidate_file, kernel_names or []) \
        if os.environ.get("TRITON_INTERPRET") == "1" else None
    if kernel is not None:
        return Verdict("compile_error", f"Triton kernel {kernel} failed in Triton's interpreter ({stage}):\n"
                                        f"{_tail_of_traceback(exc, 6)}")
    if isinstance(exc, SystemExit):
        return Verdict("runtime_error", f"the candidate called sys.exit({exc.code!r}) during {stage}")
    if isinstance(exc, KeyboardInterrupt):
        return Verdict("runtime_error", f"the candidate raised KeyboardInterrupt during {stage}")
    if isinstance(exc, SyntaxError):
        return Verdict("static_reject", f"syntax error on line {exc.lineno}: {exc.msg}")
    text = str(exc).lower()
    kind = "out of memory" if isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate" in text \
        else "error"
    return Verdict("runtime_error", f"{kind} during {stage}: {_tail_of_traceback(exc)}")


def _is_triton_compile_error(exc: BaseException) -> bool:
    names = {c.__name__ for c in type(exc).__mro__}
    if names & {"CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct"}:
        return True
    text = str(exc)
    return type(exc).__module__.startswith("triton") and "compil" in text.lower()


def _import_candidate(path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location("kgen_candidate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["kgen_candidate"] = module
    spec.loader.exec_module(module)
    return module


def _copy_weights(new_model, reference) -> str:
    """Give the candidate the reference's (randomized) parameters: by name when the state dicts
    match, else by position when shapes line up, else by name where names and shapes agree."""
    import torch

    ref_state, new_state = reference.state_dict(), new_model.state_dict()
    if not ref_state:
        return "no parameters"
    if list(ref_state) == list(new_state) and all(ref_state[k].shape == new_state[k].shape for k in ref_state):
        new_model.load_state_dict(ref_state)
        return "copied by name"
    if len(ref_state) == len(new_state) and all(a.shape == b.shape for a, b in zip(ref_state.values(),
                                                                                     new_state.values())):
        with torch.no_grad():
            new_model.load_state_dict(dict(zip(new_state.keys(), ref_state.values())))
        return "copied by position"
    matching = {k: v for k, v in ref_state.items() if k in new_state and new_state[k].shape == v.shape}
    new_model.load_state_dict(matching, strict=False)
    return f"copied {len(matching)} of {len(ref_state)} reference tensors by name"


def _trusted_snapshot() -> dict[str, Any]:
    """Identities of what verification and timing call, taken after kgen's own guards are installed
    and before the candidate is imported."""
    import torch

    import kgen.verify
    from kgen.timing import snapshot_timing_functions

    snap = {f"timing:{k}": v for k, v in snapshot_timing_functions().items()}
    for name in ("isfinite", "isnan", "abs", "where", "equal", "clamp", "nansum", "argmax", "empty", "arange",
                 "manual_seed", "no_grad", "randn", "rand", "zeros", "allclose"):
        obj = getattr(torch, name, None)
        snap[f"torch.{name}"] = (obj, getattr(obj, "__code__", None))
    snap["torch.linalg.vector_norm"] = (torch.linalg.vector_norm, None)
    for name, obj in vars(kgen.verify).items():
        if callable(obj) and getattr(obj, "__module__", None) == "kgen.verify":
            snap[f"kgen.verify.{name}"] = (obj, getattr(obj, "__code__", None))
    for name, obj in list(vars(torch.Tensor).items()):
        if callable(obj):
            snap[f"torch.Tensor.{name}"] = (obj, getattr(obj, "__code__", None))
    snap["torch.Tensor:names"] = (frozenset(vars(torch.Tensor)), None)
    return snap


def _tampered(snapshot: dict[str, Any]) -> list[str]:
    import torch

    import kgen.verify
    from kgen.timing import tampered as timing_tampered

    changed = [f"timing:{n}" for n in timing_tampered({k[7:]: v for k, v in snapshot.items()
                                                     if k.startswith("timing:")})]
    base_names = set(dir(torch._C.TensorBase))
    for key, (obj, code) in snapshot.items():
        if key.startswith("timing:"):
            continue
        if key == "torch.Tensor:names":
            added = set(vars(torch.Tensor)) - obj
            changed += [f"torch.Tensor.{n}" for n in sorted(added) if n in base_names]
            continue
        owner, _, name = key.rpartition(".")
        if owner == "torch":
            now = getattr(torch, name, None)
        elif owner == "torch.linalg":
            now = getattr(torch.linalg, name, None)
        elif owner == "kgen.verify":
            now = getattr(kgen.verify, name, None)
        elif owner == "torch.Tensor":
            now = vars(torch.Tensor).get(name)
        else:
            continue
        if now is not obj or getattr(now, "__code__", None) is not code:
            changed.append(key)
    return changed


def evaluate(job: dict[str, Any]) -> dict[str, Any]:
    details: dict[str, Any] = {}
    try:
        return _evaluate(job, details)
    except Verdict as v:
        return dict(v.fields, outcome=v.outcome, message=v.message, details=details)


def _evaluate(job: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
    import torch

    from kgen import verify
    from kgen.harness.cuda_build import BuildLog, install as install_cuda_builders
    from kgen.harness.trace import ForbiddenUseRecorder, LaunchCounter, OpTrace, covers_reference
    from kgen.problems import load_problem

    device = torch.device(job["device"])
    if device.type == "cuda":
        # set_device wants an index ("cuda" alone is refused by torch 2.11); the device is then explicit
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        torch.cuda.set_device(device)
    problem = load_problem(job["problem_path"], job["size"])
    trials = max(int(job.get("trials", 5)), 5)
    model_seed = secrets.randbelow(2**31 - 1000)
    seeds = [model_seed + 1 + i for i in range(trials)]
    scales = [1.0] * (trials - 1) + [100.0]  # the last trial: floating inputs ×100 (overflow-prone rewrites)
    details.update(seeds=seeds, scales=scales, model_seed=model_seed)

    # 1. The reference, before any candidate code exists in this process.
    phases = details.setdefault("phases", {})  # seconds per stage: where a GPU evaluation's time goes
    mark = [time.monotonic()]

    def phase(name: str) -> None:
        now = time.monotonic()
        phases[name] = round(now - mark[0], 3)
        mark[0] = now

    reference = problem.make_model(model_seed, device)
    trial_inputs = [problem.make_inputs(seed, device, scale) for seed, scale in zip(seeds, scales)]
    references = [verify.reference_outputs(reference, inputs) for inputs in trial_inputs]
    ref_trace = OpTrace()
    with ref_trace, torch.no_grad():
        ref_out = verify.as_outputs(reference(*verify.clone_inputs(trial_inputs[0])))
    expected_dtypes = [o.dtype for o in ref_out]
    out_bytes = [o.numel() * o.element_size() for o in ref_out]
    del ref_out
    reference_families = ref_trace.compute_families()
    details["reference_ops"] = ref_trace.compute_ops()
    rtol = job.get("rtol") or verify.default_rtol(expected_dtypes[0])
    fingerprints = (verify.fingerprint([t for ins in trial_inputs for t in ins]),
                    verify.fingerprint([t for refs in references for t in refs]))

    phase("reference_s")
    # 2. Guards and counters, then the trusted snapshot, then the candidate.
    candidate_file = os.path.join(job["workdir"], "kgen_candidate.py")
    with open(candidate_file, "w") as f:
        f.write(job["source"])
    import triton  # noqa: F401  (imported now, so the candidate gets the wrapped launchers)

    counter = LaunchCounter(candidate_file)
    counter.install()
    build_log = BuildLog()
    install_cuda_builders(build_log, counter.count)
    details["cuda_builds"] = build_log.builds  # filled as builds happen (cached: loaded from the compile stage's build)
    recorder = ForbiddenUseRecorder(candidate_file)
    recorder.install()
    snapshot = _trusted_snapshot()

    def guard_check(stage: str) -> None:
        if build_log.error is not None:
            raise Verdict("compile_error", f"CUDA build failed:\n{build_log.error}")
        if build_log.not_runnable is not None:
            from kgen.records import NOT_RUN
            raise Verdict(NOT_RUN, build_log.not_runnable)
        if recorder.uses:
            raise Verdict("static_reject", f"the candidate tried to {'; '.join(recorder.uses)} ({stage}); "
                                           "candidates may not")
        strays = _stray_processes()
        if strays:
            raise Verdict("static_reject", f"the candidate left {len(strays)} process(es) running ({stage}); "
                                           "candidates may not start processes")
        changed = _tampered(snapshot)
        if changed:
            raise Verdict("static_reject", f"the candidate replaced functions the evaluation relies on "
                                           f"({', '.join(changed[:6])}) ({stage})")

    def run_candidate(stage: str, fn, *args):
        try:
            return fn(*args)
        except Verdict:
            raise
        except BaseException as e:  # noqa: BLE001 - whatever the candidate raised is its outcome
            raise _classify_candidate_error(e, stage, build_log, candidate_file, counter.names) from None

    module = run_candidate("import", _import_candidate, candidate_file)
    guard_check("import")
    model_cls = getattr(module, "ModelNew", None)
    if not (isinstance(model_cls, type) and issubclass(model_cls, torch.nn.Module)):
        raise Verdict("static_reject", "ModelNew is not a torch.nn.Module subclass")

    def construct():
        torch.manual_seed(model_seed)
        with torch.device(device):
            model = model_cls(*problem.init_inputs())
        model = model.to(device)
        details["weights"] = _copy_weights(model, reference)
        return model.eval()

    model = run_candidate("construction", construct)
    guard_check("construction")
    phase("import_s")

    def forward(inputs):
        with torch.no_grad():
            out = model(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return out

    # 3. Trials: poisoned allocator, fresh clones, every output judged; trial 0 traced.
    worst: dict[str, float] = {}
    atols = []
    kept_first = None
    for t, (inputs, refs) in enumerate(zip(trial_inputs, references)):
        verify.poison_allocator(device, out_bytes)
        given = verify.clone_inputs(inputs)
        if t == 0:
            cand_trace = OpTrace()
            counter.trace = cand_trace
            with cand_trace:
                out = run_candidate("the first forward", forward, given)
            counter.trace = None
            guard_check("the first forward")
            details["torch_ops"] = cand_trace.compute_ops()
            details["kernel_launches"] = counter.launches
            details["kernels"] = list(counter.names)
            if counter.launches == 0:
                raise Verdict("static_reject", "forward launched none of the candidate's own kernels (no Triton "
                                               "kernel defined in its file, no call into its CUDA extension)")
            if covers_reference(cand_trace.compute_families(), reference_families):
                raise Verdict("static_reject", "forward does the problem's work with torch operators "
                                               f"({', '.join(cand_trace.compute_ops())} cover the reference's "
                                               f"{', '.join(details['reference_ops'])}); its own kernels are "
                                               "not what computes the result")
        else:
            out = run_candidate(f"trial {t}", forward, given)
            guard_check(f"trial {t}")
        outs = verify.as_outputs(out)
        if len(outs) != len(refs):
            raise Verdict("incorrect", f"forward returned {len(outs)} output(s), the reference {len(refs)}")
        for k, (o, r, dtype) in enumerate(zip(outs, refs, expected_dtypes)):
            label = "output" if len(refs) == 1 else f"output[{k}]"
            c = verify.compare(o, r, dtype, rtol, label)
            for name in ("max_abs_err", "max_rel_err", "norm_rel_err"):
                value = getattr(c, name)
                if value is not None:
                    worst[name] = max(worst.get(name, 0.0), value)
            if c.atol is not None and k == 0:
                atols.append(c.atol)
            if not c.ok:
                scale = f", inputs ×{scales[t]:g}" if scales[t] != 1.0 else ""
                raise Verdict("incorrect", f"trial {t + 1} of {trials} (seed {seeds[t]}{scale}): {c.message}",
                              atol=c.atol, rtol=rtol, **worst)
        if not verify.same_tensors(given, inputs):
            raise Verdict("incorrect", f"trial {t + 1}: forward modified its input tensors in place")
        if t == 0:
            kept_first = [o.detach().clone() for o in outs]
        del out, outs, given

    verify.poison_allocator(device, out_bytes)
    again = verify.as_outputs(run_candidate("the repeat of trial 1", forward, verify.clone_inputs(trial_inputs[0])))
    guard_check("the repeat of trial 1")
    if not verify.same_tensors([o for o in again], kept_first):
        raise Verdict("incorrect", "two calls on the same inputs gave different outputs (uninitialized memory read, "
                                   "or state kept between calls)", atol=atols[0] if atols else None, rtol=rtol, **worst)
    del again, kept_first
    phase("verify_s")  # the first forward (Triton's JIT compiles) included

    # 4. Time (GPU only), then the last timed output judged again.
    timing = None
    if device.type == "cuda":
        from kgen.timing import time_forward

        rotation = [verify.clone_inputs(inputs) for inputs in trial_inputs]
        last_check: dict[str, Any] = {}

        def check_last(out, index):
            outs = verify.as_outputs(out)
            for k, (o, r, dtype) in enumerate(zip(outs, references[index], expected_dtypes)):
                c = verify.compare(o, r, dtype, rtol, "last timed output")
                if not c.ok:
                    last_check["message"] = c.message
                    return

        timing = run_candidate("timing", time_forward, lambda *ins: model(*ins), rotation,
                               int(job.get("min_timed_runs", 100)), float(job.get("min_timed_s", 1.0)), check_last)
        guard_check("timing")
        if last_check:
            raise Verdict("incorrect", f"after timing: {last_check['message']}", rtol=rtol, **worst)
        if not all(verify.same_tensors(r, i) for r, i in zip(rotation, trial_inputs)):
            raise Verdict("incorrect", "forward modified its input tensors in place during timing")
        details["timing"] = {k: getattr(timing, k) for k in ("median_ms", "mean_ms", "min_ms", "p10_ms", "p90_ms",
                                                             "runs", "warmup_runs")}
        phase("timing_s")
        details["tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}

    # 5. The reference and inputs must be what they were before the candidate existed.
    if (verify.fingerprint([t for ins in trial_inputs for t in ins]),
            verify.fingerprint([t for refs in references for t in refs])) != fingerprints:
        raise Verdict("static_reject", "the reference's inputs or outputs held by the evaluator were modified")
    guard_check("the end")
    return dict(outcome="correct", message="", atol=atols[0] if atols else None, rtol=rtol,
                runtime_ms=timing.median_ms if timing else None, details=details, **worst)


def prebuild(job: dict[str, Any]) -> dict[str, Any]:
    """Build the candidate's CUDA extensions into the shared cache; report only compile errors."""
    import torch

    from kgen.harness.cuda_build import BuildLog, install as install_cuda_builders
    from kgen.problems import load_problem

    problem = load_problem(job["problem_path"], job["size"])
    candidate_file = os.path.join(job["workdir"], "kgen_candidate.py")
    with open(candidate_file, "w") as f:
        f.write(job["source"])
    build_log = BuildLog()
    install_cuda_builders(build_log, lambda name: None)
    started = time.monotonic()
    try:
        module = _import_candidate(candidate_file)
        with torch.device("meta"):
            inputs = list(problem.module.get_inputs())
        model = module.ModelNew(*problem.init_inputs())
        with torch.no_grad():
            model(*inputs)
    except BaseException:  # noqa: BLE001 - only the build's own verdict matters here
        pass
    return {"build_error": build_log.error, "not_runnable": build_log.not_runnable, "builds": build_log.builds,
            "compile_s": time.monotonic() - started}


def baseline(job: dict[str, Any]) -> dict[str, Any]:
    """Eager, torch.compile and torch.compile(mode='max-autotune') times of the reference."""
    import torch

    from kgen.problems import load_problem
    from kgen.timing import time_forward

    problem = load_problem(job["problem_path"], job["size"])
    device = torch.device("cuda")
    model = problem.make_model(0, device)
    rotation = [problem.make_inputs(seed, device) for seed in (1, 2, 3)]
    settings = {"allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision(),
                "cudnn_benchmark": torch.backends.cudnn.benchmark, "device_name": torch.cuda.get_device_name(device)}
    min_runs, min_s = int(job.get("min_timed_runs", 100)), float(job.get("min_timed_s", 1.0))
    times: dict[str, Any] = {}
    errors: dict[str, str] = {}
    variants = {"eager_ms": lambda: model, "compile_ms": lambda: torch.compile(model),
                "compile_max_autotune_ms": lambda: torch.compile(model, mode="max-autotune")}
    for key, make in variants.items():
        try:
            fn = make()
            times[key] = time_forward(lambda *ins: fn(*ins), rotation, min_runs, min_s).median_ms
        except Exception as e:  # noqa: BLE001 - a baseline that cannot be timed is recorded as missing
            times[key] = None
            errors[key] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        torch._dynamo.reset()
    return dict(times, settings=settings, errors=errors, torch_version=torch.__version__)


def _versions() -> dict[str, Any]:
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"torch_version": torch.__version__, "triton_version": triton_version, "cuda_version": torch.version.cuda}


def _preload() -> None:
    """Import what every job needs before the job arrives: a spare worker (see kgen.sandbox) does this
    while the evaluator's previous candidate is still running, so the ~2-3 s of importing torch and
    triton leave the GPU's critical path. No candidate code exists in the process yet."""
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401

        import kgen.harness.cuda_build  # noqa: F401
        import kgen.harness.trace  # noqa: F401
        import kgen.problems  # noqa: F401
        import kgen.timing  # noqa: F401
        import kgen.verify  # noqa: F401
    except Exception:  # noqa: BLE001 - the job itself reports what is missing
        pass


def main() -> None:
    _preload()
    data = sys.stdin.read()
    if not data.strip():  # a spare whose evaluator went away before giving it a job
        os._exit(0)
    job = json.loads(data)
    sys.stdin.close()
    send = _result_sender(int(job.pop("result_fd")), job.pop("nonce"))
    leave = os._exit
    from kgen.sandbox import limit_own_resources

    limit_own_resources(job.get("memory_limit_bytes"))
    if job.get("cuda_arch"):
        # Pinned, whatever the machine's environment says: the CPU compile stage (no GPU visible) and
        # the GPU process must key and build for the same arch, or the GPU stage rebuilds everything
        # (seen on the H100: an image-wide TORCH_CUDA_ARCH_LIST made the two keys differ).
        os.environ["KGEN_CUDA_ARCH"] = os.environ["TORCH_CUDA_ARCH_LIST"] = job["cuda_arch"]
    started = time.time()
    try:
        runner = {"evaluate": evaluate, "prebuild": prebuild, "baseline": baseline}[job["mode"]]
        result = runner(job)
    except Verdict as v:
        result = dict(v.fields, outcome=v.outcome, message=v.message)
    except BaseException as e:  # noqa: BLE001 - the worker must always answer
        result = {"outcome": "runtime_error", "message": f"evaluation failed: {_tail_of_traceback(e)}"}
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        result.update(_versions())
    except BaseException:  # noqa: BLE001 - a candidate may have replaced sys.stdout
        pass
    result["worker_start"], result["worker_end"] = started, time.time()
    send(result)
    leave(0)


if __name__ == "__main__":
    main()
