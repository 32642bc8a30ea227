"""The results DB through kgen's API, on a real SQLite file and on a real PostgreSQL server (tests that
take `any_db` run on both): written, closed and reopened; rounds stored from 1; the sandbox kind kept;
foreign keys enforced; read-only opens that change nothing; bad files and paths refused without harm;
passwords masked."""

import sqlite3

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from kgen.core.errors import KgenError
from kgen.core.records import EvalResult, Proposal
from kgen.store import queries
from kgen.store.db import SCHEMA_VERSION, Candidate, Evaluation, LLMCall, Meta, db_url, mask_url, open_db


def _run(db):
    return queries.create_run(db, problem="softmax", problem_path="/p/softmax.py", problem_hash="abc", size="small",
                              proposer="offline", model=None, language="any", seed=3, rounds=2,
                              candidates_per_round=4, settings={"timeout_s": 60}, device="cpu")


def _propose(db, run_id, round_index, **fields):
    proposal = Proposal(source=fields.pop("source", "class ModelNew: pass\n"), proposer="offline", language="triton",
                        **fields)
    return queries.add_proposal(db, proposal, run_id=run_id, round_index=round_index, problem="softmax",
                                problem_hash="abc")


def test_round_trip_survives_reopening(any_db):
    db = open_db(any_db)
    run_id = _run(db)
    cid = _propose(db, run_id, 0, idea="bigger blocks")
    queries.add_evaluation(db, cid, EvalResult(outcome="correct", runtime_ms=0.8, speedup_eager=1.7, rtol=1e-5,
                                               device="NVIDIA H100", size="full", torch_ops=["aten.mm"]))
    db.close()

    db = open_db(any_db, read_only=True)
    with db.reader() as s:
        cand = s.scalars(select(Candidate)).one()
        assert (cand.idea, cand.language, cand.run.seed, cand.run.settings) == ("bigger blocks", "triton", 3,
                                                                               {"timeout_s": 60})
        ev = cand.evaluations[0]
        assert (ev.outcome, ev.runtime_ms, ev.speedup_eager, ev.torch_ops) == ("correct", 0.8, 1.7, ["aten.mm"])
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)
    assert [c.id for c in queries.correct_candidates(db, problem_hash="abc")] == [cid]
    db.close()


def test_a_sqlite_db_is_in_wal_mode_with_foreign_keys_on(tmp_path):
    db = open_db(str(tmp_path / "r.db"))
    with db.reader() as s:
        assert s.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert s.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_rounds_are_stored_from_one(any_db):
    db = open_db(any_db)
    run_id = _run(db)
    first = _propose(db, run_id, 0, prompt=[{"role": "user", "content": "go"}], response="```python\n...```")
    second = _propose(db, run_id, 1, source="class ModelNew: x = 2\n")
    with db.reader() as s:
        assert [(c.id, c.round) for c in s.scalars(select(Candidate).order_by(Candidate.id))] == [(first, 1),
                                                                                                 (second, 2)]
        assert [call.round for call in s.scalars(select(LLMCall))] == [1]
    assert queries.round_candidates(db, run_id, 0) == [(first, "class ModelNew: pass\n")]


def test_the_sandbox_kind_is_stored_from_the_evaluation_details(any_db):
    db = open_db(any_db)
    run_id = _run(db)
    sandboxed, plain = _propose(db, run_id, 0), _propose(db, run_id, 0, source="class ModelNew: y = 1\n")
    queries.add_evaluation(db, sandboxed, EvalResult(outcome="correct", device="cpu", size="small",
                                                     details={"sandbox": {"kind": "bwrap", "network": False}}))
    queries.add_evaluation(db, plain, EvalResult(outcome="correct", device="cpu", size="small", details={}))
    with db.reader() as s:
        assert dict(s.execute(select(Evaluation.candidate_id, Evaluation.sandbox)).all()) == {sandboxed: "bwrap",
                                                                                       plain: None}


def test_foreign_keys_are_enforced(any_db):
    db = open_db(any_db)
    with pytest.raises(IntegrityError), db.session() as s:
        s.add(Evaluation(candidate_id=999, outcome="correct", device="cpu", size="small"))


