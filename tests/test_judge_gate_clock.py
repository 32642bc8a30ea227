"""The judge's gate clock (KGEN_JUDGE_CLOCK=gate, issue 28) on the CPU: the gate page only the judge can
write, the judge's side of a gated run against a runner on a real socket (return, shadow, failure, a
stream that did not wait), and the check's arithmetic on recorded numbers. The real thing (the runner's
cuStreamWaitValue32, the interprocess end event, the sandbox) is in tests/test_judge_clock_gpu.py."""

import mmap
import os
import random
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from kgen.harness.gate import map_read_only, read_word
from kgen.harness.protocol import Channel, RunnerJob
from kgen.judge.gate_clock import GatedRun, GatePage, gated_run, judge_clock
from kgen.judge.timing import GATE_FLOOR_MS, MIN_GATE_RUNS, Stopwatch, gate_clock_check

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


def test_noisy_runs_widen_the_threshold_instead_of_being_flagged():
    rng = random.Random(7)
    noisy = [(1.0 + OFFSET_MS + rng.gauss(0, 0.02), 1.0) for _ in range(50)]
    check = gate_clock_check(noisy, NULLS, 1.0)
    assert not check.flagged and check.threshold_ms > 0.005


def _stopwatch(candidate: list[GatedRun], runner_ms: float, nulls: int) -> Stopwatch:
    """A Stopwatch holding recorded gated runs only (what gate_report reads)."""
    watch = object.__new__(Stopwatch)
    watch.page, watch.gate_errors, watch.gate_wait = object(), {}, "cuStreamWaitValue32"
    watch.gate_ends = {"candidate's runner": "interprocess event", "reference runner": "interprocess event"}
    watch.gate_candidate = [(g, runner_ms) for g in candidate]
    watch.gate_null = [(GatedRun("return", True, True, OFFSET_MS), 0.001) for _ in range(nulls)]
    watch.gate_calibration = []
    return watch


def test_the_report_holds_both_clocks_the_gap_and_the_threshold():
    runs = [GatedRun("return", True, True, 1.0 + OFFSET_MS - 0.001) for _ in range(40)]
    report = _stopwatch(runs, 0.95, 20).gate_report(0.95, 40)
    assert report["check"] == "made" and report["flagged"]
    assert report["judge_median_ms"] == pytest.approx(1.0015, abs=1e-4)
    assert report["runner_median_ms"] == 0.95 and report["gap_ms"] == pytest.approx(0.05, abs=1e-4)
    assert report["threshold_ms"] < 0.05 and report["samples"][0] == [1.0015, 0.95, "return", True]


def test_no_check_is_claimed_when_most_runs_are_not_clean():
    """Runs whose gate opened on the shadow (forward had not returned) only bound the time: with most runs
    like that, the gate clock claims nothing and today's clock decides."""
    runs = [GatedRun("shadow", None, False, 1.2)] * 30 + [GatedRun("return", True, True, 1.0)] * 12
    report = _stopwatch(runs, 0.5, 20).gate_report(0.5, 42)
    assert report["check"].startswith("not made") and "flagged" not in report
    assert report["shadow_runs"] == 30 and report["clean_runs"] == 12
    assert _stopwatch(runs[30:], 0.5, MIN_GATE_RUNS - 1).gate_report(0.5, 12)["check"].startswith("not made")


def test_a_stream_that_passed_a_closed_gate_is_counted():
    runs = [GatedRun("return", False, False, 0.01)] + [GatedRun("return", True, True, 1.0)] * 20
    assert _stopwatch(runs, 1.0, 20).gate_report(1.0, 21)["not_held_runs"] == 1


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
    import ctypes

    end = GatePage(sealed=False)
    try:
        address = map_read_only(end.fd, writable=True)
        ctypes.c_uint32.from_address(address).value = 5
        assert end.read(0) == 5 and end.read(1) == 0
    finally:
        end.close()


def test_no_check_is_claimed_when_the_runners_runs_end_on_different_signals():
    runs = [GatedRun("return", True, True, 1.0)] * 20
    watch = _stopwatch(runs, 1.0, 20)
    watch.gate_ends = {"candidate's runner": "interprocess event", "reference runner": "end word (...)"}
    assert watch.gate_report(1.0, 20)["check"].startswith("not made: the two runners")


