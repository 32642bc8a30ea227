"""Two evaluations on one GPU (issue 26): each judge holds its GPU shared for its untimed work and alone for its
timed runs (kgen.judge.gpu_lock.Share, Judge.gpu_shared / gpu_alone), and the spares stop while anyone times on
it (SpareRunners.watch_timing). Real processes, flock and sandboxes here; the GPU itself is not (there is none):
a stand-in UUID names it, as in tests/test_baseline_gpu_overlap.py."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kgen.core.records import EvalSettings

HOLDER = '''
import sys, time
from kgen.judge import gpu_lock
uuid, how, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
if how == "shared":
    share = gpu_lock.Share(uuid)
    held = share.take()
else:
    alone = gpu_lock.exclusive(uuid, defer=how == "baselines")  # kept: its files close with it
    held = alone.__enter__()
print("held" if held["had"] else "not", flush=True)
time.sleep(seconds)
'''


def _hold(uuid: str, how: str, seconds: float, wait: bool = True) -> subprocess.Popen:
    """Another process holding GPU `uuid` ("shared", "alone", or "baselines": alone, deferring) for `seconds`."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, uuid, how, str(seconds)], stdout=subprocess.PIPE, text=True)
    if wait:
        assert proc.stdout.readline().strip() == "held"
    return proc


def _until_waiting(uuid: str, suffix: str) -> None:
    """Until another process waits for GPU `uuid` (it holds its `suffix` file shared: ".waiting" a timing,
    ".baselines" the baselines), however slowly it started."""
    import fcntl

    from kgen.judge import gpu_lock

    deadline = time.monotonic() + 30
    with open(gpu_lock.lock_path(uuid).with_suffix(suffix), "a+") as handle:
        while time.monotonic() < deadline:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(handle, fcntl.LOCK_UN)
            except BlockingIOError:
                return
            time.sleep(0.02)
    raise AssertionError(f"nobody came to wait ({suffix})")


def _stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.fixture
def uuid(request) -> str:
    return f"GPU-test-{os.getpid()}-{request.node.name[-40:]}"


def test_shared_holds_go_together_and_a_timing_waits_for_all_of_them(uuid):
    from kgen.judge import gpu_lock

    other = _hold(uuid, "shared", 1.0)
    try:
        mine = gpu_lock.Share(uuid)
        assert mine.take(wait_s=0.5)["had"]  # beside another judge's untimed work: at once
        started = time.monotonic()
        with gpu_lock.exclusive(uuid, wait_s=0.3) as alone:  # a timing: not while anyone holds it shared
            assert not alone["had"]
        mine.close()
        with gpu_lock.exclusive(uuid) as alone:  # the other process lets go after its second: then it is had
            assert alone["had"] and time.monotonic() - started >= 0.6
    finally:
        _stop(other)


def test_a_shared_hold_waits_for_a_timing_and_never_goes_before_a_waiting_one(uuid):
    """While a timing holds the GPU, untimed work waits; and once a timing waits, no new untimed work starts before
    it (a judge's untimed work would otherwise hold the other's timing off for as long as it lasts)."""
    from kgen.judge import gpu_lock

    timing = _hold(uuid, "alone", 0.8)
    try:
        share = gpu_lock.Share(uuid)
        state = share.take()
        assert state["had"] and state["waited_s"] >= 0.5  # after the timing let go
    finally:
        _stop(timing)
    # now held shared (here); a timing comes to wait for it; a second untimed hold must not go before that timing
    order: list[str] = []

    def time_it() -> None:
        with gpu_lock.exclusive(uuid) as held:
            assert held["had"]
            order.append("timing")
            time.sleep(0.3)

    def untimed() -> None:
        second = gpu_lock.Share(uuid)
        assert second.take()["had"]
        order.append("untimed")
        second.close()

    timer = threading.Thread(target=time_it)
    timer.start()
    _until_waiting(uuid, ".waiting")  # the timing is waiting now
    late = threading.Thread(target=untimed)
    late.start()
    time.sleep(0.3)
    share.close()  # the first untimed work ends: the timing goes, then the second untimed work
    timer.join(10)
    late.join(10)
    assert order == ["timing", "untimed"]