def test_a_nul_character_in_a_message_does_not_stop_the_store(any_db):
    # a candidate's output, which ends up in messages, can hold NULs; PostgreSQL's text cannot
    db = open_db(any_db)
    cid = _propose(db, _run(db), 0)
    queries.add_evaluation(db, cid, EvalResult(outcome="runtime_error", device="cpu", size="small",
                                               message="printed \x00 then crashed"))
    kept = "printed \ufffd then crashed" if any_db.startswith("postgresql") else "printed \x00 then crashed"
    with db.reader() as s:
        assert s.scalars(select(Evaluation.message)).one() == kept


def test_a_read_only_db_takes_no_writes(any_db):
    open_db(any_db).close()
    db = open_db(any_db, read_only=True)
    with pytest.raises((DBAPIError, KgenError)):
        _run(db)
    with db.reader() as s:
        assert s.execute(text("SELECT COUNT(*) FROM runs")).scalar() == 0


def test_kgen_db_env_names_the_database(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_DB", str(tmp_path / "env.db"))
    open_db().close()
    assert (tmp_path / "env.db").is_file()


def test_newer_schema_is_refused_and_left_intact(any_db):
    db = open_db(any_db)
    _run(db)
    with db.session() as s:
        s.get(Meta, "schema_version").value = str(SCHEMA_VERSION + 1)
    db.close()
    for read_only in (False, True):
        with pytest.raises(KgenError, match="newer than this kgen's"):
            open_db(any_db, read_only=read_only)
    with create_engine(db_url(any_db)).connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM runs")).scalar() == 1


@pytest.mark.parametrize("setup,needle", [
    ("garbage", "not a SQLite database"),
    ("dir", "is a directory"),
    ("missing_parent", "does not exist"),
    ("foreign", "not kgen's"),
])
@pytest.mark.parametrize("read_only", [False, True], ids=["write", "read"])
def test_bad_database_paths_raise_one_line_errors(tmp_path, setup, needle, read_only):
    path = tmp_path / "x.db"
    if setup == "garbage":
        path.write_bytes(b"this is not a database at all" * 10)
    elif setup == "dir":
        path.mkdir()
    elif setup == "missing_parent":
        path = tmp_path / "nope" / "x.db"
        needle = "no results database" if read_only else needle
    elif setup == "foreign":
        sqlite3.connect(path).execute("create table users (id integer)").connection.commit()
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(KgenError, match=needle) as info:
        open_db(str(path), read_only=read_only)
    assert "\n" not in str(info.value)
    if before is not None:
        assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ([] if setup == "missing_parent" else ["x.db"])  # nothing new


def test_reading_a_missing_db_creates_nothing(tmp_path):
    with pytest.raises(KgenError, match=f"no results database at {tmp_path / 'r.db'}"):
        open_db(str(tmp_path / "r.db"), read_only=True)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_file_holds_no_results_for_a_reader_and_becomes_a_db_for_a_writer(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(KgenError, match="holds no kgen results yet"):
        open_db(str(path), read_only=True)
    assert path.read_bytes() == b""
    open_db(str(path)).close()
    assert sqlite3.connect(path).execute("SELECT value FROM kgen_meta").fetchone() == (str(SCHEMA_VERSION),)


@pytest.mark.parametrize("url,shown", [
    ("postgresql://kgen:hunter2@db.example:5432/results", "postgresql://kgen:***@db.example:5432/results"),
    ("postgresql+psycopg://u:p%40ss@h/d", "postgresql+psycopg://u:***@h/d"),
    ("postgresql://h/d?user=u&password=hunter2&sslmode=require",
     "postgresql://h/d?user=u&password=***&sslmode=require"),
    ("mysql://root:pw:with:colons@h/d", "mysql://root:***@h/d"),
    ("postgresql://kgen@h/d", "postgresql://kgen@h/d"),
    ("sqlite:////home/me/results.db", "sqlite:////home/me/results.db"),
    ("results.db", "results.db"),
])
def test_mask_url_hides_the_password_and_nothing_else(url, shown):
    assert mask_url(url) == shown


def test_a_bad_url_is_one_line_without_its_password():
    with pytest.raises(KgenError) as info:
        open_db("postgresql://kgen:hunter2@localhost:notaport/x")
    assert "hunter2" not in str(info.value) and "kgen:***@" in str(info.value) and "\n" not in str(info.value)
