"""The judge's gate clock (KGEN_JUDGE_CLOCK=gate, issue 28) on the CPU: the gate page only the judge can
write, the judge's side of a gated run against a runner on a real socket (return, shadow, failure, a
stream that did not wait, its started and end words), the check's arithmetic on recorded numbers, and which
clock decides the verdict. The real thing (the runner's cuStreamWaitValue32 and cuStreamWriteValue32, the
sandbox) is in tests/test_judge_clock_gpu.py."""

import ctypes
import mmap
import os
import random
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Optional

import pytest

from kgen.core.records import Outcome
from kgen.harness.gate import DONE_WORD, END_WORD, STARTED_WORD, WORD_BYTES, map_read_only, read_word
from kgen.harness.protocol import Channel, RunnerJob
from kgen.judge.gate_clock import GatedRun, GatePage, gated_run, judge_clock
from kgen.judge.timing import GATE_FLOOR_MS, MIN_GATE_RUNS, ClockCheck, Stopwatch, TimedRuns, gate_clock_check
from kgen.judge.verdict import Verdict

OFFSET_MS = 0.0025  # probe 2 on the H100: the poll sees the end event 2.5 us after the runner's events say
NOISE_MS = 0.0001  # and its noise, 0.1 us


def _runs(runner_ms: float, shave: float, n: int = 200, seed: int = 0) -> list[tuple[float, float]]:
    """(judge ms, runner ms) of n runs of a forward that takes `runner_ms`, its events shaved by `shave`."""
    rng = random.Random(seed)
    return [(runner_ms + OFFSET_MS + rng.gauss(0, NOISE_MS), runner_ms * (1 - shave)) for _ in range(n)]


NULLS = _runs(0.0, 0.0, seed=1)


@pytest.mark.parametrize(("runner_ms", "shave"), [(1.0, 0.05), (0.05, 0.5), (0.065, 0.05), (6.0, 0.05)])
def test_a_shave_of_a_few_microseconds_is_flagged(runner_ms, shave):
    check = gate_clock_check(_runs(runner_ms, shave), NULLS, runner_ms * (1 - shave))
    assert check.flagged, check
    assert check.gap_ms == pytest.approx(runner_ms * shave, abs=5e-5)


@pytest.mark.parametrize("runner_ms", [0.0, 0.05, 1.0, 6.0])
def test_honest_runs_are_not_flagged_whatever_their_length(runner_ms):
    for seed in range(20):
        check = gate_clock_check(_runs(runner_ms, 0.0, seed=seed + 2), NULLS, runner_ms)
        assert not check.flagged, check
        assert check.threshold_ms >= GATE_FLOOR_MS


@pytest.mark.parametrize(("runner_ms", "early_ms"), [(0.06, 0.01), (1.0, 0.05), (5.4, 0.3)])
def test_a_judge_time_shorter_than_the_runners_is_flagged(runner_ms, early_ms):
    """The end signalled `early_ms` before the runner's events end (or a gate that did not hold): the gap is
    negative, and beyond the threshold it is flagged as surely as a shave."""
    rng = random.Random(3)
    runs = [(runner_ms - early_ms + OFFSET_MS + rng.gauss(0, NOISE_MS), runner_ms) for _ in range(200)]
    check = gate_clock_check(runs, NULLS, runner_ms)
    assert check.gap_ms == pytest.approx(-early_ms, abs=5e-5) and check.flagged, check


def test_todays_clock_stays_one_sided():
    assert not ClockCheck(-5.0, 0.01, 0.5).flagged and ClockCheck(0.6, 0.01, 0.5).flagged


def test_noisy_runs_widen_the_threshold_instead_of_being_flagged():
    rng = random.Random(7)
    noisy = [(1.0 + OFFSET_MS + rng.gauss(0, 0.02), 1.0) for _ in range(50)]
    check = gate_clock_check(noisy, NULLS, 1.0)
    assert not check.flagged and check.threshold_ms > 0.005


