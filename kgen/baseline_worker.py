"""`python -m kgen.baseline_worker FD`: times the reference eager, under torch.compile and (when asked)
torch.compile(mode="max-autotune"), in a child process of kgen's own (trusted code, no candidate:
no sandbox), so torch.compile's state and memory go with it. The job (JSON) comes on stdin, the
result goes back as JSON through descriptor FD (stdout is left to torch.compile's chatter).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def time_baselines(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    from kgen import telemetry
    from kgen.problems import load_problem
    from kgen.timing import time_forward

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
    variants = {"eager_ms": lambda: model, "compile_ms": lambda: torch.compile(model)}
    if job.get("max_autotune", True):
        variants["compile_max_autotune_ms"] = lambda: torch.compile(model, mode="max-autotune")
    readings: dict[str, Any] = {}
    for key, make in variants.items():
        try:
            fn = make()
            with torch.no_grad():  # compiled and warm before the GPU's state is read
                fn(*problem.make_inputs(999, device))
            before = telemetry.sample(device)
            times[key] = time_forward(fn, lambda i: problem.make_inputs(1000 + i, device),
                                      min_runs, min_s).median_ms
            readings[key] = telemetry.around(before, telemetry.sample(device))
        except Exception as e:  # noqa: BLE001 - a baseline that cannot be timed is recorded as missing
            times[key] = None
            errors[key] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        torch._dynamo.reset()
    if any(readings.values()):  # the same clocks, power and throttling flag a candidate's timing carries
        settings["telemetry"] = readings
    return dict(times, settings=settings, errors=errors, torch_version=torch.__version__)


def main() -> None:
    fd = int(sys.argv[1])
    job = json.loads(sys.stdin.read())
    try:
        result = time_baselines(job)
    except Exception as e:  # noqa: BLE001 - reported, not raised: the parent records the baseline as missing
        result = {"error": f"{type(e).__name__}: {e}"}
    with os.fdopen(fd, "w") as out:
        json.dump(result, out, default=str)


if __name__ == "__main__":
    main()
