"""Schema changes go through Alembic: a DB written before Alembic (tests/db_fixtures/results_schema1.sql, made
by kgen at schema version 1) upgrades and keeps every row; the baseline revision is that schema exactly; the
migrated schema is the models' on SQLite and PostgreSQL; commands that read never migrate, `kgen migrate`
and commands that write do."""

import re
import sqlite3
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text

from kgen.store import leaderboard
from kgen.store.db import MIGRATIONS_DIR, SCHEMA_VERSION, Base, db_url, open_db

from conftest import run_kgen

SCHEMA_1_DUMP = Path(__file__).resolve().parent / "db_fixtures" / "results_schema1.sql"
ROUNDED = {"candidates": "round", "llm_calls": "round"}  # the columns revision 0002 moves up by one


def schema_1_db(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_1_DUMP.read_text())
    return path


def all_rows(path: Path) -> dict[str, list[dict]]:
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [dict(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY 1")] for t in tables}


def upgrade_to(url: str, revision: str) -> None:
    """Run the migrations up to `revision` only, as kgen does (its connection, one transaction)."""
    with create_engine(db_url(url)).begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def test_the_head_revision_is_the_schema_version():
    assert ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head() == f"{SCHEMA_VERSION:04d}"


def test_a_schema_1_db_upgrades_and_keeps_every_row(tmp_path):
    path = schema_1_db(tmp_path / "old.db")
    before = all_rows(path)
    assert before["kgen_meta"] == [{"key": "schema_version", "value": "1"}]
    assert {r["round"] for r in before["candidates"]} == {0, 1}

    db = open_db(str(path))
    assert db.upgraded_from == 1
    after = all_rows(path)
    assert after["kgen_meta"] == [{"key": "schema_version", "value": str(SCHEMA_VERSION)}]
    assert after["alembic_version"] == [{"version_num": f"{SCHEMA_VERSION:04d}"}]
    for table, rows in before.items():
        if table == "kgen_meta":
            continue
        moved = [dict(r, **{ROUNDED[table]: r[ROUNDED[table]] + 1}) if table in ROUNDED else r for r in rows]
        kept = [{k: v for k, v in r.items() if k != "sandbox"} for r in after[table]]
        assert kept == moved, table
    assert {r["sandbox"] for r in after["evaluations"]} == {None}
    board = leaderboard.leaderboard(db, include_all=True)
    assert sorted((r.candidate_id, r.round) for r in board) == [(1, 1), (2, 1), (3, 2), (4, 2)]


def test_the_baseline_revision_is_the_schema_kgen_wrote_before_alembic(tmp_path):
    def ddl(path: Path) -> dict[str, str]:
        with sqlite3.connect(path) as conn:
            return {name: re.sub(r"\s+", " ", sql) for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name != 'alembic_version'")}

    baseline = tmp_path / "baseline.db"
    upgrade_to(str(baseline), "0001")
    assert ddl(baseline) == ddl(schema_1_db(tmp_path / "old.db"))


def test_the_migrated_schema_is_the_models(any_db, tmp_path):
    open_db(any_db).close()
    with create_engine(db_url(any_db)).connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    if any_db.endswith(".db"):  # and an old SQLite DB upgraded to it
        upgraded = schema_1_db(tmp_path / "old.db")
        open_db(str(upgraded)).close()
        with create_engine(db_url(str(upgraded))).connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []


def test_a_baseline_postgresql_db_upgrades_and_keeps_its_rows(pg_server):
    url = pg_server.new_database()
    upgrade_to(url, "0001")
    with create_engine(db_url(url)).begin() as conn:
        conn.execute(text("INSERT INTO runs (id, problem, problem_path, problem_hash, size, proposer, language, seed, "
                          "rounds_planned, rounds_done, candidates_per_round, settings, status, created_at) VALUES "
                          "(1, 'softmax', '/p', 'h', 'small', 'openai', 'triton', 0, 2, 2, 1, '{}', 'finished', "
                          "now())"))
        conn.execute(text("INSERT INTO llm_calls (id, run_id, round, proposer, outcome, attempts, created_at) "
                          "VALUES (1, 1, 0, 'openai', 'ok', 1, now())"))
        conn.execute(text("INSERT INTO candidates (id, run_id, round, problem, source, source_hash, language, "
                          "parent_ids, proposer, llm_call_id, created_at) VALUES "
                          "(1, 1, 0, 'softmax', 'a', 'ha', 'triton', '[]', 'openai', 1, now()), "
                          "(2, 1, 1, 'softmax', 'b', 'hb', 'triton', '[1]', 'openai', NULL, now())"))
        conn.execute(text("INSERT INTO evaluations (candidate_id, outcome, device, size, torch_ops, details, "
                          "created_at) VALUES (1, 'correct', 'cpu', 'small', '[]', '{}', now())"))
    db = open_db(url)
    assert db.upgraded_from == 1
    with db.reader() as s:
        assert s.execute(text("SELECT id, round, parent_ids FROM candidates ORDER BY id")).all() == [
            (1, 1, []), (2, 2, [1])]
        assert s.execute(text("SELECT round FROM llm_calls")).all() == [(1,)]
        assert s.execute(text("SELECT candidate_id, outcome, sandbox FROM evaluations")).all() == [
            (1, "correct", None)]


def test_read_commands_never_migrate_and_kgen_migrate_does(tmp_path):
    path = schema_1_db(tmp_path / "old.db")
    before = path.read_bytes()
    board = run_kgen("leaderboard", "--db", str(path))
    assert board.returncode == 2 and board.stdout == ""
    assert board.stderr.strip() == (
        f"kgen: error: database sqlite:///{path} has schema version 1, older than this kgen's ({SCHEMA_VERSION}); "
        "`kgen migrate` with the same --db upgrades it (so does any command that writes)")
    assert path.read_bytes() == before

    migrated = run_kgen("migrate", "--db", str(path))
    assert migrated.returncode == 0, migrated.stderr
    assert f"upgraded the results DB sqlite:///{path} from schema version 1 to {SCHEMA_VERSION}" in migrated.stderr
    assert migrated.stdout.strip() == f"sqlite:///{path}: schema version {SCHEMA_VERSION}, this kgen's"
    again = run_kgen("migrate", "--db", str(path))
    assert again.returncode == 0 and "upgraded" not in again.stderr

    board = run_kgen("leaderboard", "--db", str(path), "--all", "--format", "csv")
    assert board.returncode == 0, board.stderr
    header, *rows = board.stdout.splitlines()
    rounds = {int(row["candidate_id"]): int(row["round"]) for row in (dict(zip(header.split(","), r.split(",")))
                                                                        for r in rows)}
    assert rounds == {1: 1, 2: 1, 3: 2, 4: 2}


def test_migrate_refuses_a_missing_db(tmp_path):
    r = run_kgen("migrate", "--db", str(tmp_path / "none.db"))
    assert (r.returncode, r.stderr.strip()) == (2, f"kgen: error: no results database at {tmp_path / 'none.db'}")
    assert not (tmp_path / "none.db").exists()
