"""One GPU's timing lock: a timed measurement (a candidate's calibration and timed runs, a baseline's
timed runs) holds its GPU alone, while everything else that uses the GPU (references, compile steps,
verification, torch.compile's compiles) goes on beside it. That is what lets the baselines compile while
candidates are judged on the same GPU, and the first candidate start before the baselines are in.

Across processes: an flock on a file named by the GPU's UUID (the same GPU has the same UUID in every
process, whatever CUDA_VISIBLE_DEVICES numbers it), under the machine's temporary directory; a process
that dies lets go of it. Two threads of one process exclude each other too (each opens the file itself).
A sandboxed candidate has a private /tmp and cannot reach it. A lock not had within WAIT_S is given up
on and the measurement goes ahead (recorded by the caller): a stuck holder must not stop the search.

Shared holds (`Share`): a judge holds its GPU shared for all its untimed work (references, compile steps,
sandboxes' starts and CUDA contexts, verification), and lets go only to take it alone for a timed
measurement. So two evaluators can share one GPU (kgen.search.cluster: evaluators per GPU): their untimed
work overlaps, while a timed measurement still has the GPU to itself. A shared hold is taken only while no
timing waits (`waiting` file), and a judge's first one of an evaluation only while no baselines wait
either (`.baselines` file): the baselines go between evaluations, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

WAIT_S = 900.0  # longer than any timed measurement (max-autotune's timing included), short of forever
POLL_S = 0.02


def lock_path(uuid: str) -> Path:
    folder = Path(tempfile.gettempdir()) / f"kgen-gpu-locks-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / f"{''.join(c for c in uuid if c.isalnum() or c == '-')[:80] or 'gpu'}.lock"


def device_uuid(device=None) -> Optional[str]:
    """The UUID of `device` (a torch.device, an index, or None: the current one), or None without CUDA."""
    import torch

    try:
        if not torch.cuda.is_available():
            return None
        index = device.index if isinstance(device, torch.device) else device
        return str(torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index).uuid)
    except (AttributeError, RuntimeError, AssertionError):
        return None


def _wait_path(uuid: str) -> Path:
    return lock_path(uuid).with_suffix(".waiting")


def _baselines_path(uuid: str) -> Path:
    return lock_path(uuid).with_suffix(".baselines")


def _try(handle, mode: int) -> bool:
    try:
        fcntl.flock(handle, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


@contextlib.contextmanager
def exclusive(uuid: Optional[str], wait_s: float = WAIT_S, defer: bool = False) -> Iterator[dict]:
    """Hold GPU `uuid` alone for the block; yields {"waited_s": ..., "had": bool} (filled on entry). No
    UUID (no GPU): nothing to hold. `defer` (the baselines): take it only while no one else is waiting
    for it. A candidate's timing waits in a shared lock on a second file while it waits for the first, and
    a deferring caller takes the first only while it can take the second alone: the baselines (minutes of
    them in a collection) go between candidates and never keep one waiting behind a queue of them."""
    state = {"waited_s": 0.0, "had": False}
    if uuid is None:
        yield state
        return
    started = time.monotonic()
    with open(lock_path(uuid), "a+") as handle, open(_wait_path(uuid), "a+") as waiting, \
            open(_baselines_path(uuid), "a+") as baselines:
        if not defer:
            fcntl.flock(waiting, fcntl.LOCK_SH)  # "someone is waiting" (a deferring caller holds it for an instant)
        else:
            fcntl.flock(baselines, fcntl.LOCK_SH)  # "the baselines wait": a judge starts no evaluation meanwhile
        while True:
            if defer:
                if _try(waiting, fcntl.LOCK_EX):  # nobody waiting: may take it
                    state["had"] = _try(handle, fcntl.LOCK_EX)
                    fcntl.flock(waiting, fcntl.LOCK_UN)
            else:
                state["had"] = _try(handle, fcntl.LOCK_EX)
            if state["had"] or time.monotonic() - started > wait_s:
                break
            time.sleep(POLL_S)
        fcntl.flock(waiting if not defer else baselines, fcntl.LOCK_UN)
        state["waited_s"] = round(time.monotonic() - started, 3)
        try:
            yield state
        finally:
            if state["had"]:
                fcntl.flock(handle, fcntl.LOCK_UN)


class Share:
    """A judge's shared hold on its GPU (see the module's doc): `take` it for untimed work, `let_go` before
    taking the GPU alone (flock does not upgrade a shared lock in place without letting go first), `take` it
    again after. No UUID (no GPU): nothing is held, and nobody waits."""

    def __init__(self, uuid: Optional[str]):
        self.uuid = uuid
        self.held = False
        self._files: Optional[tuple] = None

    def take(self, wait_s: float = WAIT_S, after_baselines: bool = False) -> dict:
        """Hold the GPU shared; {"waited_s", "had"} as `exclusive` yields. Taken only while no timing waits (and,
        `after_baselines`, no baselines either); not had within `wait_s`: the work goes ahead (said by the caller)."""
        state = {"waited_s": 0.0, "had": self.held}
        if self.uuid is None or self.held:
            return state
        if self._files is None:
            self._files = tuple(open(path, "a+") for path in (  # noqa: SIM115 - kept open until close()
                lock_path(self.uuid), _wait_path(self.uuid), _baselines_path(self.uuid)))
        started = time.monotonic()
        while not self._try_take(after_baselines) and time.monotonic() - started <= wait_s:
            time.sleep(POLL_S)
        state.update(had=self.held, waited_s=round(time.monotonic() - started, 3))
        return state

    def _try_take(self, after_baselines: bool) -> bool:
        handle, waiting, baselines = self._files
        if not _try(waiting, fcntl.LOCK_EX):  # a timing waits (or another taker checks this instant): not now
            return False
        try:
            if after_baselines and not _try(baselines, fcntl.LOCK_EX):
                return False
            if after_baselines:
                fcntl.flock(baselines, fcntl.LOCK_UN)
            self.held = _try(handle, fcntl.LOCK_SH)
            return self.held
        finally:
            fcntl.flock(waiting, fcntl.LOCK_UN)

    def let_go(self) -> None:
        if self.held:
            fcntl.flock(self._files[0], fcntl.LOCK_UN)
            self.held = False

    def close(self) -> None:
        self.let_go()
        for file in self._files or ():
            file.close()
        self._files = None


def timed_now(uuid: Optional[str]) -> bool:
    """Whether someone holds GPU `uuid` alone this instant (a timed measurement): what the spares watch to stop
    while any process times on their GPU (kgen.judge.spares.SpareRunners.watch_timing)."""
    if uuid is None:
        return False
    with open(lock_path(uuid), "a+") as handle:
        if _try(handle, fcntl.LOCK_SH):
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False
        return True