def test_a_judges_first_hold_waits_for_waiting_baselines_and_its_later_ones_do_not(uuid):
    """The baselines go between evaluations: a waiting baseline holds off an evaluation's start (after_baselines),
    not a judge coming back from its own timed runs mid-evaluation."""
    from kgen.judge import gpu_lock

    untimed = gpu_lock.Share(uuid)
    assert untimed.take()["had"]
    baselines = _hold(uuid, "baselines", 0.5, wait=False)  # waits for the untimed work to end
    try:
        _until_waiting(uuid, ".baselines")
        mid_evaluation = gpu_lock.Share(uuid)
        assert mid_evaluation.take(wait_s=0.3)["had"]  # not held off by the waiting baselines
        mid_evaluation.close()
        next_evaluation = gpu_lock.Share(uuid)
        assert not next_evaluation.take(wait_s=0.3, after_baselines=True)["had"]  # waits for them
        untimed.close()
        assert baselines.stdout.readline().strip() == "held"  # the baselines go once the untimed work ends
        state = next_evaluation.take(after_baselines=True)
        assert state["had"] and state["waited_s"] >= 0.3  # and the next evaluation after them
        next_evaluation.close()
    finally:
        _stop(baselines)
    assert gpu_lock.Share(None).take() == {"waited_s": 0.0, "had": False}  # no GPU: nothing held, nobody waits


def test_timed_now_says_whether_anyone_times_on_the_gpu(uuid):
    from kgen.judge import gpu_lock

    assert not gpu_lock.timed_now(uuid) and not gpu_lock.timed_now(None)
    shared = _hold(uuid, "shared", 30)
    try:
        assert not gpu_lock.timed_now(uuid)  # untimed work: not a timing
    finally:
        _stop(shared)
    timing = _hold(uuid, "alone", 30)
    try:
        assert gpu_lock.timed_now(uuid)
    finally:
        _stop(timing)
    assert not gpu_lock.timed_now(uuid)  # a dead holder's lock is gone with it


def _judge(monkeypatch, uuid: str, fits: bool):
    from kgen.judge import gpu_lock
    from kgen.judge.judge import Judge
    from kgen.judge.sandbox import SandboxMode
    from kgen.problems.problem import load_problem

    monkeypatch.setattr(gpu_lock, "device_uuid", lambda device=None: uuid)  # the GPU stood in by its UUID
    monkeypatch.setattr(Judge, "_fits_beside_another", lambda self: fits)  # its memory plan, as a GPU's would say
    return Judge(load_problem("softmax", "small"), "", "triton", EvalSettings(device="cpu", size="small"),
                 SandboxMode.BWRAP)


def _can(uuid: str, how: str) -> bool:
    """Whether another process can hold the GPU `how` ("shared" or "alone") right now."""
    proc = subprocess.run([sys.executable, "-c", HOLDER.replace("share.take()", "share.take(wait_s=0.2)").replace(
        "gpu_lock.exclusive(uuid, ", "gpu_lock.exclusive(uuid, wait_s=0.2, "), uuid, how, "0"],
        capture_output=True, text=True, timeout=60)
    return proc.stdout.strip() == "held"


def test_a_judge_holds_its_gpu_shared_but_for_its_timed_runs_and_its_waits_are_not_the_candidates(monkeypatch, uuid):
    judge = _judge(monkeypatch, uuid, fits=True)
    with judge.gpu_shared("untimed work"):
        assert _can(uuid, "shared") and not _can(uuid, "alone")  # beside another's untimed work, not its timing
        with judge.gpu_alone("timing"):
            assert not _can(uuid, "shared") and not _can(uuid, "alone")
        assert _can(uuid, "shared") and not _can(uuid, "alone")  # shared again after its timed runs
        other = _hold(uuid, "alone", 0.6, wait=False)  # another judge's timing waits for this one's untimed work
        try:
            _until_waiting(uuid, ".waiting")
            assert other.poll() is None and not _can(uuid, "shared")  # it waits; and no new untimed work goes first
        finally:
            judge._share.let_go()  # as its own timing would: now the other's goes
            assert other.stdout.readline().strip() == "held"
            deadline = judge.deadline
            with judge.gpu_alone("timing"):  # waits for the other's timed runs, and the wait is not the candidate's
                assert judge.phases["gpu_wait_s"] >= 0.4 and judge.deadline - deadline >= 0.4
            _stop(other)
        with pytest.raises(RuntimeError), judge.gpu_alone("timing"):  # a verdict in the timed runs
            raise RuntimeError("a candidate's runtime error")
        assert _can(uuid, "shared") and not _can(uuid, "alone")  # shared again for the judge's closing work
    assert _can(uuid, "alone")  # let go of at the end


