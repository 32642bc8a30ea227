"""The cost ledger (kgen.store.ledger): a real search through the real CLI with the openai proposer against the
loopback OpenAI-compatible server (tests/llm_server.py) on the CPU, its tokens stored, totalled and shown by
`kgen runs` and `kgen show`, priced; and the leaderboard sorted by cost on hand-made rows in a real SQLite DB
whose GPU timings are made up (the GPU is mocked: no GPU evaluated them)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.core.errors import KgenError
from kgen.core.records import EvalResult, Proposal
from kgen.store import ledger, queries
from kgen.store.db import Candidate, LLMCall, open_db

from conftest import REPO, run_kgen
from llm_server import Reply, ScriptedLLMServer

SOURCE = (REPO / "problems/starters/softmax/triton_online_two_pass.py").read_text()
OTHER_SOURCE = SOURCE.replace("BLOCK_SIZE = 8192", "BLOCK_SIZE = 4096")
# What the server reports for each of the round's two requests (usage.prompt_tokens, completion_tokens).
USAGE = [(1200, 340), (2800, 660)]
PRICE_IN, PRICE_OUT = 3.0, 15.0  # USD per million tokens
MOCKED_GPU = "NVIDIA H100 80GB HBM3 (mocked)"


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """One round of two candidates proposed by the openai proposer, priced at the search."""
    home = tmp_path_factory.mktemp("ledger-search")
    db = home / "results.db"
    replies = [Reply.code(SOURCE, tokens_in=USAGE[0][0], tokens_out=USAGE[0][1]),
               Reply.code(OTHER_SOURCE, idea="Smaller blocks.", tokens_in=USAGE[1][0], tokens_out=USAGE[1][1])]
    # the caller's prices must not leak in (the autouse fixture in conftest comes after a module fixture)
    env = {k: v for k, v in os.environ.items() if k not in ledger.PRICE_ENV}
    with ScriptedLLMServer(replies) as server:
        env.update(KGEN_CACHE_DIR=str(home / "cache"), KGEN_TEST_LLM_KEY=server.api_key)
        result = subprocess.run(
            [sys.executable, "-m", "kgen", "search", "--problem", "softmax", "--rounds", "1", "--candidates", "2",
             "--language", "triton", "--size", "small", "--proposer", "openai", "--base-url", server.base_url,
             "--model", "test-model", "--api-key-env", "KGEN_TEST_LLM_KEY", "--price-in", str(PRICE_IN),
             "--price-out", str(PRICE_OUT), "--db", str(db), "--quiet"],
            cwd=home, env=env, capture_output=True, text=True, timeout=300)
        served = len(server.chat_requests())
    assert result.returncode == 0, result.stdout + result.stderr
    assert served == len(USAGE)  # every scripted usage was reported once, nothing else was asked
    return db


@pytest.mark.slow  # the search: a local Ray cluster, tens of seconds
def test_the_search_stores_each_calls_tokens_and_the_prices(searched):
    database = open_db(str(searched), create=False)
    with database.reader() as s:
        cands = list(s.query(Candidate).order_by(Candidate.id))
        calls = {c.llm_call_id: s.get(LLMCall, c.llm_call_id) for c in cands}
        settings = cands[0].run.settings
    assert len(cands) == 2 and all(c.llm_call_id is not None for c in cands)
    assert sorted((c.tokens_in, c.tokens_out) for c in calls.values()) == sorted(USAGE)
    assert all(c.model == "test-model" and c.latency_s > 0 for c in calls.values())
    assert (settings["price_in"], settings["price_out"]) == (PRICE_IN, PRICE_OUT)


@pytest.mark.slow  # the search: a local Ray cluster, tens of seconds
def test_ledger_totals_equal_the_servers_reported_usage_and_are_priced(searched):
    database = open_db(str(searched), create=False)
    [cost] = ledger.run_costs(database).values()
    tokens_in, tokens_out = sum(u[0] for u in USAGE), sum(u[1] for u in USAGE)
    assert (cost.llm_calls, cost.tokens_in, cost.tokens_out) == (2, tokens_in, tokens_out)
    assert (cost.candidates, cost.model, cost.price_source) == (2, "test-model", "run")
    assert cost.usd == pytest.approx((tokens_in * PRICE_IN + tokens_out * PRICE_OUT) / 1e6)  # $0.0249
    assert cost.gpu_s == 0 and cost.profile_s == 0  # the CPU holds no GPU
    assert cost.correct >= 1 and cost.usd_per_correct == pytest.approx(cost.usd / cost.correct)
    per_candidate = ledger.candidate_costs(database, run_ids=[cost.run_id])
    assert sorted((c.tokens_in, c.tokens_out) for c in per_candidate.values()) == sorted(USAGE)
    assert sum(c.llm_s for c in per_candidate.values()) == pytest.approx(cost.llm_s)


@pytest.mark.slow  # the search: a local Ray cluster, tens of seconds
def test_runs_json_table_and_report_show_tokens_and_dollars(searched):
    r = run_kgen("runs", "--format", "json", "--db", str(searched))
    assert r.returncode == 0, r.stderr
    [run] = json.loads(r.stdout)
    assert (run["tokens_in"], run["tokens_out"]) == (4000, 1000)
    assert (run["cost"]["tokens_in"], run["cost"]["tokens_out"], run["cost"]["llm_calls"]) == (4000, 1000, 2)
    assert run["cost"]["usd"] == pytest.approx(0.0270)  # 4000 * $3 + 1000 * $15 per million
    assert run["cost"]["usd_per_correct"] == pytest.approx(0.0270 / run["cost"]["correct"])
    # flags override the run's prices; piped, the table prints every default column in full
    cheaper = json.loads(run_kgen("runs", "--format", "json", "--price-in", "1", "--price-out", "2", "--db",
                                  str(searched)).stdout)[0]["cost"]
    assert (cheaper["usd"], cheaper["price_source"]) == (pytest.approx(0.006), "flags")
    table = run_kgen("runs", "--wide", "--db", str(searched))
    assert "LLM $" in table.stdout and "$0.027" in table.stdout and "4.00 k / 1.00 k" in table.stdout
    report = run_kgen("report", "-o", "report.html", "--db", str(searched), cwd=searched.parent)
    assert report.returncode == 0, report.stderr
    page = (searched.parent / "report.html").read_text()
    assert "<h2>Cost</h2>" in page and "$0.027" in page and "$3 / $15 per M" in page
    # the prices the search stored are enough to sort by cost
    assert run_kgen("leaderboard", "--sort", "per-dollar", "--db", str(searched)).returncode == 0


@pytest.mark.slow  # the search: a local Ray cluster, tens of seconds
def test_show_prints_the_candidates_cost(searched):
    with sqlite3.connect(searched) as conn:
        cid, tokens_in, tokens_out = conn.execute(
            "SELECT c.id, l.tokens_in, l.tokens_out FROM candidates c JOIN llm_calls l ON l.id = c.llm_call_id "
            "ORDER BY c.id").fetchone()
    out = run_kgen("show", str(cid), "--db", str(searched), env={"COLUMNS": "200"}).stdout
    dollars = ledger.usd_text((tokens_in * PRICE_IN + tokens_out * PRICE_OUT) / 1e6)
    assert re.search(rf"cost: LLM: {tokens_in / 1000:.2f} k tokens in, {tokens_out} out \(test-model, "
                     rf"\d+\.\d s to propose\), {re.escape(dollars)}", out), out
    assert "compile 0.0 s · GPU 0.0 s (verify and time) · profile 0.0 s" in out


def test_per_dollar_needs_prices_and_takes_them_from_flags_or_the_environment(tmp_path):
    db = tmp_path / "unpriced.db"
    _handmade_db(db)
    r = run_kgen("leaderboard", "--sort", "per-dollar", "--db", str(db))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "pass --price-in and --price-out" in r.stderr and "KGEN_PRICE_IN" in r.stderr
    for args, env in ((["--price-in", "2", "--price-out", "8"], {}), ([], {"KGEN_PRICE_IN": "2",
                                                                         "KGEN_PRICE_OUT": "8"})):
        r = run_kgen("leaderboard", "--all", "--sort", "per-dollar", "--format", "json", *args, "--db", str(db),
                     env=env)
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)
        # each run spent 10 k tokens in and 2 k out: $0.036; speedups 2.0, 3.0, 1.5; the CPU row last
        assert [x["speedup_per_usd"] for x in rows[:3]] == pytest.approx([3.0 / 0.036, 2.0 / 0.036, 1.5 / 0.036])
        assert rows[3]["device"] == "cpu" and rows[3]["speedup_per_usd"] is None


@pytest.mark.parametrize("args, needle", [
    (["runs", "--price-in", "-1", "--price-out", "2"], "--price-in must be a non-negative number"),
    (["runs", "--price-in", "abc", "--price-out", "2"], "--price-in must be a number, not 'abc'"),
    (["runs", "--price-in", "3"], "--price-in needs --price-out too"),
    (["leaderboard", "--sort", "cheapest"], "unknown sort 'cheapest'"),
    (["search", "--problem", "softmax", "--price-out", "nan", "--price-in", "1"], "--price-out must be"),
])
def test_bad_prices_and_sorts_are_one_line_and_exit_2(tmp_path, args, needle):
    db = tmp_path / "results.db"
    _handmade_db(db)
    r = run_kgen(*args, "--db", str(db))
    assert r.returncode == 2 and needle in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_bad_price_in_the_environment_is_one_line_and_exit_2(tmp_path):
    db = tmp_path / "results.db"
    _handmade_db(db)
    r = run_kgen("runs", "--db", str(db), env={"KGEN_PRICE_IN": "-3", "KGEN_PRICE_OUT": "1"})
    assert r.returncode == 2 and "KGEN_PRICE_IN must be a non-negative number" in r.stderr
    assert r.stderr.count("\n") == 1


# -- hand-made rows: timings and phases made up, the GPU mocked ---------------------------------------

# (speedup vs eager, runtime ms, the judge's phases in s): GPU s is every phase but compile_s and profile_s
MOCKED_RUNS = [
    (2.0, 1.5, {"reference_s": 5.0, "verify_s": 15.0, "timing_s": 80.0, "compile_s": 500.0, "profile_s": 7.0}),
    (3.0, 1.0, {"reference_s": 20.0, "verify_s": 80.0, "timing_s": 200.0}),
    (1.5, 2.0, {"verify_s": 10.0, "timing_s": 20.0}),
]


def _handmade_db(path: Path) -> dict:
    """Three runs on a mocked H100, one correct candidate each, 10 k tokens in and 2 k out per run, and a
    CPU run (no timings); the first run's candidate shares its LLM call with a second candidate."""
    db = open_db(str(path))
    ids: dict = {"runs": [], "candidates": []}
    for n, (speedup, runtime_ms, phases) in enumerate([*MOCKED_RUNS, (None, None, {"verify_s": 3.0})]):
        device = "cpu" if speedup is None else MOCKED_GPU
        run = queries.create_run(db, problem="softmax", problem_path="/p/softmax.py", problem_hash="h", size="small",
                                 proposer="openai", model="m", language="triton", seed=0, rounds=1,
                                 candidates_per_round=1, settings={}, device=device)
        proposal = Proposal(source=f"x = {n}\n", proposer="openai", language="triton", model="m", prompt="p",
                            response="r", tokens_in=10_000, tokens_out=2_000, latency_s=4.0)
        cid = queries.add_proposal(db, proposal, run_id=run, round_index=0, problem="softmax", problem_hash="h")
        eager = None if speedup is None else speedup * runtime_ms
        queries.add_evaluation(db, cid, EvalResult(
            outcome="correct", language="triton", device=device, size="small", runtime_ms=runtime_ms,
            eager_ms=eager, speedup_eager=speedup, compile_s=2.0, eval_s=999.0, details={"phases": phases}))
        ids["runs"].append(run)
        ids["candidates"].append(cid)
    twin = queries.add_proposal(db, Proposal(source="x = 'twin'\n", proposer="openai", language="triton", model="m"),
                                run_id=ids["runs"][0], round_index=0, problem="softmax", problem_hash="h")
    with db.session() as s:
        s.get(Candidate, twin).llm_call_id = s.get(Candidate, ids["candidates"][0]).llm_call_id
    ids["twin"] = twin
    db.close()
    return ids


