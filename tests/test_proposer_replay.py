"""The replay proposer re-issues another results DB's proposals, in order, with their metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.core.errors import KgenError
from kgen.core.records import EvalResult, Proposal
from kgen.problems.problem import load_problem
from kgen.proposers import make_proposer
from kgen.store.db import open_db
from kgen.store.history import build_history
from kgen.store.queries import add_evaluation, add_proposal, create_run

REPO = Path(__file__).resolve().parent.parent
SOURCE = (REPO / "problems/starters/softmax/triton_online_two_pass.py").read_text()


def _run(db, problem):
    return create_run(db, problem=problem.name, problem_path=str(problem.path), problem_hash=problem.source_hash,
                      size="small", proposer="openai", model="gpt-test", language="any", seed=0, rounds=2,
                      candidates_per_round=2, settings={}, device="cpu")


@pytest.fixture
def logged(tmp_path, problem):
    """A finished search in other.db: round 0 (a proposal and a reply with no code), round 1 (a
    child of the first). Stored out of round order, as a resumed search may leave them."""
    path = tmp_path / "other.db"
    db = open_db(str(path))
    run = _run(db, problem)

    def add(source, round_index, **kw):
        fields = dict(proposer="openai", model="gpt-test", language="triton",
                      prompt=[{"role": "user", "content": "go"}], response=f"reply for round {round_index}",
                      template="propose", tokens_in=10, tokens_out=20, latency_s=1.5)
        fields.update(kw)
        return add_proposal(db, Proposal(source=source, **fields), run_id=run, round_index=round_index,
                            problem=problem.name, problem_hash=problem.source_hash)

    first = add(SOURCE, 0, idea="two passes")
    add_evaluation(db, first, EvalResult(outcome="correct"))
    child = add(SOURCE.replace("8192", "4096"), 1, idea="smaller blocks", parent_ids=[first])
    empty = add(None, 0, error="the response held no code block")
    db.close()
    return {"path": str(path), "run": run, "first": first, "child": child, "empty": empty}


def test_replays_in_round_then_id_order_n_at_a_time_then_stops(tmp_path, problem, logged):
    proposer = make_proposer("replay", problem=problem, replay_db=logged["path"], replay_run=logged["run"])
    assert proposer.name == "replay" and proposer.model == "gpt-test"
    target = open_db(str(tmp_path / "new.db"))
    batches = []
    for round_index in range(4):
        batch = proposer.propose(problem, build_history(target, problem), 2, round_index)
        for p in batch:
            cid = add_proposal(target, p, run_id=None, round_index=round_index, problem=problem.name,
                               problem_hash=problem.source_hash)
            if p.source:
                add_evaluation(target, cid, EvalResult(outcome="correct"))
        batches.append(batch)
    assert [len(b) for b in batches] == [2, 1, 0, 0]
    first, empty, child = batches[0] + batches[1]
    assert [first.origin, empty.origin, child.origin] == [
        f"replay of candidate #{logged[k]} from {logged['path']}" for k in ("first", "empty", "child")]
    assert first.source == SOURCE and first.idea == "two passes" and first.proposer == "replay"
    assert first.model == "gpt-test" and first.prompt == [{"role": "user", "content": "go"}]
    assert first.response == "reply for round 0" and first.template == "propose"
    assert first.tokens_in is None and first.latency_s is None  # a replay spends no tokens
    assert empty.source is None and empty.error == "the response held no code block"
    assert child.parent_ids == [1]  # the replayed parent's id in the new DB


def test_a_resumed_replay_skips_what_the_db_already_holds(tmp_path, problem, logged):
    target = open_db(str(tmp_path / "new.db"))
    add_proposal(target, Proposal(source=SOURCE, proposer="replay"), run_id=None, round_index=0, problem=problem.name,
                 problem_hash=problem.source_hash)
    proposer = make_proposer("replay", problem=problem, replay_db=logged["path"])
    batch = proposer.propose(problem, build_history(target, problem), 5, 0)
    assert [p.origin.split()[3] for p in batch] == [f"#{logged['empty']}", f"#{logged['child']}"]


def test_bad_replay_sources_are_one_line_errors(tmp_path, problem, logged):
    with pytest.raises(KgenError, match="needs a results DB"):
        make_proposer("replay", problem=problem)
    with pytest.raises(KgenError, match="no results database"):
        make_proposer("replay", problem=problem, replay_db=str(tmp_path / "missing.db"))
    with pytest.raises(KgenError, match="has no run 99"):
        make_proposer("replay", problem=problem, replay_db=logged["path"], replay_run=99)
    layernorm = load_problem("layernorm", "small")
    with pytest.raises(KgenError, match="searched softmax, not layernorm"):
        make_proposer("replay", problem=layernorm, replay_db=logged["path"], replay_run=logged["run"])
    with pytest.raises(KgenError, match="holds no proposals for problem layernorm"):
        make_proposer("replay", problem=layernorm, replay_db=logged["path"])


def test_unknown_proposer_and_language_are_usage_errors(problem):
    with pytest.raises(KgenError, match="unknown proposer 'gpt'"):
        make_proposer("gpt", problem=problem)
    with pytest.raises(KgenError, match="unknown language 'rust'"):
        make_proposer("offline", problem=problem, language="rust")