def _stopwatch(candidate: list[GatedRun], runner_ms: float, nulls: int) -> Stopwatch:
    """A Stopwatch holding recorded gated runs only (what gate_report reads)."""
    watch = object.__new__(Stopwatch)
    watch.page, watch.gate_errors, watch.gate_wait = object(), {}, "cuStreamWaitValue32"
    watch.gate_ends = {"candidate's runner": "end word (...)", "reference runner": "end word (...)"}
    watch.gate_candidate = [(g, runner_ms) for g in candidate]
    watch.gate_null = [(GatedRun("return", True, True, OFFSET_MS), 0.001) for _ in range(nulls)]
    watch.gate_calibration = []
    return watch


def test_the_report_holds_both_clocks_the_gap_and_the_threshold():
    runs = [GatedRun("return", True, True, 1.0 + OFFSET_MS - 0.001, reply_lag_ms=0.05) for _ in range(40)]
    report = _stopwatch(runs, 0.95, 20).gate_report(0.95, 40)
    assert report["check"] == "made" and report["flagged"]
    assert report["judge_median_ms"] == pytest.approx(1.0015, abs=1e-4)
    assert report["runner_median_ms"] == 0.95 and report["gap_ms"] == pytest.approx(0.05, abs=1e-4)
    assert report["threshold_ms"] < 0.05 and report["samples"][0] == [1.0015, 0.95, "return", True, 0.05]
    assert report["reply_lag_median_ms"] == 0.05 and report["null_reply_lag_median_ms"] is None
    watch = _stopwatch(runs, 0.95, 20)
    watch.gate_null = [(GatedRun("return", True, True, OFFSET_MS, reply_lag_ms=0.03), 0.001)] * 20
    report = watch.gate_report(0.95, 40)
    assert report["reply_lag_gap_ms"] == pytest.approx(0.02) and report["reply_lag_noise_ms"] == 0


def test_held_shadow_runs_are_checked_like_held_returns():
    """A forward of many Python-level launches outlasts the shadow in most runs (H100: 53 of 100 at 5.4 ms,
    91 of 100 at 60 us): the gate held them all, so they count, and a shave in them is caught."""
    runs = [GatedRun("shadow", True, True, 1.0 + OFFSET_MS - 0.001)] * 91 \
        + [GatedRun("return", True, True, 1.0 + OFFSET_MS - 0.001)] * 9
    report = _stopwatch(runs, 0.95, 33).gate_report(0.95, 100)
    assert report["check"] == "made" and report["flagged"] and report["gap_ms"] == pytest.approx(0.05, abs=1e-4)
    assert report["held_runs"] == 100 and report["shadow_runs"] == report["shadow_held_runs"] == 91
    assert [s[2] for s in report["samples"][89:92]] == ["shadow", "shadow", "return"]
    honest = [GatedRun(kind, True, True, 0.95 + OFFSET_MS) for kind in ["shadow"] * 91 + ["return"] * 9]
    assert not _stopwatch(honest, 0.95, 33).gate_report(0.95, 100)["flagged"]


DRY_END_MS = 0.009  # H100 (fourteenth session): on a dry stream the end word landed 8-10 us after the done word
DRY_EVENT_MS = 0.003  # ... and the runner's end event, enqueued between them, lands a few us after the done word
NULL_OFFSET_MS = OFFSET_MS - 0.001  # _stopwatch's do-nothing runs: judge minus runner


