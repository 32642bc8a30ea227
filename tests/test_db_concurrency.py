"""Many kgen processes opening one DB at the same moment, on SQLite and PostgreSQL: a new DB is created by
exactly one of them and an old one upgraded by exactly one (its rounds moved up once, not once per process);
every process goes on and writes."""

import json
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text
from test_db_migrations import schema_1_db, upgrade_to

from kgen.store.db import SCHEMA_VERSION, db_url

PROCESSES = 8

# Each process imports kgen, says it is ready, waits for the go file, then opens the DB and stores a run.
OPENER = """
import json, os, sys, time
from kgen.store import queries
from kgen.store.db import open_db
url, go = sys.argv[1], sys.argv[2]
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.002)
db = open_db(url)
run_id = queries.create_run(db, problem="softmax", problem_path="/p", problem_hash="h", size="small",
                            proposer="offline", model=None, language="triton", seed=0, rounds=1,
                            candidates_per_round=1, settings={}, device="cpu")
print(json.dumps({"upgraded_from": db.upgraded_from, "run_id": run_id}), flush=True)
"""


def open_at_once(url: str, tmp_path) -> list[dict]:
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, url, str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(PROCESSES)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    return results


def scalar_rows(url: str, sql: str) -> list:
    with create_engine(db_url(url)).connect() as conn:
        return [r[0] for r in conn.execute(text(sql))]


def test_processes_opening_a_new_db_at_once_all_succeed_and_one_creates_it(any_db, tmp_path):
    results = open_at_once(any_db, tmp_path)
    assert sorted(r["upgraded_from"] for r in results if r["upgraded_from"] is not None) == [0]  # 0: created it
    assert sorted(r["run_id"] for r in results) == list(range(1, PROCESSES + 1))
    assert scalar_rows(any_db, "SELECT version_num FROM alembic_version") == [f"{SCHEMA_VERSION:04d}"]
    assert scalar_rows(any_db, "SELECT value FROM kgen_meta") == [str(SCHEMA_VERSION)]


@pytest.fixture
def schema_1_url(request, tmp_path):
    """A DB at schema version 1 with a candidate in round 0 (SQLite: kgen's own; PostgreSQL: the baseline)."""
    if request.param == "sqlite":
        return str(schema_1_db(tmp_path / "old.db"))
    url = request.getfixturevalue("pg_server").new_database()
    upgrade_to(url, "0001")
    with create_engine(db_url(url)).begin() as conn:
        conn.execute(text("INSERT INTO candidates (id, round, problem, source, source_hash, language, parent_ids, "
                          "proposer, created_at) VALUES "
                          "(1, 0, 'softmax', 'a', 'ha', 'triton', '[]', 'offline', now())"))
    return url


@pytest.mark.parametrize("schema_1_url", ["sqlite", "postgresql"], indirect=True)
def test_processes_opening_an_old_db_at_once_migrate_it_once(schema_1_url, tmp_path):
    first_rounds = scalar_rows(schema_1_url, "SELECT round FROM candidates ORDER BY id")
    results = open_at_once(schema_1_url, tmp_path)
    assert [r["upgraded_from"] for r in results].count(1) == 1
    assert all(r["upgraded_from"] in (1, None) for r in results)
    assert scalar_rows(schema_1_url, "SELECT round FROM candidates ORDER BY id")[:len(first_rounds)] == [
        r + 1 for r in first_rounds]
    assert scalar_rows(schema_1_url, "SELECT value FROM kgen_meta") == [str(SCHEMA_VERSION)]
