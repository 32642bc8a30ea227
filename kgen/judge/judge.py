"""The judge: trusted code that decides an evaluation's outcome. It never runs candidate code.

    judge (this process, kgen code only)                runner (sandboxed, kgen.harness.runner)
      problem, inputs, float64 references                   the candidate, imported and called
      arena: inputs, weights, output regions  ──socket──►   forward on the arena's inputs
      compare, audit, clock, verdict          ◄──socket──   outputs copied into the arena, reports

The runner and the compile step (the same program in "compile" mode, which may start compilers and
publishes its builds) run in kgen.judge.sandbox; the link is kgen.harness.protocol. The judge parses every
message as data with a size limit and a deadline, reads outputs only from memory it allocated, and
believes no claim of success: correctness is its own comparison, speed is the runner's CUDA-event
time bounded by the judge's own clock.

Order of an evaluation:
1. the reference: model and trial inputs drawn from fresh seeds (never zeros), outputs in float64;
2. on a GPU, the compile step (kgen.judge.compile_step): the candidate (and its ablated copy,
   kgen.judge.ablation) imported and called once in a sandbox that may start ptxas/nvcc, its Triton kernels
   and CUDA builds published to a cache directory keyed by the source, read-only from then on;
3. the runner (started in advance when a spare is kept: kgen.judge.spares) seals itself (no new processes)
   and runs the ablated copy first (kgen.judge.audit): if its output is still correct with its own kernels'
   bodies removed, its kernels are not what computes the result;
4. trials: for each, inputs written into the arena, outputs poisoned, forward, then shape, dtype,
   plain-tensor type, tolerance, unchanged inputs; every call traced; a repeat must match bitwise;
5. audits (kgen.judge.audit): every call launched a kernel of its own, torch's work stayed under half the
   reference's, and on a GPU the device kernels' time is mostly the candidate's;
6. timing (GPU; the protocol is kgen.judge.timing): every timed run on inputs drawn just before it, L2
   flushed by the judge, a random sample of timed outputs checked, the runner's event times bounded by the
   judge's clock within the noise measured in that very timing (clock_check: do-nothing runs of an
   untouched runner interleaved).
An evaluation ends in a Verdict, or a HarnessFault when kgen failed (kgen.judge.verdict).
"""

from __future__ import annotations

import contextlib
import copy
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any, Optional

import torch

from kgen.core.records import NOT_RUN, EvalSettings, Outcome
from kgen.harness.protocol import (
    BadFrame,
    ChannelClosed,
    ChannelTimeout,
    HostArena,
    Layout,
    RunnerJob,
    encode_value,
)
from kgen.harness.trace import OpTrace
from kgen.judge import verify
from kgen.judge.audit import Audits
from kgen.judge.compile_step import CompileSteps
from kgen.judge.gate_clock import GatePage, judge_clock
from kgen.judge.heartbeat import Heartbeat
from kgen.judge.sandbox import SandboxMode
from kgen.judge.spares import RunnerSlot, SpareRunners, start_process
from kgen.judge.timing import Stopwatch, TimedRuns
from kgen.judge.verdict import (
    MESSAGE_CHARS,
    Evidence,
    HarnessFault,
    Trial,
    Verdict,
    _number,
    _Restart,
    _text,
    seconds_in,
)
from kgen.problems.problem import Problem

RUNNER_OUTCOMES = {Outcome.COMPILE_ERROR.value, Outcome.RUNTIME_ERROR.value, Outcome.STATIC_REJECT.value}
SANDBOX_START_S = 180.0  # a sandboxed process that has not imported torch by then is a harness fault
# An evaluation whose planned GPU memory is more than this share of its GPU's holds the GPU alone all through
# (kgen.judge.gpu_lock): two evaluators share each GPU (kgen.search.cluster), two such evaluations side by side,
# their spare sandboxes' CUDA contexts (~0.5 GB each, 8 per evaluator) and the baselines' must fit together. The
# plan is generous (softmax at KernelBench's size: 10.5 GB planned, 8.9 GB at the judge's peak on the H100)
SHARE_GPU_MEMORY = 0.3


