"""A full disk under a search: the results DB lives on a small tmpfs that is filled up once the search has
stored its first evaluation. The search stops with one line and exit 2, the DB passes integrity_check with
every earlier evaluation in it, and once space is freed `--resume` finishes the run."""

import os
import sqlite3
import subprocess
import sys
import time

import pytest
from test_search import evaluations_per_candidate, rows

from conftest import run_kgen


@pytest.fixture
def small_disk(tmp_path):
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder) -> None:
    """Write a file until the filesystem has no byte left."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


@pytest.mark.slow
def test_a_full_disk_stops_the_search_in_one_line_and_resume_finishes_it(small_disk):
    db = small_disk / "results.db"
    search = subprocess.Popen([sys.executable, "-m", "kgen", "search", "--problem", "softmax", "--rounds", "2",
                               "--candidates", "2", "--language", "triton", "--size", "small", "--quiet", "--db",
                               str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (db.exists() and _count(db) >= 1):
        assert search.poll() is None and time.monotonic() < deadline, search.communicate()
        time.sleep(0.1)
    fill(small_disk)
    before = rows(db, "SELECT id, candidate_id, outcome, created_at FROM evaluations ORDER BY id")
    _, err = search.communicate(timeout=300)

    assert search.returncode == 2, err
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("kgen:")]
    assert line.startswith(f"kgen: error: cannot write to the results DB sqlite:///{db}: database or disk is full; "
                           "run 1 stopped, and `kgen search --resume 1` continues it once the DB can be used again")
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert rows(db, "SELECT id, candidate_id, outcome, created_at FROM evaluations ORDER BY id")[:len(before)] == before
    assert rows(db, "SELECT status FROM runs") != [("finished",)]

    (small_disk / "filler").unlink()
    resumed = run_kgen("search", "--resume", "1", "--db", str(db), "--quiet")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert rows(db, "SELECT status, rounds_done FROM runs") == [("finished", 2)]
    assert set(evaluations_per_candidate(db, 1).values()) == {1}  # every candidate evaluated, none twice
    assert rows(db, "SELECT id, candidate_id, outcome, created_at FROM evaluations ORDER BY id")[:len(before)] == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def _count(db) -> int:
    try:
        return rows(db, "SELECT COUNT(*) FROM evaluations")[0][0]
    except sqlite3.OperationalError:  # tables not created yet
        return 0
