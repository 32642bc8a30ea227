"""Ray: the cluster a search runs on, and its two evaluation stages.

- Compile stage: `compile_candidate` tasks (one CPU each, as many at once as the cluster has CPUs)
  run the evaluator's static checks and build CUDA sources into the shared build cache.
- Timing stage: `Evaluator` actors, one per GPU (`num_gpus=1`), each evaluating one candidate at a
  time (in its own process, as `evaluate_candidate` does), so timings never share a GPU. Without a
  GPU, CPU evaluation actors do the same under Triton's interpreter and claim no times.

`connect(None)` starts a local cluster sized to this machine (always a new one: neither RAY_ADDRESS
nor a cluster that `ray start` recorded here is joined unasked); `connect("auto")`,
`connect("host:port")` or `connect("ray://host:port")` joins a running one. Workers load the problem from its path, not from a
pickled module, and import kgen from their own Python: on a local cluster that is this checkout. To
run on a remote cluster, install kgen on its nodes (or start the driver with a runtime_env giving
`working_dir`/`py_modules`), and give problem files by a path the nodes can read.
"""

from __future__ import annotations

import functools
import logging
import signal
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Iterator, Optional
from urllib.parse import urlsplit

from kgen.errors import KgenError
from kgen.records import EvalResult, EvalSettings

# A timing task gets the evaluator's own time limit plus this much, then its actor is killed and the
# candidate recorded as a timeout (the evaluator's limit should fire first; this catches a stuck actor).
ACTOR_GRACE_S = 120.0


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster this search runs on."""

    address: Optional[str]  # None: a local cluster started here
    num_cpus: int
    num_gpus: int


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast with one line: Ray itself waits a long time on an address nobody listens at."""
    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme not in ("tcp", "ray") or not parts.hostname:
        raise KgenError(f"bad --ray-address '{address}' (use auto, HOST:PORT or ray://HOST:PORT)")
    try:
        port = parts.port or (10001 if parts.scheme == "ray" else 6379)
    except ValueError:
        raise KgenError(f"bad --ray-address '{address}': the port is not a number") from None
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except OSError as e:
        raise KgenError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


def connect(address: Optional[str] = None) -> Cluster:
    """Start a local Ray cluster (address None) or join one ('auto', 'HOST:PORT', 'ray://HOST:PORT')."""
    import ray

    if address:
        _check_reachable(address)
    kwargs = dict(log_to_driver=False, logging_level=logging.ERROR)
    main_thread = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main_thread else None
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:  # "local": a new cluster even where `ray start` left one recorded (perhaps dead) on this machine
            ray.init(address="local", include_dashboard=False, **kwargs)
    except (ConnectionError, TimeoutError, ValueError) as e:
        raise KgenError(f"cannot join the Ray cluster at {address}: {str(e).splitlines()[0]}") from None
    finally:
        # ray.init replaces the SIGTERM handler with sys.exit, which would mark a `kill`ed search
        # failed; the CLI's handler (stop as Ctrl-C does: run marked interrupted) goes back.
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
    resources = ray.cluster_resources()
    return Cluster(address=address, num_cpus=max(1, int(resources.get("CPU", 1))),
                   num_gpus=int(resources.get("GPU", 0)))


def shutdown() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


@functools.lru_cache(maxsize=4)
def _load(problem_path: str, size: str):
    from kgen.problems import load_problem

    return load_problem(problem_path, size)


def _compile(problem_path: str, size: str, source: str, settings: EvalSettings) -> tuple[Optional[EvalResult], dict]:
    """(a static_reject / compile_error result, or None to go on; what the stage did: seconds, builds)."""
    from kgen.evaluate import prebuild

    info: dict = {}
    return prebuild(_load(problem_path, size), source, settings, info), info


class _Evaluator:
    """Owns one GPU (or, without GPUs, one CPU) and evaluates one candidate at a time on it."""

    def __init__(self, problem_path: str, size: str):
        self.problem_path = problem_path
        self.size = size
        _load(problem_path, size)
        self.spares = None  # kgen.judge.SpareRunners: the next candidate's sandbox imports torch while this one runs

    def evaluate(self, source: str, settings: EvalSettings) -> EvalResult:
        from kgen.evaluate import evaluate_candidate, sandbox_mode
        from kgen.judge import SpareRunners

        mode = sandbox_mode(settings)
        if self.spares is None or self.spares.mode is not mode:
            self.spares = SpareRunners(mode)
        return evaluate_candidate(_load(self.problem_path, self.size), source, settings, self.spares)

    def device(self) -> "Device":
        import torch

        if not torch.cuda.is_available():
            return Device(name="cpu", cuda_arch=None)
        major, minor = torch.cuda.get_device_capability(0)
        return Device(name=torch.cuda.get_device_name(0), cuda_arch=f"{major}.{minor}")