def _dry(forward_ms: float, shave_ms: float = 0.0, n: int = 100, seed: int = 5, done: bool = True) -> list:
    """Held runs opened on the shadow whose stream ran dry behind the forward (it waited on the GPU inside):
    the done word lands at the forward's end, the runner's end event DRY_EVENT_MS later, the end word
    DRY_END_MS later; `shave_ms`: the runner's start event recorded again that much late. (GatedRun, runner
    ms) pairs; `done=False`: a runner that wrote no done word (the judge's time to the end word only)."""
    rng = random.Random(seed)
    runs = []
    for _ in range(n):
        at_done = forward_ms + NULL_OFFSET_MS + rng.gauss(0, NOISE_MS)
        runs.append((GatedRun("shadow", True, True, at_done + DRY_END_MS, done_ms=at_done if done else None),
                     forward_ms + DRY_EVENT_MS - shave_ms))
    return runs


def test_a_dry_stream_behind_a_forward_that_waits_inside_is_timed_to_its_done_word():
    """On the H100 a forward that waits on the GPU inside (`.item()`, a synchronize) read as shaved by 8-10 us:
    the end word came that long after its end event, the host enqueuing each marker on an idle stream. Timed
    to the done word (written right behind the forward's launches) the runs are honest; a start event
    recorded again 10 us late is flagged all the same; without done words the old false flag is what shows."""
    def report(runs):
        watch = _stopwatch([], 0.3, 33)
        watch.gate_candidate = runs
        return watch.gate_report(0.3, len(runs))

    honest = report(_dry(0.3))
    assert honest["check"] == "made" and honest["flagged"] is False and honest["done_runs"] == 100
    assert honest["gap_ms"] == pytest.approx(-DRY_EVENT_MS, abs=5e-4)  # the event lands after the done word
    assert honest["end_gap_ms"] == pytest.approx(DRY_END_MS - DRY_EVENT_MS, abs=5e-4)  # past the end word's check
    assert honest["forward_median_ms"] == pytest.approx(honest["judge_median_ms"] - DRY_END_MS, abs=1e-4)
    shaved = report(_dry(0.3, shave_ms=0.010))
    assert shaved["flagged"] is True and shaved["gap_ms"] == pytest.approx(0.010 - DRY_EVENT_MS, abs=5e-4)
    verdict = _verdict(shaved)
    assert verdict.outcome == Outcome.SUSPICIOUS and "end of the forward's launches" in verdict.message
    assert report(_dry(0.3, done=False))["flagged"] is True  # no done words: timed to the end word, as before
    early = [(replace(g, judge_ms=g.judge_ms - 0.05, done_ms=g.done_ms - 0.05), ms) for g, ms in _dry(0.3)]
    flagged = report(early)  # an end signalled 50 us early is still caught by the end word's side
    assert flagged["flagged"] is True and flagged["gap_ms"] < 0


def test_no_check_is_claimed_when_too_few_runs_are_known_to_be_held():
    """Runs whose holding is unknown (a runner that writes no started word, opened on the shadow) only bound the
    time: with most runs like that, the check is not made, and the report says how many held."""
    runs = [GatedRun("shadow", None, False, 1.2)] * 30 + [GatedRun("return", True, True, 1.0)] * 12
    report = _stopwatch(runs, 0.5, 20).gate_report(0.5, 42)
    assert report["check"] == "not made: 12 held gated runs of 42 timed (at least 21 needed), 20 held do-nothing " \
                              "runs (at least 10)" and "flagged" not in report
    assert report["shadow_runs"] == 30 and report["held_runs"] == 12 and report["unknown_runs"] == 30
    assert _stopwatch(runs[30:], 0.5, MIN_GATE_RUNS - 1).gate_report(0.5, 12)["check"].startswith("not made")


def test_a_stream_that_passed_a_closed_gate_is_counted_in_either_kind_of_run():
    runs = [GatedRun("return", False, False, 0.01), GatedRun("shadow", False, False, 0.01)] \
        + [GatedRun("return", True, True, 1.0)] * 20
    assert _stopwatch(runs, 1.0, 20).gate_report(1.0, 22)["not_held_runs"] == 2


