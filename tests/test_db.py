"""The results DB: a real SQLite file, written, closed and reopened; WAL and foreign keys on; its
schema version checked; bad files and paths refused without harm."""

import sqlite3

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError

from kgen import store
from kgen.db import SCHEMA_VERSION, Candidate, Evaluation, Meta, open_db
from kgen.errors import KgenError
from kgen.records import EvalResult, Proposal


def _run(db):
    return store.create_run(db, problem="softmax", problem_path="/p/softmax.py", problem_hash="abc", size="small",
                            proposer="offline", model=None, language="any", seed=3, rounds=2,
                            candidates_per_round=4, settings={"timeout_s": 60}, device="cpu")


def test_round_trip_survives_reopening(tmp_path):
    path = tmp_path / "r.db"
    db = open_db(str(path))
    run_id = _run(db)
    cid = store.add_proposal(db, Proposal(source="class ModelNew: pass\n", proposer="offline", language="triton",
                                          idea="bigger blocks", parent_ids=[]),
                             run_id=run_id, round_index=0, problem="softmax", problem_hash="abc")
    store.add_evaluation(db, cid, EvalResult(outcome="correct", runtime_ms=0.8, speedup_eager=1.7, rtol=1e-5,
                                             device="NVIDIA H100", size="full", torch_ops=["aten.mm"]))
    db.close()

    db = open_db(f"sqlite:///{path}", create=False)
    with db.reader() as s:
        cand = s.scalars(select(Candidate)).one()
        assert (cand.idea, cand.language, cand.run.seed, cand.run.settings) == ("bigger blocks", "triton", 3,
                                                                               {"timeout_s": 60})
        ev = cand.evaluations[0]
        assert (ev.outcome, ev.runtime_ms, ev.speedup_eager, ev.torch_ops) == ("correct", 0.8, 1.7, ["aten.mm"])
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)
        assert s.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    assert [c.id for c in store.correct_candidates(db, problem_hash="abc")] == [cid]


def test_foreign_keys_are_enforced(tmp_path):
    db = open_db(str(tmp_path / "fk.db"))
    with pytest.raises(IntegrityError):
        with db.session() as s:
            s.add(Evaluation(candidate_id=999, outcome="correct", device="cpu", size="small"))


def test_kgen_db_env_names_the_database(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_DB", str(tmp_path / "env.db"))
    open_db().close()
    assert (tmp_path / "env.db").is_file()


def test_newer_schema_is_refused_and_left_intact(tmp_path):
    path = tmp_path / "new.db"
    db = open_db(str(path))
    _run(db)
    with db.session() as s:
        s.get(Meta, "schema_version").value = str(SCHEMA_VERSION + 1)
    db.close()
    with pytest.raises(KgenError, match="newer"):
        open_db(str(path))
    rows = sqlite3.connect(path).execute("select count(*) from runs").fetchone()[0]
    assert rows == 1


@pytest.mark.parametrize("setup,needle", [
    ("garbage", "not a SQLite database"),
    ("dir", "is a directory"),
    ("missing_parent", "does not exist"),
    ("foreign", "not kgen's"),
])
def test_bad_database_paths_raise_one_line_errors(tmp_path, setup, needle):
    path = tmp_path / "x.db"
    if setup == "garbage":
        path.write_bytes(b"this is not a database at all" * 10)
    elif setup == "dir":
        path.mkdir()
    elif setup == "missing_parent":
        path = tmp_path / "nope" / "x.db"
    elif setup == "foreign":
        sqlite3.connect(path).execute("create table users (id integer)").connection.commit()
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(KgenError, match=needle) as info:
        open_db(str(path))
    assert "\n" not in str(info.value)
    if before is not None:
        assert path.read_bytes() == before
