"""The search's first candidate, judged by the driver while the local Ray cluster and its evaluators start.

On a cold H100 box a local cluster took 9-11 s to start and its evaluator another 7-8 s to answer (its process
imports Ray and torch, loads the problem, starts its sandboxes and warms its judge up), so the first result came
27-33 s after the search began, the GPU idle until 18 s (benchmarks/RESULTS.md, issue 26). The driver already has
the GPU (it measures this machine's ceilings as the search starts), the problem, and nothing to do while Ray
starts: here it starts one evaluation's sandboxes at once, and judges the first round's first Triton candidate
itself, with the judge the evaluators run (kgen.judge.evaluate.evaluate_candidate: the candidate in its own
sandboxed process, the same checks, the same timing under the GPU's timing lock), while the main thread starts
Ray. The other candidates go to the evaluators as before (the first of them once the lane is done: below), and
the search does not depend on the lane: where it fails (kgen's harness, not the candidate) or outlives
LANE_DEADLINE_S past the candidate's time limit, its candidate goes to the evaluators instead and a late answer of
the lane's is dropped.

Only where it pays and is safe: a new run (a resumed one's first candidates are known only once the cluster is
up), a local cluster on a machine with a GPU (a joined cluster's evaluators may be other machines, with another
GPU), a proposer that answers at once (a model's first reply outlasts the cluster's start), candidates in the
bubblewrap sandbox (unsandboxed, a candidate could reach its runner's parent: here the search, not a worker Ray
restarts), and a Triton candidate (a CUDA one's build belongs on the compile stage's CPUs, where it takes as long
as the cluster's start). KGEN_DRIVER_LANE=0 turns it off; =1 forces it where there is no GPU (the tests: Triton's
interpreter on the CPU).

The GPU: the lane's judge holds the GPU as an evaluator's does (kgen.judge.gpu_lock): shared for its untimed work,
alone for its timed runs, so the evaluators' warm-ups and first candidates go on beside its untimed work, and
neither they nor the baselines ever run beside its timed runs, nor it beside theirs.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

from kgen.core.records import EvalResult, EvalSettings, Outcome

LANE_DEADLINE_S = 120.0  # beyond the candidate's own time limit, before its candidate goes to the evaluators
CLOSE_WAIT_S = 30.0  # at the search's end, for a judge still inside torch (its sandboxes are stopped first)


def wanted(gpu_here: bool) -> bool:
    """Whether a new search on a local cluster judges its first candidate in the driver."""
    setting = os.environ.get("KGEN_DRIVER_LANE", "")
    return setting == "1" or (setting != "0" and gpu_here)


def early_sandboxes(sandbox: str, proposer: Optional[str]) -> Any:
    """The lane's sandboxes (kgen.judge.spares.start_early: a compile step and two runners), started before the
    search imports torch and loads the problem (`kgen search` calls this first), for a new search that may have
    the lane: on a cold H100 box the lane's runner was the last thing its first result waited for (runner_start_s
    3.9 s, started after torch's import and the problem's load). None where it will not: the guess needs no torch
    (a GPU's device node); the search decides again with torch and its settings resolved, and closes what it does
    not use (the default proposer may turn out to be openai)."""
    from kgen.judge.spares import gpu_node_here, start_early

    if sandbox != "bwrap" or proposer == "openai" or not wanted(gpu_node_here()):
        return None
    return start_early("triton", None, "bwrap")


class DriverLane:
    """One candidate judged in the driver, in a thread of its own; `poll` hands its result to the search loop as
    the stages hand theirs (kgen.search.workers.StageEvent)."""

    def __init__(self, problem: Any, sandbox: str, device: str,
                 judge: Optional[Callable[..., EvalResult]] = None, spares: Any = None):
        """`problem`: the loaded problem (kgen.problems.problem.Problem); `device`: the judge's device ("cuda" or
        "cpu"); `judge(problem, source, settings, spares)`: kgen.judge.evaluate.evaluate_candidate (a test's
        stand-in may fail on purpose); `spares`: its sandboxes, started earlier (early_sandboxes), else started
        now, in a thread."""
        from kgen.judge.spares import start_early

        self.problem = problem
        self.device = device
        self.judge = judge
        # a compile step and runners, importing torch now (a wrong early guess of the device is never taken)
        self.spares = spares if spares is not None else start_early("triton", device, sandbox)
        self._judge_spares = _StoppableSpares(self.spares) if self.spares is not None else None
        self.job = None  # kgen.search.workers.Job, once taken
        self.deadline: Optional[float] = None
        self._thread: Optional[threading.Thread] = None
        self._outcome: dict = {}
        self._announced = False
        self._given_up = False
        self.note: Optional[str] = None  # why its candidate went to the evaluators instead, once it did
        self.began: Optional[float] = None  # monotonic: the judge started, and ended
        self.finished: Optional[float] = None

    @staticmethod
    def judge_function(problem: Any, source: str, settings: EvalSettings, spares: Any) -> EvalResult:
        """The evaluators' judge (a test replaces it to make kgen's side fail)."""
        from kgen.judge.evaluate import evaluate_candidate

        return evaluate_candidate(problem, source, settings, spares)

    @staticmethod
    def _takes(source: str) -> bool:
        from kgen.judge.static_checks import check_source

        verdict = check_source(source)
        return verdict.rejection is None and verdict.language == "triton"

    def take(self, jobs: list, settings: EvalSettings) -> list:
        """Start judging the first Triton job of `jobs` (once per lane); the jobs left for the stages."""
        if self.job is not None or self.spares is None:
            return list(jobs)
        for k, job in enumerate(jobs):
            if getattr(job, "problem", None) is None and self._takes(job.source):
                self.job = job
                # the evaluators get a pickled copy: the search changes its settings later (the baselines)
                own = copy.deepcopy(settings)
                self.deadline = time.monotonic() + float(own.timeout_s or 300.0) + LANE_DEADLINE_S
                self._thread = threading.Thread(target=self._judge, args=(job.source, own), daemon=True,
                                                name="kgen-driver-lane")
                self._thread.start()
                return list(jobs[:k]) + list(jobs[k + 1:])
        with contextlib.suppress(Exception):  # nothing for the lane (no Triton candidate): its sandboxes go now
            self.spares.close()
        self.spares = self._judge_spares = None
        return list(jobs)

    def _judge(self, source: str, settings: EvalSettings) -> None:
        started = time.time()
        self.began = time.monotonic()
        try:
            result = (self.judge or self.judge_function)(self.problem, source, settings, self._judge_spares)
            result.details.setdefault("nodes", {})["evaluation"] = dict(
                _where(), gpus=_visible_gpu(self.device), start=round(started, 3), end=round(time.time(), 3),
                lane="driver")
            self._outcome["result"] = result
        except BaseException as e:  # noqa: BLE001 - kgen's own failure: the candidate goes to the evaluators
            self._outcome["error"] = f"{type(e).__name__}: {e}"
        finally:
            self.finished = time.monotonic()
            if self.device != "cpu":  # the judge's cached GPU memory back, for the evaluators' candidates
                with contextlib.suppress(Exception):
                    import torch

                    torch.cuda.empty_cache()

    def poll(self) -> tuple[list, list]:
        """(events for the search loop, jobs to send to the stages instead). Events: 'timing' once the judge
        began, 'done' with its result."""
        from kgen.search.workers import StageEvent

        if self.job is None or self._given_up or "done" in self._outcome:
            return [], []
        events = []
        if not self._announced:
            self._announced = True
            events.append(StageEvent("timing", self.job.candidate_id))
        alive = self._thread is not None and self._thread.is_alive()
        if alive and time.monotonic() < (self.deadline or 0.0):
            return events, []
        if alive:
            return events, self._give_up(f"the driver's judge outlived its deadline ({LANE_DEADLINE_S:g} s past "
                                         "the candidate's time limit)")
        result: Optional[EvalResult] = self._outcome.get("result")
        if result is None or result.outcome == Outcome.HARNESS_ERROR.value:
            why = self._outcome.get("error") or (result.message.strip().splitlines() or [""])[0][:200]
            return events, self._give_up(f"kgen's harness failed in the driver ({why})")
        self._outcome["done"] = True
        events.append(StageEvent("done", self.job.candidate_id, result))
        return events, []

    def _give_up(self, why: str) -> list:
        self._given_up = True
        self.note = f"candidate {self.job.candidate_id} goes to the evaluators: {why}"
        return [self.job]

    def close(self) -> None:
        """Stop the lane's sandboxes, those its judge took included (a search stopped by Ctrl-C while the lane
        judges: its runner gone, the judge returns at once), and give a judge still running a moment to leave
        torch (a thread inside it when Python exits aborts the process)."""
        if self._judge_spares is not None and self._thread is not None and self._thread.is_alive():
            self._judge_spares.stop()
        if self.spares is not None:
            with contextlib.suppress(Exception):
                self.spares.close()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(CLOSE_WAIT_S)


class _StoppableSpares:
    """The lane's spares (kgen.judge.spares.SpareRunners) as its judge sees them: each process the judge takes is
    remembered, so that stopping the lane can stop them, and none is handed out after that."""

    def __init__(self, spares: Any):
        self._spares = spares
        self._taken: list = []
        self._stopped = False
        self._lock = threading.Lock()

    def take(self, *args, **kwargs):
        from kgen.judge.verdict import HarnessFault

        with self._lock:
            if self._stopped:
                raise HarnessFault("the search is stopping: no new sandbox for the driver's judge")
        slot = self._spares.take(*args, **kwargs)
        with self._lock:
            self._taken.append(slot)
            stopped = self._stopped
        if stopped:  # stopped while it started
            slot.close()
        return slot

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            taken = list(self._taken)
        for slot in taken:
            with contextlib.suppress(Exception):
                slot.close()

    def __getattr__(self, name: str):
        return getattr(self._spares, name)


def _where() -> dict:
    """This driver's Ray node where Ray is up (it is by the time a result is stored), else nothing."""
    with contextlib.suppress(Exception):
        import ray

        if ray.is_initialized():
            from kgen.search.cluster import where_am_i

            return where_am_i()
    return {}


def _visible_gpu(device: str) -> list[str]:
    """The GPU the driver's judge used as Ray would name it (its index among the visible ones), for kgen bench's
    per-GPU shares; none on the CPU."""
    if device == "cpu":
        return []
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return [visible[0].strip()] if visible else ["0"]
