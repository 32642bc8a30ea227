"""`python -m kgen.judge.baseline_worker FD`: times the reference eager, under torch.compile and (when asked)
torch.compile(mode="max-autotune"), in a child process of kgen's own (trusted code, no candidate:
no sandbox), so torch.compile's state and memory go with it. The job (one JSON line) comes on stdin;
lines of JSON go back through descriptor FD (stdout is left to torch.compile's chatter): first
{"ready_to_time": true, "gpu_uuid": ...} once every variant is compiled and warm, then, after the parent
answers with a line on stdin (it first takes that GPU's timing lock, kgen.judge.gpu_lock, so no
candidate is timed beside the baselines), the result.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any


def time_baselines(job: dict[str, Any], ready: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Compile and warm every variant first (the CPU-heavy part, which may overlap other work), then
    `ready()`, then time them back to back."""
    import torch

    from kgen.judge import telemetry
    from kgen.judge.baseline_timing import time_forward
    from kgen.problems.problem import load_problem

    problem = load_problem(job["problem_path"], job["size"])
    device = torch.device("cuda")
    model = problem.make_model(0, device)
    settings = {"allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision(),
                "cudnn_benchmark": torch.backends.cudnn.benchmark, "device_name": torch.cuda.get_device_name(device)}
    min_runs, min_s = int(job.get("min_timed_runs", 100)), float(job.get("min_timed_s", 1.0))
    times: dict[str, Any] = {}
    errors: dict[str, str] = {}
    readings: dict[str, Any] = {}

    def warm(key: str, make: Callable[[], Any]) -> Any:
        try:
            fn = make()
            with torch.no_grad():  # compiled and warm before it is timed
                fn(*problem.make_inputs(999, device))
            return fn
        except Exception as e:  # noqa: BLE001 - a baseline that cannot be timed is recorded as missing
            times[key], errors[key] = None, _error(e)
            return None

    def time_it(key: str, fn: Any) -> None:
        if fn is None:
            return
        try:
            before = telemetry.sample(device)
            times[key] = time_forward(fn, lambda i: problem.make_inputs(1000 + i, device),
                                      min_runs, min_s).median_ms
            readings[key] = telemetry.around(before, telemetry.sample(device))
        except Exception as e:  # noqa: BLE001
            times[key], errors[key] = None, _error(e)

    # eager and torch.compile are both made ready before the go; max-autotune (minutes, only on request)
    # after a dynamo reset, so each compiled variant runs its own graphs
    ready_fns = {"eager_ms": warm("eager_ms", lambda: model),
                 "compile_ms": warm("compile_ms", lambda: torch.compile(model))}
    torch.cuda.synchronize(device)
    ready()
    for key, fn in ready_fns.items():
        time_it(key, fn)
    torch._dynamo.reset()
    if job.get("max_autotune", True):
        time_it("compile_max_autotune_ms",
                warm("compile_max_autotune_ms", lambda: torch.compile(model, mode="max-autotune")))
        torch._dynamo.reset()
    if any(readings.values()):  # the same clocks, power and throttling flag a candidate's timing carries
        settings["telemetry"] = readings
    return dict(times, settings=settings, errors=errors, torch_version=torch.__version__)


def _error(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def main() -> None:
    job = json.loads(sys.stdin.readline())
    with os.fdopen(int(sys.argv[1]), "w") as out:
        def ready() -> None:  # compiled: wait for the parent's go before timing (it takes this GPU's timing lock)
            from kgen.judge.gpu_lock import device_uuid

            out.write(json.dumps({"ready_to_time": True, "gpu_uuid": device_uuid()}) + "\n")
            out.flush()
            sys.stdin.readline()

        try:
            result = time_baselines(job, ready)
        except Exception as e:  # noqa: BLE001 - reported, not raised: the parent records the baseline as missing
            result = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(result, default=str) + "\n")


if __name__ == "__main__":
    main()
