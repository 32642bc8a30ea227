"""The judge's side of the gate clock (KGEN_JUDGE_CLOCK=gate, issue 28; the runner's side is kgen.harness.gate).

Per timed run the runner's stream waits on a gate word only the judge can write. The judge opens it at T_go
on its own clock: when the runner says forward returned (all its launches are queued behind the gate), or
after the launch shadow if forward has not returned by then (a forward that synchronizes inside must not
deadlock). Then its host polls the runner's interprocess end event until it completes: T_end. No judge work
runs on the GPU meanwhile (probe 2 on the H100: the judge's own events are stamped only when its time-sliced
context gets the GPU, 290 us late; the host's poll of the runner's events sees them 2.5 us late, +-0.1 us).

The judge's time of the run is T_end - T_go; timing.gate_clock_check compares it with the runner's event
time, against the same difference in do-nothing runs of a runner no candidate touched.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from kgen.harness.gate import PAGE_BYTES, WORD_BYTES

CLOCKS = ("events", "gate")  # events: today's (the runner's events, bounded by the judge's wall clock)
F_SEAL_FUTURE_WRITE = 0x0010  # Linux 5.1: no new writable mapping, no write(2); the judge's own mapping stays
GATE_SHADOW_S = 1e-3  # what the runner's GPU-side wait gave the host to queue the forward (LAUNCH_SHADOW_CYCLES)


def judge_clock(setting: Optional[str]) -> str:
    """The clock a GPU timing uses: the setting, else KGEN_JUDGE_CLOCK, else today's events clock."""
    value = (setting or os.environ.get("KGEN_JUDGE_CLOCK") or "events").strip().lower()
    if value not in CLOCKS:
        raise ValueError(f"unknown judge clock {value!r} (KGEN_JUDGE_CLOCK): expected one of {', '.join(CLOCKS)}")
    return value


class GatePage:
    """One page of gate words, a memfd the judge maps writable and then seals: whoever receives the
    descriptor (the runners) can map it read-only and nothing else, so only the judge opens a gate.
    Unsealed (`sealed=False`): a runner's own end page, which its stream writes and the judge reads."""

    def __init__(self, sealed: bool = True):
        self.fd = os.memfd_create("kgen-gate" if sealed else "kgen-end", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, PAGE_BYTES)
        self.map = mmap.mmap(self.fd, PAGE_BYTES)
        seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW  # the mapping's size is fixed either way
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, seals | F_SEAL_FUTURE_WRITE if sealed else seals)
        self.values = [0] * (PAGE_BYTES // WORD_BYTES)

    def read(self, index: int) -> int:
        """Word `index` as it is now (the end word a runner's stream wrote)."""
        return struct.unpack_from("<I", self.map, WORD_BYTES * index)[0]

    def open(self, index: int, value: int) -> None:
        """Write gate word `index` = `value` (values only grow: a runner waits for >= its run's value)."""
        struct.pack_into("<I", self.map, WORD_BYTES * index, value & 0xFFFFFFFF)
        self.values[index] = value

    def next_value(self, index: int) -> int:
        return self.values[index] + 1

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


@dataclass(frozen=True)
class GatedRun:
    """The judge's clock of one gated run. `opened_by`: "return" (forward had returned: every launch was
    queued behind the gate) or "shadow" (it had not, GATE_SHADOW_S after the request). `held`: on "return",
    the end event was still pending as the gate opened (an honest stream cannot pass a closed gate; None on
    "shadow"). `pending_at_first_poll`: the end had not completed when the judge began to poll, so T_end is
    the moment of completion (to the poll's microseconds); else the first poll's time, a bound. `judge_ms`:
    T_end - T_go."""

    opened_by: str
    held: Optional[bool]
    pending_at_first_poll: bool
    judge_ms: float

    @property
    def clean(self) -> bool:
        """A run whose judge time measures the GPU's work from the gate to the end event: its launches were all
        queued behind the gate, which held. Its end completed after T_go then, so even one already complete at
        the first poll (a do-nothing run: microseconds) is timed to within that poll; the bound errs long,
        never short, so it can hide a lie of a microsecond but never make an honest run look shaved."""
        return self.opened_by == "return" and bool(self.held)


def gated_run(open_gate: Callable[[], None], end_done: Callable[[], bool], returned_soon: Callable[[float], bool],
              receive_returned: Callable[[], Any], deadline: float, shadow_s: float = GATE_SHADOW_S) -> GatedRun:
    """The judge's part of one timed run, from just after its request went out: open the gate on the
    runner's `returned` (or after `shadow_s`), then poll the end event. `returned_soon(s)`: whether a
    message is there within s seconds; `receive_returned()`: that message (raises on anything else, e.g. the
    runner's failure: the gate opens anyway, so the runner's stream is never left waiting); `end_done()`:
    whether the runner's interprocess end event has completed; `deadline`: time.perf_counter() past which
    the poll stops (the caller's receive then meets the runner's silence)."""
    opened_by, held = "shadow", None
    try:
        if returned_soon(shadow_s):
            receive_returned()
            opened_by, held = "return", not end_done()
    finally:
        go = time.perf_counter()
        open_gate()
    if opened_by == "shadow":
        receive_returned()
    pending = not end_done()
    while pending and not end_done() and time.perf_counter() < deadline:
        pass
    return GatedRun(opened_by, held, pending, (time.perf_counter() - go) * 1e3)