@dataclass(frozen=True)
class Device:
    """An evaluator's device: its name as evaluations record it ('cpu' without a GPU), and the compute
    capability CUDA builds target (so the compile stage, on CPUs, builds what the GPU will load)."""

    name: str
    cuda_arch: Optional[str]


@dataclass(frozen=True)
class Job:
    """A stored candidate waiting for its evaluation."""

    candidate_id: int
    source: str


@dataclass(frozen=True)
class StageEvent:
    """A candidate entering a stage ('compiling', 'timing') or leaving the last one ('done', with its result)."""

    kind: str
    candidate_id: int
    result: Optional[EvalResult] = None


def _worker_died(message: str, settings: EvalSettings) -> EvalResult:
    return EvalResult(outcome="runtime_error", message=message, device=settings.device, size=settings.size)


class Stages:
    """The compile and timing stages on a cluster. `run(jobs, settings)` yields each candidate's events
    as they happen, results in the order they finish, so a slow candidate never holds up the others.

    An evaluator whose worker died is restarted by Ray; it gets no new candidate until it answers a
    ping again (a task sent to a restarting actor would fail, and the candidate with it)."""

    def __init__(self, cluster: Cluster, problem_path: str, size: str):
        import ray

        self.problem_path = problem_path
        self.size = size
        self._compile_task = ray.remote(num_cpus=1, max_retries=0)(_compile)
        self._actor_class = ray.remote(max_restarts=-1, max_task_retries=0)(_Evaluator)
        if cluster.num_gpus > 0:
            self._actor_options = dict(num_gpus=1, num_cpus=1)
            count = cluster.num_gpus
        else:
            self._actor_options = dict(num_cpus=1)
            count = max(1, cluster.num_cpus - 1)
        self.actors = [self._new_actor() for _ in range(count)]
        self._free = list(range(count))
        self._pings: dict = {}  # ping ref -> actor index, for actors coming back from a death
        self._ping_later: list[tuple[float, int]] = []  # (when, actor index): pinged again then
        self._compiling: dict = {}  # compile task ref -> (job, settings)
        self._ready: deque = deque()  # (job, settings) compiled, waiting for an evaluator
        self._timing: dict = {}  # evaluation ref -> (job, settings, actor index, started)
        self._compiled: dict[int, dict] = {}  # candidate id -> what its compile stage did

    def _new_actor(self):
        return self._actor_class.options(**self._actor_options).remote(self.problem_path, self.size)

    @property
    def evaluator_count(self) -> int:
        return len(self.actors)

    def device(self) -> Device:
        import ray

        return ray.get(self.actors[0].device.remote())

    def _recover(self, index: int) -> None:
        self._pings[self.actors[index].device.remote()] = index

    def _pinged(self, ref) -> None:
        """A ping came back: the actor is free again, still restarting (ping later), or gone for
        good (its node died: start a new one)."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayError

        index = self._pings.pop(ref)
        try:
            ray.get(ref)
        except ActorUnavailableError:
            self._ping_later.append((time.monotonic() + 0.5, index))
            return
        except RayError:
            self.actors[index] = self._new_actor()
            self._recover(index)
            return
        self._free.append(index)

    def _failed_remotely(self, error: Exception, stage: str, settings: EvalSettings) -> EvalResult:
        """A worker that died (the candidate killed it, its node went away) costs the candidate a
        runtime_error, not the search; an exception raised by kgen's own code is a bug and propagates."""
        from ray.exceptions import RayTaskError

        if isinstance(error, RayTaskError):
            if isinstance(error.cause, KeyboardInterrupt):  # Ctrl-C reached the workers too
                raise KeyboardInterrupt from None
            raise error
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return _worker_died(f"the {stage} worker died while running this candidate ({type(error).__name__}: "
                            f"{reason[:300]}); it was restarted and the search went on", settings)

    # The stages as a scheduler the search feeds while earlier candidates are still in flight:
    # `submit` sends jobs to the compile stage, `poll` moves them along and returns what happened.

    @property
    def compiling_count(self) -> int:
        return len(self._compiling)

    @property
    def in_flight(self) -> int:
        return len(self._compiling) + len(self._ready) + len(self._timing)

    def submit(self, jobs: list[Job], settings: EvalSettings) -> list[StageEvent]:
        """Send jobs to the compile stage (CPU tasks, all at once: Ray queues what the CPUs cannot take)."""
        events = []
        for job in jobs:
            ref = self._compile_task.remote(self.problem_path, self.size, job.source, settings)
            self._compiling[ref] = (job, settings)
            events.append(StageEvent("compiling", job.candidate_id))
        return events

    def poll(self, timeout_s: float = 0.5, timing_open: bool = True) -> list[StageEvent]:
        """Dispatch compiled candidates to free evaluators (only while `timing_open`: the search holds
        the GPUs back while its baselines are being timed), wait up to `timeout_s` for anything to
        finish, and return the events: 'timing' for each dispatch, 'done' with each result."""
        import ray
        from ray.exceptions import RayError

        events: list[StageEvent] = []
        while timing_open and self._free and self._ready:
            (job, settings), index = self._ready.popleft(), self._free.pop(0)
            ref = self.actors[index].evaluate.remote(job.source, settings)
            self._timing[ref] = (job, settings, index, time.monotonic())
            events.append(StageEvent("timing", job.candidate_id))
        now = time.monotonic()
        for when, index in [p for p in self._ping_later if p[0] <= now]:
            self._ping_later.remove((when, index))
            self._recover(index)
        waiting = list(self._compiling) + list(self._timing) + list(self._pings)
        if not waiting:
            time.sleep(min(timeout_s, 0.2))
            return events
        done, _ = ray.wait(waiting, num_returns=1, timeout=timeout_s)
        for ref in done:
            if ref in self._pings:
                self._pinged(ref)
            elif ref in self._compiling:
                job, settings = self._compiling.pop(ref)
                try:
                    failure, info = ray.get(ref)
                except RayError as e:
                    failure, info = self._failed_remotely(e, "compile", settings), {}
                if failure is not None:
                    events.append(StageEvent("done", job.candidate_id, failure))
                else:
                    if info:
                        self._compiled[job.candidate_id] = info
                    self._ready.append((job, settings))
            else:
                job, settings, index, _ = self._timing.pop(ref)
                try:
                    result = ray.get(ref)
                    self._free.append(index)
                except RayError as e:
                    result = self._failed_remotely(e, "evaluation", settings)
                    self._recover(index)
                info = self._compiled.pop(job.candidate_id, None)
                if info:  # the compile stage's seconds and builds go with the result
                    result.details["compile_stage"] = info
                    if result.compile_s is None:
                        result.compile_s = info.get("compile_s")
                events.append(StageEvent("done", job.candidate_id, result))
        now = time.monotonic()
        for ref, (job, settings, index, started) in list(self._timing.items()):
            limit_s = settings.timeout_s * 2 + ACTOR_GRACE_S
            if now - started > limit_s:
                del self._timing[ref]
                ray.kill(self.actors[index], no_restart=False)
                self._recover(index)
                events.append(StageEvent("done", job.candidate_id, replace(
                    _worker_died("", settings), outcome="timeout",
                    message=f"no result from its evaluation worker after {limit_s:.0f} s; the worker was "
                            "killed and restarted")))
        return events

    def cancel(self) -> None:
        """Drop everything in flight (Ctrl-C, an error): compile tasks are force-cancelled; actor
        tasks cannot be, and end with the cluster."""
        import ray

        for ref in self._compiling:
            ray.cancel(ref, force=True)
        for ref in self._timing:
            ray.cancel(ref)
        self._compiling.clear()
        self._ready.clear()
        self._timing.clear()
        self._compiled.clear()

    def run(self, jobs: list[Job], settings: EvalSettings) -> Iterator[StageEvent]:
        """All of `jobs` through both stages; events as they happen, results in the order they finish."""
        try:
            yield from self.submit(jobs, settings)
            while self.in_flight:
                yield from self.poll()
        finally:
            self.cancel()
