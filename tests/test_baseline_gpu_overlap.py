"""Baselines and candidates share a GPU (issues 26, 27, 30): the baselines compile while candidates are
judged, and only timed runs take turns, under the GPU's timing lock (kgen.judge.gpu_lock). Real
processes and flock here; the GPU itself is not (there is none): a stand-in UUID names it."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time

import pytest
from rich.console import Console

from kgen.core.records import EvalResult, EvalSettings

HOLDER = '''
import sys, time
from kgen.judge import gpu_lock
with gpu_lock.exclusive(sys.argv[1]) as held:
    print("held" if held["had"] else "not", flush=True)
    time.sleep(float(sys.argv[2]))
'''


def _hold_in_another_process(uuid: str, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, uuid, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_the_timing_lock_keeps_two_processes_apart_and_is_per_gpu():
    from kgen.judge import gpu_lock

    uuid = f"GPU-test-{os.getpid()}-a"
    holder = _hold_in_another_process(uuid, 1.5)
    try:
        with gpu_lock.exclusive(f"GPU-test-{os.getpid()}-b") as other:  # another GPU: no wait
            assert other["had"] and other["waited_s"] < 0.5
        with gpu_lock.exclusive(uuid) as held:  # the same GPU: waits for the other process to let go
            assert held["had"] and held["waited_s"] >= 0.8
            assert holder.poll() is not None or holder.wait(5) == 0
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_never_had_is_given_up_on_and_said_so_and_a_dead_holder_lets_go():
    from kgen.judge import gpu_lock

    uuid = f"GPU-test-{os.getpid()}-c"
    holder = _hold_in_another_process(uuid, 60)
    try:
        with gpu_lock.exclusive(uuid, wait_s=0.3) as held:
            assert not held["had"] and 0.3 <= held["waited_s"] < 5
        holder.kill()  # killed while holding it: the kernel drops the flock with the process
        holder.wait()
        with gpu_lock.exclusive(uuid, wait_s=5) as held:
            assert held["had"] and held["waited_s"] < 1
    finally:
        holder.kill()
        holder.wait()
    assert gpu_lock.exclusive(None).__enter__() == {"waited_s": 0.0, "had": False}  # no GPU: nothing held


def test_a_deferring_holder_never_goes_before_a_waiting_timing():
    """The baselines defer: when the GPU frees, a candidate's timing already waiting goes first, every time,
    and the baselines go after it (three holders: another process, a timing thread, a baselines thread)."""
    from kgen.judge import gpu_lock

    uuid = f"GPU-test-{os.getpid()}-e"
    with gpu_lock.exclusive(uuid, defer=True) as alone:  # nobody waiting: a deferring caller takes it at once
        assert alone["had"] and alone["waited_s"] < 0.5
    order: list[str] = []

    def take(name: str, defer: bool, hold_s: float) -> None:
        with gpu_lock.exclusive(uuid, defer=defer) as held:
            assert held["had"]
            order.append(name)
            time.sleep(hold_s)

    holder = _hold_in_another_process(uuid, 1.0)
    try:
        timing = threading.Thread(target=take, args=("timing", False, 0.5))
        baselines = threading.Thread(target=take, args=("baselines", True, 0.0))
        baselines.start()  # waiting first, and still second
        time.sleep(0.2)
        timing.start()
        timing.join(10)
        baselines.join(10)
    finally:
        holder.kill()
        holder.wait()
    assert order == ["timing", "baselines"]


STAND_IN_WORKER = '''
import fcntl, sys
import kgen.judge.baseline_worker as worker
from kgen.judge import gpu_lock

def stand_in(job, ready):  # the GPU part mocked: "compiles", says so with its GPU's UUID, waits, "times"
    gpu_lock.device_uuid = lambda device=None: job["uuid"]  # what the child would read from CUDA

    def held_by_parent():
        with open(gpu_lock.lock_path(job["uuid"]), "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return False  # (let go of as the file closes)
            except BlockingIOError:
                return True

    while_compiling = held_by_parent()  # the compiles hold nothing
    ready()
    while_timing = held_by_parent()  # the parent must hold it now
    return {"eager_ms": 1.5, "compile_ms": 1.25, "errors": {},
            "settings": {"held_while_compiling": while_compiling, "held_while_timing": while_timing}}

worker.time_baselines = stand_in
worker.main()
'''


def test_the_baselines_are_timed_under_their_gpus_lock(tmp_path, monkeypatch):
    """The real child process and pipe protocol, with the GPU work stood in: the child names its GPU when
    it has compiled, and its timed runs happen while the parent holds that GPU's timing lock; a judge
    timing on that GPU meanwhile waits (here: a second holder in this process)."""
    from kgen.judge import baselines, gpu_lock

    (tmp_path / "stand_in_worker.py").write_text(STAND_IN_WORKER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(baselines, "WORKER", "stand_in_worker")
    uuid = f"GPU-test-{os.getpid()}-d"
    sent = baselines._time_in_child({"uuid": uuid})
    assert sent is not None and (sent["eager_ms"], sent["compile_ms"]) == (1.5, 1.25)
    assert sent["settings"]["held_while_compiling"] is False and sent["settings"]["held_while_timing"] is True
    lock = sent["settings"]["gpu_lock"]  # kept with the baselines' row: how long they waited and held the GPU
    assert lock["had"] is True and lock["waited_s"] < 5 and 0 <= lock["held_s"] < 30
    with gpu_lock.exclusive(uuid, wait_s=1) as held:  # and let go of once the child is done
        assert held["had"]


class _AnyGpuStages:
    """The stages as the search sees them, without Ray: each poll finishes one job, correct, on whichever
    GPU; the search must never hold them back while its baselines are being timed."""

    compiling_count = 0

    def __init__(self):
        self.pending, self.polls = [], []

    def submit(self, jobs, settings):
        self.pending += jobs
        return []

    def poll(self, timing_open=True):
        from kgen.search.workers import StageEvent

        self.polls.append(timing_open)
        done, self.pending = self.pending[:1], self.pending[1:]
        return [StageEvent("done", job.candidate_id, EvalResult(outcome="correct", language="triton", device="cuda",
                                                                size="small", runtime_ms=0.25)) for job in done]

    def cancel(self):
        pass


def test_results_stored_before_the_baselines_get_their_speedups_once_they_are_in(tmp_path):
    from kgen.problems.problem import load_problem
    from kgen.proposers import make_proposer
    from kgen.search.loop import Search, SearchConfig
    from kgen.search.progress import SearchProgress
    from kgen.store.db import Evaluation, open_db

    db = open_db(str(tmp_path / "k.db"))
    config = SearchConfig(problem="softmax", rounds=1, candidates=3, proposer="offline", size="small")
    out = io.StringIO()
    progress = SearchProgress(Console(file=out, width=200))
    problem = load_problem("softmax", "small")
    search = Search(db, config, problem, make_proposer("offline", problem=problem), progress)
    search._open_run("Stand-in GPU", 1)
    settings = EvalSettings(device="cuda", size="small")
    release = threading.Event()

    def baselines():  # the baselines' thread: in once every candidate has been evaluated without them
        release.wait(30)
        settings.baseline_eager_ms, settings.baseline_compile_ms = 1.0, 0.5

    thread = threading.Thread(target=baselines, daemon=True)
    thread.start()
    stages = _AnyGpuStages()
    real_add = __import__("kgen.store.queries", fromlist=["add_evaluation"]).add_evaluation
    stored = []

    def add_and_release(db_, candidate_id, result):
        stored.append(candidate_id)
        if len(stored) == 3:
            release.set()
        return real_add(db_, candidate_id, result)

    import kgen.search.loop as search_module

    saved = search_module.queries.add_evaluation
    search_module.queries.add_evaluation = add_and_release
    try:
        search._rounds(stages, settings, 0, "Stand-in GPU", thread)  # done before the baselines: waits for them
    finally:
        search_module.queries.add_evaluation = saved
    assert stages.polls and all(p is True for p in stages.polls)  # the GPU was open while the baselines ran
    with db.reader() as s:
        rows = s.query(Evaluation).all()
    assert len(rows) == 3
    assert all(r.eager_ms == 1.0 and r.compile_ms == 0.5 for r in rows)
    assert all(r.speedup_eager == pytest.approx(4.0) and r.speedup_compile == pytest.approx(2.0) for r in rows)
    assert "the baselines are in: speedups added to 3 candidate(s)" in out.getvalue()
    assert progress.counts.best_speedup_eager == pytest.approx(4.0)


def test_the_judges_warm_up_waits_for_a_timed_measurement_and_leaves_nothing_open(monkeypatch):
    """An evaluator's one-time judge work (Judge.warm_up: a reference built, copied to float64, traced, an
    arena made) runs before its first candidate and beside the baselines' compiles, but never beside a timed
    measurement on its GPU: it takes the GPU's timing lock, and gives back everything it made."""
    from kgen.judge import gpu_lock
    from kgen.judge.judge import Judge
    from kgen.judge.sandbox import SandboxMode
    from kgen.problems.problem import load_problem

    uuid = f"GPU-test-{os.getpid()}-w"
    monkeypatch.setattr(gpu_lock, "device_uuid", lambda device=None: uuid)  # the GPU stood in by its UUID
    judge = Judge(load_problem("softmax", "small"), "", "triton", EvalSettings(device="cpu", size="small"),
                  SandboxMode.BWRAP)
    holder = _hold_in_another_process(uuid, 1.0)  # the baselines' timed runs, say
    try:
        seconds = judge.warm_up()
    finally:
        holder.kill()
        holder.wait()
    assert judge.phases["gpu_wait_s"] >= 0.7 and seconds >= judge.phases["gpu_wait_s"]
    assert judge.evidence.details["reference_ops"] and judge.evidence.details["torch_own_error"]["trials"]
    assert judge.arena is None and judge.slots == [] and not hasattr(judge, "reference64")
    with gpu_lock.exclusive(uuid, wait_s=1) as held:  # let go of once it is done
        assert held["had"]


