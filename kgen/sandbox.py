"""Subprocess isolation: run one job of `kgen.eval_worker` in a fresh process the caller survives.

The child starts in its own session (so its process group, children included, dies with one
`killpg`), in a fresh temporary working directory, with an environment scrubbed of secrets, with
no network and in its own PID namespace where `unshare` allows it (so even a child that calls
setsid() dies when the worker does), with core dumps off and a cap on file sizes. Its stdout and
stderr go to files the candidate cannot find from its working directory and are read back
truncated. The job goes in on stdin; the result comes back through an unlinked temporary file
passed as an inherited descriptor, authenticated with an HMAC keyed by a per-run nonce, so a
candidate that prints or writes a "result" of its own and exits gets a runtime_error, not a pass.

A candidate runs in the same interpreter as the worker, so a candidate written against kgen's own
internals could still find the nonce in memory; the HMAC stops forgeries that do not, and every
check the worker makes uses functions captured before the candidate was imported.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import hmac
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

# Substrings of environment variable names that are never passed to a candidate.
SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
SECRET_NAME_PREFIXES = ("OPENAI_",)
OUTPUT_TAIL_BYTES = 16_000
RESULT_MAX_BYTES = 4 << 20
# Caps on what a candidate may write: enough for CUDA builds and Triton caches, not for filling a disk.
FILE_SIZE_LIMIT_BYTES = 2 << 30


def scrubbed_env(extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """This process's environment without anything that looks like a credential."""
    env = {name: value for name, value in os.environ.items()
           if not any(part in name.upper() for part in SECRET_NAME_PARTS)
           and not name.upper().startswith(SECRET_NAME_PREFIXES)}
    env.update(extra or {})
    return env


