"""The evaluation watchdog (kgen.search.workers.Stages._watch) fires on a silent evaluator, not a busy one.

On the H100 a 300 s limit on the whole evaluation killed a judge that was working on a 7.5 GB problem
(issue 32's 36_RMSNorm_): its own float64 references and comparisons are not the candidate's time. Here
evaluator stand-ins on a real local Ray cluster report their progress through the real heartbeat
(kgen.judge.heartbeat) while they "work"; the driver's limits are scaled down from minutes to seconds
(the candidate's time limit to 1 s, so the old rule would have killed anything past 3 s). The stages run
as a collection runs them (`kgen eval COLLECTION`: no problem of their own, each job names its own), which
is the same Stages.poll the search uses. A real CPU evaluation checks that the judge itself beats.
"""

import json
import os
import sys
import threading
import time
from dataclasses import dataclass

import pytest

from kgen.core.records import EvalResult, EvalSettings
from kgen.judge.heartbeat import Heartbeat


class _StandInEvaluator:
    """An evaluator whose "judge" follows the plan in the candidate's source: `steps` steps of `step_s` each
    (each a new step on the heartbeat), then `silent_s` in one step; `charged_s` is what its clock of the
    candidate's time says; `hang_progress` makes its progress call never answer."""

    def __init__(self, problem, size, source_hash):
        self.heartbeat = Heartbeat()
        self.hang = False

    def device(self):
        import ray

        from kgen.search.workers import Device

        return Device(name="cpu", cuda_arch=None, node_id=ray.get_runtime_context().get_node_id())

    def progress(self):
        while self.hang:
            time.sleep(1)
        return self.heartbeat.snapshot()

    def evaluate(self, source, settings, problem=None):
        plan = json.loads(source)
        self.heartbeat.begin(plan.get("bytes", 0))
        self.hang = plan.get("hang_progress", False)
        charged = plan.get("charged_s")
        if charged is not None:
            self.heartbeat.charged_by(lambda: charged)
        try:
            self.heartbeat.phase_ended("reference_s")
            for k in range(plan.get("steps", 0)):
                self.heartbeat.step(f"waiting for trial {k + 1}", 1.0)
                time.sleep(plan["step_s"])
            self.heartbeat.step("the silent step")
            time.sleep(plan.get("silent_s", 0))
        finally:
            self.heartbeat.end()
        return EvalResult(outcome="correct", size=settings.size)


def _compile_stand_in(problem, size, source_hash, source, settings):
    import ray

    return None, {}, {"node_id": ray.get_runtime_context().get_node_id(), "ip": "127.0.0.1"}


PLANS = {  # candidate id -> what its evaluator does
    1: {"name": "busy past the old limit", "steps": 12, "step_s": 0.5},  # 6 s of steps, old limit 3 s
    2: {"name": "silent", "steps": 2, "step_s": 0.2, "silent_s": 60},
    3: {"name": "hung", "steps": 1, "step_s": 0.2, "hang_progress": True, "silent_s": 60},
    4: {"name": "charged far past", "charged_s": 100.0, "steps": 200, "step_s": 0.3},
    5: {"name": "busy forever", "bytes": 2_000_000_000, "steps": 400, "step_s": 0.3},
}
LIMITS = dict(ACTOR_GRACE_S=1.0, PROGRESS_EVERY_S=0.2, PROGRESS_ANSWER_S=3.0, SILENT_S=2.0, SILENT_S_PER_GB=0.0,
              QUEUED_S=30.0, HARD_S=6.0, HARD_S_PER_GB=2.0)  # a 2 GB problem: hard bound 3 + 6 + 4 = 13 s


