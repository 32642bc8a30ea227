"""The two evaluation stages on a Ray cluster (kgen.search.cluster starts or joins it).

- Compile stage: `compile_candidate` tasks (one CPU each, spread over the cluster's nodes, as many
  at once as it has CPUs) run the evaluator's static checks and build CUDA sources into the build
  cache.
- Timing stage: `Evaluator` actors, placed as kgen.search.cluster.evaluator_placement says (two per GPU of
  40 GiB or more by default), each evaluating one candidate at a time (in its own process, as
  `evaluate_candidate` does); the two of a GPU overlap their untimed work, and their timed runs never share it
  (kgen.judge.gpu_lock).

A candidate runs in a sandboxed process of its own that cannot reach its Ray worker, so a Ray
worker or node that dies is never the candidate's fault: whatever it had in flight goes back to
the queue of its stage, at most MAX_REQUEUES times, and is then recorded as a harness_error that
says the workers kept dying. A `harness_error` result (kgen's own fault) is evaluated once more the
same way. Each result records in `details["nodes"]` the Ray node of its compile and of its
evaluation, and in `details["requeued"]` every attempt that did not finish.

Workers import kgen from their own Python (on a local cluster, this checkout; on another cluster,
each node's own install) and load the problem themselves, not from a pickled module: a bundled
problem by name, any other by its path (see problem_ref), checked against the driver's copy.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Optional

from kgen.core.errors import KgenError
from kgen.core.records import EvalResult, EvalSettings, Outcome
from kgen.search.baseline_queue import baselines_per_evaluator
from kgen.search.cluster import Cluster, where_am_i

if TYPE_CHECKING:
    from kgen.judge.evaluator_facts import EvaluatorFacts
    from kgen.judge.heartbeat import Progress

# Beyond the candidate's own time limit (which the judge enforces itself), what the driver allows an evaluation
# before it kills its actor and records a harness_error (Stages._watch): an evaluator stand-in without a
# heartbeat gets 2 x the time limit plus this; one with a heartbeat (kgen.judge.heartbeat) is killed only when
# the candidate's charged seconds pass 2 x its limit plus this, or its judge is silent or hung (below).
ACTOR_GRACE_S = 120.0
# The heartbeat's watchdog. The judge's own work (float64 references, comparisons) is not the candidate's and
# grows with the problem's tensors: KernelBench's 6.4 GB softmax took 182 s of one evaluation on the H100, and
# a 300 s limit on the whole evaluation killed judges that were working (issue 32's 36_RMSNorm_, 7.5 GB in and out).
PROGRESS_EVERY_S = 5.0  # how often the driver asks an evaluator what its judge is doing
PROGRESS_ANSWER_S = 120.0  # an evaluator that does not answer within this is hung (its answer runs in its own thread)
SILENT_S = 120.0  # a judge's step may last what the judge itself allows it (a runner's answer), plus this
SILENT_S_PER_GB = 30.0  # ... plus this per GB of the problem's inputs and outputs (the judge's work on them)
QUEUED_S = 180.0  # an evaluator may finish earlier work (prestart: sandboxes starting) before it takes a candidate
HARD_S = 600.0  # an evaluation ends by 2 x the time limit + ACTOR_GRACE_S + this (waits for the GPU's timing
HARD_S_PER_GB = 60.0  # lock aside) + this per GB of the problem's tensors, even while its judge keeps busy
# Attempts a candidate gets after the first when the Ray worker or node running it dies.
MAX_REQUEUES = 2
# ... and after a harness_error result.
MAX_HARNESS_RETRIES = 1
# an evaluator's warm-up not over by then (after Stages.prestart) no longer holds off its first candidate
WARM_UP_WAIT_S = 120.0


def problem_ref(problem_path: Optional[str]) -> Optional[str]:
    """What workers load a problem by: a bundled problem's name (each node finds its own install's copy,
    wherever kgen is installed there), any other problem's path (which every node must be able to read).
    None: the stages have no problem of their own, each job names its own (a collection)."""
    from kgen.core.resources import problems_dir

    if problem_path is None:
        return None
    path = Path(problem_path).resolve()
    return path.stem if path.parent == problems_dir().resolve() else str(path)


@functools.lru_cache(maxsize=32)  # a collection judges many problems in turn
def _load(problem: str, size: str, source_hash: Optional[str] = None):
    """The problem as the driver has it: a node whose copy differs (another kgen version, an edited
    file) stops the search with one line rather than judge candidates against another reference."""
    from kgen.problems.problem import load_problem

    loaded = load_problem(problem, size)
    if source_hash is not None and loaded.source_hash != source_hash:
        raise KgenError(f"the problem file {loaded.path} on {socket.gethostname()} differs from the driver's: "
                        "install the same kgen on every Ray node (and keep problem files the same)")
    return loaded


@functools.lru_cache(maxsize=32)
def _tensor_bytes(problem: str, size: str, source_hash: Optional[str] = None) -> int:
    """The problem's inputs and outputs at this size, in bytes (its shapes on the meta device): what the
    watchdog's limits for the judge's own work scale with. 0 when they cannot be worked out."""
    from kgen.problems.problem import TensorSpec

    try:
        loaded = _load(problem, size, source_hash)
        specs = [s for s in loaded.input_specs() if isinstance(s, TensorSpec)] + loaded.output_specs()
        return sum(s.nbytes for s in specs)
    except Exception:  # noqa: BLE001 - the judge meets the same fault and reports it; the limits take their floor
        return 0


def _compile(problem: str, size: str, source_hash: str, source: str,
             settings: EvalSettings) -> tuple[Optional[EvalResult], dict, dict]:
    """(a static_reject / compile_error result, or None to go on; what the stage did: seconds, builds;
    the node it ran on).

    A source the static checks pass that has nothing to build here (Triton: its kernels are compiled by the
    evaluation's compile step, on the GPU) goes on without this worker importing torch or loading the problem
    (the evaluator loads it, and checks it against the driver's copy): on the H100 box a fresh worker took ~4 s
    for that, and the search's first candidate waited for it while its evaluator stood idle (issue 26)."""
    from kgen.judge.static_checks import check_source

    info: dict = {"start": round(time.time(), 3)}  # when (epoch s): kgen bench's per-GPU waits read it
    verdict = check_source(source)
    if verdict.rejection is None and verdict.language != "cuda":
        result = None
    else:  # the rejection's result, or a CUDA source's builds (kgen.judge.evaluate.prebuild checks it again)
        from kgen.judge.evaluate import prebuild

        result = prebuild(_load(problem, size, source_hash), source, settings, info)
    info["end"] = round(time.time(), 3)
    return result, info, where_am_i()


@dataclass(frozen=True)
class Device:
    """An evaluator's device: its name as evaluations record it ('cpu' without a GPU), the compute
    capability CUDA builds target (so the compile stage, on CPUs, builds what the GPU will load), and
    the Ray node the evaluator runs on."""

    name: str
    cuda_arch: Optional[str]
    node_id: Optional[str] = None


def gpu_device(node_id: Optional[str] = None) -> Device:
    """This process's first GPU as evaluations name it and CUDA builds target it."""
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return Device(name=torch.cuda.get_device_name(0), cuda_arch=f"{major}.{minor}", node_id=node_id)


def _has_ray_gpu() -> bool:
    """Whether Ray gave this worker a GPU (asked without importing torch)."""
    try:
        import ray

        return bool(ray.get_gpu_ids())
    except Exception:  # noqa: BLE001 - not in a Ray worker (a test's evaluator): no GPU of Ray's
        return False


class _Evaluator:
    """Owns one GPU (or one kgen_gpu, or without GPUs one CPU), or its share of one, and evaluates one candidate at
    a time on it."""

    def __init__(self, problem: Optional[str], size: str, source_hash: Optional[str],
                 prestart: Optional[tuple[str, str]] = None):
        """`prestart`: (sandbox, language) of the search, whose first sandboxes start here, first thing."""
        from kgen.core.process import process_age_s
        from kgen.judge.sandbox import probe_early

        # where this evaluator's start went (start_figures): its process's age when kgen's code began (Ray's
        # worker start, its imports), then the problem's load (torch's import included)
        began = time.monotonic()
        self._start_figures: dict = {"process_age_s": process_age_s()}
        # kgen.judge.spares.SpareRunners: the next candidate's sandbox imports torch while this one runs
        self.spares = None
        if prestart is not None:
            self._start_early(*prestart)
        probe_early(_has_ray_gpu())  # while this process imports torch and loads the problem, before prestart
        self.problem = (problem, size, source_hash)
        if problem is not None:
            _load(*self.problem)
        self._start_figures["init_s"] = round(time.monotonic() - began, 3)
        from kgen.judge.heartbeat import Heartbeat

        self.heartbeat = Heartbeat()  # what the judge is doing now: `progress` answers the driver's watchdog from it

    def evaluate(self, source: str, settings: EvalSettings, problem: Optional[tuple] = None) -> EvalResult:
        """`problem`: (problem ref, size, source hash) of a job judged against another problem than the
        evaluator's own (a collection's entries each name theirs)."""
        import ray

        from kgen.judge.evaluate import evaluate_candidate, sandbox_mode
        from kgen.judge.spares import SpareRunners

        mode = sandbox_mode(settings)
        if self.spares is None or self.spares.mode is not mode:
            self.spares = SpareRunners(mode)
        started = time.time()
        loaded = _load(*(problem or self.problem))
        self.heartbeat.begin(_tensor_bytes(*(problem or self.problem)))
        try:
            result = evaluate_candidate(loaded, source, settings, self.spares, heartbeat=self.heartbeat)
        finally:
            self.heartbeat.end()
        # where, on which GPU(s) and when (epoch s): kgen bench's busy shares and GPU scaling come from these
        result.details.setdefault("nodes", {})["evaluation"] = dict(
            where_am_i(), gpus=[str(g) for g in ray.get_gpu_ids()], start=round(started, 3), end=round(time.time(), 3))
        return result

    def start_figures(self) -> dict:
        """How this evaluator's start went (see __init__): its process's age when kgen's code began, and the
        seconds of its own start (the problem's load, torch's import included)."""
        return dict(self._start_figures)

    def progress(self) -> Progress:
        """What the judge of the evaluation under way is doing (kgen.judge.heartbeat), in the actor's "progress"
        concurrency group: answered while `evaluate` runs, so the driver's watchdog tells a busy judge from a
        silent one."""
        return self.heartbeat.snapshot()

    def baselines(self, problem: tuple, max_autotune: bool) -> Optional[dict]:
        """Time `problem`'s eager and torch.compile baselines on this evaluator's GPU (kgen.judge.baselines, in
        a child process of kgen's own), in the actor's "baselines" concurrency group: beside its candidates,
        on every GPU; the driver stores them. None when they could not be timed."""
        from kgen.judge.baselines import time_baselines

        return time_baselines(_load(*problem), max_autotune)

    # What prestart starts at once on a GPU, per kind: what the first two evaluations take (the compile step
    # first: the first candidate needs it first). The spares' take() fills up to SpareRunners.DEPTH as the
    # candidates take them: all of DEPTH at once would slow these by as many more sandboxes importing torch.
    PRESTART: ClassVar[dict[str, int]] = {"compile": 2, "run": 4}

    def prestart(self, sandbox: str, language: str) -> None:
        """Start the sandboxes the first candidates will take now (runners, and compile steps where
        evaluations have one: on a GPU, or for CUDA sources), and (on a GPU) let them make their CUDA
        contexts: they start while the search times its baselines, not when the first candidate arrives."""
        from kgen.judge.evaluate import sandbox_mode
        from kgen.judge.spares import SpareRunners

        mode = sandbox_mode(EvalSettings(sandbox=sandbox))
        if self.spares is None or self.spares.mode is not mode:
            self.spares = SpareRunners(mode)
        device = self._judge_device()
        if device != "cpu":  # stopped while anyone times on this GPU (the driver lane, another evaluator on it)
            import torch

            from kgen.judge.gpu_lock import device_uuid

            self.spares.watch_timing(device_uuid(torch.device(device)))
        self.spares.prestart(device, self._prestart_counts(device, language))  # what _start_early has not started
        if device != "cpu":
            self.spares.warm()

    def _prestart_counts(self, device: str, language: str) -> dict[str, int]:
        counts = self.PRESTART if device != "cpu" else {"run": 2}
        kinds = ("compile", "run") if device != "cpu" or language != "triton" else ("run",)
        return {kind: counts.get(kind, 2) for kind in kinds}

    def _start_early(self, sandbox: str, language: str) -> None:
        """prestart's sandboxes started in a thread as this process starts, before it imports torch and loads
        the problem (4.7 s of the H100 box's 13.4 s to its first answer, issue 26), so theirs and its imports run
        side by side; prestart then starts only what is missing. The device is known without torch only where
        Ray gave this worker its GPU (cuda:0 is then that GPU) or the machine has none; elsewhere (a kgen_gpu
        evaluator on a machine with GPUs) prestart starts them, as before."""
        from kgen.judge import spares

        device = "cuda:0" if _has_ray_gpu() else "cpu" if not spares.gpu_node_here() else None
        if device is not None:
            self.spares = spares.start_in_background(sandbox, device, self._prestart_counts(device, language))

    def warm_up(self, sandbox: str, language: str) -> Optional[float]:
        """On a GPU, the judge's one-time work (Judge.warm_up) done now, in the actor's "baselines" group:
        beside whatever the actor is asked meanwhile (where it runs, its machine's facts), before its first
        candidate (whose timed runs wait for it under the GPU's timing lock). Its seconds, or None."""
        from kgen.judge.evaluate import sandbox_mode
        from kgen.judge.judge import Judge

        device = self._judge_device()
        if device == "cpu" or self.problem[0] is None:  # a collection's problems come with their candidates
            return None
        settings = EvalSettings(device=device, size=self.problem[1], sandbox=sandbox)
        try:
            return Judge(_load(*self.problem), "", language, settings, sandbox_mode(settings)).warm_up()
        except Exception:  # noqa: BLE001 - not a verdict: the first candidate meets the same fault and reports it
            return None

    @staticmethod
    def _judge_device() -> str:
        """The device as the judge keys its spares: this worker's GPU (as evaluations ask for "cuda"), or cpu."""
        import torch

        from kgen.judge.spares import spare_key

        return spare_key("cuda") if torch.cuda.is_available() else "cpu"

    def ncu_profile(self, source: str, settings: EvalSettings, budget_s: float) -> dict:
        """A Nsight Compute profile of a correct candidate (kgen.judge.ncu_profile), or {"unavailable": why}
        when none can be taken here."""
        import torch

        from kgen.judge import gpu_lock
        from kgen.judge.ncu_profile import NcuUnavailable, profile_candidate

        # its kernels replayed under the profiler: never beside a timed measurement (another evaluator may share
        # this GPU), nor beside another's untimed work that would skew the profile
        uuid = gpu_lock.device_uuid() if torch.cuda.is_available() else None
        try:
            with gpu_lock.exclusive(uuid):
                return profile_candidate(_load(*self.problem), source, settings, budget_s)
        except NcuUnavailable as e:
            return {"unavailable": str(e)}

    def gpu_free_bytes(self) -> Optional[int]:
        """Free memory on this evaluator's GPU now (what its baselines may share), or None without one."""
        import torch

        return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None

    def facts(self) -> EvaluatorFacts:
        """This evaluator's machine as the prompts state it: its versions, its GPU's properties and measured
        ceilings (kgen.judge.evaluator_facts; the ceilings from its node's cache, else measured now)."""
        from kgen.judge.evaluator_facts import this_machine

        return this_machine()

    def device(self) -> Device:
        import ray
        import torch

        node_id = ray.get_runtime_context().get_node_id()
        if not torch.cuda.is_available():
            return Device(name="cpu", cuda_arch=None, node_id=node_id)
        return gpu_device(node_id)


@dataclass(frozen=True)
class Job:
    """A stored candidate waiting for its evaluation."""

    candidate_id: int
    source: str
    problem: Optional[tuple] = None  # (problem ref, size, source hash) when not the stages' own (a collection)


@dataclass
class _Watch:
    """The watchdog's view of one evaluation: its progress call in flight (and when it was sent, or the
    evaluation was), the evaluator's last answer, and whether the evaluation was ever seen under way."""

    asked: Optional[object] = None
    asked_at: float = field(default_factory=time.monotonic)
    progress: Optional[Progress] = None
    answered_at: Optional[float] = None
    seen_busy: bool = False

    def seen(self, progress: Progress, now: float) -> None:
        self.progress, self.answered_at = progress, now
        self.seen_busy = self.seen_busy or progress.busy

    def last_state(self) -> str:
        if self.progress is None or self.answered_at is None:
            return ""
        return f"; at its last answer, {time.monotonic() - self.answered_at:.0f} s before, {self.progress.describe()}"


@dataclass(frozen=True)
class StageEvent:
    """A candidate entering a stage ('compiling', 'timing'), going back to one ('requeued', with a
    note saying why), or leaving the last one ('done', with its result)."""

    kind: str
    candidate_id: int
    result: Optional[EvalResult] = None
    note: str = ""


def _start_failure(error: Exception) -> Optional[KgenError]:
    """The one-line error for an evaluator whose own start raised (kgen's code in its __init__: a node whose
    problem file differs from the driver's, say), which no restart can mend; None for any other Ray error
    (a worker or node that died is restarted). Ray passes the start's exception on as text."""
    if not getattr(error, "actor_init_failed", False):
        return None
    lines = [line.strip() for line in str(getattr(error, "error_msg", "") or error).splitlines() if line.strip()]
    last = lines[-1] if lines else type(error).__name__
    prefix = f"{KgenError.__module__}.{KgenError.__name__}: "
    if last.startswith(prefix):
        return KgenError(last[len(prefix):])
    return KgenError(f"an evaluator could not start on its Ray node: {last[:300]}")


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:300]


class Stages:
    """The compile and timing stages on a cluster. `run(jobs, settings)` yields each candidate's events
    as they happen, results in the order they finish, so a slow candidate never holds up the others.

    An evaluator whose worker died is restarted by Ray (on another node if its own is gone, once one
    has the resource it needs); it gets no new candidate until it answers a ping again (a task sent
    to a restarting actor would fail, and the candidate with it)."""

    # What each stage runs: `compile_function(problem, size, source_hash, source, settings)` and the
    # evaluator actor class (`(problem, size, source_hash)`, `evaluate(source, settings)`, `device()`);
    # tests put stand-ins here.
    compile_function = staticmethod(_compile)
    evaluator_class = _Evaluator

    def __init__(self, cluster: Cluster, problem_path: Optional[str], size: str, source_hash: Optional[str] = None,
                 prestart: Optional[tuple[str, str]] = None):
        """`prestart`: (sandbox, language): each evaluator starts its first sandboxes as its process starts
        (_Evaluator._start_early), not after its imports; the `prestart` method starts what is still missing."""
        import ray

        from kgen.search.cluster import Reservation

        self.problem = (problem_ref(problem_path), size, source_hash)
        placement = cluster.placement
        # The placement's slots, reserved whole (or a one-line KgenError within a minute): the compile tasks
        # share each node's CPUs the evaluators leave. A placement without slots (a test's) is left to Ray.
        self._reservation = Reservation(placement) if placement.evaluators else None
        # else SPREAD: a round's compiles (30-70 s each for CUDA) use every node's CPUs, not the driver's first
        compile_options = (self._reservation.compile_options() if self._reservation
                           else {"num_cpus": 1, "scheduling_strategy": "SPREAD"})
        self._compile_task = ray.remote(max_retries=0, **compile_options)(self.compile_function)
        # baselines run in a concurrency group of their own: they compile beside the candidate being judged
        # (kgen.judge.gpu_lock keeps their timed runs and its apart), while evaluations stay one at a time, as
        # many as the evaluator's CPUs allow (kgen.search.baseline_queue: its caller keeps their GPU memory in
        # bounds); the watchdog's progress calls in one of their own: answered while a candidate is judged
        self.baselines_at_once = baselines_per_evaluator(cluster.num_cpus, placement.count)
        self._actor_class = ray.remote(max_restarts=-1, max_task_retries=0,
                                       concurrency_groups={"baselines": self.baselines_at_once, "progress": 1},
                                       )(self.evaluator_class)
        self._actor_options = placement.actor_options
        self._early = {"prestart": prestart} if prestart is not None and hasattr(self.evaluator_class, "prestart") \
            else {}
        self.per_gpu = placement.per_gpu  # evaluators sharing each GPU (their baselines share its free memory)
        self.actors = [self._new_actor(index) for index in range(placement.count)]
        self._actor_nodes: list[Optional[str]] = [None] * len(self.actors)  # where each last answered from
        self._free: list[int] = []  # actors that answered their ping and have no candidate
        self._pings: dict = {}  # ping ref -> actor index, for actors starting or coming back from a death
        self._ping_later: list[tuple[float, int]] = []  # (when, actor index): pinged again then
        self._compiling: dict = {}  # compile task ref -> (job, settings)
        self._ready: deque = deque()  # (job, settings) compiled, waiting for an evaluator
        self._timing: dict = {}  # evaluation ref -> (job, settings, actor index, started)
        self._watches: dict = {}  # evaluation ref -> its _Watch (what its evaluator's heartbeat said)
        self._compiled: dict[int, dict] = {}  # candidate id -> what its compile stage did
        self._nodes: dict[int, dict] = {}  # candidate id -> where its stages ran
        self._requeued: dict[int, list[dict]] = {}  # candidate id -> its attempts that did not finish
        self.first_answer: Optional[float] = None  # when (monotonic) an evaluator first answered a ping
        self._warm_ups: list = []  # each evaluator's warm-up ref (its seconds)
        self._cold: set[int] = set()  # evaluators whose warm-up is under way: given no candidate yet (_warm_free)
        self._warm_by = 0.0  # ... unless it is still under way then (a stuck warm-up must not stop the search)
        for index in range(len(self.actors)):
            self._ping(index)  # free once it answers, and then its node is known

    def prestart(self, sandbox: str, language: str) -> None:
        """Have every evaluator start its sandboxes now (see _Evaluator.prestart) and warm its judge up (in
        its "baselines" group, so nothing else asked of it waits); an evaluator class without these (a test's
        stand-in) does that work with its first candidate as before."""
        if hasattr(self.evaluator_class, "prestart"):
            for actor in self.actors:
                actor.prestart.remote(sandbox, language)
        if hasattr(self.evaluator_class, "warm_up"):
            self._warm_ups = [actor.warm_up.options(concurrency_group="baselines").remote(sandbox, language)
                              for actor in self.actors]
            self._cold = set(range(len(self.actors)))
            self._warm_by = time.monotonic() + WARM_UP_WAIT_S

    @staticmethod
    def _answers(refs: list, timeout_s: float) -> list:
        """What the actors asked (`refs`) answered within `timeout_s`; an evaluator that died meanwhile: none."""
        import ray

        if not refs:
            return []
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        values = []
        for ref in done:
            with contextlib.suppress(Exception):
                values.append(ray.get(ref))
        return values

    def start_figures(self) -> list[dict]:
        """Each evaluator's start figures (_Evaluator.start_figures), asked at the search's end (an evaluator class
        without them, a test's stand-in, or one that does not answer within 5 s: none)."""
        if not hasattr(self.evaluator_class, "start_figures"):
            return []
        return self._answers([actor.start_figures.options(concurrency_group="progress").remote()
                              for actor in self.actors], 5)

    def warm_up_s(self) -> list[float]:
        """The seconds of each evaluator's warm-up (Judge.warm_up) that has finished: kept with the run's startup
        figures, to see what the first candidate no longer pays."""
        return [v for v in self._answers(self._warm_ups, 0) if isinstance(v, (int, float))]

    def _new_actor(self, index: int):
        options = self._reservation.actor_options(index) if self._reservation else self._actor_options
        return self._actor_class.options(**options).remote(*self.problem, **self._early)

    @property
    def evaluator_count(self) -> int:
        return len(self.actors)

    def device(self) -> Device:
        import ray
        from ray.exceptions import RayError

        try:
            device = ray.get(self.actors[0].device.remote())
        except RayError as e:
            failure = _start_failure(e)
            if failure is None:
                raise
            raise failure from None
        self._actor_nodes[0] = device.node_id
        return device

    def evaluator_facts(self) -> EvaluatorFacts:
        """The first evaluator's machine (versions, GPU properties, measured ceilings), asked once per search:
        its prompts state these, not the driver's."""
        import ray

        return ray.get(self.actors[0].facts.remote())

    def _ping(self, index: int) -> None:
        """Ask the actor where it runs; it takes candidates again once it answers (see _pinged)."""
        self._pings[self.actors[index].device.remote()] = index

    def _pinged(self, ref) -> None:
        """A ping came back: the actor is free again, still restarting (ping later), or gone for
        good (start a new one)."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayError

        index = self._pings.pop(ref)
        try:
            device = ray.get(ref)
            self._actor_nodes[index] = device.node_id
        except ActorUnavailableError:
            self._ping_later.append((time.monotonic() + 0.5, index))
            return
        except RayError as e:
            failure = _start_failure(e)
            if failure is not None:  # its own start failed: a new one would fail the same way, forever
                raise failure from None
            self.actors[index] = self._new_actor(index)
            self._ping(index)
            return
        if self.first_answer is None:
            self.first_answer = time.monotonic()
        self._free.append(index)

    @staticmethod
    def _raise_if_kgens_own(error: Exception) -> None:
        """An exception raised by kgen's own code in a worker is a bug and propagates (Ctrl-C that reached
        the workers stops the search); any other Ray error means the worker or its node died."""
        from ray.exceptions import RayTaskError

        if isinstance(error, RayTaskError):
            if isinstance(error.cause, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            if isinstance(error.cause, KgenError):  # bad input met on a node (say, its problem file differs)
                raise error.cause from None
            raise error

    def _send_to_compile(self, job: Job, settings: EvalSettings) -> None:
        ref = self._compile_task.remote(*(job.problem or self.problem), job.source, settings)
        self._compiling[ref] = (job, settings)

    def _tries(self, candidate_id: int, kind: str) -> int:
        return sum(a["kind"] == kind for a in self._requeued.get(candidate_id, []))

    def _requeue(self, job: Job, settings: EvalSettings, stage: str, kind: str, reason: str,
                 node: Optional[str], limit: int) -> StageEvent:
        """Record the attempt that did not finish and put the candidate back in the queue of `stage`."""
        self._requeued.setdefault(job.candidate_id, []).append(
            {"stage": stage, "kind": kind, "node": node, "error": reason})
        if stage == "compile":
            self._send_to_compile(job, settings)
        else:
            self._ready.appendleft((job, settings))  # it has waited its turn once already
        what = "its worker died" if kind == "worker_died" else "kgen's harness failed"
        tries = self._tries(job.candidate_id, kind)
        return StageEvent("requeued", job.candidate_id, note=f"{what} in the {stage} stage ({reason}); "
                                                              f"re-queued, attempt {tries + 1} of {limit + 1}")

    def _worker_died(self, job: Job, settings: EvalSettings, stage: str, error: Exception,
                     node: Optional[str]) -> StageEvent:
        """Its Ray worker or node died under a candidate: again, or after MAX_REQUEUES more attempts, a
        harness_error that says so (the candidate cannot reach its worker: never its fault)."""
        reason = f"{type(error).__name__}: {_first_line(error)}"
        if self._tries(job.candidate_id, "worker_died") < MAX_REQUEUES:
            return self._requeue(job, settings, stage, "worker_died", reason, node, MAX_REQUEUES)
        self._requeued.setdefault(job.candidate_id, []).append(
            {"stage": stage, "kind": "worker_died", "node": node, "error": reason})
        return StageEvent("done", job.candidate_id, self._finish(job.candidate_id, EvalResult(
            outcome=Outcome.HARNESS_ERROR.value, device=settings.device, size=settings.size,
            message=f"the Ray workers running this candidate kept dying ({MAX_REQUEUES + 1} attempts; the last "
                    f"in the {stage} stage: {reason}); not the candidate's fault, it cannot reach its worker")))

    def _finish(self, candidate_id: int, result: EvalResult) -> EvalResult:
        """The result with where its stages ran, its unfinished attempts and its compile stage's record."""
        nodes = dict(self._nodes.pop(candidate_id, {}), **result.details.get("nodes", {}))
        if nodes:
            result.details["nodes"] = nodes
        if candidate_id in self._requeued:
            result.details["requeued"] = self._requeued.pop(candidate_id)
        info = self._compiled.pop(candidate_id, None)
        if info:  # the compile stage's seconds and builds go with the result
            result.details["compile_stage"] = info
            if result.compile_s is None:
                result.compile_s = info.get("compile_s")
        return result

    # The stages as a scheduler the search feeds while earlier candidates are still in flight:
    # `submit` sends jobs to the compile stage, `poll` moves them along and returns what happened.

    @property
    def compiling_count(self) -> int:
        return len(self._compiling)

    @property
    def in_flight(self) -> int:
        return len(self._compiling) + len(self._ready) + len(self._timing)

    def waiting(self) -> tuple[int, int, list[tuple[int, float]]]:
        """What is in flight: candidates in the compile stage, compiled ones waiting for an evaluator, and
        (candidate id, seconds so far) of each on an evaluator now."""
        now = time.monotonic()
        return (len(self._compiling), len(self._ready),
                [(job.candidate_id, now - started) for job, _, _, started in self._timing.values()])

    def submit(self, jobs: list[Job], settings: EvalSettings) -> list[StageEvent]:
        """Send jobs to the compile stage (CPU tasks, all at once: Ray queues what the CPUs cannot take)."""
        for job in jobs:
            self._send_to_compile(job, settings)
        return [StageEvent("compiling", job.candidate_id) for job in jobs]

    def _compile_done(self, ref) -> Optional[StageEvent]:
        import ray
        from ray.exceptions import RayError

        job, settings = self._compiling.pop(ref)
        try:
            failure, info, node = ray.get(ref)
        except RayError as e:
            self._raise_if_kgens_own(e)
            return self._worker_died(job, settings, "compile", e, None)
        self._nodes[job.candidate_id] = {"compile": node}
        if info:
            self._compiled[job.candidate_id] = info
        if failure is not None:
            return StageEvent("done", job.candidate_id, self._finish(job.candidate_id, failure))
        self._ready.append((job, settings))
        return None

    def _evaluation_done(self, ref) -> StageEvent:
        import ray
        from ray.exceptions import RayError

        job, settings, index, _ = self._timing.pop(ref)
        self._watches.pop(ref, None)
        try:
            result = ray.get(ref)
        except RayError as e:
            self._raise_if_kgens_own(e)
            self._ping(index)
            return self._worker_died(job, settings, "evaluation", e, self._actor_nodes[index])
        self._free.append(index)
        if (result.outcome == Outcome.HARNESS_ERROR.value
                and self._tries(job.candidate_id, "harness_error") < MAX_HARNESS_RETRIES):
            return self._requeue(job, settings, "evaluation", "harness_error", result.message.strip()[:300],
                                 self._actor_nodes[index], MAX_HARNESS_RETRIES)
        return StageEvent("done", job.candidate_id, self._finish(job.candidate_id, result))

    def _next_ready(self, timing_open) -> Optional[tuple]:
        """The first compiled (job, settings) that may be timed now: any while `timing_open` is True, none
        while it is False, else the first job `timing_open(job)` accepts (a collection times a problem's
        candidates once that problem's baselines are in)."""
        if timing_open is True or timing_open is False:
            return self._ready.popleft() if timing_open and self._ready else None
        for k, item in enumerate(self._ready):
            if timing_open(item[0]):
                del self._ready[k]
                return item
        return None

    def _warming(self) -> list:
        """The warm-up refs still awaited (poll wakes when one ends); the evaluators whose warm-up ended leave _cold."""
        import ray

        if not self._cold:
            return []
        refs = {self._warm_ups[i]: i for i in self._cold if i < len(self._warm_ups)}
        if not refs:
            self._cold.clear()
            return []
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        self._cold -= {refs[ref] for ref in done}
        if time.monotonic() > self._warm_by:
            self._cold.clear()
        return [ref for ref in refs if ref not in done] if self._cold else []

    def _warm_free(self) -> Optional[int]:
        """A free evaluator whose warm-up is over (or none was asked of it): its first candidate waits for its
        warm-up, which beside it only made both slower (on the H100 box the first candidate of each of two
        evaluators took 15.5 s, 3.7-4.2 s of it in a reference that shared the warm-up's one-time work)."""
        self._warming()
        return next((i for i in self._free if i not in self._cold), None)

    def poll(self, timeout_s: float = 0.5, timing_open=True) -> list[StageEvent]:
        """Dispatch compiled candidates to free evaluators (only while `timing_open`, a bool or a predicate
        on the job), wait up to `timeout_s` for anything to finish, and return the events: 'timing' for
        each dispatch, 'requeued' for each attempt a dead worker cut short, 'done' with each result."""
        import ray

        events: list[StageEvent] = []
        while (index := self._warm_free()) is not None and (item := self._next_ready(timing_open)) is not None:
            self._free.remove(index)
            job, settings = item
            ref = self.actors[index].evaluate.remote(job.source, settings, *((job.problem,) if job.problem else ()))
            self._timing[ref] = (job, settings, index, time.monotonic())
            self._watches[ref] = _Watch()
            events.append(StageEvent("timing", job.candidate_id))
        now = time.monotonic()
        for when, index in [p for p in self._ping_later if p[0] <= now]:
            self._ping_later.remove((when, index))
            self._ping(index)
        waiting = list(self._compiling) + list(self._timing) + list(self._pings) + self._warming()
        if not waiting:
            time.sleep(min(timeout_s, 0.2))
            return events
        done, _ = ray.wait(waiting, num_returns=1, timeout=timeout_s)
        for ref in done:
            if ref in self._pings:
                self._pinged(ref)
            elif ref in self._compiling:
                event = self._compile_done(ref)
                if event is not None:
                    events.append(event)
            elif ref in self._timing:
                events.append(self._evaluation_done(ref))
            # else an evaluator's warm-up ended: it takes candidates from the next poll (_warm_free)
        events.extend(self._watch())
        return events

    def _watch(self) -> list[StageEvent]:
        """Kill each evaluation its evaluator's heartbeat shows stuck (`_stuck`) and record a harness_error that
        says why and what the judge was doing: the judge enforces the candidate's own limit, so an evaluation
        stuck far past it is kgen's fault."""
        import ray

        events = []
        now = time.monotonic()
        for ref, (job, settings, index, started) in list(self._timing.items()):
            reason = self._stuck(ref, settings, index, now - started)
            if reason is None:
                continue
            del self._timing[ref]
            self._watches.pop(ref, None)
            ray.kill(self.actors[index], no_restart=False)
            self._ping(index)
            events.append(StageEvent("done", job.candidate_id, self._finish(job.candidate_id, EvalResult(
                outcome="harness_error", device=settings.device, size=settings.size,
                message=f"no result from its evaluation worker after {now - started:.0f} s: {reason}; the worker "
                        "was killed and restarted (kgen's fault, not the candidate's)"))))
        return events

    def _stuck(self, ref, settings: EvalSettings, index: int, elapsed_s: float) -> Optional[str]:
        """Why the evaluation `ref` (on evaluator `index`, `elapsed_s` since it was sent) should be killed now,
        or None. An evaluator asked for its progress every PROGRESS_EVERY_S is killed when (a) the candidate's
        charged seconds are far past its limit, (b) its judge started no new step for longer than the step may
        take, (c) it does not answer at all, or (d) the evaluation passed the hard bound for its problem's size.
        A stand-in without `progress`: after 2 x the time limit + ACTOR_GRACE_S, as before."""
        import ray
        from ray.exceptions import RayError

        if not hasattr(self.evaluator_class, "progress"):
            limit_s = settings.timeout_s * 2 + ACTOR_GRACE_S
            return (f"over the {limit_s:.0f} s limit (the judge enforces the candidate's time limit itself)"
                    if elapsed_s > limit_s else None)
        watch = self._watches[ref]
        now = time.monotonic()
        if watch.asked is not None:
            done, _ = ray.wait([watch.asked], timeout=0)
            if done:
                with contextlib.suppress(RayError):  # it died: its evaluation's ref fails too (back to the queue)
                    watch.seen(ray.get(done[0]), now)
                watch.asked = None
            elif now - watch.asked_at > PROGRESS_ANSWER_S:
                return (f"its evaluator did not answer a progress call in {PROGRESS_ANSWER_S:.0f} s (its process is "
                        f"hung){watch.last_state()}")
        if watch.asked is None and now - watch.asked_at >= PROGRESS_EVERY_S:
            watch.asked = self.actors[index].progress.options(concurrency_group="progress").remote()
            watch.asked_at = now
        progress = watch.progress
        if progress is None:
            return None
        gb = progress.tensor_bytes / 1e9
        charged_limit_s = settings.timeout_s * 2 + ACTOR_GRACE_S
        if progress.charged_s > charged_limit_s:
            return (f"the candidate's charged time ({progress.charged_s:.0f} s) is far past its "
                    f"{settings.timeout_s:g} s limit, which the judge should have enforced; {progress.describe()}")
        if progress.busy:
            silent_limit_s = (progress.step_limit_s or 0.0) + SILENT_S + SILENT_S_PER_GB * gb
            if progress.step_age_s > silent_limit_s:
                return (f"its judge made no progress for {progress.step_age_s:.0f} s (that step may take "
                        f"{silent_limit_s:.0f} s); {progress.describe()}")
        elif not watch.seen_busy and elapsed_s > QUEUED_S + SILENT_S:  # else it ended: its result is on its way
            return f"its evaluator did not start it in {QUEUED_S + SILENT_S:.0f} s (busy with earlier work)"
        hard_s = settings.timeout_s * 2 + ACTOR_GRACE_S + HARD_S + HARD_S_PER_GB * gb
        if elapsed_s - progress.waited_s > hard_s:
            return (f"past the hard bound of {hard_s:.0f} s for a problem of {gb:.2g} GB of inputs and outputs "
                    f"(its judge kept working); {progress.describe()}")
        return None

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
        self._watches.clear()
        self._compiled.clear()
        self._nodes.clear()
        self._requeued.clear()

    def time_baselines(self, problem: tuple, index: int, max_autotune: bool = False):
        """Send `problem`'s ((problem ref, size, source hash)) baseline timing to evaluator `index`; the ref
        gives a dict, or None. It runs beside the evaluator's candidates (`baselines_at_once` at a time, the
        rest queued): compiling while they are judged, timed under the GPU's timing lock."""
        return self.actors[index].baselines.options(concurrency_group="baselines").remote(problem, max_autotune)

    def gpu_free_bytes(self) -> list[Optional[int]]:
        """Each evaluator's share of its GPU's free memory now (asked in its "baselines" group, beside whatever it
        does: the free memory divided among the evaluators sharing the GPU); None for one without a GPU or that
        does not say (a test's stand-in)."""
        import ray

        if not hasattr(self.evaluator_class, "gpu_free_bytes"):
            return [None] * len(self.actors)
        refs = [actor.gpu_free_bytes.options(concurrency_group="baselines").remote() for actor in self.actors]
        free: list[Optional[int]] = []
        for ref in refs:
            try:
                answer = ray.get(ref, timeout=120)
                free.append(answer // self.per_gpu if isinstance(answer, int) else answer)
            except Exception:  # noqa: BLE001 - an evaluator that died or is slow to start: its count limits it
                free.append(None)
        return free

    def queued_ids(self) -> list[int]:
        """The candidates compiled and waiting for an evaluator, first in line first."""
        return [job.candidate_id for job, _ in self._ready]

    def ncu_profile(self, source: str, settings: EvalSettings, budget_s: float) -> dict:
        """Profile one candidate with Nsight Compute on the first evaluator's GPU (after whatever it is
        evaluating now): the profile, {"error": why} for this candidate, or {"unavailable": why}."""
        import ray

        method = getattr(self.actors[0], "ncu_profile", None)
        if method is None:  # an evaluator class without profiles (a stand-in's, say)
            return {"unavailable": "this evaluator does not take Nsight Compute profiles"}
        ref = method.remote(source, settings, budget_s)
        try:
            return ray.get(ref, timeout=budget_s + settings.timeout_s + ACTOR_GRACE_S)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref)
            return {"error": "the profile did not finish in time"}
        except Exception as e:  # noqa: BLE001 - a worker that died: no profile, the search goes on
            return {"error": _first_line(e)}

    def close(self) -> None:
        """The search is over: drop what is in flight and let the evaluators go, so a next search on the
        same cluster (kgen bench) gets their GPUs. Each exits as its own process would (its spare
        worker processes stopped), once its current task, if any, ends; then the reserved slots go back
        (after 10 s at most: an evaluator still busy then is ended with them)."""
        import ray

        self.cancel()
        ends = [actor.__ray_terminate__.remote() for actor in self.actors]
        if self._reservation is not None:  # its slots go back once the evaluators have ended (or 10 s on)
            ray.wait(ends, num_returns=len(ends), timeout=10)
            self._reservation.release()

    def run(self, jobs: list[Job], settings: EvalSettings) -> Iterator[StageEvent]:
        """All of `jobs` through both stages; events as they happen, results in the order they finish."""
        try:
            yield from self.submit(jobs, settings)
            while self.in_flight:
                yield from self.poll()
        finally:
            self.cancel()
