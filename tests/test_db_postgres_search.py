"""`kgen search` on PostgreSQL end to end, as on SQLite: the real CLI, a real local Ray cluster, the offline
proposer, the evaluator under Triton's interpreter, and a real PostgreSQL server. Two searches start at
once on a new database, one is SIGKILLed midway and resumed, and the read commands show the results; a
server that goes away mid-search stops it in one line, and once it is back the run resumes."""

import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from kgen.store.db import db_url

from conftest import run_kgen
from pg_server import PG_PASSWORD, PgServer, free_port

SEARCH = ["--problem", "softmax", "--candidates", "2", "--size", "small", "--proposer", "offline", "--language",
          "triton", "--quiet"]


def rows(url: str, sql: str) -> list[tuple]:
    engine = create_engine(db_url(url))
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


def start_search(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kgen", "search", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_evaluation(proc: subprocess.Popen, url: str, run_pid: int, timeout_s: float = 300) -> int:
    """The run of the search with process id `run_pid`, once it has stored an evaluation."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            for run_id, settings in rows(url, "SELECT id, settings FROM runs"):
                if (json.loads(settings) if isinstance(settings, str) else settings).get("process", {}).get(
                        "pid") == run_pid and rows(url, "SELECT COUNT(*) FROM evaluations e JOIN candidates c ON "
                                                        f"c.id = e.candidate_id WHERE c.run_id = {run_id}")[0][0]:
                    return run_id
        except Exception:  # noqa: BLE001 - the tables do not exist yet
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"no evaluation stored within {timeout_s} s")


def evaluations_per_candidate(url: str) -> dict[int, int]:
    return dict(rows(url, "SELECT c.id, COUNT(e.id) FROM candidates c LEFT JOIN evaluations e "
                          "ON e.candidate_id = c.id GROUP BY c.id"))


@pytest.mark.slow
def test_concurrent_searches_resume_and_the_read_commands_on_postgresql(pg_server, tmp_path):
    url = pg_server.new_database()
    killed = start_search(*SEARCH, "--rounds", "2", "--seed", "1", "--db", url)
    # the command the issue names, started at the same moment on the same new database
    other = start_search("--problem", "softmax", "--rounds", "1", "--candidates", "2", "--size", "small",
                         "--proposer", "offline", "--language", "triton", "--db", url)
    killed_run = wait_for_evaluation(killed, url, killed.pid)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    before = rows(url, f"SELECT e.id, e.candidate_id, e.outcome FROM evaluations e JOIN candidates c "
                       f"ON c.id = e.candidate_id WHERE c.run_id = {killed_run} ORDER BY e.id")
    assert 0 in evaluations_per_candidate(url).values(), "killed after its work was done; kill it sooner"

    resumed = run_kgen("search", "--resume", str(killed_run), "--db", url, "--quiet")
    out, err = other.communicate(timeout=600)
    assert other.returncode == 0, out + err
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming run {killed_run}" in resumed.stdout
    assert sorted(r[1:] for r in rows(url, "SELECT id, status, rounds_done, rounds_planned FROM runs")) == [
        ("finished", 1, 1), ("finished", 2, 2)]
    assert set(evaluations_per_candidate(url).values()) == {1}  # none lost, none twice
    assert rows(url, f"SELECT e.id, e.candidate_id, e.outcome FROM evaluations e JOIN candidates c "
                     f"ON c.id = e.candidate_id WHERE c.run_id = {killed_run} ORDER BY e.id")[:len(before)] == before
    assert {r[0] for r in rows(url, f"SELECT round FROM candidates WHERE run_id = {killed_run}")} == {1, 2}

    board = run_kgen("leaderboard", "--db", url, "--format", "csv")
    assert board.returncode == 0, board.stderr
    header, first = board.stdout.splitlines()[:2]
    winner = dict(zip(header.split(","), first.split(",")))
    correct = {r[0] for r in rows(url, "SELECT candidate_id FROM evaluations WHERE outcome = 'correct'")}
    assert int(winner["candidate_id"]) in correct and winner["problem"] == "softmax"
    runs = run_kgen("runs", "--db", url, "--json")
    assert [r["status"] for r in json.loads(runs.stdout)] == ["finished", "finished"], runs.stderr
    show = run_kgen("show", winner["candidate_id"], "--db", url)
    assert show.returncode == 0 and f"round {winner['round']}" in show.stdout, show.stderr
    export = run_kgen("export", "softmax", "-o", str(tmp_path / "softmax_kernel.py"), "--db", url)
    assert export.returncode == 0 and "class ModelNew" in (tmp_path / "softmax_kernel.py").read_text(), export.stderr
    report = run_kgen("report", "-o", str(tmp_path / "report.html"), "--db", url)
    assert report.returncode == 0, report.stderr
    for output in (out, err, resumed.stdout, resumed.stderr, board.stdout, runs.stdout, show.stdout,
                   (tmp_path / "report.html").read_text()):
        assert PG_PASSWORD not in output


@pytest.fixture
def own_pg_server(pg_server):
    """A second server for a test that stops it (the session's stays up for the others)."""
    server = PgServer(bin_dir=pg_server.bin_dir, root=Path(tempfile.mkdtemp(prefix="kgen-pg-")),
                      port=free_port(), run_as=pg_server.run_as)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)


@pytest.mark.slow
def test_a_server_that_goes_away_stops_the_search_in_one_line_and_resume_finishes_it(own_pg_server):
    url = own_pg_server.new_database()
    search = start_search(*SEARCH, "--rounds", "2", "--db", url)
    run_id = wait_for_evaluation(search, url, search.pid)
    before = rows(url, "SELECT id, candidate_id, outcome FROM evaluations ORDER BY id")
    own_pg_server.stop()
    _, err = search.communicate(timeout=300)
    assert search.returncode == 2, err
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("kgen:")]
    shown = re.escape(f"postgresql+psycopg://kgen:***@127.0.0.1:{own_pg_server.port}/kgen_test_1")
    assert re.match(rf"kgen: error: cannot (read|write to) the results DB {shown}: ", line), line
    assert f"run {run_id} stopped, and `kgen search --resume {run_id}` continues it once the DB can be used again" \
        in line and PG_PASSWORD not in err

    own_pg_server.start()
    resumed = run_kgen("search", "--resume", str(run_id), "--db", url, "--quiet")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert rows(url, "SELECT status, rounds_done FROM runs") == [("finished", 2)]
    assert set(evaluations_per_candidate(url).values()) == {1}
    assert rows(url, "SELECT id, candidate_id, outcome FROM evaluations ORDER BY id")[:len(before)] == before