def test_the_sandbox_probe_started_early_is_run_once_and_its_answer_waited_for(monkeypatch):
    """An evaluator starts the probe of whether bubblewrap can run as nobody (a sandboxed `import torch`) as its
    process starts; the first sandbox started meanwhile waits for that probe's answer instead of probing again."""
    from kgen.judge import sandbox

    probes = []

    def slow_probe(argv, **kwargs):
        probes.append(argv)
        time.sleep(0.5)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)  # kgen as root, where the probe applies
    monkeypatch.setattr(sandbox.subprocess, "run", slow_probe)
    sandbox._probe_as_nobody.cache_clear()
    try:
        started = time.monotonic()
        sandbox.probe_early(True)
        time.sleep(0.1)
        assert sandbox._run_as_nobody(True) is True
        assert 0.4 <= time.monotonic() - started < 2 and len(probes) == 1  # waited for the early one
        assert sandbox._run_as_nobody(True) is True and len(probes) == 1
    finally:
        sandbox._probe_as_nobody.cache_clear()  # later tests probe this machine for real


def test_a_searchs_baselines_start_at_its_first_result_and_still_give_every_speedup(tmp_path):
    """DeferredBaselines: nothing of the baselines runs beside the first evaluation; they start when its result
    comes back, and the evaluations stored before they are in get their speedups (the GPU is a stand-in, as above)."""
    from kgen.problems.problem import load_problem
    from kgen.proposers import make_proposer
    from kgen.search.loop import DeferredBaselines, Search, SearchConfig
    from kgen.search.progress import SearchProgress
    from kgen.store.db import Evaluation, open_db

    db = open_db(str(tmp_path / "k.db"))
    config = SearchConfig(problem="softmax", rounds=1, candidates=3, proposer="offline", size="small")
    progress = SearchProgress(Console(file=io.StringIO(), width=200))
    problem = load_problem("softmax", "small")
    search = Search(db, config, problem, make_proposer("offline", problem=problem), progress)
    search._open_run("Stand-in GPU", 1)
    settings = EvalSettings(device="cuda", size="small")
    ran = threading.Event()

    def baselines():
        ran.set()
        settings.baseline_eager_ms, settings.baseline_compile_ms = 2.0, 1.0

    deferred = DeferredBaselines(threading.Thread(target=baselines, daemon=True))
    assert deferred.is_alive() and not deferred.started  # still to come: not in

    class Stages(_AnyGpuStages):
        def __init__(self):
            super().__init__()
            self.started_at_poll = []  # (results handed out so far, baselines started?) at each poll

        def poll(self, timing_open=True):
            self.started_at_poll.append((len(self.polls), deferred.started))
            return super().poll(timing_open)

    stages = Stages()
    search._rounds(stages, settings, 0, "Stand-in GPU", deferred)
    assert stages.started_at_poll[0] == (0, False)  # no baselines while the first candidate is judged
    assert stages.started_at_poll[1] == (1, True)  # started with the first result
    assert ran.wait(10)
    with db.reader() as s:
        rows = s.query(Evaluation).all()
    assert len(rows) == 3 and all(r.eager_ms == 2.0 and r.compile_ms == 1.0 for r in rows)
