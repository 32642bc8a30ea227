"""`kgen search` end to end on the CPU: the real CLI in a subprocess, a real local Ray cluster, a real
SQLite file, the offline and replay proposers, and the evaluator under Triton's interpreter."""

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_kgen

CANDIDATES = Path(__file__).resolve().parent / "candidates_search"
SOFTMAX_STARTER = REPO / "problems" / "starters" / "softmax" / "triton_online_two_pass.py"


def rows(db: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, args).fetchall()


def evaluations_per_candidate(db: Path, run_id: int) -> dict[int, int]:
    return dict(rows(db, "SELECT c.id, COUNT(e.id) FROM candidates c LEFT JOIN evaluations e ON e.candidate_id = c.id "
                         "WHERE c.run_id = ? GROUP BY c.id", run_id))


def start_search(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kgen", "search", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_for_evaluations(proc: subprocess.Popen, db: Path, count: int, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the search ended early:\n{proc.stdout.read()}"
        if db.exists():
            try:
                if rows(db, "SELECT COUNT(*) FROM evaluations")[0][0] >= count:
                    return
            except sqlite3.OperationalError:  # tables not created yet
                pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"no {count} evaluation(s) stored within {timeout_s} s")


@pytest.mark.slow
def test_search_runs_two_rounds_on_cpu_and_the_leaderboard_shows_its_winner(tmp_path):
    db = tmp_path / "results.db"
    # Triton only: on a machine with nvcc but no GPU each CUDA starter is built (minutes), never run.
    result = run_kgen("search", "--problem", "softmax", "--rounds", "2", "--candidates", "3", "--language", "triton",
                      "--size", "small", "--db", str(db))
    assert result.returncode == 0, result.stdout + result.stderr
    # it ends without the interpreter's teardown (kgen.cli.main.quick_exit), but with its DB closed: no WAL left
    assert not (tmp_path / "results.db-wal").exists()
    assert "no timings are measured" in result.stdout and "ranked by correctness only" in result.stdout
    assert [r[1:] for r in rows(db, "SELECT id, status, rounds_done, rounds_planned, proposer FROM runs")] == [
        ("finished", 2, 2, "offline")]
    assert {r[0] for r in rows(db, "SELECT round FROM candidates")} == {1, 2}
    assert set(evaluations_per_candidate(db, 1).values()) == {1}
    correct = [r[0] for r in rows(db, "SELECT candidate_id FROM evaluations WHERE outcome = 'correct'")]
    assert correct, rows(db, "SELECT candidate_id, outcome, message FROM evaluations")
    assert f"export: kgen export {min(correct)} -o softmax_kernel.py" in result.stdout

    board = run_kgen("leaderboard", "--db", str(db), "--format", "csv")
    assert board.returncode == 0, board.stderr
    header, first = board.stdout.splitlines()[:2]
    winner = dict(zip(header.split(","), first.split(",")))
    assert (winner["candidate_id"], winner["problem"], winner["run_id"]) == (str(min(correct)), "softmax", "1")