@functools.lru_cache(maxsize=4)
def isolation_prefix(device: str) -> tuple[str, ...]:
    """The `unshare` command line that gives the child no network and its own PID namespace (with its
    own /proc, so no other process's environment can be read), or ()
    where the OS refuses (no user namespaces, seccomp ...). Checked once per process; on a GPU the
    probe also initializes the CUDA driver inside the namespaces, so they never cost us the GPU.
    KGEN_SANDBOX_NAMESPACES=0 turns them off."""
    if os.environ.get("KGEN_SANDBOX_NAMESPACES", "1") == "0" or not shutil.which("unshare"):
        return ()
    probe = [sys.executable, "-c", "import ctypes,sys; sys.exit(ctypes.CDLL('libcuda.so.1').cuInit(0))"] \
        if device.startswith("cuda") else ["true"]
    pid = ["--fork", "--pid", "--kill-child"]
    candidates = [("unshare", *pid, "--mount-proc", "--net"), ("unshare", "--map-root-user", *pid, "--mount-proc", "--net"),
                  ("unshare", *pid, "--net"), ("unshare", "--map-root-user", *pid, "--net"),
                  ("unshare", "--net"), ("unshare", "--map-root-user", "--net")]
    for prefix in candidates:
        try:
            done = subprocess.run([*prefix, "--", *probe], capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return prefix
    return ()


@dataclass
class SandboxRun:
    """How one child run ended, and the result it sent (None when it sent no valid one)."""

    result: Optional[dict[str, Any]]
    returncode: Optional[int]
    timed_out: bool
    wall_s: float
    stdout_tail: str = ""
    stderr_tail: str = ""
    isolation: list[str] = field(default_factory=list)
    result_problem: str = ""  # why `result` is None although the child exited

    def exit_description(self) -> str:
        rc = self.returncode
        if self.timed_out:
            return f"killed after the {self.wall_s:.0f} s time limit"
        if rc is None:
            return "did not finish"
        if rc < 0 or rc > 128 and rc - 128 in signal.Signals._value2member_map_:
            sig = -rc if rc < 0 else rc - 128
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = str(sig)
            return f"killed by signal {name}"
        return f"exited with status {rc}"


def _tail(path: Path, limit: int = OUTPUT_TAIL_BYTES) -> str:
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size > limit:
                f.seek(size - limit)
            data = f.read(limit)
    except OSError:
        return ""
    text = data.decode(errors="replace")
    return (f"[... {size - limit} bytes cut ...]\n" + text) if size > limit else text


def limit_own_resources(memory_limit_bytes: Optional[int]) -> None:
    """Called by the worker on itself before any candidate code runs."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES))
    if memory_limit_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))


def cpu_memory_limit_bytes() -> Optional[int]:
    """Address-space cap for CPU evaluations (a CUDA process maps far more than it uses, so none
    there): KGEN_EVAL_MEMORY_GB, else 3/4 of this machine's memory, so a candidate allocating huge
    tensors fails with an error in its own process instead of waking the OOM killer."""
    if os.environ.get("KGEN_EVAL_MEMORY_GB"):
        return int(float(os.environ["KGEN_EVAL_MEMORY_GB"]) * (1 << 30))
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
    return max(total * 3 // 4, 4 << 30)


def sign(payload: bytes, nonce: str) -> str:
    return hmac.new(nonce.encode(), payload, hashlib.sha256).hexdigest()


@dataclass
class _Child:
    """A started worker process waiting for its job on stdin, and the private files that go with it."""

    proc: subprocess.Popen
    nonce: str
    private: Path
    workdir: Path
    result_file: Any
    prefix: tuple[str, ...]
    memory_limit: Optional[int]

    def discard(self) -> None:
        _kill_group(self.proc)
        self.result_file.close()
        shutil.rmtree(self.private, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _spawn(device: str, extra_env: Optional[dict[str, str]], workdir_parent: Optional[str]) -> _Child:
    private = Path(tempfile.mkdtemp(prefix="kgen-eval-io-"))  # logs: outside the child's cwd
    workdir = Path(tempfile.mkdtemp(prefix="kgen-eval-", dir=workdir_parent))
    result_file = tempfile.TemporaryFile(dir=private)
    env = scrubbed_env(extra_env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(Path(__file__).resolve().parent.parent),
                                                    env.get("PYTHONPATH", "")] if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["TMPDIR"] = str(workdir)
    prefix = isolation_prefix(device)
    with open(private / "stdout", "wb") as out, open(private / "stderr", "wb") as err:
        proc = subprocess.Popen(_command(prefix), stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=workdir,
                                env=env, pass_fds=(result_file.fileno(),), start_new_session=True)
    return _Child(proc=proc, nonce=secrets.token_hex(32), private=private, workdir=workdir, result_file=result_file,
                  prefix=prefix, memory_limit=cpu_memory_limit_bytes() if device == "cpu" else None)


# One started worker per configuration, kept by long-lived evaluators (keep_spare_workers): it imports
# torch and triton while the current candidate runs, and takes the next job. Each job still gets a
# process, directory and nonce no candidate has touched.
_spares: dict[tuple, _Child] = {}
_keep_spares = False


def keep_spare_workers(enabled: bool = True) -> None:
    """From now on, start the next worker while the current one runs (the GPU evaluators do this)."""
    global _keep_spares
    _keep_spares = enabled
    if not enabled:
        discard_spare_workers()


@atexit.register
def discard_spare_workers() -> None:
    while _spares:
        _spares.popitem()[1].discard()


def run_worker(job: dict[str, Any], timeout_s: float, device: str, extra_env: Optional[dict[str, str]] = None,
               workdir_parent: Optional[str] = None) -> SandboxRun:
    """Run `python -m kgen.eval_worker` on `job` in a fresh, isolated process; never raises for
    anything the child does. The time limit counts from when the job is handed over."""
    key = (device, tuple(sorted((extra_env or {}).items())), workdir_parent)
    child = _spares.pop(key, None)
    if child is not None and child.proc.poll() is not None:  # the spare died while waiting
        child.discard()
        child = None
    if child is None:
        child = _spawn(device, extra_env, workdir_parent)
    payload = json.dumps(dict(job, result_fd=child.result_file.fileno(), nonce=child.nonce,
                              workdir=str(child.workdir), memory_limit_bytes=child.memory_limit)).encode()
    started = time.monotonic()
    timed_out = False
    proc = child.proc
    try:
        try:
            proc.stdin.write(payload)
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died at once; its exit status says how
        if _keep_spares:
            _spares[key] = _spawn(device, extra_env, workdir_parent)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
    finally:
        _kill_group(proc)
    wall_s = time.monotonic() - started
    result, problem = _read_result(child.result_file, child.nonce)
    run = SandboxRun(result=None if timed_out else result, returncode=proc.returncode,
                     timed_out=timed_out, wall_s=wall_s, stdout_tail=_tail(child.private / "stdout"),
                     stderr_tail=_tail(child.private / "stderr"), isolation=list(child.prefix), result_problem=problem)
    child.discard()
    return run


def _command(prefix: tuple[str, ...]) -> list[str]:
    worker = [sys.executable, "-m", "kgen.eval_worker"]
    if "--pid" in prefix:
        # A shell is the namespace's init, the worker its child: init ignores signals it has no handler
        # for (a candidate's os.kill(os.getpid(), SIGKILL) would do nothing), and when init exits the
        # kernel kills everything left in the namespace.
        return [*prefix, "--", "/bin/sh", "-c", '"$@"; exit $?', "sh", *worker]
    return [*prefix, "--", *worker] if prefix else worker


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (its own children too), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _read_result(result_file, nonce: str) -> tuple[Optional[dict[str, Any]], str]:
    try:
        result_file.seek(0)
        data = result_file.read(RESULT_MAX_BYTES + 1)
    except OSError as e:
        return None, f"its result could not be read: {e}"
    if not data:
        return None, "it sent no result"
    if len(data) > RESULT_MAX_BYTES:
        return None, "its result was too large"
    try:
        envelope = json.loads(data)
        body = envelope["body"].encode()
        if not hmac.compare_digest(envelope["mac"], sign(body, nonce)):
            return None, "its result was not signed by the worker (forged)"
        return json.loads(body), ""
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, "its result was garbled"