@dataclass
class WatchedRun:
    events: list
    finished_s: dict  # candidate id -> seconds from the start to its result

    def done(self, candidate_id: int) -> EvalResult:
        [result] = [e.result for e in self.events if e.kind == "done" and e.candidate_id == candidate_id]
        return result


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray cluster for this module's tests (this module's stand-ins pickled by value)."""
    import logging

    import ray
    from ray import cloudpickle

    saved_env = dict(os.environ)  # ray.init sets RAY_AUTH_MODE here; later tests' subprocesses must not inherit it
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        os.environ.clear()
        os.environ.update(saved_env)


@pytest.fixture(scope="module")
def watched(ray_session):
    from kgen.search import workers
    from kgen.search.cluster import Cluster, Placement

    class StandInStages(workers.Stages):
        compile_function = staticmethod(_compile_stand_in)
        evaluator_class = _StandInEvaluator

    saved = {name: getattr(workers, name) for name in LIMITS}
    try:
        for name, value in LIMITS.items():
            setattr(workers, name, value)
        stages = StandInStages(Cluster(address=None, num_cpus=2, num_gpus=0,
                                       placement=Placement(len(PLANS), dict(num_cpus=0.1))), None, "small")
        jobs = [workers.Job(cid, json.dumps(plan), ("softmax", "small", None)) for cid, plan in PLANS.items()]
        events, finished = [], {}
        started = None
        for event in stages.run(jobs, EvalSettings(timeout_s=1.0)):
            if event.kind == "timing" and started is None:
                started = time.monotonic()
            if event.kind == "done":
                finished[event.candidate_id] = time.monotonic() - started
            events.append(event)
        stages.close()
    finally:
        for name, value in saved.items():
            setattr(workers, name, value)
    return WatchedRun(events, finished)


def test_an_evaluator_that_keeps_reporting_progress_is_not_killed_past_the_old_limit(watched):
    result = watched.done(1)
    assert result.outcome == "correct", result.message
    assert watched.finished_s[1] > 2 * 1.0 + LIMITS["ACTOR_GRACE_S"]  # the old rule would have killed it


def test_a_silent_evaluator_is_killed_with_a_message_naming_why_and_the_judges_step(watched):
    result = watched.done(2)
    assert result.outcome == "harness_error"
    assert "made no progress" in result.message and "'the silent step'" in result.message
    assert "phases done: reference_s" in result.message and "killed and restarted" in result.message
    assert watched.finished_s[2] < 20  # not the silent step's 60 s


def test_an_evaluator_that_does_not_answer_its_progress_call_is_killed(watched):
    result = watched.done(3)
    assert result.outcome == "harness_error"
    assert "did not answer a progress call in 3 s" in result.message, result.message
    assert watched.finished_s[3] < 20


def test_a_candidate_charged_far_past_its_limit_is_killed(watched):
    result = watched.done(4)
    assert result.outcome == "harness_error"
    assert "charged time (100 s) is far past its 1 s limit" in result.message, result.message


def test_a_judge_busy_forever_ends_at_a_hard_bound_scaled_by_the_problems_bytes(watched):
    result = watched.done(5)
    assert result.outcome == "harness_error"
    assert "hard bound of 13 s for a problem of 2 GB" in result.message, result.message
    assert 13 < watched.finished_s[5] < 30


def test_each_candidate_leaves_exactly_once(watched):
    assert sorted(e.candidate_id for e in watched.events if e.kind == "done") == sorted(PLANS)


def _starter() -> str:
    from pathlib import Path

    starters = Path(__file__).resolve().parent.parent / "problems" / "starters"
    return (starters / "softmax" / "triton_row_in_registers.py").read_text()


def test_the_real_evaluator_answers_its_progress_call_while_it_judges(ray_session):
    """kgen's own evaluator actor, as Stages makes it (its "progress" concurrency group), judging a real
    candidate on the CPU: the progress calls sent meanwhile come back while `evaluate` runs, busy."""
    import ray

    from kgen.search import workers

    actor = ray.remote(max_restarts=0, concurrency_groups={"baselines": 1, "progress": 1})(workers._Evaluator) \
        .options(num_cpus=0.5).remote("softmax", "small", None)
    ray.get(actor.device.remote())
    pending = actor.evaluate.remote(_starter(), EvalSettings(sandbox="none", timeout_s=60.0))
    seen = []
    while not ray.wait([pending], timeout=0)[0]:
        seen.append(ray.get(actor.progress.options(concurrency_group="progress").remote(), timeout=30))
        time.sleep(0.05)
    assert ray.get(pending).outcome == "correct"
    busy = [p for p in seen if p.busy]
    assert busy and busy[-1].steps > 5 and busy[-1].tensor_bytes > 0
    assert ray.get(actor.progress.options(concurrency_group="progress").remote()).step == "idle"
    ray.kill(actor)


def test_a_real_judge_beats_each_step_and_charges_only_the_candidates_time(problem):
    """A real evaluation (CPU, Triton's interpreter, no sandbox) with a heartbeat read from another thread, as
    the evaluator's progress call reads it."""
    from kgen.judge.evaluate import evaluate_candidate

    source = _starter()
    heartbeat = Heartbeat()
    seen, stop = [], threading.Event()
    named = []  # every step the judge reports, as it reports it (a 20 ms sampler can miss a short one)
    report = heartbeat.step

    def step(what, *args, **kwargs):
        named.append(what)
        return report(what, *args, **kwargs)

    heartbeat.step = step

    def watch():
        while not stop.is_set():
            seen.append(heartbeat.snapshot())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    heartbeat.begin(4096)
    try:
        result = evaluate_candidate(problem, source, EvalSettings(sandbox="none", timeout_s=60.0),
                                    heartbeat=heartbeat)
    finally:
        heartbeat.end()
        stop.set()
        watcher.join()
    assert result.outcome == "correct", result.message
    busy = [p for p in seen if p.busy]
    assert busy and busy[-1].steps > 10  # a step per runner answer, per trial's references and checks
    assert "drawing a trial's inputs and float64 references" in named
    assert any(s.startswith("waiting for trial") for s in named)
    assert {"reference_s", "verify_s"} <= set(busy[-1].phases)
    # the candidate's clock starts after the reference and leaves the judge's checks out
    assert all(p.charged_s == 0 for p in busy if not p.phases)
    assert 0 < max(p.charged_s for p in busy) < max(p.elapsed_s for p in busy)
    after = heartbeat.snapshot()
    assert not after.busy and after.step == "idle"


def test_a_wait_for_the_gpus_timing_lock_is_neither_charged_nor_silent(problem, monkeypatch):
    """The judge waits for the timing lock (a baseline holds it): the watchdog sees that step, with the lock's
    own bound as its limit, and the candidate's charged seconds stand still meanwhile (the real lock, held by
    another holder for 0.6 s; the GPU's UUID is the one thing made up)."""
    import secrets

    from kgen.judge import gpu_lock
    from kgen.judge.judge import Judge
    from kgen.judge.sandbox import SandboxMode

    uuid = f"test-{secrets.token_hex(4)}"
    monkeypatch.setattr(gpu_lock, "device_uuid", lambda device=None: uuid)
    heartbeat = Heartbeat()
    heartbeat.begin()
    judge = Judge(problem, "", "triton", EvalSettings(timeout_s=10.0), SandboxMode.NONE, heartbeat=heartbeat)
    judge._clock_running, judge.deadline = True, time.monotonic() + 10.0
    taken, release = threading.Event(), threading.Event()

    def hold():
        with gpu_lock.exclusive(uuid):
            taken.set()
            release.wait(5)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    taken.wait(5)
    threading.Timer(0.6, release.set).start()
    seen = []
    sampler_stop = threading.Event()

    def sample():
        while not sampler_stop.is_set():
            seen.append(heartbeat.snapshot())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with judge.gpu_alone("timing"):
        inside = heartbeat.snapshot()
        time.sleep(0.2)  # the measurement the lock guards: the candidate's time
    sampler_stop.set()
    sampler.join()
    holder.join()
    waiting = [p for p in seen if p.step == "waiting for the GPU's timing lock (timing)"]
    assert waiting and waiting[0].step_limit_s == gpu_lock.WAIT_S
    assert max(p.charged_s for p in waiting) < 0.15
    assert inside.step == "timing" and inside.waited_s >= 0.5 and inside.charged_s < 0.15
    assert 0.15 < judge.charged_s() < 0.5 and judge.phases["gpu_wait_s"] >= 0.5
    with gpu_lock.exclusive(uuid, wait_s=0.1) as state:  # the judge let it go
        assert state["had"]
