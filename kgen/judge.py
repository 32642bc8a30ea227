"""The judge: trusted code that decides an evaluation's outcome. It never runs candidate code.

    judge (this process, kgen code only)                runner (sandboxed, kgen.harness.runner)
      problem, inputs, float64 references                   the candidate, imported and called
      arena: inputs, weights, output regions  ──socket──►   forward on the arena's inputs
      compare, audit, clock, verdict          ◄──socket──   outputs copied into the arena, reports

The runner and the compile step (the same program in "compile" mode, which may start compilers and
publishes its builds) run in kgen.sandbox; the link is kgen.harness.protocol. The judge parses every
message as data with a size limit and a deadline, reads outputs only from memory it allocated, and
believes no claim of success: correctness is its own comparison, speed is the runner's CUDA-event
time bounded by the judge's own clock.

Order of an evaluation:
1. the reference: model and trial inputs drawn from fresh seeds (never zeros), outputs in float64;
2. on a GPU, the compile step: the candidate (and its ablated copy, kgen.ablation) imported and called
   once in a sandbox that may start ptxas/nvcc, its Triton kernels and CUDA builds published to a
   cache directory keyed by the source, read-only from then on;
3. the runner (started in advance when a spare is kept) seals itself (no new processes) and runs the
   ablated copy first: if its output is still correct with its own kernels' bodies removed, its
   kernels are not what computes the result;
4. trials: for each, inputs written into the arena, outputs poisoned, forward, then shape, dtype,
   plain-tensor type, tolerance, unchanged inputs; every call traced; a repeat must match bitwise;
5. audits: every call launched a kernel of its own, torch's work stayed under half the reference's,
   and on a GPU the device kernels' time is mostly the candidate's;
6. timing (GPU): every timed run on inputs drawn just before it, L2 flushed by the judge, a random
   sample of timed outputs checked, the runner's event times bounded by the judge's clock within the
   noise measured in that very timing (clock_check: do-nothing runs of an untouched runner interleaved).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import os
import secrets
import shutil
import socket
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

import torch

from kgen import kernel_profile, telemetry, verify
from kgen.harness.protocol import (
    BadFrame,
    Channel,
    ChannelClosed,
    ChannelTimeout,
    HostArena,
    Layout,
    RunnerJob,
    encode_value,
)
from kgen.harness.trace import OpTrace
from kgen.problems import Problem, on_device
from kgen.records import NOT_RUN, EvalSettings, Outcome
from kgen.sandbox import SandboxedProcess, SandboxMode, SandboxSpec, SandboxUnavailable, cpu_memory_limit_bytes

L2_FLUSH_BYTES = 256 << 20
WARMUP_RUNS = 10
WARMUP_MAX_S = 2.0
MAX_RUNS = 10_000
MAX_TIMED_S = 1.0  # past min_runs, timing stops here even short of min_s (short kernels: thousands of runs)
CHECKED_TIMED_RUNS = 8  # timed outputs the judge verifies, at random, on fresh inputs
CALIBRATION_RUNS = 20  # timed runs of kgen's do-nothing forward, before any candidate code: the overhead
# timed median this far below the CUPTI-profiled forward's kernel time: suspicious. Honest kernels on the H100
# (65 evaluations of the 23 starters, benchmarks/judge_clock_gpu.sh) time at 0.984-1.04x their profiled kernels
WATCHED_SHARE, WATCHED_SLACK_MS = 0.9, 0.01
NULL_RUN_EVERY = 3  # during timing, one do-nothing run on the reference runner per this many candidate runs
MIN_INTERLEAVED_NULL_RUNS = 10
TORCH_WORK_LIMIT = 0.5  # torch may do less than half the reference's work, and use less than half the GPU time
# The clock check (clock_check): a runner whose event times fall short of the judge's clock by more than
# the null runs' overhead plus CLOCK_SIGMAS standard errors of that difference, and at least CLOCK_FLOOR_MS, is
# `suspicious`. The floor is measured: on the H100 an honest candidate's runner and the reference runner differ
# by a per-evaluation offset of up to 0.41 ms (65 honest evaluations; -0.41 to +0.39 ms), far beyond the
# standard errors within one evaluation, so a floor of 15 us flagged 3 of the 65 (benchmarks/RESULTS.md)
# and grows with the kernel: honest gaps of 0.40-0.48 ms on a 6 ms kernel (the clock matrix's share-0 runs)
CLOCK_SIGMAS = 6.0
CLOCK_FLOOR_MS = 0.5
CLOCK_FLOOR_SHARE = 0.1
# ... and without the reference runner's interleaved runs, whose overhead is measured before the candidate was
# loaded: GPU clocks and load drift by ±0.2 ms between then and the timing (seen on the H100)
DRIFT_SLACK_SHARE = 0.25
DRIFT_SLACK_MS = 0.25
PREBUILT_SUFFIX = ".cuda-prebuilt"  # the CPU compile stage's CUDA builds of a source, before its GPU compile step
RUNNER_OUTCOMES = {Outcome.COMPILE_ERROR.value, Outcome.RUNTIME_ERROR.value, Outcome.STATIC_REJECT.value}
MESSAGE_CHARS = 4000
SANDBOX_START_S = 180.0  # a sandboxed process that has not imported torch by then is a harness fault


class Verdict(Exception):
    """A finished evaluation (any outcome), raised from deep inside to end it."""

    def __init__(self, outcome: str, message: str, **fields: Any):
        super().__init__(message)
        self.outcome = str(outcome)
        self.message = message
        self.fields = fields


class HarnessFault(Exception):
    """The judge or the sandbox failed, not the candidate: the outcome is harness_error."""


def build_key(source: str, arch: Optional[str], shapes: str = "") -> str:
    """Where a source's compiled kernels live: one directory per (source, GPU arch, versions, and for
    Triton the input shapes). The CPU compile stage and the GPU's judge compute the same key (the search
    pins the arch for both). Triton compiles a kernel per specialization (its constexprs, which integer
    arguments are 1 or multiples of 16), so kernels compiled for one size are not those another size
    needs, and the runner may not compile: keyed without the shapes, `--size small` after `--size full`
    of the same source was a runtime_error."""
    import triton

    parts = [source, arch or "cpu", torch.__version__, str(torch.version.cuda), triton.__version__]
    payload = "\0".join(parts + ([shapes] if shapes else []))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def builds_root() -> Path:
    from kgen.resources import cache_dir

    return cache_dir() / "builds"


@dataclass
class RunnerSlot:
    """A started sandboxed process and our end of its channel (and, for a compile step, the fresh
    directory it may write)."""

    process: SandboxedProcess
    channel: Channel
    staging: Optional[Path] = None
    warm_sent: bool = False  # told to make its CUDA context before its job (it answers `warmed`)

    def close(self, keep_staging: bool = False) -> None:
        with contextlib.suppress(OSError):
            self.channel.close()
        self.process.kill()
        if self.staging is not None and not keep_staging:
            shutil.rmtree(self.staging, ignore_errors=True)


def start_process(device: str, mode: SandboxMode, kind: str = "run", wrapper: tuple[str, ...] = (),
                  read_only: tuple[Path, ...] = (), writable: tuple[Path, ...] = ()) -> RunnerSlot:
    """Start `python -m kgen.harness.runner` in the sandbox for `device`: it imports torch, makes its
    CUDA context and warms Triton, then waits for a job. `kind` "run": read-only builds, nothing
    writable (the same for every candidate, so it can start before the candidate is known);
    "compile": a fresh staging directory of its own, writable, where it publishes its builds."""
    gpu = device.startswith("cuda")
    root = builds_root()
    root.mkdir(parents=True, exist_ok=True)
    env = {"KGEN_RUNNER_DEVICE": device, "KGEN_RUNNER_KIND": kind}
    if not gpu:
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    staging = None
    if kind == "compile":
        staging = root / f".staging-{secrets.token_hex(8)}"
        (staging / "cuda").mkdir(parents=True)
        (staging / "triton").mkdir()
    spec = SandboxSpec(gpu=gpu, read_only=[root, *read_only], writable=([staging] if staging else []) + list(writable),
                       env=env, memory_limit_bytes=None if gpu else cpu_memory_limit_bytes())
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        process = SandboxedProcess("kgen.harness.runner", spec, mode, theirs.fileno(), wrapper=wrapper)
    except SandboxUnavailable as e:
        ours.close()
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise HarnessFault(str(e)) from e
    finally:
        theirs.close()
    return RunnerSlot(process, Channel(ours), staging)


def spare_key(device: str) -> str:
    """The device as the judge names it when it takes a spare (Judge.take: cuda:N, or cpu), for code that
    starts spares before the judge runs."""
    target = torch.device(device)
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", torch.cuda.current_device())
    return str(target)


class SpareRunners:
    """Started processes kept ready per (device, kind), `depth` of each: they import torch while the
    judge is busy with earlier candidates, and make their CUDA context when told to (`warm`, after a
    candidate's timing, never during it). Every candidate still gets processes, directories and a
    channel no other candidate has touched."""

    # per kind: an evaluation takes two `run` processes (the candidate's and the reference runner) and
    # one `compile`; a process needs 5-8 s to import torch in the sandbox on the H100 box, longer than a
    # Triton candidate's whole evaluation, so `run` spares start two evaluations ahead
    DEPTH: ClassVar[dict[str, int]] = {"run": 4, "compile": 2}

    def __init__(self, mode: SandboxMode, depth: Optional[int] = None):
        self.mode = mode
        self.depth = depth
        self.spares: dict[tuple[str, str], list[RunnerSlot]] = {}

    def take(self, device: str, kind: str = "run") -> RunnerSlot:
        queue = self.spares.setdefault((device, kind), [])
        slot = None
        while queue and slot is None:
            slot = queue.pop(0)
            if not slot.process.alive():
                slot.close()
                slot = None
        fresh = slot or start_process(device, self.mode, kind)
        depth = self.depth if self.depth is not None else self.DEPTH.get(kind, 2) if device != "cpu" else 2
        while len(queue) < depth:  # on a CPU the interpreter's evaluations are long: two spares keep up
            try:
                queue.append(start_process(device, self.mode, kind))
            except HarnessFault:
                break
        return fresh

    def prestart(self, device: str, counts: dict[str, int]) -> None:
        """Start now, all at once, the processes of each kind one evaluation will take (`counts`): with
        `depth` 0, what a single `kgen eval` needs, so its sandboxes import torch side by side, while
        the baselines compile and the reference runs, instead of one after another."""
        for kind, count in counts.items():
            queue = self.spares.setdefault((device, kind), [])
            while len(queue) < count:
                try:
                    queue.append(start_process(device, self.mode, kind))
                except HarnessFault:  # take() starts it then, and reports why it could not
                    break

    def warm(self) -> None:
        """Let the waiting spares make their CUDA contexts now (no candidate is being timed)."""
        for queue in self.spares.values():
            for slot in queue:
                if not slot.warm_sent and slot.process.alive():
                    try:
                        slot.channel.send({"type": "warm"})
                        slot.warm_sent = True
                    except OSError:
                        pass

    @contextlib.contextmanager
    def paused(self):
        """The spares stopped for the duration (a candidate's timing): one importing torch or making its
        CUDA context competes with the timed runs for the CPU that launches their kernels (on the H100 box,
        with four spares starting, every candidate's median came out 3-14% slower)."""
        held = [slot for queue in self.spares.values() for slot in queue if slot.process.alive()]
        for slot in held:
            slot.process.pause(True)
        try:
            yield
        finally:
            for slot in held:
                slot.process.pause(False)

    def close(self) -> None:
        for queue in self.spares.values():
            for slot in queue:
                slot.close()
        self.spares.clear()


@dataclass
class Trial:
    """One verification call's inputs, drawn from `seed` (×`scale` for floating inputs), their float64
    references and torch's own error in the problem's dtype (kgen.verify.OwnError): made when first
    needed and dropped when the next trial's are made, so the judge holds one trial's tensors at a
    time, however many trials there are."""

    seed: int
    scale: float
    _made: Optional[tuple[list[Any], list[torch.Tensor], list[Optional[verify.OwnError]]]] = \
        field(default=None, repr=False)

    @property
    def inputs(self) -> list[Any]:
        return self._made[0]

    @property
    def references(self) -> list[torch.Tensor]:
        return self._made[1]

    @property
    def own_errors(self) -> list[Optional[verify.OwnError]]:
        return self._made[2]


@dataclass
class Evidence:
    """What the judge learned on the way, for the result's details."""

    details: dict[str, Any] = field(default_factory=dict)
    worst: dict[str, float] = field(default_factory=dict)
    atol: Optional[float] = None


class Judge:
    """Evaluates one candidate of one problem on one device; `run()` returns the worker-result dict
    (outcome, message, errors, runtime_ms, details) that kgen.evaluate turns into an EvalResult."""

    def __init__(self, problem: Problem, source: str, language: str, settings: EvalSettings, mode: SandboxMode,
                 spares: Optional[SpareRunners] = None):
        self.problem, self.source, self.language, self.settings, self.mode = problem, source, language, settings, mode
        self.spares = spares
        self.input_signature = ""  # part of the build key for Triton (build_key says why); set by run()
        self.device = torch.device(settings.device)
        self.gpu = self.device.type == "cuda"
        if self.gpu:
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            self.device = torch.device("cuda", index)
        self.deadline = time.monotonic() + settings.timeout_s
        self.evidence = Evidence()
        self.slots: list[RunnerSlot] = []
        self.arena = None
        self.phases: dict[str, float] = {}
        self._mark = self._last_answer = time.monotonic()

    # -- bookkeeping ---------------------------------------------------------------------------------

    def phase(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._mark, 3)
        self._mark = now

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def receive(self, slot: RunnerSlot, stage: str, expect: tuple[str, ...],
                budget_s: Optional[float] = None) -> dict[str, Any]:
        """The runner's next message; its silence, death or garbage becomes the candidate's outcome."""
        wait_s = max(self.left_s(), 0.01) if budget_s is None else max(min(self.left_s(), budget_s), 0.01)
        starting = stage.endswith("start")  # starting a sandbox runs no candidate code: kgen's fault if it fails
        if starting:
            wait_s = SANDBOX_START_S
        try:
            message = slot.channel.receive(timeout_s=wait_s)
        except ChannelTimeout:
            if starting:
                raise HarnessFault(f"the sandbox did not start within {SANDBOX_START_S:.0f} s"
                                   + _stderr_suffix(slot)) from None
            limit = f"the {self.settings.timeout_s:g} s time limit" if budget_s is None else f"{wait_s:.0f} s"
            raise Verdict(Outcome.TIMEOUT,
                          f"no result within {limit} (during {stage}; the sandbox was killed)") from None
        except ChannelClosed:
            # its own exit status, when it exited by itself; still running (it closed the socket): kill it
            with contextlib.suppress(Exception):
                slot.process.proc.wait(timeout=5)
            slot.process.kill()
            if starting:
                raise HarnessFault(f"the sandbox failed to start: it {slot.process.exit_description()}"
                                   + _stderr_suffix(slot)) from None
            raise Verdict(Outcome.RUNTIME_ERROR, f"the evaluation process {slot.process.exit_description()} "
                                                 f"during {stage}" + _stderr_suffix(slot)) from None
        except BadFrame as e:
            raise Verdict(Outcome.RUNTIME_ERROR, f"the evaluation process sent a malformed message during {stage} "
                                                 f"({e})") from None
        finally:
            for fd in slot.channel.take_fds():  # nothing the runner sends is opened
                os.close(fd)
        kind = message["type"]
        now = time.monotonic()
        steps = self.evidence.details.setdefault("steps", [])
        if len(steps) < 40:  # where an evaluation's seconds go: each answer and how long it took to come
            steps.append([stage[:40], kind[:12], round(now - self._last_answer, 3)])
        self._last_answer = now
        if kind == "failed":
            claimed = str(message.get("outcome"))
            outcome = claimed if claimed in RUNNER_OUTCOMES or (claimed == NOT_RUN and not self.gpu
                                                                and self.language == "cuda") else Outcome.RUNTIME_ERROR
            builds = message.get("builds")
            if isinstance(builds, list):
                self.evidence.details["cuda_builds"] = builds[:20]
            raise Verdict(outcome, _text(message.get("message")) or f"failed during {stage}")
        if kind == "setup_failed":
            raise HarnessFault(f"the sandboxed process could not set up: {_text(message.get('message'))}")
        if kind not in expect:
            raise Verdict(Outcome.RUNTIME_ERROR, f"the evaluation process sent '{kind[:40]}' during {stage}")
        return message

    # -- the reference -------------------------------------------------------------------------------

    def make_trials(self) -> list[Trial]:
        trials = max(int(self.settings.trials), 5)
        self.model_seed = secrets.randbelow(2**31 - 1000)
        seeds = [secrets.randbelow(2**31 - 1) for _ in range(trials)]
        scales = [1.0] * (trials - 1) + [100.0]  # the last trial: floating inputs ×100 (overflow-prone rewrites)
        self.evidence.details.update(seeds=seeds, scales=scales, model_seed=self.model_seed)
        self.reference = self.problem.make_model(self.model_seed, self.device)
        self.reference64 = copy.deepcopy(self.reference).to(torch.float64)
        self._current_trial: Optional[Trial] = None
        return [Trial(seed, scale) for seed, scale in zip(seeds, scales)]

    @contextlib.contextmanager
    def judge_work(self):
        """The judge's own work (drawing inputs, the float64 references and torch's own run in the dtype,
        checking outputs) is not charged to the candidate's time limit: at the full size on a CPU it takes
        tens of seconds a trial, and charged it reported `timeout` for candidates that had not run."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.deadline += time.monotonic() - started

    def make(self, trial: Trial) -> Trial:
        """Draw `trial`'s inputs and references (freeing the previous trial's first); judge_work."""
        with self.judge_work():
            return self._make(trial)

    def _make(self, trial: Trial) -> Trial:
        if trial._made is None:
            if self._current_trial is not None:
                self._current_trial._made = None
            try:
                inputs = self.problem.make_inputs(trial.seed, self.device, trial.scale)
                trial._made = (inputs, *self.references(inputs))
                self.note_own_error(trial)
            except torch.OutOfMemoryError as e:
                raise HarnessFault(f"the reference ran out of GPU memory: {str(e).splitlines()[0]}") from e
            self._current_trial = trial
        return trial

    def references(self, inputs: list[Any]) -> tuple[list[torch.Tensor], list[Optional[verify.OwnError]]]:
        """The float64 outputs, and the error of the reference's own forward in its dtype against them
        (TF32 off): the bar a candidate is held to is never below what torch itself achieves."""
        return verify.reference_and_own_error(self.reference, self.reference64, inputs)

    def note_own_error(self, trial: Trial) -> None:
        """torch's own error on this trial, for the details (`kgen show`); an overflow is said, not hidden."""
        own = self.evidence.details.get("torch_own_error")
        if own is None:
            own = self.evidence.details["torch_own_error"] = {"dtype": self.problem.dtype,
                                                              "factor": verify.OWN_ERROR_FACTOR, "trials": []}
        seen = own["trials"]
        if any(t["seed"] == trial.seed for t in seen):
            return
        errors = [e for e in trial.own_errors if e is not None]
        row = {"seed": trial.seed, "scale": trial.scale,
               "norm_rel_err": max((e.norm_rel_err for e in errors), default=0.0),
               "elem_err": max((e.elem_err for e in errors), default=0.0),
               "overflow": sum(e.overflow for e in errors)}
        seen.append(row)
        for name in ("norm_rel_err", "elem_err"):
            own[name] = max(own.get(name, 0.0), row[name])
        if row["overflow"]:
            own.setdefault("overflow_notes", []).append(
                f"trial {len(seen)} (seed {trial.seed}, inputs ×{trial.scale:g}): torch's own forward in the "
                f"problem's dtype is Inf/NaN at {row['overflow']} elements where float64 is finite; those "
                "elements were not compared (the candidate's may be anything there but a NaN torch does not make)")

    def reference_profile(self, inputs: list[Any]) -> None:
        """The reference's outputs (shapes, dtypes) and its work, measured as the runner measures the
        candidate's (kgen.harness.trace)."""
        trace = OpTrace()
        with trace, torch.no_grad():
            outs = verify.as_outputs(self.reference(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
        self.expected = [(tuple(o.shape), o.dtype) for o in outs]
        self.reference_work = trace.total_work()
        self.evidence.details["reference_ops"] = trace.compute_ops()
        self.rtol = self.settings.rtol or verify.default_rtol(self.expected[0][1])

    # -- the arena -----------------------------------------------------------------------------------

    def make_arena(self, inputs: list[Any], outputs: bool = True) -> RunnerJob:
        """The shared buffer (inputs, the reference's parameters, output regions) and the job that
        describes it to the runner."""
        layout = Layout()
        args: list[Any] = []
        self.input_regions: list[Optional[str]] = []
        for k, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                r = layout.add(f"in{k}", _dtype_name(x.dtype), tuple(x.shape), x.element_size())
                args.append({"region": r.name})
                self.input_regions.append(r.name)
            else:
                args.append({"value": encode_value(x)})
                self.input_regions.append(None)
        state = self.reference.state_dict()
        weights = {}
        for k, (name, t) in enumerate(state.items()):
            weights[name] = layout.add(f"w{k}", _dtype_name(t.dtype), tuple(t.shape), t.element_size()).name
        init_inputs = []
        for k, v in enumerate(self.problem.init_inputs()):
            if isinstance(v, torch.Tensor):
                init_inputs.append({"region": layout.add(f"init{k}", _dtype_name(v.dtype), tuple(v.shape),
                                                         v.element_size()).name})
                self._init_tensors = getattr(self, "_init_tensors", {}) | {f"init{k}": v}
            else:
                init_inputs.append({"value": encode_value(v)})
        outputs = [layout.add(f"out{k}", _dtype_name(dtype), shape, torch.empty((), dtype=dtype).element_size()).name
                   for k, (shape, dtype) in enumerate(self.expected)] if outputs else []
        self.layout = layout
        if self.gpu:
            from kgen.harness.gpu_share import CudaArena, CudaShareError

            try:
                self.arena = CudaArena.create(layout.size, self.device.index)
            except (CudaShareError, OSError) as e:
                raise HarnessFault(f"cannot share GPU memory with the sandbox: {e}") from e
        else:
            self.arena = HostArena(layout.size)
        for name, region in weights.items():
            self.region(region).copy_(state[name])
        for name, t in getattr(self, "_init_tensors", {}).items():
            self.region(name).copy_(t)
        self.output_regions = outputs
        return RunnerJob(mode="run", device=str(self.device), arena_kind=self.arena.kind, layout=layout.to_json(),
                         args=args, init_inputs=init_inputs, weights=weights, outputs=outputs,
                         model_seed=self.model_seed, env=self.build_env())

    def region(self, name: str) -> torch.Tensor:
        return self.arena.tensor(self.layout.regions[name])

    def write_inputs(self, inputs: list[Any]) -> None:
        for x, name in zip(inputs, self.input_regions):
            if name is not None:
                self.region(name).copy_(x)
        for name in self.output_regions:
            self.region(name).view(torch.uint8).fill_(verify.POISON_BYTE)
        if self.gpu:
            torch.cuda.synchronize(self.device)

    def inputs_unchanged(self, inputs: list[Any]) -> bool:
        return all(name is None or verify.same_tensors([self.region(name)], [x])
                   for x, name in zip(inputs, self.input_regions))

    # -- builds --------------------------------------------------------------------------------------

    def build_env(self) -> dict[str, str]:
        from kgen.harness.cuda_build import pch_env

        env = pch_env()
        if self.settings.cuda_arch:
            env["KGEN_CUDA_ARCH"] = env["TORCH_CUDA_ARCH_LIST"] = self.settings.cuda_arch
        return env

    def prepare_pch(self) -> None:
        """kgen's precompiled torch/extension.h for this CUDA source's flags, made here (trusted code),
        before its compile step; its seconds are not charged to the candidate."""
        if self.language == "cuda":
            from kgen.harness.cuda_build import prepare_torch_pch

            done = self.evidence.details["torch_pch"] = prepare_torch_pch(self.source)
            self.deadline += done["s"]

    def build_dir(self) -> Path:
        # a CUDA source's builds depend on the target arch even where nothing runs (nvcc checks it for one)
        arch = self.settings.cuda_arch if self.gpu or torch.version.cuda or self.language == "cuda" else None
        return builds_root() / build_key(self.source, arch, self.input_signature)

    def compile_step(self, job: RunnerJob, ablated: Optional[str]) -> Path:
        """The sandboxed process that may start compilers: it imports and calls the candidate (and its
        ablated copy) once, so Triton compiles their kernels and load_inline builds their extensions,
        and publishes them to the source's build directory. Cached: a source compiled once for this
        GPU and these versions is never compiled again. `job` (the runner's) is pointed at the builds."""
        final = self.build_dir()
        self.evidence.details["build_key"] = final.name  # where its kernels are: builds_root() / build_key
        if (final / "complete").exists():
            self.evidence.details["compile_step"] = "cached"
            return self._use_builds(job, final)
        self.prepare_pch()
        prebuilt = final.with_name(final.name + PREBUILT_SUFFIX) / "cuda"
        while True:
            slot = self.take(str(self.device), "compile")
            staging = slot.staging
            if prebuilt.is_dir():  # the CPU compile stage built its CUDA extensions already
                shutil.copytree(prebuilt, staging / "cuda", symlinks=True, dirs_exist_ok=True)
                slot.process.hand_over(staging / "cuda")
            try:
                self._compile_in(slot, job, ablated)
                break
            except _Restart:  # the ablated copy took the process down: the candidate compiles in a fresh one
                ablated = None
                self.ablated_crashed = True
        (staging / "complete").write_text("compiled by the compile step\n")
        try:
            os.rename(staging, final)
        except OSError:  # another evaluation of the same source published first: use theirs
            shutil.rmtree(staging, ignore_errors=True)
        self.evidence.details["compile_step"] = "compiled"
        return self._use_builds(job, final)

    @staticmethod
    def _use_builds(job: RunnerJob, build: Path) -> Path:
        """Point the runner's job at a finished build directory: its Triton cache, its CUDA builds."""
        job.triton_caches = [str(build / "triton")]
        job.env = dict(job.env, KGEN_CUDA_BUILD_DIR=str(build / "cuda"))
        return build

    def prebuild(self) -> tuple[str, str, list]:
        """The CPU compile stage of a CUDA source (no GPU): the compile step imports it, so its
        load_inline calls build, into the source's `.cuda-prebuilt` directory. Returns (outcome,
        message, builds), outcome "" when it built (or could not tell: the GPU's compile step will)."""
        self.model_seed = secrets.randbelow(2**31 - 1000)
        self.reference = self.problem.make_model(self.model_seed, "cpu")
        with on_device("meta"):  # shapes only: the arena's input pages are never written, so never allocated
            inputs = list(self.problem.module.get_inputs())
        job = self.make_arena(inputs, outputs=False)
        final = self.build_dir()
        prebuilt = final.with_name(final.name + PREBUILT_SUFFIX)
        if prebuilt.exists() or (final / "complete").exists():
            return "", "", []
        self.prepare_pch()
        slot = self.take("cpu", "compile")
        staging = slot.staging
        compile_job = RunnerJob(**dict(asdict(job), mode="compile",
                                       env=dict(job.env, KGEN_CUDA_BUILD_DIR=str(staging / "cuda"))))
        outcome, message, builds = "", "", []
        try:
            self.started(slot, "the compile stage's start")
            slot.channel.send(asdict(compile_job), fds=(self.arena.fd,))
            self.receive(slot, "the compile stage's setup", ("sealed",))
            slot.channel.send({"type": "load", "module": "candidate", "source": self.source})
            loaded = self.receive(slot, "the compile stage", ("loaded",))
            builds = loaded.get("builds") if isinstance(loaded.get("builds"), list) else []
            slot.channel.send({"type": "forward", "module": "candidate", "meta": True, "stage": "the compile stage"})
            try:  # a forward on meta tensors, for the extensions it builds on its first call
                self.receive(slot, "the compile stage", ("output",))
            except Verdict as v:
                if v.outcome == Outcome.COMPILE_ERROR:
                    raise
            builds = self.evidence.details.get("cuda_builds", builds)
        except Verdict as v:
            if v.outcome == Outcome.COMPILE_ERROR:
                outcome, message = v.outcome, v.message
            builds = self.evidence.details.get("cuda_builds", [])
        finally:
            slot.close(keep_staging=True)
            self.slots.remove(slot)
            self.close()
        if not outcome:
            with contextlib.suppress(OSError):  # another evaluation of the same source published first
                os.rename(staging, prebuilt)
        shutil.rmtree(staging, ignore_errors=True)
        return outcome, message, builds

    def started(self, slot: RunnerSlot, stage: str) -> dict[str, float]:
        """Wait until a sandboxed process is up (and warm, if it was told to warm): what its start cost."""
        ready = self.receive(slot, stage, ("ready",))
        if slot.warm_sent:
            ready = self.receive(slot, stage, ("warmed",))
        seconds = ready.get("seconds") if isinstance(ready.get("seconds"), dict) else {}
        return {_text(k, 20): round(_number(v), 3) for k, v in list(seconds.items())[:4]}

    def take(self, device: str, kind: str) -> RunnerSlot:
        slot = self.spares.take(device, kind) if self.spares else start_process(device, self.mode, kind)
        self.slots.append(slot)
        return slot

    def _compile_in(self, slot: RunnerSlot, job: RunnerJob, ablated: Optional[str]) -> None:
        staging = slot.staging
        compile_job = RunnerJob(**dict(asdict(job), mode="compile", publish_to=str(staging / "triton"),
                                       env=dict(job.env, KGEN_CUDA_BUILD_DIR=str(staging / "cuda"))))
        try:
            self.started(slot, "the compile step's start")
            slot.channel.send(asdict(compile_job), fds=(self.arena.fd,))
            self.receive(slot, "the compile step's setup", ("sealed",))
            for module, source in (("ablated", ablated), ("candidate", self.source)):
                if source is None:
                    continue
                slot.channel.send({"type": "load", "module": module, "source": source})
                try:
                    self.receive(slot, f"the compile step ({module})", ("loaded",))
                    slot.channel.send({"type": "forward", "module": module, "stage": "the compile step's warm-up call"})
                    self.receive(slot, f"the compile step ({module})", ("output",))
                except Verdict as v:
                    if module == "candidate" and (v.outcome in (Outcome.COMPILE_ERROR, Outcome.TIMEOUT, NOT_RUN)
                                                  or not slot.process.alive()):
                        raise
                    if not slot.process.alive():  # nothing more can be sent to a dead process
                        raise _Restart() from None
                    # other failures of the warm-up call show again, with their context, in the runner
            slot.channel.send({"type": "bye"})
            self.receive(slot, "the compile step's end", ("bye",))
        except BaseException:
            slot.close()
            self.slots.remove(slot)
            raise
        slot.close(keep_staging=True)
        self.slots.remove(slot)

    # -- the runner ----------------------------------------------------------------------------------

    def start_runner(self, job: RunnerJob) -> RunnerSlot:
        slot = self.take(str(self.device), "run")
        self.evidence.details["runner_start"] = self.started(slot, "the sandbox's start")
        if self.left_s() <= 0:  # the candidate's own earlier run (its ablated copy) used up its time
            raise Verdict(Outcome.TIMEOUT, f"no result within the {self.settings.timeout_s:g} s time limit")
        slot.channel.send(asdict(job), fds=(self.arena.fd,))
        sealed = self.receive(slot, "the runner's setup", ("sealed",))
        versions = sealed.get("versions")
        if isinstance(versions, dict):
            self.versions = {k: _text(versions.get(k), 64) for k in ("torch_version", "triton_version", "cuda_version")}
        return slot

    def reference_runner_begin(self, job: RunnerJob) -> Optional[RunnerSlot]:
        """A second runner, given the same job but never any candidate code: the timing's trusted
        measure of its own overhead. Its job is sent now and its setup (a CUDA context, the arena)
        runs while the candidate is verified; `reference_runner_end` waits for it."""
        try:
            slot = self.take(str(self.device), "run")
            slot.channel.send(asdict(job), fds=(self.arena.fd,))
            return slot
        except (HarnessFault, OSError) as e:
            self.evidence.details["reference_runner"] = f"not available: {e}"
            return None

    def reference_runner_end(self, slot: Optional[RunnerSlot]) -> Optional[RunnerSlot]:
        """The reference runner once sealed; None when it could not start (the calibration made before
        the candidate was loaded stands in)."""
        if slot is None:
            return None
        try:
            self.started(slot, "the reference runner's start")
            self.receive(slot, "the reference runner's setup", ("sealed",))
            return slot
        except (HarnessFault, Verdict) as e:
            self.evidence.details["reference_runner"] = f"not available: {e}"
            return None

    def call(self, slot: RunnerSlot, trial: Trial, module: str, stage: str) -> dict[str, Any]:
        """One forward of `module` on `trial`'s inputs; returns the runner's report (outputs in the arena)."""
        self.write_inputs(self.make(trial).inputs)
        slot.channel.send({"type": "forward", "module": module, "stage": stage})
        return self.receive(slot, stage, ("output",))

    def check_outputs(self, report: dict[str, Any], trial: Trial, label_prefix: str = "") -> list[verify.Comparison]:
        """Compare what the runner delivered with the trial's float64 references; the runner's
        description decides only which message a mismatch gets. judge_work: not the candidate's time."""
        with self.judge_work():
            return self._check_outputs(report, trial, label_prefix)

    def _check_outputs(self, report: dict[str, Any], trial: Trial, label_prefix: str) -> list[verify.Comparison]:
        described = report.get("outputs") if isinstance(report.get("outputs"), list) else []
        if len(described) != len(self.expected):
            raise Verdict(Outcome.INCORRECT, f"{label_prefix}forward returned {len(described)} output(s), "
                                             f"the reference {len(self.expected)}")
        results = []
        for k, (d, (shape, dtype), ref) in enumerate(zip(described, self.expected, trial.references)):
            label = label_prefix + ("output" if len(self.expected) == 1 else f"output[{k}]")
            problem = _description_problem(d, shape, dtype, str(self.device), label)
            if problem:
                results.append(verify.Comparison(False, problem, rtol=self.rtol))
                continue
            results.append(verify.compare(self.region(self.output_regions[k]), ref, dtype, self.rtol, label,
                                          own=trial.own_errors[k]))
        return results

    def ablation(self, slot: RunnerSlot, trials: list[Trial], ablated: str) -> None:
        """The candidate with its Triton kernels' bodies removed, first in a fresh runner: if its output
        is still correct, its kernels are not what computes the result."""
        from kgen.ablation import ablated_kernel_names

        slot.channel.send({"type": "load", "module": "ablated", "source": ablated})
        passed, torch_ops = False, set()
        budget_s = max(10.0, self.left_s() / 4)  # a hang here must leave time for the real evaluation
        try:
            self.receive(slot, "the ablated copy's import", ("loaded",), budget_s)
            for trial in trials[:2]:
                self.write_inputs(self.make(trial).inputs)
                slot.channel.send({"type": "forward", "module": "ablated", "stage": "the ablated copy's forward"})
                report = self.receive(slot, "the ablated copy's forward", ("output",), budget_s)
                passed = passed or all(c.ok for c in self.check_outputs(report, trial))
                if isinstance(report.get("work"), dict):
                    torch_ops.update(_text(k, 64) for k in list(report["work"])[:32])
        except Verdict as v:
            self.evidence.details["ablation"] = f"inconclusive: the ablated copy failed ({v.outcome})"
            if not slot.process.alive() or v.outcome == Outcome.TIMEOUT:
                raise _Restart() from None
            return
        if passed:
            self.evidence.details["torch_ops"] = sorted(torch_ops)
            who = f"torch ({', '.join(sorted(torch_ops))})" if torch_ops else "torch or other code"
            raise Verdict(Outcome.STATIC_REJECT, f"its output is still correct with the bodies of its own kernels "
                                                 f"({', '.join(ablated_kernel_names(self.source))}) removed: {who} "
                                                 "computes the result, not its kernels")
        self.evidence.details["ablation"] = "the ablated copy's output was wrong, as it must be"

    def trials(self, slot: RunnerSlot, trials: list[Trial]) -> None:
        details = self.evidence.details
        slot.channel.send({"type": "load", "module": "candidate", "source": self.source})
        loaded = self.receive(slot, "import", ("loaded",))
        details["weights"] = _text(loaded.get("weights"), 200)
        if isinstance(loaded.get("builds"), list):
            details["cuda_builds"] = loaded["builds"][:20]
        self.phase("import_s")
        torch_work, launches, kernels = [], [], set()
        kept = None
        n = len(trials)
        for t, trial in enumerate([*trials, trials[0]]):
            repeat = t == n
            stage = "the repeat of trial 1" if repeat else ("the first forward" if t == 0 else f"trial {t + 1}")
            report = self.call(slot, trial, "candidate", stage)
            work = report.get("work") if isinstance(report.get("work"), dict) else {}
            torch_work.append({_text(k, 64): _number(v) for k, v in list(work.items())[:64]})
            launches.append(_number(report.get("launches")))
            kernels.update(_text(k, 100) for k in (report.get("kernels") or [])[:32])
            self.runner_peak_bytes = max(getattr(self, "runner_peak_bytes", 0), int(_number(report.get("peak_bytes"))))
            if repeat:
                again = [self.region(r) for r in self.output_regions]  # compared before anything else runs
                if not all(verify.same_tensors([a], [b]) for a, b in zip(again, kept)):
                    raise Verdict(Outcome.INCORRECT, "two calls on the same inputs gave different outputs "
                                  "(uninitialized memory read, or state kept between calls)", **self.errors())
                break
            for c in self.check_outputs(report, trial):
                for name in ("max_abs_err", "max_rel_err", "norm_rel_err"):
                    value = getattr(c, name)
                    if value is not None:
                        self.evidence.worst[name] = max(self.evidence.worst.get(name, 0.0), value)
                if c.atol is not None and self.evidence.atol is None:
                    self.evidence.atol = c.atol
                if not c.ok:
                    scale = f", inputs ×{trial.scale:g}" if trial.scale != 1.0 else ""
                    raise Verdict(Outcome.INCORRECT, f"trial {t + 1} of {n} (seed {trial.seed}{scale}): {c.message}",
                                  **self.errors())
            if not self.inputs_unchanged(trial.inputs):
                raise Verdict(Outcome.INCORRECT, f"trial {t + 1}: forward modified its input tensors in place",
                              **self.errors())
            if t == 0:
                kept = [verify.kept_copy(self.region(r)) for r in self.output_regions]
        self.phase("verify_s")
        if self._current_trial is not None:  # nothing of the trials is needed from here on
            self._current_trial._made = None
        details["kernel_launches"] = launches
        details["kernels"] = sorted(kernels)
        self.audit_work(torch_work, launches)

    def audit_work(self, torch_work: list[dict[str, float]], launches: list[float]) -> None:
        """Every call launched a kernel of the candidate's own, and torch did less than half the
        reference's work in each (the runner's trace; the ablation and the GPU audit back it up)."""
        ops = sorted({op for w in torch_work for op in w})
        self.evidence.details["torch_ops"] = ops
        for t, count in enumerate(launches):
            if not count:
                call = "the repeat call" if t == len(launches) - 1 else f"call {t + 1}"
                raise Verdict(Outcome.STATIC_REJECT, f"{call} of forward launched none of the candidate's own kernels "
                                                     "(no Triton kernel defined in its file, no call into its CUDA "
                                                     "extension)")
        if self.reference_work:
            share = max(sum(w.values()) for w in torch_work) / self.reference_work
            self.evidence.details["torch_work_share"] = round(share, 4)
            if share >= TORCH_WORK_LIMIT:
                reference_ops = ", ".join(self.evidence.details["reference_ops"])
                raise Verdict(Outcome.STATIC_REJECT, f"torch operators ({', '.join(ops)}) did {share:.0%} of the "
                                                     f"reference's work ({reference_ops}); "
                                                     "its own kernels are not what computes the result")

    def audit_gpu_kernels(self, slot: RunnerSlot, runtime_ms: Optional[float] = None) -> None:
        """The device kernels one forward ran (CUPTI): most of the GPU time must be the candidate's own,
        and the timed runs may not take much less GPU time than this watched forward did (a candidate
        that notices the profiler and runs other code when unwatched)."""
        slot.channel.send({"type": "profile"})
        report = self.receive(slot, "the kernel audit", ("profile",))
        kernels = report.get("kernels")
        if not isinstance(kernels, list):
            self.evidence.details["gpu_kernels"] = f"not available: {_text(report.get('error'), 300)}"
            return
        own_names = set(self.evidence.details.get("kernels", [])) | _cuda_kernel_names(self.source)
        rows, own_us, other_us = [], 0.0, 0.0
        watched_ms = sum(_number(k.get("us")) for k in kernels[:50]) / 1e3
        for k in kernels[:50]:
            name, us = _text(k.get("name"), 300), _number(k.get("us"))
            whose = "own" if any(n and n in name for n in own_names) else (
                "copy" if any(w in name.lower() for w in ("memcpy", "memset", "fill")) else "other")
            own_us += us if whose == "own" else 0.0
            other_us += us if whose == "other" else 0.0
            rows.append({"name": name, "us": round(us, 2), "whose": whose})
        self.evidence.details["gpu_kernels"] = rows
        try:  # the profile the next round's prompt shows: advisory, so a malformed one is left out, not a verdict
            profile = kernel_profile.from_runner(report, own_names)
        except Exception:  # noqa: BLE001 - the runner's reply is the candidate's to shape
            profile = None
        if profile is not None:
            self.evidence.details["kernel_profile"] = profile
        if own_us + other_us > 0 and other_us / (own_us + other_us) >= TORCH_WORK_LIMIT:
            others = ", ".join(r["name"][:60] for r in rows if r["whose"] == "other")[:500]
            raise Verdict(Outcome.STATIC_REJECT, f"{other_us / (own_us + other_us):.0%} of its GPU kernel time was in "
                                                 f"kernels that are not its own ({others})")
        if runtime_ms is not None and runtime_ms < WATCHED_SHARE * watched_ms - WATCHED_SLACK_MS:
            raise Verdict(Outcome.SUSPICIOUS, f"its timed runs took {runtime_ms:.4g} ms, but the forward the judge "
                                              f"profiled ran {watched_ms:.4g} ms of GPU kernels (honest kernels "
                                              "time at "
                                              "0.98x or more of their profile): its timed runs leave work out of "
                                              "their events, or it does less work when it is not watched",
                                  runtime_ms=runtime_ms)

    # -- timing --------------------------------------------------------------------------------------

    def timing(self, slot: RunnerSlot, watch: Stopwatch) -> dict[str, Any]:
        """Time the candidate: fresh inputs for every run, drawn and written by the judge; L2 flushed by
        the judge; the runner's CUDA-event time for each run; the judge's clock around each run; a
        random sample of timed outputs verified. Returns the statistics."""
        warm_started, warmup = time.perf_counter(), 0
        while warmup < WARMUP_RUNS and (warmup < 2 or time.perf_counter() - warm_started < WARMUP_MAX_S):
            watch.run("candidate", "timing (warm-up)")
            warmup += 1
        before = telemetry.sample(self.device)  # the GPU's clocks and power as the timed runs start, warm
        elapsed, wall = [], []
        min_runs, min_s = int(self.settings.min_timed_runs), float(self.settings.min_timed_s)
        started = time.perf_counter()
        checked, check_every = 0, None
        while len(elapsed) < MAX_RUNS and (len(elapsed) < min_runs or sum(elapsed) < min_s * 1e3) \
                and (len(elapsed) < min_runs or time.perf_counter() - started < MAX_TIMED_S):
            if self.left_s() <= 0:
                raise Verdict(Outcome.TIMEOUT, f"no result within the {self.settings.timeout_s:g} s time limit "
                                               "(during timing)")
            if len(elapsed) % NULL_RUN_EVERY == NULL_RUN_EVERY - 1:
                watch.null_run()
            seed, inputs, wall_ms, ms, reply = watch.run("candidate", "timing")
            elapsed.append(ms)
            wall.append(wall_ms)
            if check_every is None:  # as many runs as the time allows, of which CHECKED_TIMED_RUNS are checked
                per_run_ms = wall_ms * (1 + 2 / NULL_RUN_EVERY) + 1.0  # each null run is a pair
                expected_runs = max(min_runs, min(int(min_s * 1e3 / max(ms, 1e-3)),
                                                  int(MAX_TIMED_S * 1e3 / per_run_ms)))
                check_every = max(1, expected_runs // CHECKED_TIMED_RUNS)
            if secrets.randbelow(check_every) == 0:  # which runs are checked is decided after they ran
                checked += 1
                with self.judge_work():
                    trial = Trial(seed, 1.0, (inputs, *self.references(inputs)))
                for c in self.check_outputs(reply, trial, "timed run: "):
                    if not c.ok:
                        raise Verdict(Outcome.INCORRECT, f"timed run {len(elapsed)} (fresh inputs, seed {seed}): "
                                                         f"{c.message}", **self.errors())
                if not self.inputs_unchanged(inputs):
                    raise Verdict(Outcome.INCORRECT, "forward modified its input tensors in place during timing",
                                  **self.errors())
        measured = telemetry.around(before, telemetry.sample(self.device))
        if measured is not None:
            self.evidence.details["telemetry"] = measured
        ordered = sorted(elapsed)
        median = statistics.median(ordered)
        beside = statistics.median(w - e for w, e in zip(wall, elapsed))  # the judge's clock beyond the events
        stats = {"median_ms": median, "mean_ms": statistics.fmean(ordered), "min_ms": ordered[0],
                 "p10_ms": ordered[len(ordered) // 10], "p90_ms": ordered[(len(ordered) * 9) // 10],
                 "runs": len(ordered), "warmup_runs": warmup, "checked_runs": checked,
                 "judge_wall_median_ms": statistics.median(wall), "beside_events_ms": round(beside, 4),
                 "overhead_ms": round(watch.overhead_ms, 4), "unexplained_ms": round(beside - watch.overhead_ms, 4),
                 "overhead_from": "interleaved runs of a runner no candidate touched"
                 if len(watch.null_beside) >= MIN_INTERLEAVED_NULL_RUNS else "runs before the candidate was loaded"}
        self.evidence.details["timing"] = stats
        self.evidence.details["samples_ms"] = [round(x, 5) for x in elapsed[:2000]]
        self.evidence.details["judge_wall_ms"] = [round(x, 4) for x in wall[:2000]]
        self.evidence.details["null_beside_ms"] = [round(x, 4) for x in watch.null_beside[:1000]]
        self.evidence.details["null_first_beside_ms"] = [round(x, 4) for x in watch.null_first_beside[:1000]]
        if len(watch.null_beside) >= MIN_INTERLEAVED_NULL_RUNS:
            clock = clock_check([w - e for w, e in zip(wall, elapsed)], watch.null_beside, median)
        else:  # the overhead measured before the candidate was loaded: its drift since is not measured
            clock = ClockCheck(beside - watch.overhead_ms, None, DRIFT_SLACK_SHARE * median + DRIFT_SLACK_MS)
        stats.update(clock_gap_ms=round(clock.gap_ms, 4), clock_threshold_ms=round(clock.threshold_ms, 4),
                     clock_noise_ms=None if clock.noise_ms is None else round(clock.noise_ms, 5))
        if clock.flagged:
            raise Verdict(Outcome.SUSPICIOUS, f"the runner's CUDA-event time ({median:.4g} ms) leaves "
                                              f"{clock.gap_ms:.3g} ms of the judge's own clock "
                                              f"({stats['judge_wall_median_ms']:.4g} ms per run) unexplained, beyond "
                                              f"what a run that does nothing takes ({watch.overhead_ms:.3g} ms) and "
                                              f"more than the {clock.threshold_ms:.3g} ms the measured noise allows: "
                                              "the timing cannot be trusted", runtime_ms=median, **self.errors())
        return stats

    # -- the whole evaluation ------------------------------------------------------------------------

    def errors(self) -> dict[str, Any]:
        return dict(self.evidence.worst, atol=self.evidence.atol, rtol=getattr(self, "rtol", None))

    def run(self) -> dict[str, Any]:
        from kgen.ablation import ablate_triton_kernels

        details = self.evidence.details
        details["phases"] = self.phases
        details["sandbox"] = {"kind": str(self.mode)}
        if self.gpu:
            torch.cuda.reset_peak_memory_stats(self.device)
            if self.spares is not None:  # spares started during the last evaluation make their contexts now,
                self.spares.warm()  # while this one's reference and compile step run, not during its timing
        try:
            trials = self.make_trials()
            self.reference_profile(self.make(trials[0]).inputs)
            if self.language != "cuda":  # nvcc's builds do not depend on the shapes (and the CPU stage shares them)
                self.input_signature = ";".join(
                    f"{tuple(x.shape)}:{x.dtype}" if isinstance(x, torch.Tensor) else repr(x) for x in trials[0].inputs)
            job = self.make_arena(trials[0].inputs)
            self.phase("reference_s")
            self.deadline = time.monotonic() + self.settings.timeout_s  # the candidate's time starts now
            ablated = ablate_triton_kernels(self.source) if self.language != "cuda" else None
            self.ablated_crashed = False
            if self.mode is SandboxMode.NONE:
                job.seal = False
            if self.gpu or self.language == "cuda":
                self.write_inputs(self.make(trials[0]).inputs)
                self.compile_step(job, ablated)
                self.phase("compile_s")
                if self.ablated_crashed:  # it would take the runner down too: spare the candidate's time
                    ablated = None
                    details["ablation"] = "inconclusive: the ablated copy took its process down in the compile step"
                if self.language == "cuda" and not self.gpu:  # compiled, but nothing can run here
                    raise Verdict(NOT_RUN, _cuda_not_run_message(details))
            reference = None
            for _attempt in range(2):
                slot = self.start_runner(job)
                self.phase("runner_start_s")
                details["sandbox"]["isolation"] = slot.process.isolation
                watch = Stopwatch(self, slot) if self.gpu else None
                if watch is not None:
                    watch.calibrate()
                    self.phase("calibration_s")
                    if reference is None:
                        reference = self.reference_runner_begin(job)
                try:
                    if ablated is not None:
                        self.ablation(slot, trials, ablated)
                        self.phase("ablation_s")
                    self.trials(slot, trials)
                    break
                except _Restart:  # the ablated copy took its runner down: the real candidate gets a fresh one
                    slot.close()
                    self.slots.remove(slot)
                    ablated = None
            timing = None
            if self.gpu:
                watch.reference = self.reference_runner_end(reference)
                with self.spares.paused() if self.spares is not None else contextlib.nullcontext():
                    timing = self.timing(slot, watch)
                self.phase("timing_s")
                self.audit_gpu_kernels(slot, timing["median_ms"] if timing else None)
                self.phase("profile_s")
                details["tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32,
                                   "cudnn": torch.backends.cudnn.allow_tf32}
            result = dict(outcome=Outcome.CORRECT.value, message="", runtime_ms=timing["median_ms"] if timing else None,
                          **self.errors())
        except Verdict as v:
            result = dict(v.fields, outcome=v.outcome, message=v.message[:MESSAGE_CHARS])
            for name, value in self.errors().items():
                result.setdefault(name, value)
        finally:
            self.close()
            if self.spares is not None:
                self.spares.warm()
        result["details"] = details
        result.update(getattr(self, "versions", {}))
        return result

    def close(self) -> None:
        if self.gpu and self.arena is not None:
            self.evidence.details["gpu_memory"] = {
                "judge_peak_bytes": torch.cuda.max_memory_allocated(self.device), "arena_bytes": self.arena.size,
                "runner_peak_bytes": getattr(self, "runner_peak_bytes", None)}
        for slot in self.slots:
            tails = {"stdout_tail": slot.process.stdout.text(), "stderr_tail": slot.process.stderr.text()}
            slot.close()
            for key, text in tails.items():
                if text.strip():
                    self.evidence.details[key] = text[-2000:]
        self.slots.clear()
        if self.arena is not None:
            self.arena.close()
            self.arena = None
        if self.gpu:
            torch.cuda.empty_cache()


@dataclass(frozen=True)
class ClockCheck:
    """The judge's clock against the runner's events: `gap_ms` is what the candidate's runs spend beyond
    their event time, minus what a run that does nothing spends beyond its own; `noise_ms` the standard
    error of that difference (None where it was not measured); beyond `threshold_ms` is `suspicious`."""

    gap_ms: float
    noise_ms: Optional[float]
    threshold_ms: float

    @property
    def flagged(self) -> bool:
        return self.gap_ms > self.threshold_ms


def _median_standard_error(values: list[float]) -> float:
    """The standard error of a sample's median, from its MAD: 1.4826·MAD estimates σ for normal data
    (and ignores the outliers a context switch or a page fault makes), and a median's standard error is
    √(π/2)·σ/√n = 1.2533·σ/√n."""
    middle = statistics.median(values)
    mad = statistics.median(abs(v - middle) for v in values)
    return 1.2533 * 1.4826 * mad / math.sqrt(len(values))


def clock_check(beside_ms: list[float], null_beside_ms: list[float], median_ms: float) -> ClockCheck:
    """Whether the runner's event times are shorter than the judge's clock allows, from this timing's
    own measurements.

    Each timed run gives `beside` = the judge's wall time − the runner's event time: the round trip,
    the process switches and the output copy, which a run of kgen's do-nothing forward in the reference
    runner (never touched by the candidate, interleaved with the candidate's runs) spends too. An honest
    runner's beside times have the null runs' median; a runner that reports s% + c ms less than its
    kernels took has a median higher by s·T + c. The gap is the difference of the two medians; its noise
    the standard error of that difference (each median's from its MAD, robust to the slow runs a context
    switch makes). The threshold is CLOCK_SIGMAS standard errors (a gap that large is not chance: honest
    runs are never flagged for noise), and at least CLOCK_FLOOR_MS + CLOCK_FLOOR_SHARE of the median, which
    covers what two processes differ by systematically from one evaluation to the next (on the H100: up to
    0.41 ms for kernels of 0.3-3 ms, 0.48 ms for one of 6 ms; their wake-ups, the GPU's clocks under each
    one's load; benchmarks/judge_clock_gpu.sh). So the clock catches lies of more than 0.5 ms + 10%; the
    audit's watched check (the timed median against the CUPTI-profiled forward's kernels,
    Judge.audit_gpu_kernels) catches shaves of 10% and more of any kernel whose profile is honest."""
    gap = statistics.median(beside_ms) - statistics.median(null_beside_ms)
    noise = math.hypot(_median_standard_error(beside_ms), _median_standard_error(null_beside_ms))
    threshold = max(CLOCK_SIGMAS * noise, CLOCK_FLOOR_MS + CLOCK_FLOOR_SHARE * median_ms)
    return ClockCheck(gap, noise, threshold)


class Stopwatch:
    """The judge's side of timed runs on a GPU: every run gets inputs drawn just before it, an L2 flush
    (a 256 MB write), then the runner's timed call, clocked by the judge from its request to its own
    kernel finishing after the reply (so work left running past the reply is counted).

    `calibrate()` runs it on kgen's own do-nothing forward, in a runner no candidate code has touched
    yet: what a timed run costs besides the forward on this GPU (the round trip, the switch between
    the two processes' GPU contexts, the output copy). A candidate's runs may exceed that by their
    event time and the measured noise, no more (clock_check); `null_run()` measures it again during the
    timing, in the reference runner."""

    def __init__(self, judge: Judge, slot: RunnerSlot):
        self.judge, self.slot, self.device = judge, slot, judge.device
        self.flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=self.device)
        self.probe = torch.zeros(1, device=self.device)
        self.overhead_ms = 0.0
        self.null_beside: list[float] = []
        self.null_first_beside: list[float] = []  # the first of each pair: the reference runner waking up
        self.reference: Optional[RunnerSlot] = None  # a second runner that never sees candidate code

    def run(self, module: str, stage: str, slot: Optional[RunnerSlot] = None,
            ) -> tuple[int, list[Any], float, float, dict[str, Any]]:
        """One timed run: (seed, inputs, the judge's wall ms, the runner's event ms, its reply)."""
        slot = slot or self.slot
        seed = secrets.randbelow(2**31 - 1)
        inputs = self.judge.problem.make_inputs(seed, self.device)
        self.judge.write_inputs(inputs)
        self.flush.fill_(1)
        torch.cuda.synchronize(self.device)
        started = time.perf_counter()
        slot.channel.send({"type": "timed", "module": module})
        reply = self.judge.receive(slot, stage, ("timed",))
        self.probe.add_(1)  # the judge's own kernel: runs once the GPU has run everything before it
        torch.cuda.synchronize(self.device)
        wall_ms = (time.perf_counter() - started) * 1e3
        ms = _number(reply.get("elapsed_ms"))
        if not (math.isfinite(ms) and ms > 0):
            raise Verdict(Outcome.RUNTIME_ERROR, f"the runner reported a timed run of {reply.get('elapsed_ms')!r} ms")
        return seed, inputs, wall_ms, ms, reply

    def calibrate(self, runs: int = CALIBRATION_RUNS) -> float:
        """The overhead, from the candidate's runner before any candidate code is in it."""
        beside = []
        for k in range(runs + 3):  # the first few warm up
            _, _, wall_ms, ms, _ = self.run("null", "calibration")
            if k >= 3:
                beside.append(wall_ms - ms)
        self.overhead_ms = statistics.median(beside)
        return self.overhead_ms

    def null_run(self) -> None:
        """Do-nothing runs on the reference runner, between the candidate's runs: the overhead under the
        very conditions of the timing (GPU clocks, load), from a process no candidate touched. Two in a
        row, of which the second counts: the first finds the reference runner idle since its last pair,
        where the candidate's runner is busy, and it wakes more slowly (overheads ~0.1 ms higher on the
        H100, which would let a candidate's events claim that much less unseen)."""
        if self.reference is not None:
            _, _, wall_ms, ms, _ = self.run("null", "calibration", self.reference)
            self.null_first_beside.append(wall_ms - ms)
            _, _, wall_ms, ms, _ = self.run("null", "calibration", self.reference)
            self.null_beside.append(wall_ms - ms)
            if len(self.null_beside) >= MIN_INTERLEAVED_NULL_RUNS:
                self.overhead_ms = statistics.median(self.null_beside)


def prebuild_cuda(problem: Problem, source: str, settings: EvalSettings, mode: SandboxMode) -> tuple[str, str, list]:
    """The CPU compile stage for a CUDA candidate (see Judge.prebuild)."""
    from dataclasses import replace

    return Judge(problem, source, "cuda", replace(settings, device="cpu"), mode).prebuild()


class _Restart(Exception):
    """The runner died during the ablation run; the real evaluation needs a fresh one."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _text(value: Any, limit: int = MESSAGE_CHARS) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _stderr_suffix(slot: RunnerSlot) -> str:
    text = slot.process.stderr.text().strip()[-2000:]
    return f"; its stderr ended with:\n{text}" if text else ""


def _description_problem(d: Any, shape: tuple, dtype: torch.dtype, device: str, label: str) -> Optional[str]:
    """What is wrong with a returned value, from the runner's description of it; None if it fits."""
    if not isinstance(d, dict):
        return f"{label}: no description"
    kind = _text(d.get("type"), 200)
    if "plain" not in d:
        return f"{label} is a {kind}, not a torch.Tensor"
    if d.get("plain") is not True:
        return f"{label} is a {kind}, not a plain torch.Tensor"
    if d.get("layout") != "torch.strided":
        return f"{label} has layout {_text(d.get('layout'), 40)}, not strided"
    if d.get("shape") != list(shape):
        return f"{label} has shape {tuple(d.get('shape') or ())}, expected {shape}"
    if d.get("dtype") != _dtype_name(dtype):
        return f"{label} has dtype torch.{_text(d.get('dtype'), 40)}, expected {dtype}"
    if d.get("device") != device:
        return f"{label} is on {_text(d.get('device'), 40)}, expected {device}"
    return None


def _cuda_kernel_names(source: str) -> set[str]:
    """The names of the `__global__` functions in a CUDA source. Qualifiers with arguments
    (`__launch_bounds__(256)`, `__cluster_dims__(2, 1, 1)`, `__maxnreg__(64)`, `__attribute__((...))`)
    may stand before or after the return type: they are dropped first, else their parenthesis would be
    taken for the kernel's (a correct kernel's time then counted as another's, and the candidate
    rejected: seen on the H100 with the bundled cuda_two_pass and cuda_cluster_single_pass starters)."""
    import re

    bare = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", source, flags=re.S)
    bare = re.sub(r"\b__\w+__\s*\([^()]*\)", " ", bare)
    return set(re.findall(r"__global__\s+[\w:<>\s\*]*?\b(\w+)\s*\(", bare))


def _cuda_not_run_message(details: dict[str, Any]) -> str:
    builds = details.get("cuda_builds") or []
    return ("compiled with nvcc; not runnable here (torch has no CUDA): not run, not verified, not timed"
            if builds or details.get("compile_step") else
            "CUDA source; not runnable here (torch has no CUDA): not run, not verified, not timed")
