"""The driver lane (kgen.search.driver_lane): a new search's first Triton candidate judged in the driver while the
local Ray cluster starts. On the CPU here it is forced on (KGEN_DRIVER_LANE=1; by default it runs only with a GPU):
the real CLI, a real local Ray cluster and SQLite file, the candidate under Triton's interpreter in bubblewrap. The
lane's own rules (which job it takes, what it hands back when kgen's side fails or outlives its deadline) are tested
on the lane itself, with the judge replaced by stand-ins that fail on purpose and real sandboxes started beside."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from kgen.core.records import EvalResult, EvalSettings
from kgen.search import driver_lane
from kgen.search.workers import Job

from conftest import REPO, run_kgen

STARTERS = REPO / "problems" / "starters"
TRITON = (STARTERS / "softmax" / "triton_online_two_pass.py").read_text()
CUDA = next((STARTERS / "softmax").glob("cuda_*.py")).read_text()
NO_KERNEL = (REPO / "tests" / "candidates" / "no_kernel.py").read_text()
LANE_ON = {"KGEN_DRIVER_LANE": "1"}


def rows(db, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, args).fetchall()


@pytest.fixture
def lane():
    made = []

    def make(judge):
        made.append(driver_lane.DriverLane(None, "none", "cpu", judge=judge))
        return made[-1]

    yield make
    for one in made:
        one.close()


def poll_until_settled(lane, timeout_s: float = 20.0) -> tuple[list, list]:
    events, back = [], []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new, returned = lane.poll()
        events += new
        back += returned
        if back or any(e.kind == "done" for e in events):
            return events, back
        time.sleep(0.02)
    raise AssertionError(f"the lane neither answered nor gave up within {timeout_s} s: {events}")


def test_the_lane_takes_the_first_triton_job_and_leaves_the_rest_in_order(lane):
    seen = {}

    def judge(problem, source, settings, spares):
        seen["source"], seen["timeout"] = source, settings.timeout_s
        return EvalResult(outcome="correct")

    one = lane(judge)
    settings = EvalSettings(device="cpu", timeout_s=7.0)
    jobs = [Job(1, CUDA), Job(2, NO_KERNEL), Job(3, TRITON), Job(4, TRITON)]
    assert one.take(jobs, settings) == [jobs[0], jobs[1], jobs[3]]
    assert one.take([Job(5, TRITON)], settings) == [Job(5, TRITON)]  # one candidate per lane
    settings.timeout_s = 99.0  # the search changes its settings later: the lane judged with its own copy
    events, back = poll_until_settled(one)
    assert back == [] and [e.kind for e in events] == ["timing", "done"]
    assert events[1].candidate_id == 3 and events[1].result.outcome == "correct"
    assert events[1].result.details["nodes"]["evaluation"]["lane"] == "driver"
    assert seen == {"source": TRITON, "timeout": 7.0}
    assert one.poll() == ([], [])  # said once
    assert one.began is not None and one.finished >= one.began


def test_a_lane_with_no_triton_candidate_stops_its_sandboxes_at_once(lane):
    one = lane(lambda *args: EvalResult(outcome="correct"))
    spares = one.spares
    jobs = [Job(1, CUDA), Job(2, NO_KERNEL)]
    assert one.take(jobs, EvalSettings(device="cpu")) == jobs
    assert one.spares is None and spares._starter is None  # closed (its starter let go): none kept for the search
    assert one.take([Job(3, TRITON)], EvalSettings(device="cpu")) == [Job(3, TRITON)]
    assert one.poll() == ([], []) and one.job is None and one._thread is None  # nothing judged


@pytest.mark.parametrize("failure", ["raises", "harness_error"])
def test_kgen_failing_in_the_lane_sends_its_candidate_to_the_evaluators(lane, failure):
    def judge(problem, source, settings, spares):
        if failure == "raises":
            raise RuntimeError("the driver's judge broke")
        return EvalResult(outcome="harness_error", message="kgen's harness failed, not the candidate: pipe closed")

    one = lane(judge)
    assert one.take([Job(8, TRITON)], EvalSettings(device="cpu")) == []
    events, back = poll_until_settled(one)
    assert back == [Job(8, TRITON)] and all(e.kind != "done" for e in events)
    assert "goes to the evaluators" in one.note
    assert ("the driver's judge broke" if failure == "raises" else "pipe closed") in one.note
    assert one.poll() == ([], [])


def test_a_lane_past_its_deadline_is_given_up_and_its_late_answer_dropped(lane, monkeypatch):
    monkeypatch.setattr(driver_lane, "LANE_DEADLINE_S", 0.3)
    release = {"at": time.monotonic() + 1.5}

    def judge(problem, source, settings, spares):
        while time.monotonic() < release["at"]:
            time.sleep(0.02)
        return EvalResult(outcome="correct")

    one = lane(judge)
    one.take([Job(9, TRITON)], EvalSettings(device="cpu", timeout_s=0.1))
    _, back = poll_until_settled(one)
    assert back == [Job(9, TRITON)] and "outlived its deadline" in one.note
    time.sleep(max(0.0, release["at"] - time.monotonic()) + 0.3)
    assert one.finished is not None and one.poll() == ([], [])  # the late result is not handed to the search


def test_closing_the_lane_stops_the_sandbox_its_judge_took_and_hands_out_no_more(lane):
    """Ctrl-C while the lane judges: closing it kills the (real) sandboxed process its judge took, so the judge
    returns at once instead of the search waiting for it, and the judge gets no new process after that."""
    from kgen.judge.verdict import HarnessFault

    seen = {}

    def judge(problem, source, settings, spares):
        slot = spares.take("cpu", "run")
        seen["took"] = True
        deadline = time.monotonic() + 60
        while slot.process.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["killed"] = not slot.process.alive()
        with pytest.raises(HarnessFault, match="stopping"):
            spares.take("cpu", "run")
        seen["refused"] = True
        return EvalResult(outcome="correct")

    one = lane(judge)
    one.take([Job(1, TRITON)], EvalSettings(device="cpu"))
    deadline = time.monotonic() + 60
    while "took" not in seen and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    one.close()
    assert time.monotonic() - started < 10 < driver_lane.CLOSE_WAIT_S
    assert seen == {"took": True, "killed": True, "refused": True}


@pytest.mark.slow
def test_a_search_s_first_result_comes_from_the_driver_and_every_candidate_is_judged_once(tmp_path):
    db = tmp_path / "results.db"
    result = run_kgen("search", "--problem", "softmax", "--rounds", "2", "--candidates", "3", "--language", "triton",
                      "--size", "small", "--db", str(db), env=LANE_ON)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "candidate 1 is judged here, in the driver, while the evaluators start" in result.stdout
    per_candidate = rows(db, "SELECT c.id, COUNT(e.id) FROM candidates c LEFT JOIN evaluations e "
                             "ON e.candidate_id = c.id GROUP BY c.id")
    assert len(per_candidate) == 6 and {n for _, n in per_candidate} == {1}
    where = {cid: json.loads(details).get("nodes", {}).get("evaluation", {})
             for cid, details in rows(db, "SELECT candidate_id, details FROM evaluations")}
    assert {cid: w.get("lane") for cid, w in where.items()} == {1: "driver", **dict.fromkeys(range(2, 7))}
    # one candidate per GPU (here: per machine) at a time: no evaluator began one while the driver judged
    assert min(w["start"] for cid, w in where.items() if cid != 1) >= where[1]["end"]
    assert rows(db, "SELECT outcome FROM evaluations WHERE candidate_id = 1") == [("correct",)]
    [(settings,)] = rows(db, "SELECT settings FROM runs")
    startup = json.loads(settings)["startup"]
    # stored once the loop runs (the cluster up), which is after the driver's judge finished it
    assert startup["lane_result_s"] <= startup["first_result_s"]
    # where each evaluator's start went (the figures the next step on issue 26 is chosen from)
    starts = startup["evaluator_start"]
    assert len(starts) == 2 and all(f["init_s"] > 0 and f["process_age_s"] > 0 for f in starts), starts
    assert rows(db, "SELECT status, rounds_done FROM runs") == [("finished", 2)]


@pytest.mark.slow
def test_ctrl_c_while_the_lane_judges_and_ray_starts_marks_the_run_interrupted(tmp_path):
    db = tmp_path / "results.db"
    proc = subprocess.Popen([sys.executable, "-m", "kgen", "search", "--problem", "softmax", "--rounds", "3",
                             "--candidates", "3", "--language", "triton", "--size", "small", "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, **LANE_ON))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the run is opened beside Ray's start, before the cluster is up
        try:
            if db.exists() and rows(db, "SELECT COUNT(*) FROM candidates")[0][0] > 0:
                break
        except sqlite3.OperationalError:
            pass
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 130, out
    assert "Traceback" not in out and "kgen search --resume 1" in out
    assert rows(db, "SELECT status FROM runs") == [("interrupted",)]


def replay_log(path, sources: list[str]):
    """A results DB whose logged proposals (one round) the replay proposer hands out in this order."""
    from kgen.core.records import Proposal
    from kgen.store import queries
    from kgen.store.db import open_db

    log = open_db(str(path))
    run_id = queries.create_run(log, problem="softmax", problem_path="softmax.py", problem_hash="-", size="small",
                                proposer="offline", model=None, language="triton", seed=0, rounds=1,
                                candidates_per_round=len(sources), settings={}, device="cpu")
    for source in sources:
        queries.add_proposal(log, Proposal(source=source, proposer="offline", language="triton"), run_id=run_id,
                             round_index=0, problem="softmax", problem_hash="-")
    log.close()
    return path


def replayed_search(tmp_path, sources: list[str]):
    log = replay_log(tmp_path / "log.db", sources)
    db = tmp_path / "results.db"
    result = run_kgen("search", "--problem", "softmax", "--proposer", "replay", "--from", str(log), "--rounds", "1",
                      "--candidates", str(len(sources)), "--size", "small", "--db", str(db), "--quiet", env=LANE_ON)
    assert result.returncode == 0, result.stdout + result.stderr
    judged = rows(db, "SELECT c.source, e.outcome, e.details FROM candidates c JOIN evaluations e "
                      "ON e.candidate_id = c.id ORDER BY c.id")
    assert rows(db, "SELECT status, rounds_done FROM runs") == [("finished", 1)]
    return [(source, outcome, json.loads(details)["nodes"]["evaluation"]) for source, outcome, details in judged]


@pytest.mark.slow
def test_a_candidate_judged_in_the_driver_cannot_reach_the_search(tmp_path):
    """The lane's candidate runs in the driver's sandbox, its ancestors outside it the search itself: one that kills
    every ancestor it can see is just a correct softmax there, and the search finishes."""
    killer = (REPO / "tests" / "candidates_search" / "kills_its_ancestors.py").read_text()
    judged = replayed_search(tmp_path, [killer, TRITON])
    assert [(source == killer, outcome) for source, outcome, _ in judged] == [(True, "correct"), (False, "correct")]
    assert judged[0][2]["lane"] == "driver"


@pytest.mark.slow
def test_the_evaluators_take_candidates_while_the_driver_still_judges_one(tmp_path):
    """The lane and the evaluators share the GPU as two evaluators do (kgen.judge.gpu_lock: untimed work side by side,
    timed runs apart): an evaluator up while the lane still judges (a forward that sleeps keeps it busy past the
    evaluators' start) starts its candidates meanwhile, and each candidate is judged once."""
    slow = (REPO / "tests" / "candidates_search" / "slow_forward.py").read_text()
    judged = replayed_search(tmp_path, [slow, TRITON, TRITON.replace("BLOCK_SIZE = 8192", "BLOCK_SIZE = 512")])
    assert [outcome for _, outcome, _ in judged] == ["correct"] * 3
    lane, *others = [where for _, _, where in judged]
    assert lane["lane"] == "driver" and all("lane" not in w for w in others)
    assert lane["end"] - lane["start"] > 15  # long enough for the evaluators to come up meanwhile
    assert min(w["start"] for w in others) < lane["end"]
