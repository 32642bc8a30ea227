"""The sandboxed processes an evaluation runs in: `start_process` starts `python -m kgen.harness.runner` in the
sandbox (kgen.judge.sandbox) with our end of its channel (a RunnerSlot), and SpareRunners keeps some started
ahead, per device and kind, so that importing torch in the sandbox (5-8 s on the H100 box) overlaps the
evaluations before. Importing this module imports no torch: `kgen eval` starts its sandboxes before its own
torch import (SpareRunners.prestart_in_background).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

from kgen.harness.protocol import Channel
from kgen.judge.builds import builds_root
from kgen.judge.sandbox import SandboxedProcess, SandboxMode, SandboxSpec, SandboxUnavailable, cpu_memory_limit_bytes
from kgen.judge.verdict import HarnessFault


@dataclass
class RunnerSlot:
    """A started sandboxed process and our end of its channel (and, for a compile step, the fresh
    directory it may write)."""

    process: SandboxedProcess
    channel: Channel
    staging: Optional[Path] = None
    warm_sent: bool = False  # told to make its CUDA context before its job (it answers `warmed`)
    gate: Optional[dict] = None  # KGEN_JUDGE_CLOCK=gate: what its `sealed` said of its gate (kgen.harness.gate)

    def close(self, keep_staging: bool = False) -> None:
        with contextlib.suppress(OSError):
            self.channel.close()
        self.process.kill()
        if self.staging is not None and not keep_staging:
            shutil.rmtree(self.staging, ignore_errors=True)


def compile_nice() -> int:
    """How much lower the CPU compile stage's sandboxes run (their nvcc builds, 60-120 s each, fill every CPU a
    node has): KGEN_COMPILE_NICE, else 10. A judge polling its gate clock beside them must get its CPU on time:
    on the H100 box a collection entry judged beside 15 builds read 1.67 ms slower on the judge's clock than on
    its own events (`suspicious`), and was correct in 6 of 6 evaluations on a quiet machine (RESULTS, twelfth and
    thirteenth sessions)."""
    try:
        return max(0, min(19, int(os.environ.get("KGEN_COMPILE_NICE", "10"))))
    except ValueError:
        return 10


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
                       env=env, memory_limit_bytes=None if gpu else cpu_memory_limit_bytes(),
                       nice=compile_nice() if kind == "compile" and not gpu else 0)
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
    import torch

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
    # one `compile`. A `run` spare is ready (torch imported, CUDA context made) 8.3-9 s after it starts on
    # the one-H100 box and 8.5-11 s on the two-H100 one (twice the sandboxes importing at once, and the
    # import runs on through its evaluator's timed runs, paused), against 4.4-5 s per Triton candidate:
    # started two evaluations ahead (4) it was often not ready: runner_start_s 1-3.4 s on one candidate in
    # four, summed 23 s (one GPU) and 35 s (two) over 32 candidates where a warm spare takes 0.35 s. So
    # `run` spares start three evaluations ahead (each waiting one holds a CUDA context, ~0.5 GB of its
    # GPU). A `compile` spare imports less (no operator trace): two evaluations ahead, it was always ready.
    DEPTH: ClassVar[dict[str, int]] = {"run": 6, "compile": 2}

    WATCH_S: ClassVar[float] = 0.01  # how often watch_timing looks at the GPU's timing lock

    def __init__(self, mode: SandboxMode, depth: Optional[int] = None):
        self.mode = mode
        self.depth = depth
        self.spares: dict[tuple[str, str], list[RunnerSlot]] = {}
        # why the waiting spares are stopped now ("timing": this judge's own, timing_here(); "timed": anyone's on the
        # GPU, watch_timing); stopped while any reason holds. The lock: the watcher's thread signals the queues'
        # processes while the judge's thread takes from them
        self._stopped_for: set[str] = set()
        self._lock = threading.RLock()
        self._watcher: Optional[threading.Thread] = None
        self._watching = threading.Event()
        self._not_timing_here = threading.Event()  # cleared while this process's judge times (timing_here)
        self._not_timing_here.set()
        self._holding_alone = False  # this process's judge holds the GPU alone all through (holding_alone)
        # prestart_in_background's thread: it outlives the processes it started, which bubblewrap's
        # --die-with-parent (PR_SET_PDEATHSIG, a thread's) kills when the thread that started them ends
        self._starter: Optional[threading.Thread] = None
        self._started, self._release = threading.Event(), threading.Event()

    def _settled(self) -> None:
        """Wait for prestart_in_background's starts: the queues are this thread's alone from then on."""
        if self._starter is not None:
            self._started.wait()

    def take(self, device: str, kind: str = "run") -> RunnerSlot:
        self._settled()
        slot = None
        with self._lock:
            queue = self.spares.setdefault((device, kind), [])
            while queue and slot is None:
                slot = queue.pop(0)
                if not slot.process.alive():
                    slot.close()
                    slot = None
            if slot is not None:
                slot.process.pause(False)  # its taker holds the GPU: the watcher may not have seen a timing end yet
        fresh = slot or start_process(device, self.mode, kind)
        depth = self.depth if self.depth is not None else self.DEPTH.get(kind, 2) if device != "cpu" else 2
        while len(queue) < depth:  # on a CPU the interpreter's evaluations are long: two spares keep up
            try:
                self._keep(queue, start_process(device, self.mode, kind))
            except HarnessFault:
                break
        return fresh

    def _keep(self, queue: list[RunnerSlot], slot: RunnerSlot) -> None:
        """A started spare into its queue, stopped at once while its GPU is timed."""
        with self._lock:
            queue.append(slot)
            if self._stopped_for:
                slot.process.pause(True)

    def prestart(self, device: str, counts: dict[str, int]) -> None:
        """Start now, all at once, the processes of each kind one evaluation will take (`counts`): with
        `depth` 0, what a single `kgen eval` needs, so its sandboxes import torch side by side, while
        the baselines compile and the reference runs, instead of one after another."""
        self._settled()
        self._prestart(device, counts)

    def _prestart(self, device: str, counts: dict[str, int]) -> None:
        for kind, count in counts.items():
            queue = self.spares.setdefault((device, kind), [])
            while len(queue) < count:
                try:
                    self._keep(queue, start_process(device, self.mode, kind))
                except HarnessFault:  # take() starts it then, and reports why it could not
                    break

    def prestart_in_background(self, device: str, counts: dict[str, int], warm: bool = False) -> None:
        """`prestart` (then, with `warm`, `warm`) in a thread, returning at once: `kgen eval` calls it before it
        imports torch and loads the problem, so its sandboxes import torch beside it (and the first start, as
        root, waits for the sandbox probe: kgen.judge.sandbox._run_as_nobody) rather than after it (on the H100
        box `kgen eval`'s runner_start_s was 3.1 s, its load 4.7 s). Every other method waits for the thread.
        A start that fails here is started again, and its failure reported, by `take`."""
        if self._starter is not None:
            raise RuntimeError("prestart_in_background is called once per SpareRunners")

        def start() -> None:
            try:
                with contextlib.suppress(Exception):  # take() starts what is missing, and says why it cannot
                    self._prestart(device, counts)
                    if warm:
                        self._warm()
            finally:
                self._started.set()
            self._release.wait()  # until close(): the processes it started die with this thread

        self._starter = threading.Thread(target=start, daemon=True, name="kgen-spares-start")
        self._starter.start()

    def warm(self) -> None:
        """Let the waiting spares make their CUDA contexts now (no candidate is being timed)."""
        self._settled()
        self._warm()

    def _warm(self) -> None:
        for queue in self.spares.values():
            for slot in queue:
                if not slot.warm_sent and slot.process.alive():
                    try:
                        slot.channel.send({"type": "warm"})
                        slot.warm_sent = True
                    except OSError:
                        pass

    def _stop_for(self, reason: str, stop: bool) -> None:
        with self._lock:
            was = bool(self._stopped_for)
            (self._stopped_for.add if stop else self._stopped_for.discard)(reason)
            if bool(self._stopped_for) != was:
                for queue in self.spares.values():
                    for slot in queue:
                        if slot.process.alive():
                            slot.process.pause(not was)

    def watch_timing(self, uuid: Optional[str]) -> None:
        """From now on, stop the waiting spares whenever any process times on GPU `uuid` (holds its timing lock
        alone: this judge, another evaluator sharing the GPU, the driver lane, the baselines), within WATCH_S,
        and let them go on after: timing_here() covers only this judge's own timings. Once; no UUID (no GPU):
        nothing."""
        if uuid is None or self._watcher is not None:
            return
        from kgen.judge import gpu_lock

        def watch() -> None:
            while not self._watching.wait(self.WATCH_S):
                self._not_timing_here.wait()  # asleep while this process's judge times: the spares are stopped
                with contextlib.suppress(OSError):
                    self._stop_for("timed", gpu_lock.timed_now(uuid) and not self._holding_alone)
            self._stop_for("timed", False)

        self._watching.clear()
        self._watcher = threading.Thread(target=watch, daemon=True, name="kgen-spares-watch")
        self._watcher.start()

    @contextlib.contextmanager
    def timing_here(self):
        """This process's judge times on the GPU for the block (Judge.gpu_alone: calibration, timing, the kernel
        profile). The spares stop: one importing torch or making its CUDA context competes with the timed runs for
        the CPU that launches their kernels (on the H100 box, with four spares starting, every candidate's median
        came out 3-14% slower). And the watcher sleeps instead of waking every WATCH_S in the process whose own
        polls time the candidate (the gate clock's), taking the GIL from them."""
        self._settled()
        self._stop_for("timing", True)
        self._not_timing_here.clear()
        try:
            yield
        finally:
            self._not_timing_here.set()
            self._stop_for("timing", False)

    def holding_alone(self, alone: bool) -> None:
        """This process's judge holds its GPU alone all through an evaluation (too big to share it): the GPU's
        timing lock is its own then, and its spares go on starting but for its timed runs (timing_here())."""
        self._holding_alone = alone

    def close(self) -> None:
        """Stop the spares not taken (a taken one is its judge's to close, before this)."""
        self._settled()
        if self._watcher is not None:
            self._watching.set()
            self._not_timing_here.set()
            self._watcher.join(5)
            self._watcher = None
        with self._lock:
            for queue in self.spares.values():
                for slot in queue:
                    slot.close()
            self.spares.clear()
        if self._starter is not None:
            self._release.set()
            self._starter.join()
            self._starter = None


def processes_per_evaluation(language: str, device: str) -> dict[str, int]:
    """The sandboxed processes one evaluation takes, per kind (see Judge.run): on a GPU a compile step
    and two runners (the candidate's, and the reference runner that never sees candidate code); on the
    CPU a runner for a Triton candidate, a compile step for a CUDA one (which is never run there)."""
    if device != "cpu":
        return {"compile": 1, "run": 2}
    return {"compile": 1} if language == "cuda" else {"run": 1}


def gpu_node_here() -> bool:
    """Whether this machine has an NVIDIA GPU's device node (asked without importing torch)."""
    import os

    return os.path.exists("/dev/nvidiactl")


def start_in_background(sandbox: str, device: str, counts: dict[str, int],
                        depth: Optional[int] = None) -> Optional[SpareRunners]:
    """A SpareRunners of sandbox mode `sandbox` (its name) whose `counts` processes for `device` start now in a
    thread (SpareRunners.prestart_in_background; on a GPU they then make their CUDA contexts), or None for a
    sandbox name that is not one: the caller's own checks say why."""
    try:
        mode = SandboxMode(sandbox)
    except ValueError:
        return None
    spares = SpareRunners(mode, depth=depth)
    spares.prestart_in_background(device, counts, warm=device != "cpu")
    return spares


def start_early(language: str, device: Optional[str], sandbox: str) -> Optional[SpareRunners]:
    """The sandboxes one `kgen eval` of a `language` candidate (past its static checks) takes, started now in a
    thread (start_in_background), before torch is imported and the problem loaded: the SpareRunners for
    kgen.judge.evaluate.evaluate_one, or None for input evaluate_one rejects. The device is guessed without
    torch ("cuda:0" where a GPU's device node exists, as torch's current device is in a fresh process):
    sandboxes of a wrong guess are never taken (evaluate_one starts the right ones) and are closed."""
    import os

    if device is None:
        gpu = gpu_node_here() and os.environ.get("CUDA_VISIBLE_DEVICES", "0") not in ("", "-1")
        device = "cuda:0" if gpu else "cpu"
    elif device == "cuda":
        device = "cuda:0"
    elif not (device == "cpu" or device.startswith("cuda:")):
        return None
    return start_in_background(sandbox, device, processes_per_evaluation(language, device), depth=0)