def test_gpu_compile_and_profile_seconds_come_from_the_judges_phases(tmp_path):
    ids = _handmade_db(tmp_path / "results.db")
    database = open_db(str(tmp_path / "results.db"), create=False)
    costs = ledger.candidate_costs(database, run_ids=ids["runs"])
    first = costs[ids["candidates"][0]]
    assert (first.gpu_s, first.compile_s, first.profile_s) == (100.0, 502.0, 7.0)
    assert costs[ids["candidates"][3]].gpu_s == 0  # the CPU run: no GPU
    # a call shared by two candidates is split evenly between them
    twin = costs[ids["twin"]]
    assert (first.tokens_in, first.tokens_out, first.llm_s) == (5000, 1000, 2.0) == \
        (twin.tokens_in, twin.tokens_out, twin.llm_s)
    assert twin.calls_shared_by == 2 and not twin.correct  # never evaluated
    run = ledger.run_costs(database, [ids["runs"][0]])[ids["runs"][0]]
    assert (run.tokens_in, run.candidates, run.correct, run.gpu_s_per_correct) == (10_000, 2, 1, 100.0)
    out = run_kgen("show", str(ids["twin"]), "--db", str(tmp_path / "results.db"), env={"COLUMNS": "200"}).stdout
    assert "5.00 k tokens in, 1.00 k out (m, 2.0 s to propose, its 1/2 share of one call)" in out