def test_runners_ending_on_different_signals_compare_with_the_candidates_own_calibration():
    """The reference runner's do-nothing runs end on another signal (its interprocess event opened, the
    candidate's did not): their offset is another one, so the calibration's runs on the candidate's own runner
    (before its import) stand in."""
    runs = [GatedRun("return", True, True, 1.0 + OFFSET_MS)] * 20
    watch = _stopwatch(runs, 1.0, 20)
    watch.gate_null = [(GatedRun("return", True, True, 0.150), 0.001)] * 20  # another signal: another offset
    watch.gate_ends = {"candidate's runner": "end word (...)", "reference runner": "interprocess event"}
    assert _stopwatch(runs, 1.0, 20).gate_report(1.0, 20)["flagged"] is False
    report = watch.gate_report(1.0, 20)
    assert report["check"].startswith("not made") and report["null_from"] == "runs before the candidate was loaded"
    watch.gate_calibration = [(GatedRun("return", True, True, OFFSET_MS), 0.0)] * 20
    report = watch.gate_report(1.0, 20)
    assert report["check"] == "made" and not report["flagged"] and report["null_offset_ms"] == OFFSET_MS


# -- which clock decides the verdict ------------------------------------------------------------------------

class _Judge(TimedRuns):
    """TimedRuns' verdicts alone (the Judge's evidence is not needed to decide)."""

    def errors(self) -> dict:
        return {}


TODAYS_FLAG = ClockCheck(0.765, 0.05, 0.543)  # the conv_relu_maxpool starter under the gate on the H100


def _verdict(gate_clock, clock=TODAYS_FLAG, median_ms=0.43):
    try:
        _Judge().clock_verdict(clock, gate_clock, median_ms, 2.8, 1.6)
    except Verdict as v:
        return v
    return None


def test_a_made_gate_check_decides_and_todays_clock_does_not_flag_gated_runs():
    """Gated, a forward's host time and its GPU time are serial: the judge's wall clock holds both, and today's
    check flagged the honest conv_relu_maxpool starter (gap 0.765 > 0.543 ms) on the H100. A made, clean gate
    check passes it; without the gate, today's clock still flags."""
    clean = _stopwatch([GatedRun("return", True, True, 0.43 + OFFSET_MS)] * 40, 0.43, 20).gate_report(0.43, 40)
    assert clean["check"] == "made" and not clean["flagged"]
    assert _verdict(clean) is None
    todays = _verdict(None)
    assert todays.outcome == Outcome.SUSPICIOUS and "unexplained" in todays.message
    ungated = dict(clean, runs=0)  # the gate clock asked for, the candidate's runner could not set it up
    assert _verdict(ungated).message == todays.message


def test_a_gate_check_that_cannot_be_made_is_suspicious_in_one_line():
    runs = [GatedRun("shadow", None, False, 1.2)] * 30 + [GatedRun("return", True, True, 1.0)] * 12
    verdict = _verdict(_stopwatch(runs, 0.5, 20).gate_report(0.5, 42), ClockCheck(0.0, 0.01, 0.5))
    assert verdict.outcome == Outcome.SUSPICIOUS
    assert verdict.message == ("the gate clock could not check the timing: 12 of 42 runs held (30 opened before "
                               "forward returned), 20 do-nothing runs; not made: 12 held gated runs of 42 timed (at "
                               "least 21 needed), 20 held do-nothing runs (at least 10)")
    assert "\n" not in verdict.message


@pytest.mark.parametrize(("judge_ms", "runner_ms", "words"), [
    (1.0 + OFFSET_MS, 0.95, "is 51 us shorter than the judge's gate clock (1.002 ms"),  # a shave
    (0.9 + OFFSET_MS, 1.0, "is 99 us shorter than the runner's CUDA-event time (1 ms), beyond what a run that does "
                           "nothing shows and more than the 11 us the measured noise allows: the gate did not hold or "
                           "the end was signalled early")])
