"""Baselines: the reference timed eager, under torch.compile and torch.compile(max-autotune), under the
same conditions as candidates (kgen.judge.baseline_timing), in a child process of kgen's own
(kgen.judge.baseline_worker). kgen.store.baselines keeps them in the DB's `baselines` table per (problem hash,
size, device, torch version, triton version).

Eager runs with PyTorch's defaults as users get them (TF32 off for matmul, on for cuDNN
convolutions); the flags in force are stored with the row.
"""

from __future__ import annotations

import contextlib
import time
from typing import Optional

from kgen.judge import gpu_lock
from kgen.problems.problem import Problem

BASELINE_TIMEOUT_S = 1800.0  # max-autotune compiles can take many minutes
WORKER = "kgen.judge.baseline_worker"  # the module the child runs (tests put a stand-in for the GPU part here)


def _time_in_child(job: dict) -> Optional[dict]:
    """Run kgen.judge.baseline_worker on `job`; its result, or None if it failed or timed out. Once the worker
    has compiled every variant, its GPU's timing lock (kgen.judge.gpu_lock) is taken, deferring to any
    candidate waiting for it, until its result is in: the compiles overlap candidates' evaluations, the
    timed runs never do."""
    import json
    import os
    import select
    import signal
    import subprocess
    import sys

    read, write = os.pipe()
    try:
        # Inductor compiles in the child's own process: a pool of a worker per core (each importing torch)
        # costs more than the few kernels of one reference, and would crowd the candidates' CPUs
        env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS=os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "1"))
        proc = subprocess.Popen([sys.executable, "-m", WORKER, str(write)], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(write,),
                                start_new_session=True, env=env)
    finally:
        os.close(write)
    deadline = time.monotonic() + BASELINE_TIMEOUT_S
    buffer, sent, lock, locked_at = b"", None, None, 0.0
    with contextlib.ExitStack() as held, os.fdopen(read, "rb", buffering=0) as lines:
        try:
            proc.stdin.write((json.dumps(job) + "\n").encode())
            proc.stdin.flush()
            while True:
                if not select.select([lines], [], [], max(deadline - time.monotonic(), 0.0))[0]:
                    raise TimeoutError
                chunk = lines.read(65536)
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = json.loads(line or b"null")
                    if isinstance(message, dict) and message.get("ready_to_time"):
                        uuid = message.get("gpu_uuid")
                        lock = held.enter_context(gpu_lock.exclusive(uuid if isinstance(uuid, str) else None,
                                                                     defer=True))
                        locked_at = time.monotonic()
                        proc.stdin.write(b"go\n")
                        proc.stdin.flush()
                    else:
                        sent = message
                        held.close()  # timed: the GPU is free before the child has finished exiting
                        if lock is not None and isinstance(sent, dict) and isinstance(sent.get("settings"), dict):
                            sent["settings"]["gpu_lock"] = {  # kept with the baselines' row: how long they
                                "waited_s": lock["waited_s"], "had": lock["had"],  # waited and held the GPU
                                "held_s": round(time.monotonic() - locked_at, 3)}
            proc.wait(timeout=max(deadline - time.monotonic(), 1.0))  # its exit tidies torch.compile's workers
        except (TimeoutError, subprocess.TimeoutExpired, OSError, ValueError):
            sent = None
        finally:
            if proc.poll() is None:  # timed out or broken: it and whatever it started go
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return sent if isinstance(sent, dict) and "error" not in sent else None


def time_baselines(problem: Problem, max_autotune: bool = False) -> Optional[dict]:
    """Time `problem` now, in a child process on this process's GPU: kgen.judge.baseline_worker's answer
    (eager_ms, compile_ms, compile_max_autotune_ms, settings, errors), or None if it failed."""
    return _time_in_child({"problem_path": str(problem.path), "size": problem.size, "max_autotune": max_autotune})