def test_leaderboard_sorts_by_speedup_per_gpu_hour_with_untimed_rows_last(tmp_path):
    ids = _handmade_db(tmp_path / "results.db")
    by_runtime = json.loads(run_kgen("leaderboard", "--all", "--format", "json", "--db",
                                     str(tmp_path / "results.db")).stdout)
    c = ids["candidates"]
    assert [x["candidate_id"] for x in by_runtime] == [c[1], c[0], c[2], c[3]]  # fastest first
    r = run_kgen("leaderboard", "--all", "--sort", "per-gpu-hour", "--format", "json", "--db",
                 str(tmp_path / "results.db"))
    rows = json.loads(r.stdout)
    # 1.5x for 30 GPU-s = 180/h; 2.0x for 100 GPU-s = 72/h; 3.0x for 300 GPU-s = 36/h; the CPU row last
    assert [x["candidate_id"] for x in rows] == [c[2], c[0], c[1], c[3]]
    assert [x["speedup_per_gpu_hour"] for x in rows] == pytest.approx([180.0, 72.0, 36.0, None])
    table = run_kgen("leaderboard", "--all", "--sort", "per-gpu-hour", "--db", str(tmp_path / "results.db")).stdout
    assert "vs eager/GPU-h" in table and "180" in table


def test_a_run_that_cost_nothing_ranks_first_per_dollar(tmp_path):
    ids = _handmade_db(tmp_path / "results.db")
    database = open_db(str(tmp_path / "results.db"))
    with database.session() as s:  # the slowest run's tokens were free (an offline or local model)
        for call in s.query(LLMCall).filter(LLMCall.run_id == ids["runs"][2]):
            call.tokens_in = call.tokens_out = 0
    from kgen.store.leaderboard import leaderboard

    rows = ledger.sort_board(database, leaderboard(database, include_all=True), "per-dollar",
                             ledger.Prices(2.0, 8.0))
    assert [r.candidate_id for r in rows][:2] == [ids["candidates"][2], ids["candidates"][1]]
    assert rows[0].free and rows[0].speedup_per_usd is None


def test_prices_resolve_flags_then_run_then_environment(monkeypatch):
    monkeypatch.setenv("KGEN_PRICE_IN", "1")
    monkeypatch.setenv("KGEN_PRICE_OUT", "4")
    stored = {"price_in": 2.0, "price_out": 6.0}
    assert ledger.run_prices({}) == ledger.Prices(1.0, 4.0, "environment")
    assert ledger.run_prices(stored) == ledger.Prices(2.0, 6.0, "run")
    assert ledger.run_prices(stored, ledger.Prices(0.0, 0.0)).usd(10**6, 10**6) == 0
    monkeypatch.delenv("KGEN_PRICE_OUT")
    with pytest.raises(KgenError, match="KGEN_PRICE_IN needs KGEN_PRICE_OUT too"):
        ledger.run_prices({})