def test_a_flagged_gate_check_says_which_way(judge_ms, runner_ms, words):
    report = _stopwatch([GatedRun("return", True, True, judge_ms)] * 40, runner_ms, 20).gate_report(runner_ms, 40)
    verdict = _verdict(report, ClockCheck(0.0, 0.01, 0.5), runner_ms)
    assert verdict.outcome == Outcome.SUSPICIOUS and words in verdict.message, verdict.message


def test_a_stream_that_did_not_wait_is_suspicious_before_anything_else():
    runs = [GatedRun("shadow", False, False, 0.0)] + [GatedRun("return", True, True, 1.0 + OFFSET_MS)] * 40
    verdict = _verdict(_stopwatch(runs, 1.0, 20).gate_report(1.0, 41))
    assert "in 1 of 41 gated runs the runner's stream had passed the gate" in verdict.message


# -- the gate page: only the judge writes it --------------------------------------------------------------

def test_the_runner_sees_the_judges_gate_and_cannot_open_it():
    page = GatePage()
    try:
        address = map_read_only(page.fd)
        assert read_word(address, 1) == 0
        page.open(1, 7)
        assert read_word(address, 1) == 7 and read_word(address, 0) == 0 and page.next_value(1) == 8
        with pytest.raises(PermissionError):  # F_SEAL_FUTURE_WRITE: no new writable shared mapping
            mmap.mmap(page.fd, 4096)
        with pytest.raises(PermissionError):
            os.pwrite(page.fd, b"\xff\xff\xff\xff", 4)
        reopened = os.open(f"/proc/self/fd/{page.fd}", os.O_RDWR)  # a fresh description: still sealed
        try:
            with pytest.raises(PermissionError):
                mmap.mmap(reopened, 4096)
        finally:
            os.close(reopened)
        assert read_word(address, 1) == 7
    finally:
        page.close()


def test_a_runners_end_page_is_its_own_to_write_and_the_judge_reads_it():
    """The end word (where the interprocess end event cannot be opened): the runner's stream writes the run's
    value into its own page, unsealed, and the judge's poll reads it there."""
    end = GatePage(sealed=False)
    try:
        address = map_read_only(end.fd, writable=True)
        ctypes.c_uint32.from_address(address).value = 5
        assert end.read(0) == 5 and end.read(1) == 0
    finally:
        end.close()


def test_a_driver_function_rewritten_at_the_c_level_changes_the_gates_fingerprint():
    """The gate is as good as its wait: a function whose code is patched (here a `ret` in a page of our own
    standing in for cuStreamWaitValue32) or a ctypes pointer aimed elsewhere no longer matches."""
    from kgen.harness.gate import code_fingerprint

    code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    code.write(b"\x90" * 64)
    address = ctypes.addressof(ctypes.c_char.from_buffer(code))
    wait = ctypes.CFUNCTYPE(None)(address)
    other = ctypes.CFUNCTYPE(None)(address + 8)
    before = code_fingerprint([wait])
    assert before == code_fingerprint([wait]) and before[0][0] == address
    assert code_fingerprint([other]) != before
    code[0:1] = b"\xc3"
    assert code_fingerprint([wait]) != before
    del wait, other


def test_the_job_carries_the_runners_gate_word():
    job = RunnerJob(mode="run", device="cuda:0", arena_kind="cuda", layout={}, args=[], init_inputs=[], weights={},
                    outputs=[], model_seed=1, gate_index=1)
    assert RunnerJob(**asdict(job)).gate_index == 1
    assert RunnerJob(**dict(asdict(job), gate_index=None)).gate_index is None


# -- one gated run against a runner on a real socket -------------------------------------------------------