def test_a_judge_too_big_to_share_its_gpu_holds_it_alone_all_through(monkeypatch, uuid):
    judge = _judge(monkeypatch, uuid, fits=False)
    with judge.gpu_shared("untimed work"):
        assert not _can(uuid, "shared")
        with judge.gpu_alone("timing"):  # already alone: no second hold (that would wait for itself)
            assert not _can(uuid, "shared")
        assert not _can(uuid, "shared")
    assert _can(uuid, "shared") and _can(uuid, "alone")


def _stopped(slot) -> bool:
    return Path(f"/proc/{slot.process.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_the_spares_stop_while_anyone_times_on_their_gpu_and_go_on_after(uuid):
    from kgen.judge.sandbox import SandboxMode
    from kgen.judge.spares import SpareRunners

    spares = SpareRunners(SandboxMode.BWRAP, depth=0)
    spares.prestart("cpu", {"run": 2})
    try:
        spares.watch_timing(uuid)
        waiting = spares.spares[("cpu", "run")]
        time.sleep(0.2)
        assert not any(_stopped(s) for s in waiting)
        timing = _hold(uuid, "alone", 30)  # another evaluator's timed runs
        try:
            time.sleep(0.3)
            assert all(_stopped(s) for s in waiting)
            with spares.timing_here():  # its own timing ending meanwhile does not let them go on
                pass
            time.sleep(0.1)
            assert all(_stopped(s) for s in waiting)
            taken = spares.take("cpu", "run")  # one taken goes on at once: its judge holds the GPU
            time.sleep(0.1)
            assert not _stopped(taken)
        finally:
            _stop(timing)
        time.sleep(0.3)
        assert not any(_stopped(s) for s in spares.spares[("cpu", "run")])
        taken.close()
    finally:
        spares.close()


def test_while_its_own_judge_times_the_spares_stop_and_the_watcher_sleeps(monkeypatch, uuid):
    """Judge.gpu_alone's timed runs: the spares stop, and the watcher looks at the lock no more until they end
    (a thread waking every 10 ms in the process whose own polls are the gate clock's). Its looks are counted by
    wrapping the real gpu_lock.timed_now."""
    from kgen.judge import gpu_lock
    from kgen.judge.sandbox import SandboxMode
    from kgen.judge.spares import SpareRunners

    looks = []
    real = gpu_lock.timed_now
    monkeypatch.setattr(gpu_lock, "timed_now", lambda u: looks.append(time.monotonic()) or real(u))
    spares = SpareRunners(SandboxMode.BWRAP, depth=0)
    spares.prestart("cpu", {"run": 1})
    try:
        spares.watch_timing(uuid)
        waiting = spares.spares[("cpu", "run")]
        time.sleep(0.2)
        assert looks and not any(_stopped(s) for s in waiting)
        with spares.timing_here():
            time.sleep(0.05)  # a look already under way ends
            asleep_from = time.monotonic()
            time.sleep(0.4)
            assert all(_stopped(s) for s in waiting)
            assert not [t for t in looks if t > asleep_from]
        time.sleep(0.3)
        assert [t for t in looks if t > asleep_from] and not any(_stopped(s) for s in waiting)
    finally:
        spares.close()


def test_an_evaluation_shares_its_gpu_only_where_two_fit_in_its_memory(monkeypatch):
    """The rule that decides gpu_shared's two ways: the evaluation's planned GPU memory (verify.gpu_memory_plan, from
    the problem's shapes) at most SHARE_GPU_MEMORY of the GPU's. The GPU's size is stood in (there is no GPU here)."""
    from types import SimpleNamespace

    import torch

    from kgen.judge.judge import SHARE_GPU_MEMORY, Judge
    from kgen.judge.sandbox import SandboxMode
    from kgen.problems.problem import load_problem

    judge = Judge(load_problem("softmax", "small"), "", "triton", EvalSettings(device="cpu", size="small"),
                  SandboxMode.BWRAP)
    for total in (80 << 30, 1 << 20):  # an H100's memory; a GPU too small for two of these
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None, t=total: SimpleNamespace(
            total_memory=t))
        need = judge._memory_plan([]).need_bytes
        assert need > 0 and judge._fits_beside_another() is (need <= SHARE_GPU_MEMORY * total)
        assert judge._fits_beside_another() is (total == 80 << 30)

    def no_gpu(device=None):
        raise RuntimeError("no GPU")

    monkeypatch.setattr(torch.cuda, "get_device_properties", no_gpu)
    assert judge._fits_beside_another() is False  # unknown: alone
