"""The judge's side of the gate clock (the default; KGEN_JUDGE_CLOCK=events turns it off; issue 28; the
runner's side is kgen.harness.gate).

Per timed run the runner's stream waits on a gate word only the judge can write. The judge opens it at T_go
on its own clock: when the runner says forward returned (all its launches are queued behind the gate), or
after the launch shadow if forward has not returned by then (a forward that synchronizes inside must not
deadlock). Just before it opens the gate it reads the runner's started word (written by the stream right
behind the gate wait): not yet written means the gate held, in either kind of run. Then its host polls the
runner's end signal until it shows the run's end: T_end. The runner's start event is queued behind the gate
wait too, so both clocks start as the gate opens, and a held run's judge-minus-runner difference is the same
wake-up and poll lag whether forward had returned or not (the H100: 752 us against 755 us, 47 and 53 runs of
one evaluation). No judge work runs on the GPU meanwhile (probe 2 on the H100: the judge's own events are
stamped only when its time-sliced context gets the GPU, 290 us late; the host's poll sees the runner's end
2.5 us late, +-0.1 us).

The judge's time of the run is T_end - T_go; timing.gate_clock_check compares it with the runner's event
time, against the same difference in do-nothing runs of a runner no candidate touched.

What the end word does not prove. On the H100 the judge cannot open the runner's interprocess end event
across the sandbox's PID namespace, so every run is timed to the end word, which the runner's stream writes
into a page of its own process; the candidate can write it too, from its kernels (the page is mapped into
its CUDA context and its device address is in the runner's memory) or its stream (the runner's own
cuStreamWriteValue32, called: nothing is replaced) at any point of the run, or from its host code while a
forward still runs after the gate opened (a shadow run). Written before the gate opened, the end shows at
once: a judge time shorter than the runner's, flagged by the two-sided check; written early without
shortening the events, the same. But written X early while the runner's events are also shortened by X (its
start event recorded again mid-forward), the judge-minus-runner difference stays honest and the gate check
passes (benchmarks/gate_attacks/c8_early_end_word). What still bounds that: the runner's reply goes out only
after its synchronize (bound before the candidate was imported), which waits for all of the GPU's work, so
the reply follows the end word by X more than it honestly does. Each run records that lag
(GatedRun.reply_lag_ms; the report's reply_lag_gap_ms: the candidate's median minus the do-nothing runs').
The rest of the lag is the same code in both runners, delivering outputs of the same shapes (the do-nothing
model returns tensors of the output shapes), and two processes' wake-ups; but how far honest runners differ
by it has not been measured on the GPU, so it is advisory, not a check: until it is, a lie of this kind is
bounded only by the kernel audit's watched check (the timed median against the CUPTI-profiled kernels, 10%
and more). The started word is writable the same way: written early it makes the candidate's own runs "not
held" (`suspicious`); set back, it could hide a stream that passed the gate without waiting, which needs the
wait itself skipped (its driver function is fingerprinted: kgen.harness.gate.code_fingerprint). The judge also
times when it first saw the started word (GatedRun.pass_ms: the gate's wake-up, advisory in the report).

Runs whose stream may have run dry. Where the gate opened before forward returned (a forward that waits on the
GPU inside: `.item()`, a synchronize; or one whose host outlasts the shadow), the runner's markers behind the
forward (its end event, the end word) land only as its host enqueues them once the GPU has nothing else: the
end word came 8-10 us after the end event on the H100 (fourteenth session, benchmarks/gate_pass_gpu.sh), so
honest forwards of that shape read as shaved. The runner then writes a done word right behind the forward's
launches, before its end event (kgen.harness.gate.Gate.mark_done), and the check for a shave times to it
(GatedRun.done_ms); the end word, after the end event, stays the end for the check that the judge's time is not
shorter than the runner's. A done word can be written early like the end word, with the same bound.
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

CLOCKS = ("events", "gate")  # events: the runner's events bounded by the judge's wall clock (before the gate)
DEFAULT_CLOCK = "gate"  # the default since its H100 runs (RESULTS, tenth session): every shave caught, no honest flag
F_SEAL_FUTURE_WRITE = 0x0010  # Linux 5.1: no new writable mapping, no write(2); the judge's own mapping stays
GATE_SHADOW_S = 1e-3  # what the runner's GPU-side wait gave the host to queue the forward (LAUNCH_SHADOW_CYCLES)


def judge_clock(setting: Optional[str]) -> str:
    """The clock a GPU timing uses: the setting, else KGEN_JUDGE_CLOCK, else the gate clock."""
    value = (setting or os.environ.get("KGEN_JUDGE_CLOCK") or DEFAULT_CLOCK).strip().lower()
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


GATE_RETURN_LOOK_S = 1e-4  # in a shadow run, how often the end poll looks for the runner's `returned` too
GATE_AFTER_RETURN_S = 0.05  # ... and how long it polls on alone once `returned` is there, before reading it


@dataclass(frozen=True)
class GatedRun:
    """The judge's clock of one gated run. `opened_by`: "return" (forward had returned: every launch was
    queued behind the gate) or "shadow" (it had not, GATE_SHADOW_S after the request). `held`: the runner's
    stream had not passed the gate as it opened (its started word not yet written; where the runner writes
    none, on "return" its end was still pending, and on "shadow" None: unknown). `pending_at_first_poll`: the
    end had not shown when the judge began to poll, so T_end is the moment it showed (to the poll's
    microseconds); else the first poll's time, a bound that errs long by at most the time from opening the
    gate to that poll (a microsecond: the end of a held run comes after T_go). `judge_ms`: T_end - T_go.
    `pass_ms`: from T_go to the poll that first saw the started word (the gate's wake-up as the host sees
    it; None where the runner writes none or the end showed first). `done_ms`: from T_go to the poll that first
    saw the done word (None where the runner wrote none: its gate was still closed when forward returned, so
    its end markers were queued back to back). `reply_lag_ms`: from T_end to the
    runner's reply (filled in by the caller; see the module's docstring)."""

    opened_by: str
    held: Optional[bool]
    pending_at_first_poll: bool
    judge_ms: float
    end_s: float = 0.0  # T_end on time.perf_counter()
    reply_lag_ms: Optional[float] = None
    pass_ms: Optional[float] = None
    done_ms: Optional[float] = None

    @property
    def forward_ms(self) -> float:
        """The judge's time to the forward's end: to the done word where the runner wrote one, else the end."""
        return self.judge_ms if self.done_ms is None else min(self.done_ms, self.judge_ms)


def gated_run(open_gate: Callable[[], None], end_done: Callable[[], bool], returned_soon: Callable[[float], bool],
              receive_returned: Callable[[], Any], deadline: float, passed_gate: Optional[Callable[[], bool]] = None,
              shadow_s: float = GATE_SHADOW_S, forward_done: Optional[Callable[[], bool]] = None) -> GatedRun:
    """The judge's part of one timed run, from just after its request went out: open the gate on the
    runner's `returned` (or after `shadow_s`), then poll the end. `returned_soon(s)`: whether a message is
    there within s seconds; `receive_returned()`: that message (raises on anything else, e.g. the runner's
    failure: the gate opens anyway, so the runner's stream is never left waiting); `end_done()`: whether the
    runner's end signal shows this run's end; `passed_gate()`: whether its started word shows this run (None
    where the runner writes none); `deadline`: time.perf_counter() past which the poll stops (the caller's
    receive then meets the runner's silence). In a shadow run the poll also looks for `returned` every
    GATE_RETURN_LOOK_S, and reads it only after the end (or GATE_AFTER_RETURN_S on), so an end is timed when
    it comes, not when the message is read. Until the started word shows, each poll reads it too: when the
    stream passed the gate (how long the GPU took to see the gate open differs by what the run's stream did
    while it waited: timing.gate_report). `forward_done()`: whether the runner's done word shows this run (None
    where it writes none); each poll reads it until it shows, before the end (see the module's docstring)."""
    opened_by, held, returned = "shadow", None, False
    try:
        if returned_soon(shadow_s):
            receive_returned()
            opened_by, returned = "return", True
        if passed_gate is not None:  # (a runner so late it had not even enqueued its wait reads as held: its
            held = not passed_gate()  # judge time errs long by the delay, one outlier for the medians)
        elif returned:
            held = not end_done()
    finally:
        go = time.perf_counter()
        open_gate()
    pending = not end_done()
    done = not pending
    look_at, waiting_since, passed_at, done_at = go + GATE_RETURN_LOOK_S, None, None, None
    watch_pass = passed_gate is not None and pending
    watch_done = forward_done is not None and pending
    while not done and time.perf_counter() < deadline:
        now = time.perf_counter()
        if watch_pass and passed_gate():  # read before the end: a pass seen with the end is not timed
            passed_at, watch_pass = now, False
        if watch_done and forward_done():  # read before the end too: seen with it, it is timed with it
            done_at, watch_done = now, False
        if not returned and now >= look_at:
            # Once `returned` is there, forward's launches are all queued and the end is near. Reading the
            # message (tens of us) while the end lands would time the end late, an honest run looking shaved
            # (the H100's honest 20-launch forward at 50 us: +29 us), so the poll goes on alone and reads it
            # only once the end has shown or GATE_AFTER_RETURN_S has passed (a runner's failure: no end comes).
            if waiting_since is None and returned_soon(0.0):
                waiting_since = now
            if waiting_since is not None and now - waiting_since >= GATE_AFTER_RETURN_S:
                receive_returned()
                returned = True
            look_at = now + GATE_RETURN_LOOK_S
        done = end_done()
    end = time.perf_counter()
    if not returned:
        receive_returned()
    return GatedRun(opened_by, held, pending, (end - go) * 1e3, end,
                    pass_ms=None if passed_at is None else (passed_at - go) * 1e3,
                    done_ms=None if done_at is None else (done_at - go) * 1e3)