class FakeRunner:
    """The runner's part, in a forked process of its own (as a runner is: threads of the judge's process
    starved behind its poll on a loaded 2-core host, seeing the gate hundreds of ms late): waits for the
    request, 'enqueues' the forward behind the gate (its GPU: a thread that waits until the gate word reaches
    the run's value, writes the started word, works `gpu_s`, writes the end word), says `returned` (before the
    gate opens, or, where its forward synchronizes inside, only after), after `host_s` of forward's host time.
    `waits=False`: a stream that does not wait for the gate; `started_word=False`: a runner that writes none
    (the gate kernel's fallback); `wake_s`: how long its GPU takes to see the gate open, before the started
    word; `dry_s`: a stream that ran dry behind the forward: the done word at the forward's end, the end word
    `dry_s` later (None: no done word). What the judge's side reads of it is in the two shared pages."""

    SEEN_AT = 512  # byte offset in the end page where the fake GPU stamps when it saw the gate open

    def __init__(self, page: GatePage, index: int, gpu_s: float, syncs_inside: bool = False, fails: bool = False,
                 host_s: float = 0.0, waits: bool = True, started_word: bool = True, wake_s: float = 0.0,
                 dry_s: Optional[float] = None):
        self.judge_end, runner_end = socket.socketpair()
        self.channel, self.runner = Channel(self.judge_end), Channel(runner_end)
        self.address, self.index, self.gpu_s = map_read_only(page.fd), index, gpu_s
        self.syncs_inside, self.fails, self.host_s = syncs_inside, fails, host_s
        self.waits, self.started_word, self.wake_s, self.dry_s = waits, started_word, wake_s, dry_s
        self.end = GatePage(sealed=False)  # this runner's own end page
        self.end_address = map_read_only(self.end.fd, writable=True)
        self.value = None
        pid = os.fork()
        if pid == 0:  # the runner: touches only its socket and the two shared pages, then leaves without cleanup
            try:
                self.serve()
            finally:
                os._exit(0)
        threading.Thread(target=os.waitpid, args=(pid, 0), daemon=True).start()

    @property
    def gate_seen_at(self):
        seen = ctypes.c_double.from_address(self.end_address + self.SEEN_AT).value
        return seen or None

    @property
    def ended(self) -> bool:
        """Whether its GPU wrote the end word of the run asked last."""
        return self.value is not None and self.end.read(END_WORD) >= self.value

    def write(self, word: int, value: int) -> None:
        ctypes.c_uint32.from_address(self.end_address + WORD_BYTES * word).value = value

    def gpu(self, value: int) -> None:
        while self.waits and read_word(self.address, self.index) < value:
            time.sleep(1e-5)
        time.sleep(self.wake_s)
        ctypes.c_double.from_address(self.end_address + self.SEEN_AT).value = time.perf_counter()
        if self.started_word:
            self.write(STARTED_WORD, value)
        time.sleep(self.gpu_s)
        if self.dry_s is not None:
            self.write(DONE_WORD, value)
            time.sleep(self.dry_s)
        self.write(END_WORD, value)

    def serve(self) -> None:
        request = self.runner.receive(timeout_s=5)
        stream = threading.Thread(target=self.gpu, args=(request["gate"],), daemon=True)
        stream.start()
        if self.fails:
            self.runner.send({"type": "failed", "outcome": "runtime_error", "message": "boom"})
        else:
            if self.syncs_inside:  # forward waits for its own GPU work, which waits for the gate
                while self.gate_seen_at is None:
                    time.sleep(1e-5)
            if not self.waits and self.started_word:  # a stream that does not wait is past the gate before
                while self.end.read(STARTED_WORD) < request["gate"]:  # forward returns (however loaded the host)
                    time.sleep(1e-5)
            time.sleep(self.host_s)  # forward's host time: its launches, queued behind the gate
            self.runner.send({"type": "returned"})
        stream.join(10)  # the process ends with its GPU's work

    def run(self, page: GatePage, shadow_s: float = 0.02, read_s: float = 0.0) -> tuple[GatedRun, float]:
        """`read_s`: what reading a message costs the judge (parsing it, on a loaded host)."""
        value = self.value = page.next_value(self.index)
        asked = time.perf_counter()
        self.channel.send({"type": "timed", "gate": value})

        def receive_returned():
            time.sleep(read_s)
            message = self.channel.receive(timeout_s=5)
            if message["type"] != "returned":
                raise RuntimeError(message["message"])

        gated = gated_run(lambda: page.open(self.index, value), lambda: self.end.read(END_WORD) >= value,
                          self.channel.readable, receive_returned, time.perf_counter() + 5,
                          (lambda: self.end.read(STARTED_WORD) >= value) if self.started_word else None,
                          shadow_s=shadow_s, forward_done=lambda: self.end.read(DONE_WORD) >= value)
        return gated, asked