def test_a_driver_function_rewritten_at_the_c_level_changes_the_gates_fingerprint():
    """The gate is as good as its wait: a function whose code is patched (here a `ret` in a page of our own
    standing in for cuStreamWaitValue32) or a ctypes pointer aimed elsewhere no longer matches."""
    import ctypes

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
    """The runner's part, in a thread: waits for the request, 'enqueues' the forward behind the gate (its
    GPU: a thread that waits until the gate word reaches the run's value, then works `gpu_s`), says
    `returned` (before the gate opens, or, where its forward synchronizes inside, only after), and marks the
    end event done when its GPU is done."""

    def __init__(self, page: GatePage, index: int, gpu_s: float, syncs_inside: bool = False, fails: bool = False,
                 host_s: float = 0.0):
        self.judge_end, runner_end = socket.socketpair()
        self.channel, self.runner = Channel(self.judge_end), Channel(runner_end)
        self.address, self.index, self.gpu_s = map_read_only(page.fd), index, gpu_s
        self.syncs_inside, self.fails, self.host_s = syncs_inside, fails, host_s
        self.done = threading.Event()
        self.gate_seen_at = None
        threading.Thread(target=self.serve, daemon=True).start()

    def gpu(self, value: int) -> None:
        while read_word(self.address, self.index) < value:
            time.sleep(1e-5)
        self.gate_seen_at = time.perf_counter()
        time.sleep(self.gpu_s)
        self.done.set()

    def serve(self) -> None:
        request = self.runner.receive(timeout_s=5)
        stream = threading.Thread(target=self.gpu, args=(request["gate"],), daemon=True)
        stream.start()
        if self.fails:
            self.runner.send({"type": "failed", "outcome": "runtime_error", "message": "boom"})
            return
        if self.syncs_inside:  # forward waits for its own GPU work, which waits for the gate
            while self.gate_seen_at is None:
                time.sleep(1e-5)
        time.sleep(self.host_s)  # forward's host time: its launches, queued behind the gate
        self.runner.send({"type": "returned"})

    def run(self, page: GatePage, shadow_s: float = 0.02) -> tuple[GatedRun, float]:
        value = page.next_value(self.index)
        asked = time.perf_counter()
        self.channel.send({"type": "timed", "gate": value})

        def receive_returned():
            message = self.channel.receive(timeout_s=5)
            if message["type"] != "returned":
                raise RuntimeError(message["message"])

        gated = gated_run(lambda: page.open(self.index, value), self.done.is_set, self.channel.readable,
                          receive_returned, time.perf_counter() + 5, shadow_s=shadow_s)
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
    assert gated.opened_by == "return" and gated.held and gated.pending_at_first_poll and gated.clean
    assert 20 <= gated.judge_ms < 300 and runner.gate_seen_at - asked >= 0.3
    assert runner.done.is_set()


def test_a_forward_that_synchronizes_inside_gets_the_gate_after_the_shadow_and_does_not_deadlock(page):
    runner = FakeRunner(page, 1, gpu_s=0.005, syncs_inside=True)
    gated, asked = runner.run(page, shadow_s=0.02)
    assert gated.opened_by == "shadow" and gated.held is None and not gated.clean
    assert runner.gate_seen_at - asked >= 0.02
    assert runner.done.is_set()


def test_the_gate_opens_even_when_the_runner_fails(page):
    runner = FakeRunner(page, 0, gpu_s=0.0, fails=True)
    with pytest.raises(RuntimeError, match="boom"):
        runner.run(page, shadow_s=5.0)
    assert read_word(runner.address, 0) == page.values[0] == 1  # the runner's stream is not left waiting


def test_an_end_event_already_done_before_the_gate_opened_is_not_held(page):
    runner = FakeRunner(page, 0, gpu_s=1.0)
    runner.done.set()  # as if the stream had not waited for the gate
    gated, _ = runner.run(page, shadow_s=5.0)
    assert gated.opened_by == "return" and gated.held is False and not gated.clean


def test_the_clock_setting_defaults_to_todays_and_refuses_unknown_values(monkeypatch):
    monkeypatch.delenv("KGEN_JUDGE_CLOCK", raising=False)
    assert judge_clock(None) == "events"
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
