"""What a judge is doing now, for the watchdog of the process that waits for its result.

An evaluation of a huge problem is mostly the judge's own work (float64 references, kept copies,
comparisons at several GB a tensor: KernelBench's 6.4 GB softmax took 182 s in all on the H100), none of
it charged to the candidate's time limit. A watchdog that only counts the seconds since it sent the
candidate kills judges that are working; one that reads this heartbeat kills a judge only when it is
silent (no new step for longer than the step may take), when the candidate's own time is far past its
limit, or when it does not answer at all (kgen.search.workers.Stages does the killing).

The judge (another thread of the same process) marks each step as it starts; `snapshot()` is read from
the thread that answers the watchdog, so every field is written and read under one lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Progress:
    """One look at an evaluator: what its judge is doing and for how long (seconds measured in the
    evaluator's own process, so no two machines' clocks are compared)."""

    busy: bool  # an evaluation is under way (False: none started yet, or the last one ended)
    step: str  # what the judge is doing now (its last step started)
    step_age_s: float  # since that step started
    step_limit_s: Optional[float]  # how long the judge itself lets that step take (a runner's answer), if it says
    phases: tuple[str, ...]  # the judge's phases ended so far (kgen.judge.judge.Judge.phase), in order
    elapsed_s: float  # since the evaluation started
    charged_s: float  # of which the candidate's time limit is charged with
    waited_s: float  # of which spent waiting for the GPU's timing lock (bounded by kgen.judge.gpu_lock)
    steps: int  # steps started in this evaluation: a count that grows while the judge works
    tensor_bytes: int  # the problem's inputs and outputs at this size, in its dtype

    def describe(self) -> str:
        """The judge's state as one clause of a message."""
        done = ", ".join(self.phases) if self.phases else "none"
        return f"the judge was at '{self.step}' for {self.step_age_s:.0f} s (phases done: {done})"


class Heartbeat:
    """An evaluator's record of its judge's progress: `begin`/`end` around each evaluation, `step` as the
    judge starts each one, `phase_ended` as each phase ends; `snapshot()` from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = False
        self._step, self._step_started, self._step_limit_s = "idle", time.monotonic(), None
        self._phases: list[str] = []
        self._started = time.monotonic()
        self._steps = 0
        self._tensor_bytes = 0
        self._waited_s = 0.0
        self._waiting_since: Optional[float] = None
        self._charged: Optional[Callable[[], float]] = None

    def begin(self, tensor_bytes: int = 0) -> None:
        with self._lock:
            self._busy, self._phases, self._steps = True, [], 0
            self._started = time.monotonic()
            self._tensor_bytes, self._waited_s, self._waiting_since, self._charged = int(tensor_bytes), 0.0, None, None
            self._set("starting the evaluation", None)

    def end(self) -> None:
        with self._lock:
            self._busy, self._charged = False, None
            self._set("idle", None)

    def charged_by(self, charged: Callable[[], float]) -> None:
        """Where the candidate's charged seconds are read from (the judge's own clock of its time limit)."""
        with self._lock:
            self._charged = charged

    def step(self, what: str, limit_s: Optional[float] = None) -> None:
        with self._lock:
            self._set(what, limit_s)

    def phase_ended(self, name: str) -> None:
        with self._lock:
            self._phases.append(name)
            self._set(f"after {name}", None)

    def waiting(self, what: str, limit_s: float) -> None:
        """The judge waits for the GPU's timing lock (not its work, not the candidate's: `waited`)."""
        with self._lock:
            self._waiting_since = time.monotonic()
            self._set(what, limit_s)

    def waited(self) -> None:
        with self._lock:
            if self._waiting_since is not None:
                self._waited_s += time.monotonic() - self._waiting_since
                self._waiting_since = None

    def _set(self, what: str, limit_s: Optional[float]) -> None:
        self._step, self._step_started, self._step_limit_s = what[:120], time.monotonic(), limit_s
        self._steps += 1

    def snapshot(self) -> Progress:
        with self._lock:
            now = time.monotonic()
            charged = 0.0
            if self._charged is not None:
                try:
                    charged = max(0.0, float(self._charged()))
                except Exception:  # noqa: BLE001 - a judge closing meanwhile: no figure, never a failed answer
                    charged = 0.0
            waited = self._waited_s + (now - self._waiting_since if self._waiting_since is not None else 0.0)
            return Progress(busy=self._busy, step=self._step, step_age_s=round(now - self._step_started, 3),
                            step_limit_s=self._step_limit_s, phases=tuple(self._phases),
                            elapsed_s=round(now - self._started, 3), charged_s=round(charged, 3),
                            waited_s=round(waited, 3), steps=self._steps, tensor_bytes=self._tensor_bytes)