@pytest.fixture
def page():
    page = GatePage()
    yield page
    page.close()


def test_the_gate_opens_when_forward_returns_and_the_judge_times_the_gpu_from_there(page):
    """The judge's time holds the GPU's 20 ms from the gate on, not forward's 300 ms of host time before it."""
    runner = FakeRunner(page, 0, gpu_s=0.02, host_s=0.3)
    gated, asked = runner.run(page, shadow_s=5.0)
    assert gated.opened_by == "return" and gated.held and gated.pending_at_first_poll
    assert 20 <= gated.judge_ms < 300 and runner.gate_seen_at - asked >= 0.3
    assert runner.ended and runner.end.read(STARTED_WORD) == runner.end.read(END_WORD) == 1


def test_a_forward_that_synchronizes_inside_gets_the_gate_after_the_shadow_and_is_held(page):
    """No deadlock, and the started word says the gate held it: the run counts in the check."""
    runner = FakeRunner(page, 1, gpu_s=0.005, syncs_inside=True)
    gated, asked = runner.run(page, shadow_s=0.02)
    assert gated.opened_by == "shadow" and gated.held is True
    assert runner.gate_seen_at - asked >= 0.02
    assert runner.ended


def test_a_shadow_runs_end_is_timed_when_it_shows_not_when_returned_is_read(page):
    """The gate opened on the shadow; the GPU's 10 ms end before forward's host returns at 200 ms: the poll
    looks at the socket on the side and times the end itself (reading `returned` first made the judge's time
    long by the rest of the host's time: an honest run looking shaved)."""
    runner = FakeRunner(page, 0, gpu_s=0.01, host_s=0.2)
    gated, _ = runner.run(page, shadow_s=0.02)
    assert gated.opened_by == "shadow" and gated.held is True and gated.pending_at_first_poll
    assert 10 <= gated.judge_ms < 100, gated


def test_a_shadow_runs_end_that_lands_while_returned_would_be_read_is_timed_when_it_lands(page):
    """The gate opens on the shadow (20 ms), forward returns at 30 ms, the GPU ends 40 ms after the gate, and
    reading the message costs 300 ms: the poll goes on alone once `returned` is there, so the judge's time is
    the GPU's 40 ms, not ~300 (on the H100 an honest forward of 20 small launches read 29 us long that way)."""
    runner = FakeRunner(page, 0, gpu_s=0.04, host_s=0.03)
    gated, _ = runner.run(page, shadow_s=0.02, read_s=0.3)
    assert gated.opened_by == "shadow" and gated.held is True
    assert 40 <= gated.judge_ms < 150, gated


def test_the_judge_times_when_the_stream_passed_the_gate(page):
    """A GPU that takes 60 ms to see the gate open, then works 20 ms: the judge's time is ~80 ms from the
    opening, of which ~60 before its poll saw the started word (on a loaded host the fake GPU's sleeps run
    long, so only the lower bounds are sure); a runner that writes none gives no pass."""
    runner = FakeRunner(page, 0, gpu_s=0.02, wake_s=0.06, syncs_inside=True)
    gated, _ = runner.run(page, shadow_s=0.01)
    assert gated.opened_by == "shadow" and gated.held is True
    assert gated.pass_ms >= 60 and gated.judge_ms - gated.pass_ms >= 20, gated
    runner = FakeRunner(page, 1, gpu_s=0.02, wake_s=0.06, started_word=False)
    gated, _ = runner.run(page, shadow_s=5.0)
    assert gated.pass_ms is None and gated.judge_ms >= 80