@pytest.mark.slow
def test_resume_after_kill_evaluates_the_rest_and_nothing_twice(tmp_path):
    db = tmp_path / "results.db"
    args = ["--problem", "softmax", "--rounds", "2", "--candidates", "3", "--language", "triton", "--size", "small",
            "--db", str(db), "--quiet"]
    proc = start_search(*args)
    wait_for_evaluations(proc, db, 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = rows(db, "SELECT id, candidate_id, outcome, created_at FROM evaluations ORDER BY id")
    assert rows(db, "SELECT status, rounds_done FROM runs") == [("running", 0)]
    assert 0 in evaluations_per_candidate(db, 1).values(), "killed after the round had finished; kill sooner"
    listed = run_kgen("runs", "--json", "--db", str(db))
    [run] = json.loads(listed.stdout)
    assert run["status"] == "running" and run["process_alive"] is False  # `kgen runs` tells it apart
    assert "process gone" in run_kgen("runs", "--db", str(db), env={"COLUMNS": "400"}).stdout

    result = run_kgen("search", "--resume", "1", "--db", str(db), "--quiet", "--rounds", "7",
                      "--problem", "matmul")  # a resumed run keeps its own settings
    assert result.returncode == 0, result.stdout + result.stderr
    assert "resuming run 1" in result.stdout
    assert rows(db, "SELECT status, rounds_done, rounds_planned, problem FROM runs") == [
        ("finished", 2, 2, "softmax")]
    assert set(evaluations_per_candidate(db, 1).values()) == {1}
    assert rows(db, "SELECT id, candidate_id, outcome, created_at FROM evaluations ORDER BY id")[:len(before)] == before
    assert {r[0] for r in rows(db, "SELECT round FROM candidates")} == {1, 2}
    assert len(rows(db, "SELECT id FROM candidates WHERE round = 1")) == 3


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_ctrl_c_or_kill_marks_the_run_interrupted(tmp_path, sig):
    # SIGTERM: ray.init installs a handler of its own (sys.exit), which marked a killed run `failed`
    db = tmp_path / "results.db"
    proc = start_search("--problem", "softmax", "--rounds", "3", "--candidates", "3", "--language", "triton",
                        "--size", "small", "--db", str(db), "--quiet")
    wait_for_evaluations(proc, db, 1)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "kgen search --resume 1" in out
    assert rows(db, "SELECT status FROM runs") == [("interrupted",)]
    assert set(evaluations_per_candidate(db, 1).values()) <= {0, 1}


def _replay_db(path: Path) -> Path:
    """A results DB whose log holds, in order: a correct starter and the worker killer (round 0), then
    a retuning of the starter (round 1)."""
    from kgen.core.records import Proposal
    from kgen.store import queries
    from kgen.store.db import open_db

    starter = SOFTMAX_STARTER.read_text()
    retuned = starter.replace("BLOCK_SIZE = 8192", "BLOCK_SIZE = 512")
    assert retuned != starter
    db = open_db(str(path))
    run_id = queries.create_run(db, problem="softmax", problem_path="softmax.py", problem_hash="-", size="small",
                                proposer="offline", model=None, language="triton", seed=0, rounds=2,
                                candidates_per_round=2, settings={}, device="cpu")
    for round_index, source in ((0, starter), (0, (CANDIDATES / "kills_its_worker.py").read_text()), (1, retuned)):
        queries.add_proposal(db, Proposal(source=source, proposer="offline", language="triton"), run_id=run_id,
                             round_index=round_index, problem="softmax", problem_hash="-")
    db.close()
    return path


@pytest.mark.slow
def test_a_candidate_cannot_reach_the_worker_evaluating_it(tmp_path):
    log = _replay_db(tmp_path / "log.db")
    db = tmp_path / "results.db"
    result = run_kgen("search", "--problem", "softmax", "--proposer", "replay", "--from", str(log), "--rounds", "2",
                      "--candidates", "2", "--size", "small", "--db", str(db), "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    outcomes = rows(db, "SELECT c.round, e.outcome, e.message, c.source FROM candidates c "
                        "JOIN evaluations e ON e.candidate_id = c.id ORDER BY c.id")
    # its kill found no Ray worker among the processes the sandbox shows it: it is just a correct softmax
    assert [(r[0], r[1]) for r in outcomes] == [(1, "correct"), (1, "correct"), (2, "correct")], outcomes
    assert "_kill_ray_worker_ancestor" in outcomes[1][3]
    assert rows(db, "SELECT status, rounds_done FROM runs") == [("finished", 2)]


@pytest.mark.parametrize("args, message", [
    (["--problem", "no_such_problem"], "unknown problem 'no_such_problem'"),
    (["--problem", "softmax", "--rounds", "0"], "--rounds must be at least 1"),
    (["--problem", "softmax", "--proposer", "oracle"], "unknown proposer 'oracle'"),
    (["--problem", "softmax", "--ray-address", "127.0.0.1:9"], "cannot reach the Ray cluster at 127.0.0.1:9"),
    (["--resume", "42"], "no run 42"),
    ([], "give --problem"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    db = tmp_path / "results.db"
    if args[:1] == ["--resume"]:
        from kgen.store.db import open_db

        open_db(str(db)).close()  # an empty results DB to look the run up in
    result = run_kgen("search", "--db", str(db), "--quiet", *args, env={"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr, result.stderr
    if db.exists():
        assert rows(db, "SELECT COUNT(*) FROM runs") == [(0,)]