class Judge(CompileSteps, Audits, TimedRuns):
    """Evaluates one candidate of one problem on one device; `run()` returns the worker-result dict
    (outcome, message, errors, runtime_ms, details) that kgen.judge.evaluate turns into an EvalResult."""

    def __init__(self, problem: Problem, source: str, language: str, settings: EvalSettings, mode: SandboxMode,
                 spares: Optional[SpareRunners] = None, on_phase: Optional[Callable[[str, float], None]] = None,
                 heartbeat: Optional[Heartbeat] = None):
        self.problem, self.source, self.language, self.settings, self.mode = problem, source, language, settings, mode
        self.spares = spares
        self.on_phase = on_phase  # told each phase as it ends (name, seconds): `kgen eval`'s progress lines
        # told each step as it starts: the evaluator's watchdog reads it (kgen.judge.heartbeat)
        self.heartbeat = heartbeat if heartbeat is not None else Heartbeat()
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
        self.gate_page = None  # KGEN_JUDGE_CLOCK=gate: the gate words the runners wait on (kgen.judge.gate_clock)
        self.end_pages: list = []  # and each runner's end page, where the interprocess end event cannot be opened
        self.phases: dict[str, float] = {}
        self._mark = self._last_answer = time.monotonic()
        self._clock_running = False  # the candidate's time limit runs from the end of the reference phase
        self._unpaid_since: Optional[float] = None  # judge work or a GPU-lock wait under way: not the candidate's
        self._share = None  # the GPU held shared while run() works (gpu_shared), let go for each gpu_alone
        self._alone_throughout = False  # or held alone all through (gpu_shared: too big to share)
        self.heartbeat.charged_by(self.charged_s)

    # -- bookkeeping ---------------------------------------------------------------------------------

    def phase(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._mark, 3)
        if self.on_phase is not None:
            with contextlib.suppress(Exception):  # a progress line must never change a verdict
                self.on_phase(name, now - self._mark)
        self.heartbeat.phase_ended(name)
        self._mark = now

    def charged_s(self) -> float:
        """The seconds charged to the candidate's time limit so far (0 before its time starts); read from the
        evaluator's watchdog thread while the judge works, so judge work under way is left out too."""
        if not self._clock_running:
            return 0.0
        now = time.monotonic()
        unpaid_since = self._unpaid_since
        unpaid = now - unpaid_since if unpaid_since is not None else 0.0
        return self.settings.timeout_s - (self.deadline - now) - unpaid

    @contextlib.contextmanager
    def gpu_alone(self, what: str):
        """Hold this GPU's timing lock (kgen.judge.gpu_lock) for a timed measurement: a baseline being
        timed beside it, or another judge's untimed work on the same GPU, would skew both. The judge's shared
        hold (gpu_shared) is let go meanwhile and taken again after. The waits are the judge's, not the
        candidate's: its deadline moves by them, and the phases leave them out (`gpu_wait_s`)."""
        from kgen.judge import gpu_lock

        here = self.spares.timing_here() if self.spares is not None else contextlib.nullcontext()
        if self._alone_throughout:  # held alone for the whole evaluation already (gpu_shared)
            with here:
                yield
            return
        share = self._share
        if share is not None:
            share.let_go()
        held_lock = gpu_lock.exclusive(gpu_lock.device_uuid(self.device))
        try:
            with contextlib.ExitStack() as stack:
                self._wait_for_gpu(what, lambda: stack.enter_context(held_lock))
                stack.enter_context(here)
                yield
        finally:  # a verdict raised in the timed runs too: the judge's closing work is untimed work on the GPU
            if share is not None:
                self._wait_for_gpu(f"after {what}", share.take)

    @contextlib.contextmanager
    def gpu_shared(self, what: str, after_baselines: bool = True):
        """Hold this GPU shared (kgen.judge.gpu_lock.Share) for the block but for its gpu_alone parts: this
        judge's untimed work may run beside another judge's on the same GPU (two evaluators per GPU, the driver
        lane beside an evaluator), never beside a timed measurement. `after_baselines`: taken only once no
        baselines wait (they go between evaluations). Nothing is held without a GPU."""
        from kgen.judge import gpu_lock

        share = gpu_lock.Share(gpu_lock.device_uuid(self.device))
        if share.uuid is None:
            yield
            return
        if not self._fits_beside_another():  # two such evaluations could run the GPU out of memory: alone
            with self.gpu_alone(f"{what} (alone: its memory would not fit beside another evaluation's)"):
                self._alone_throughout = True
                if self.spares is not None:  # its own spares go on starting while it holds the GPU
                    self.spares.holding_alone(True)
                try:
                    yield
                finally:
                    self._alone_throughout = False
                    if self.spares is not None:
                        self.spares.holding_alone(False)
            return
        self._share = share
        try:
            self._wait_for_gpu(what, lambda: share.take(after_baselines=after_baselines))
            yield
        finally:
            self._share = None
            share.close()

    def _fits_beside_another(self) -> bool:
        """Whether this evaluation's GPU memory (its plan, verify.gpu_memory_plan, from the problem's shapes on the
        meta device) is at most SHARE_GPU_MEMORY of its GPU's: else it holds its GPU alone all through (another
        evaluation beside it could run the GPU out of memory). Unknown: alone."""
        from kgen.problems.problem import on_device

        try:
            with on_device("meta"):
                weights = list(self.problem.module.Model(*self.problem.init_inputs()).state_dict().values())
            plan = self._memory_plan(weights)
            return plan.need_bytes <= SHARE_GPU_MEMORY * plan.total_bytes
        except Exception:  # noqa: BLE001 - the problem's own faults are met (and reported) by the evaluation
            return False

    def _wait_for_gpu(self, what: str, take: Callable[[], dict]) -> dict:
        """`take()` a hold on the GPU (it returns {"waited_s", "had"}), its wait kept out of the candidate's time
        and out of the phases (`gpu_wait_s`)."""
        from kgen.judge import gpu_lock

        self.heartbeat.waiting(f"waiting for the GPU's timing lock ({what})", gpu_lock.WAIT_S)
        outer = self._unpaid_since is None
        if outer:  # the watchdog's charged seconds leave the wait out while it lasts
            self._unpaid_since = time.monotonic()
        try:
            held = take()
        except BaseException:
            if outer:
                self._unpaid_since = None
            raise
        waited = held["waited_s"]
        self.deadline += waited
        if outer:
            self._unpaid_since = None
        self.heartbeat.waited()
        self.heartbeat.step(what)
        self._mark += waited
        self.phases["gpu_wait_s"] = round(self.phases.get("gpu_wait_s", 0.0) + waited, 3)
        if not held["had"]:
            self.evidence.details.setdefault("gpu_lock", []).append(f"{what}: not had in {waited:.0f} s")
        return held

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def receive(self, slot: RunnerSlot, stage: str, expect: tuple[str, ...],
                budget_s: Optional[float] = None) -> dict[str, Any]:
        """The runner's next message; its silence, death or garbage becomes the candidate's outcome."""
        wait_s = max(self.left_s(), 0.01) if budget_s is None else max(min(self.left_s(), budget_s), 0.01)
        starting = stage.endswith("start")  # starting a sandbox runs no candidate code: kgen's fault if it fails
        if starting:
            wait_s = SANDBOX_START_S
        self.heartbeat.step(f"waiting for {stage}", wait_s)
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
        if self.gpu:
            self.plan_gpu_memory()
        return [Trial(seed, scale) for seed, scale in zip(seeds, scales)]

    def plan_gpu_memory(self) -> None:
        """Where the float64 reference runs, decided before the first trial from the problem's shapes
        (verify.GpuMemoryPlan, kept in the details): on the host when even the evaluation's least memory at a
        trial's float64 forward is more than the GPU has, rather than after a trial ran the GPU out of it."""
        try:
            plan = self._memory_plan(list(self.reference.state_dict().values()))
        except Exception:  # noqa: BLE001 - the reference's own run meets the same fault and reports it
            return
        self.evidence.details["gpu_memory_plan"] = dict(asdict(plan), need_bytes=plan.need_bytes)
        if not plan.fits:
            verify.reference_on_host(self.reference64)
            self.evidence.details["float64_reference"] = f"on the host, chosen before the first trial: " \
                                                         f"{plan.described()}"

    def _memory_plan(self, weights: list[torch.Tensor]) -> verify.GpuMemoryPlan:
        """verify.gpu_memory_plan for this problem's shapes (on the meta device) and `weights`, on this GPU."""
        from kgen.problems.problem import TensorSpec

        def meta(spec: TensorSpec) -> torch.Tensor:
            return torch.empty(spec.shape, dtype=getattr(torch, spec.dtype), device="meta")

        inputs = [meta(s) for s in self.problem.input_specs() if isinstance(s, TensorSpec)]
        outputs = [meta(s) for s in self.problem.output_specs()]
        total = torch.cuda.get_device_properties(self.device).total_memory
        return verify.gpu_memory_plan(inputs, weights, outputs, total)

    @contextlib.contextmanager
    def judge_work(self, what: str = "the judge's own work"):
        """The judge's own work (drawing inputs, the float64 references and torch's own run in the dtype,
        checking outputs, starting a sandbox) is not charged to the candidate's time limit: at the full size
        on a CPU it takes tens of seconds a trial, and charged it reported `timeout` for candidates that had
        not run."""
        self.heartbeat.step(what)
        with self._unpaid():
            yield

    @contextlib.contextmanager
    def _unpaid(self):
        """Seconds the candidate's deadline moves by (judge work, a wait for the GPU's timing lock); an inner
        block inside an outer one is the outer's."""
        if self._unpaid_since is not None:
            yield
            return
        started = self._unpaid_since = time.monotonic()
        try:
            yield
        finally:
            self.deadline += time.monotonic() - started
            self._unpaid_since = None

    def make(self, trial: Trial) -> Trial:
        """Draw `trial`'s inputs and references (freeing the previous trial's first); judge_work."""
        with self.judge_work("drawing a trial's inputs and float64 references"):
            return self._make(trial)

    def _make(self, trial: Trial) -> Trial:
        if trial._made is None:
            if self._current_trial is not None:
                self._current_trial._made = None
            try:
                inputs = self.problem.make_inputs(trial.seed, self.device, trial.scale)
                trial._made = (inputs, *self.references(inputs))
                if self.gpu and verify.reference_is_on_host(self.reference64):
                    self.evidence.details.setdefault(
                        "float64_reference", "on the host: its float64 forward ran the GPU out of memory in a trial")
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
                         model_seed=self.model_seed, env=self.build_env(), training=self.reference.training)

    def region(self, name: str) -> torch.Tensor:
        return self.arena.tensor(self.layout.regions[name])

    def write_inputs(self, inputs: list[Any]) -> None:
        for x, name in zip(inputs, self.input_regions):
            if name is not None:
                self.region(name).copy_(x)
        for name in self.output_regions:  # reshape: a 0-dim output (a full reduction) cannot be viewed as bytes
            self.region(name).reshape(-1).view(torch.uint8).fill_(verify.POISON_BYTE)
        if self.gpu:
            torch.cuda.synchronize(self.device)

    def inputs_unchanged(self, inputs: list[Any]) -> bool:
        return all(name is None or verify.same_tensors([self.region(name)], [x])
                   for x, name in zip(inputs, self.input_regions))

    # -- the runner ----------------------------------------------------------------------------------

    def started(self, slot: RunnerSlot, stage: str) -> dict[str, float]:
        """Wait until a sandboxed process is up (and warm, if it was told to warm): what its start cost. kgen's
        own work (no candidate code runs in it): not charged to the candidate (47.7 s for a compile step's
        sandbox on the H100 beside KernelBench's 6.4 GB softmax)."""
        with self._unpaid():
            ready = self.receive(slot, stage, ("ready",))
            if slot.warm_sent:
                ready = self.receive(slot, stage, ("warmed",))
        return seconds_in(ready, "seconds", 4)

    def take(self, device: str, kind: str) -> RunnerSlot:
        slot = self.spares.take(device, kind) if self.spares else start_process(device, self.mode, kind)
        self.slots.append(slot)
        return slot

    def start_runner(self, job: RunnerJob) -> RunnerSlot:
        slot = self.take(str(self.device), "run")
        self.evidence.details["runner_start"] = self.started(slot, "the sandbox's start")
        if self.left_s() <= 0:  # the candidate's own earlier run (its ablated copy) used up its time
            raise Verdict(Outcome.TIMEOUT, f"no result within the {self.settings.timeout_s:g} s time limit")
        slot.channel.send(asdict(job), fds=self.job_fds(job))
        sealed = self.receive(slot, "the runner's setup", ("sealed",))
        self.evidence.details["runner_setup"] = seconds_in(sealed, "setup_s", 16, 4)
        slot.gate = sealed.get("gate") if isinstance(sealed.get("gate"), dict) else None
        versions = sealed.get("versions")
        if isinstance(versions, dict):
            self.versions = {k: _text(versions.get(k), 64) for k in ("torch_version", "triton_version", "cuda_version")}
        return slot

    def job_fds(self, job: RunnerJob) -> tuple[int, ...]:
        """The descriptors a runner's job travels with: the arena, and the gate page where the gate clock is on."""
        if job.gate_index is None:
            return (self.arena.fd,)
        return self.arena.fd, self.gate_page.fd, self.end_pages[job.gate_index].fd

    def reference_runner_begin(self, job: RunnerJob) -> Optional[RunnerSlot]:
        """A second runner, given the same job but never any candidate code: the timing's trusted
        measure of its own overhead. Its job is sent now and its setup (a CUDA context, the arena)
        runs while the candidate is verified; `reference_runner_end` waits for it."""
        try:
            slot = self.take(str(self.device), "run")
            if job.gate_index is not None:  # its own word of the gate page
                job = replace(job, gate_index=job.gate_index + 1)
            slot.channel.send(asdict(job), fds=self.job_fds(job))
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
            sealed = self.receive(slot, "the reference runner's setup", ("sealed",))
            slot.gate = sealed.get("gate") if isinstance(sealed.get("gate"), dict) else None
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
        with self.judge_work("checking the outputs against the float64 references"):
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
                    # the verdict stands whatever the size of the difference (a forward must be reproducible bit
                    # for bit); the message says how far apart they are, so last-bit noise shows for what it is
                    raise Verdict(Outcome.INCORRECT, "two calls on the same inputs gave different outputs ("
                                  f"{verify.repeat_difference(kept, again)}): a forward must give the same bits for "
                                  "the same inputs, and an uninitialized read, state kept between calls or a "
                                  "reduction whose order changes from call to call (float atomicAdd) all show like "
                                  "this", **self.errors())
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

    # -- the whole evaluation ------------------------------------------------------------------------

    def errors(self) -> dict[str, Any]:
        return dict(self.evidence.worst, atol=self.evidence.atol, rtol=getattr(self, "rtol", None))

    def run(self) -> dict[str, Any]:
        """The evaluation, with its GPU held shared throughout but for its timed measurements (gpu_shared)."""
        with self.gpu_shared("the evaluation's untimed work"):
            return self._run()

    def _run(self) -> dict[str, Any]:
        from kgen.judge.ablation import ablate_triton_kernels

        details = self.evidence.details
        details["phases"] = self.phases
        details["sandbox"] = {"kind": str(self.mode)}
        if self.gpu:
            torch.cuda.reset_peak_memory_stats(self.device)
            if self.spares is not None:  # spares started during the last evaluation make their contexts now,
                self.spares.warm()  # while this one's reference and compile step run, not during its timing
                if self._share is not None:  # and they stop while anyone times on this GPU
                    self.spares.watch_timing(self._share.uuid)
        try:
            trials = self.make_trials()
            self.reference_profile(self.make(trials[0]).inputs)
            if self.language != "cuda":  # nvcc's builds do not depend on the shapes (and the CPU stage shares them)
                self.input_signature = ";".join(
                    f"{tuple(x.shape)}:{x.dtype}" if isinstance(x, torch.Tensor) else repr(x) for x in trials[0].inputs)
            job = self.make_arena(trials[0].inputs)
            self.phase("reference_s")
            self.deadline = time.monotonic() + self.settings.timeout_s  # the candidate's time starts now
            self._clock_running = True
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
            if self.gpu and judge_clock(self.settings.judge_clock) == "gate":
                self.gate_page = GatePage()
                self.end_pages = [GatePage(sealed=False), GatePage(sealed=False)]  # each runner's own
                job = replace(job, gate_index=0)  # the candidate's runner; the reference runner gets word 1
            reference = None
            for _attempt in range(2):
                slot = self.start_runner(job)
                self.phase("runner_start_s")
                details["sandbox"]["isolation"] = slot.process.isolation
                watch = Stopwatch(self, slot) if self.gpu else None
                if watch is not None:
                    with self.gpu_alone("calibration"):
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
                with self.gpu_alone("timing"):  # its spares stopped meanwhile (SpareRunners.timing_here)
                    timing = self.timed(slot, watch)
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

    def warm_up(self) -> float:
        """A first evaluation's one-time work in this process, done with no candidate (on the H100 box the
        first candidate's reference_s was 4.5-5.2 s, each later one's 0.03 s): the CUDA context, cuBLAS and
        the float64 kernels loaded, the operator trace's imports, a reference built, copied to float64 and
        traced, an arena shared with no one and closed. With the GPU held shared (gpu_shared), so no timed
        measurement (the baselines', timed while the evaluators start; another judge's) runs beside it, while
        another evaluator's warm-up on the same GPU may. Returns its seconds."""
        started = time.monotonic()
        try:
            with self.gpu_shared("warm-up"):
                trials = self.make_trials()
                self.reference_profile(self.make(trials[0]).inputs)
                self.make_arena(trials[0].inputs)
                self._current_trial._made = None
                del self.reference, self.reference64
        finally:
            self.close()
        return round(time.monotonic() - started, 3)

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
        if self.gate_page is not None:
            for page in (self.gate_page, *self.end_pages):
                page.close()
            self.gate_page, self.end_pages = None, []
        if self.gpu:
            torch.cuda.empty_cache()
            verify.release_pinned()


def prebuild_cuda(problem: Problem, source: str, settings: EvalSettings, mode: SandboxMode) -> tuple[str, str, list]:
    """The CPU compile stage for a CUDA candidate (see Judge.prebuild)."""
    return Judge(problem, source, "cuda", replace(settings, device="cpu"), mode).prebuild()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


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


def _cuda_not_run_message(details: dict[str, Any]) -> str:
    builds = details.get("cuda_builds") or []
    return ("compiled with nvcc; not runnable here (torch has no CUDA): not run, not verified, not timed"
            if builds or details.get("compile_step") else
            "CUDA source; not runnable here (torch has no CUDA): not run, not verified, not timed")