def test_the_judge_times_the_done_word_of_a_dry_stream_and_its_end_apart(page):
    """A forward that synchronizes inside, 20 ms of GPU work, then a stream dry for 60 ms before its end word:
    the judge's time to the done word holds the work, its time to the end the dry wait too; a runner that
    writes no done word gives none (its forward_ms is the end's)."""
    runner = FakeRunner(page, 0, gpu_s=0.02, syncs_inside=True, dry_s=0.06)
    gated, _ = runner.run(page, shadow_s=0.01)
    assert gated.opened_by == "shadow" and gated.held is True and runner.end.read(DONE_WORD) == 1
    assert gated.done_ms >= 20 and gated.judge_ms - gated.done_ms >= 60 and gated.forward_ms == gated.done_ms
    runner = FakeRunner(page, 1, gpu_s=0.02, syncs_inside=True)
    gated, _ = runner.run(page, shadow_s=0.01)
    assert gated.done_ms is None and gated.forward_ms == gated.judge_ms >= 20


def test_the_gate_opens_even_when_the_runner_fails(page):
    runner = FakeRunner(page, 0, gpu_s=0.0, fails=True)
    with pytest.raises(RuntimeError, match="boom"):
        runner.run(page, shadow_s=5.0)
    assert read_word(runner.address, 0) == page.values[0] == 1  # the runner's stream is not left waiting


@pytest.mark.parametrize(("host_s", "opened_by"), [(0.0, "return"), (0.3, "shadow")])
def test_a_stream_that_passed_the_gate_before_it_opened_is_not_held(page, host_s, opened_by):
    runner = FakeRunner(page, 0, gpu_s=1.0, host_s=host_s, waits=False)  # its stream runs past the gate at once
    gated, _ = runner.run(page, shadow_s=0.1)
    assert gated.opened_by == opened_by and gated.held is False


def test_without_a_started_word_only_a_return_run_with_its_end_pending_is_known_held(page):
    runner = FakeRunner(page, 0, gpu_s=0.02, started_word=False)
    gated, _ = runner.run(page, shadow_s=5.0)
    assert gated.opened_by == "return" and gated.held is True
    runner = FakeRunner(page, 1, gpu_s=0.005, syncs_inside=True, started_word=False)
    gated, _ = runner.run(page, shadow_s=0.02)
    assert gated.opened_by == "shadow" and gated.held is None


def test_the_clock_setting_defaults_to_the_gate_and_refuses_unknown_values(monkeypatch):
    monkeypatch.delenv("KGEN_JUDGE_CLOCK", raising=False)
    assert judge_clock(None) == "gate"
    monkeypatch.setenv("KGEN_JUDGE_CLOCK", "events")
    assert judge_clock(None) == "events" and judge_clock("gate") == "gate"
    monkeypatch.setenv("KGEN_JUDGE_CLOCK", "gate")
    assert judge_clock(None) == "gate" and judge_clock("events") == "events"
    with pytest.raises(ValueError, match="unknown judge clock"):
        judge_clock("sundial")


def test_kgen_eval_refuses_an_unknown_clock_in_one_line(tmp_path):
    candidate = Path(__file__).resolve().parents[1] / "problems" / "starters" / "softmax" / "triton_row_in_registers.py"
    done = subprocess.run([sys.executable, "-m", "kgen", "eval", "softmax", str(candidate), "--no-baselines"],
                          capture_output=True, text=True, env=dict(os.environ, KGEN_JUDGE_CLOCK="sundial"),
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["kgen: error: unknown judge clock 'sundial' (KGEN_JUDGE_CLOCK): "
                                                "expected one of events, gate"]
