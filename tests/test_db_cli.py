"""A DB kgen never damages, through the real CLI: commands that only read (leaderboard, show, runs, export,
report) open it read-only: a missing DB is one line and no new file, another application's SQLite file is
refused byte for byte, a kgen DB is left as it was, and a DB in a read-only folder can be read. A password in
a DB URL is never printed."""

import os
import sqlite3
import subprocess

import pytest

from conftest import run_kgen
from pg_server import PG_PASSWORD
from test_leaderboard_fixtures import build_results_db

READ_COMMANDS = {
    "leaderboard": ["leaderboard"],
    "runs": ["runs"],
    "show": ["show", "1"],
    "export": ["export", "softmax", "-o", "exported.py"],
    "report": ["report", "-o", "report.html"],
}


def files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def one_line_error(result) -> str:
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgen: error: "), result.stderr
    return lines[0].removeprefix("kgen: error: ")


@pytest.mark.parametrize("command", READ_COMMANDS)
def test_reading_a_missing_db_is_one_line_and_creates_nothing(tmp_path, command):
    assert one_line_error(run_kgen(*READ_COMMANDS[command], "--db", "results.db")) == \
        f"no results database at {tmp_path / 'results.db'}"
    assert [p.name for p in tmp_path.iterdir() if p.name != "kgen-cache"] == []


@pytest.mark.parametrize("command", [*READ_COMMANDS, "search"])
def test_another_applications_db_is_refused_and_left_byte_for_byte(tmp_path, command):
    with sqlite3.connect(tmp_path / "app.db") as conn:  # the default rollback journal, as most applications leave it
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, who TEXT)")
        conn.execute("INSERT INTO runs (who) VALUES ('their data')")
    before = files(tmp_path)
    args = READ_COMMANDS.get(command, ["search", "--problem", "softmax", "--size", "small", "--rounds", "1"])
    assert one_line_error(run_kgen(*args, "--db", "app.db")) == (
        f"sqlite:///{tmp_path / 'app.db'} holds tables that are not kgen's (runs) and no kgen_meta; "
        "refusing to touch it")
    assert files(tmp_path) == before  # no kgen tables, no WAL switch, no -wal or -shm file, no output file
    assert sqlite3.connect(tmp_path / "app.db").execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_read_commands_leave_a_kgen_db_as_it_was(tmp_path):
    build_results_db(tmp_path / "results.db")
    before = (tmp_path / "results.db").read_bytes()
    for command in READ_COMMANDS.values():
        result = run_kgen(*command, "--db", "results.db")
        assert result.returncode == 0, (command, result.stderr)
    assert (tmp_path / "results.db").read_bytes() == before
    wal = tmp_path / "results.db-wal"  # a WAL reader may open one (SQLite's way), never write to it
    assert not wal.exists() or wal.stat().st_size == 0
    assert "class ModelNew" in (tmp_path / "exported.py").read_text() and (tmp_path / "report.html").is_file()


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder on a tmpfs that is remounted read-only: `make_read_only()` does it (root can write anywhere
    else, whatever the permissions say)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only folder needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")

    def make_read_only() -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)

    try:
        yield folder, make_read_only
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_db_in_a_read_only_folder_can_be_read(read_only_folder, tmp_path):
    folder, make_read_only = read_only_folder
    ids = build_results_db(folder / "results.db")  # in WAL mode, as kgen leaves it; closed, so no -wal file
    make_read_only()
    db = str(folder / "results.db")
    board = run_kgen("leaderboard", "--db", db, "--format", "csv")
    assert board.returncode == 0, board.stderr
    assert {line.split(",")[1] for line in board.stdout.splitlines()[1:]} == {
        str(ids[k]) for k in ("softmax_best", "conv_best", "cpu_first")}
    runs = run_kgen("runs", "--db", db, "--json")
    assert runs.returncode == 0 and runs.stdout.count('"run_id"') == 3, runs.stderr
    show = run_kgen("show", str(ids["softmax_best"]), "--db", db)
    assert show.returncode == 0 and "round 3" in show.stdout, show.stderr
    export = run_kgen("export", "softmax", "-o", str(tmp_path / "exported.py"), "--db", db)
    assert export.returncode == 0 and (tmp_path / "exported.py").is_file(), export.stderr
    assert one_line_error(run_kgen("search", "--problem", "softmax", "--size", "small", "--db", db)) == \
        f"cannot write to database {db}: its folder is not writable"


def test_a_password_in_the_db_url_is_never_printed(pg_server, tmp_path):
    missing = pg_server.url("no_such_database")
    error = one_line_error(run_kgen("runs", "--db", missing))
    assert error.startswith(f"cannot use database 'postgresql+psycopg://kgen:***@127.0.0.1:{pg_server.port}/"
                            "no_such_database': ") and 'database "no_such_database" does not exist' in error

    url = pg_server.new_database()
    empty = one_line_error(run_kgen("leaderboard", "--db", url))
    assert empty.endswith("holds no kgen results yet") and ":***@" in empty

    build_results_db(url)
    outputs = [run_kgen(*args, "--db", url) for args in (
        ["runs"], ["runs", "--json"], ["leaderboard"], ["report", "-o", str(tmp_path / "report.html")],
        ["search", "--resume", "99"], ["show", "9999"])]
    page = (tmp_path / "report.html").read_text()
    assert ":***@127.0.0.1" in page
    for text in [o.stdout + o.stderr for o in outputs] + [page]:
        assert PG_PASSWORD not in text
    assert "no run 99 in postgresql+psycopg://kgen:***@" in outputs[4].stderr
