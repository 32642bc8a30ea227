"""While a search times its baselines on one GPU, candidates go to the machine's other GPUs (issue 27):
the stages dispatch only to evaluators of another GPU, and results stored before the baselines were in
get their speedups once they are. Real Ray (local) with stand-in evaluators that report a GPU UUID of
their own (there is no GPU here: that, and only that, is stood in)."""
from __future__ import annotations

import io
import os
import sys
import threading
import time

import pytest
from rich.console import Console

from kgen.core.records import EvalResult, EvalSettings


def _compiled_at_once(problem, size, source_hash, source, settings):
    import ray

    return None, {}, {"node_id": ray.get_runtime_context().get_node_id(), "ip": "127.0.0.1"}


class _TwoGpuEvaluator:
    """Says it owns the GPU whose UUID is its process id (two actors: two "GPUs"); each result names it."""

    def __init__(self, problem, size, source_hash):
        pass

    def device(self):
        import ray

        from kgen.search.workers import Device

        return Device(name="Stand-in GPU", cuda_arch="9.0", node_id=ray.get_runtime_context().get_node_id(),
                      gpu_uuid=f"GPU-{os.getpid()}")

    def evaluate(self, source, settings):
        return EvalResult(outcome="correct", device="cuda", size=settings.size, runtime_ms=0.5,
                          details={"gpu_uuid": f"GPU-{os.getpid()}"})


@pytest.mark.slow
def test_candidates_go_only_to_the_other_gpu_while_the_baselines_hold_one():
    import logging

    import ray
    from ray import cloudpickle

    from kgen.search.cluster import Cluster, Placement
    from kgen.search.workers import Job, Stages

    class TwoGpuStages(Stages):
        compile_function = staticmethod(_compiled_at_once)
        evaluator_class = _TwoGpuEvaluator

    saved_env = dict(os.environ)  # ray.init sets RAY_AUTH_MODE here; later tests' subprocesses must not inherit it
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        stages = TwoGpuStages(Cluster(address=None, num_cpus=3, num_gpus=0,
                                      placement=Placement(2, dict(num_cpus=1))), "unused.py", "small")
        deadline = time.monotonic() + 60
        while len(stages._free) < 2:  # both evaluators answered their ping: their GPUs are known
            stages.poll(timeout_s=0.5)
            assert time.monotonic() < deadline, "the stand-in evaluators never answered"
        held = stages._actor_gpus[0]
        assert held and stages._actor_gpus[1] and stages._actor_gpus[1] != held
        list(stages.submit([Job(cid, f"# candidate {cid}") for cid in range(1, 7)], EvalSettings(device="cuda")))
        seen: list[EvalResult] = []
        while len(seen) < 6 and time.monotonic() < deadline:
            events = stages.poll(timing_open=False, evaluator_open=stages.gpus_other_than(held))
            seen += [e.result for e in events if e.kind == "done"]
        assert len(seen) == 6
        assert {r.details["gpu_uuid"] for r in seen} == {stages._actor_gpus[1]}  # never the baselines' GPU
        # without a GPU to keep clear (None: the baselines are not timed here) nothing is dispatched
        list(stages.submit([Job(7, "# candidate 7")], EvalSettings(device="cuda")))
        for _ in range(6):
            assert not [e for e in stages.poll(timing_open=False, evaluator_open=stages.gpus_other_than(None))
                        if e.kind in ("timing", "done")]
        stages.close()
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        os.environ.clear()
        os.environ.update(saved_env)


class _OtherGpuStages:
    """The stages as the search sees them, without Ray: while the search keeps the GPUs closed it must
    pass an evaluator filter; each poll then finishes one job, correct, as the other GPU would."""

    compiling_count = 0

    def __init__(self):
        self.pending, self.polls = [], []

    def submit(self, jobs, settings):
        self.pending += jobs
        return []

    def gpus_other_than(self, gpu):
        return lambda index: index == 1

    def poll(self, timing_open, evaluator_open=None):
        from kgen.search.workers import StageEvent

        self.polls.append((timing_open, evaluator_open is not None))
        if not timing_open and evaluator_open is None:
            time.sleep(0.01)
            return []
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
    search._open_run("Stand-in GPU", 2)
    search._baseline_gpu = "GPU-0"
    settings = EvalSettings(device="cuda", size="small")
    release = threading.Event()

    def baselines():  # the baselines' thread: in once every candidate has been evaluated without them
        release.wait(30)
        settings.baseline_eager_ms, settings.baseline_compile_ms = 1.0, 0.5

    thread = threading.Thread(target=baselines, daemon=True)
    thread.start()
    stages = _OtherGpuStages()
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
    assert stages.polls[0] == (False, True)  # the other GPU was open while the baselines ran
    with db.reader() as s:
        rows = s.query(Evaluation).all()
    assert len(rows) == 3
    assert all(r.eager_ms == 1.0 and r.compile_ms == 0.5 for r in rows)
    assert all(r.speedup_eager == pytest.approx(4.0) and r.speedup_compile == pytest.approx(2.0) for r in rows)
    assert "the baselines are in: speedups added to 3 candidate(s)" in out.getvalue()
    assert progress.counts.best_speedup_eager == pytest.approx(4.0)
