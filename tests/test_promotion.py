"""Promotion that beats the noise (a new best must beat the best beyond its timing noise) and parents
spread across ideas. The GPU is mocked: the judge's timed runs (details["samples_ms"]) are written by
hand into a real SQLite results DB, as the judge stores them."""

from __future__ import annotations

import io
import json
from fractions import Fraction
from math import comb

import pytest
from rich.console import Console

from kgen.core.records import EvalResult, Proposal
from kgen.problems.problem import load_problem
from kgen.proposers.offline import OfflineProposer
from kgen.proposers.prompts import PromptRenderer, prompt_context
from kgen.search.loop import Search, SearchConfig
from kgen.search.progress import SearchCounts, SearchProgress
from kgen.store.history import MAX_PER_BUCKET, build_history, parent_bucket
from kgen.store.leaderboard import leaderboard, print_board
from kgen.store.promotion import (
    MIN_GAIN,
    RuntimeSpread,
    beats,
    median_interval,
    median_interval_ranks,
    promoted_best,
    promotion_order,
    spread_of,
    within_noise,
)
from kgen.store.queries import add_evaluation, add_proposal, create_run

from conftest import run_kgen
from test_leaderboard_fixtures import H100, STARTERS, starter


def runs(median_ms: float, noise: float, n: int = 201) -> list[float]:
    """n timed runs spread evenly over median ± noise·median (their median is `median_ms`), shuffled."""
    grid = [median_ms * (1 + noise * (2 * k / (n - 1) - 1)) for k in range(n)]
    return grid[::2] + grid[1::2]


def spread(median_ms: float, noise: float) -> RuntimeSpread:
    return spread_of(median_ms, runs(median_ms, noise))


# -- the interval of a median ------------------------------------------------------------------------

@pytest.mark.parametrize(("n", "ranks"), [(5, (0, 4)), (6, (0, 5)), (10, (1, 8)), (100, (39, 60))])
def test_interval_ranks_match_the_binomial_tables(n, ranks):
    # n = 10: [x(2), x(9)]; n = 100: [x(40), x(61)] (1-based), as in the tables of order-statistic intervals
    assert median_interval_ranks(n) == ranks


@pytest.mark.parametrize("n", [6, 7, 20, 51, 200, 999])
def test_interval_covers_95_percent_and_is_the_narrowest_that_does(n):
    def coverage(low: int) -> Fraction:  # P(x(low+1) <= median <= x(n-low)) = 1 - 2 P(B <= low)
        return 1 - 2 * Fraction(sum(comb(n, i) for i in range(low + 1)), 2**n)

    low, high = median_interval_ranks(n)
    assert high == n - 1 - low
    assert coverage(low) >= Fraction(95, 100) > coverage(low + 1)


def test_interval_of_known_samples():
    assert median_interval([5, 1, 4, 2, 3, 10, 9, 8, 7, 6]) == (2, 9)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few runs for 95%: the whole range


# -- when a candidate is a new best ------------------------------------------------------------------

def test_one_percent_faster_within_the_noise_is_a_tie():
    best, new = spread(1.00, 0.05), spread(0.99, 0.05)
    assert new.high_ms > best.low_ms  # the intervals overlap
    assert not beats(new, best) and within_noise(new, best)


def test_ten_percent_faster_with_tight_runs_wins():
    best, new = spread(1.00, 0.01), spread(0.90, 0.01)
    assert new.high_ms < best.low_ms
    assert beats(new, best) and not within_noise(new, best) and not beats(best, new)


def test_clearly_separated_but_under_min_gain_is_a_tie():
    best, new = spread(1.00, 0.001), spread(0.99, 0.001)
    assert new.high_ms < best.low_ms and MIN_GAIN > 0.01  # 0.99 vs 1.00
    assert not beats(new, best)


def test_five_percent_faster_but_noisy_is_a_tie():
    best, new = spread(1.00, 0.5), spread(0.95, 0.5)
    assert not beats(new, best) and within_noise(new, best)


def test_without_samples_the_medians_decide_by_min_gain():
    assert spread_of(0.99, []) == RuntimeSpread(0.99)
    assert not beats(spread_of(0.99), spread_of(1.00))  # 1%: a tie
    assert beats(spread_of(0.97), spread_of(1.00))
    assert beats(spread_of(0.97), spread(1.00, 0.001))  # one side without runs: the medians decide
    assert beats(spread_of(0.5), RuntimeSpread(None)) and not beats(RuntimeSpread(None), spread_of(0.5))


def test_the_first_found_stays_best_until_beaten():
    found = [("a", spread(1.00, 0.05)), ("b", spread(0.99, 0.05)), ("c", spread(1.20, 0.05))]
    assert promoted_best(found, lambda x: x[1])[0] == "a"
    assert [x[0] for x in promotion_order(found, lambda x: x[1])] == ["a", "b", "c"]
    assert promoted_best(found[::-1], lambda x: x[1])[0] == "b"  # found in the other order: b is the incumbent
    found.append(("d", spread(0.85, 0.01)))
    assert [x[0] for x in promotion_order(found, lambda x: x[1])] == ["d", "b", "a", "c"]


# -- end to end over a results DB ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def softmax():
    return load_problem("softmax", "full")


def _timed(db, problem, run_id, source, median_ms, noise, language="triton", idea=None):
    """A candidate stored as a search stores it, with an evaluation as the judge would write on an H100
    (mocked: hand-made timed runs)."""
    cid = add_proposal(db, Proposal(source=source, proposer="offline", language=language, idea=idea),
                       run_id=run_id, round_index=0, problem=problem.name, problem_hash=problem.source_hash)
    samples = runs(median_ms, noise) if noise is not None else []
    details = {"samples_ms": samples, "timing": {"median_ms": median_ms, "runs": len(samples)}} if samples else {}
    add_evaluation(db, cid, EvalResult(outcome="correct", runtime_ms=median_ms, eager_ms=2.0,
                                       speedup_eager=2.0 / median_ms, device=H100, size="full", rtol=1e-5,
                                       atol=1e-5, details=details))
    return cid


def _run(db, problem):
    return create_run(db, problem=problem.name, problem_path=str(problem.path), problem_hash=problem.source_hash,
                      size="full", proposer="offline", model=None, language="any", seed=0, rounds=1,
                      candidates_per_round=3, settings={"problem": problem.name}, device=H100)


def test_a_later_candidate_within_noise_does_not_replace_the_best(tmp_path, db, softmax):
    run_id = _run(db, softmax)
    first = _timed(db, softmax, run_id, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=4096), 1.00, 0.05)
    later = _timed(db, softmax, run_id, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=2048), 0.99, 0.05)
    slow = _timed(db, softmax, run_id, starter("softmax", "triton_row_in_registers"), 1.30, 0.05)

    assert [r.candidate_id for r in leaderboard(db)] == [first]
    rows = leaderboard(db, include_all=True)
    assert [(r.candidate_id, r.rank, r.tied_with) for r in rows] == [(first, 1, None), (later, 2, first),
                                                                     (slow, 3, None)]
    low, high = median_interval(runs(1.00, 0.05))
    assert (rows[0].ci_low_ms, rows[0].ci_high_ms, rows[0].timed_runs) == (low, high, 201)
    assert rows[0].spread_ms == pytest.approx((high - low) / 2) and 0 < rows[0].spread_ms < 0.05

    # the search's summary and its live "best so far" agree with the leaderboard
    summary = Search(db, SearchConfig(problem="softmax"), softmax, None, SearchProgress(Console(file=io.StringIO())),
                     run_id=run_id).summary("finished")
    assert summary.best_id == first and summary.best_runtime_ms == 1.00
    counts = SearchCounts()
    verdicts = [counts.record(cid, EvalResult(outcome="correct", runtime_ms=ms, speedup_eager=2.0 / ms,
                                              details={"samples_ms": runs(ms, 0.05)}))
                for cid, ms in ((first, 1.00), (later, 0.99), (slow, 1.30))]
    assert verdicts == [True, False, False] and counts.best_candidate_id == first

    # the report's best speedup after the round is the kept best's, not the tie's higher figure
    from kgen.outputs.report import run_history
    from kgen.store.leaderboard import run_rows

    [history] = [run_history(db, r) for r in run_rows(db) if r.run_id == run_id]
    assert [r.best_speedup_eager for r in history.rounds] == [pytest.approx(2.0 / 1.00)]

    # a clearly faster candidate does replace it
    faster = _timed(db, softmax, run_id, starter("softmax", "triton_online_two_pass", NUM_WARPS=8), 0.80, 0.01)
    assert [r.candidate_id for r in leaderboard(db)] == [faster]
    assert counts.record(faster, EvalResult(outcome="correct", runtime_ms=0.80, details={"samples_ms": runs(0.8, .01)}))


def test_the_leaderboard_shows_each_time_with_its_spread(tmp_path, db, softmax):
    run_id = _run(db, softmax)
    first = _timed(db, softmax, run_id, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=4096), 1.00, 0.05)
    later = _timed(db, softmax, run_id, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=2048), 0.99, 0.05)
    untimed_runs = _timed(db, softmax, run_id, starter("softmax", "triton_row_in_registers"), 1.30, None)
    rows = leaderboard(db, include_all=True)
    spread_text = f"±{rows[0].spread_ms:.3f}"
    db.close()

    r = run_kgen("leaderboard", "--all", "--format", "json", "--db", str(tmp_path / "results.db"))
    assert r.returncode == 0, r.stderr
    board = {x["candidate_id"]: x for x in json.loads(r.stdout)}
    assert board[first]["rank"] == 1 and board[later]["tied_with"] == first
    assert board[first]["ci_low_ms"] < 1.00 < board[first]["ci_high_ms"] and board[first]["timed_runs"] == 201
    assert board[untimed_runs]["spread_ms"] is None and board[untimed_runs]["runtime_ms"] == 1.30

    r = run_kgen("leaderboard", "--all", "--format", "table", "--db", str(tmp_path / "results.db"))
    assert r.returncode == 0, r.stderr
    assert f"1.000 {spread_text}" in r.stdout and "0.990 ±" in r.stdout
    assert f"candidate {later} is faster than {first} only within the timing noise" in r.stdout

    # on an 80-column terminal the ids and the problem stay, and so does the time with its spread
    console = Console(file=io.StringIO(), force_terminal=True, width=80, color_system=None)
    print_board(rows, console, title="kgen leaderboard")
    lines = [line for line in console.file.getvalue().splitlines()
             if not line.startswith("candidate ")]  # the note below the table wraps
    assert all(len(line) <= 80 for line in lines)
    assert any(line.lstrip().startswith(f"{first}  softmax") and f"1.000 {spread_text}" in line for line in lines)


# -- parents spread across ideas ----------------------------------------------------------------------

def test_parents_come_from_different_kernels_not_only_the_top_times(db, softmax):
    """Six retunings of one kernel are the six fastest; two other kernels are slower. Picking by time
    alone would give every parent slot to the one kernel."""
    tunings = [(4096, 32), (2048, 32), (1024, 32), (4096, 16), (2048, 16), (1024, 16)]
    retunings = [_timed(db, softmax, None, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=b, NUM_WARPS=w),
                        0.500 + 0.005 * i, None, idea=f"BLOCK_SIZE {b}, NUM_WARPS {w}")
                 for i, (b, w) in enumerate(tunings)]
    in_registers = _timed(db, softmax, None, (STARTERS / "softmax/triton_row_in_registers.py").read_text(), 0.70, None)
    cuda = _timed(db, softmax, None, (STARTERS / "softmax/cuda_two_pass.py").read_text(), 0.80, None, language="cuda")
    in_registers_16 = _timed(db, softmax, None, starter("softmax", "triton_row_in_registers", NUM_WARPS=16), 0.90, None)

    history = build_history(db, softmax, max_best=4)
    buckets = [parent_bucket(c) for c in history.best]
    assert len(history.best) == 4 and len(set(buckets)) >= 3
    assert buckets.count(parent_bucket(history.best[0])) <= MAX_PER_BUCKET == 2
    assert [c.id for c in history.best] == [retunings[0], retunings[1], in_registers, cuda]
    assert history.ties == {retunings[1]: retunings[0]}  # 0.505 vs 0.500: within MIN_GAIN, no runs stored

    # every bucket gives up to MAX_PER_BUCKET in turn (the slower kernel's second tuning before a third of
    # the fastest kernel's); only when the buckets run out may one bucket give more
    def parents(k):
        return [c.id for c in build_history(db, softmax, max_best=k).best]

    assert parents(5) == [*retunings[:2], in_registers, cuda, in_registers_16]
    assert parents(7) == [*retunings[:4], in_registers, cuda, in_registers_16]

    # the prompt shows the other kernels and the tie, and the offline proposer retunes those parents
    text = PromptRenderer().render("propose.j2", prompt_context(softmax, history, "any"))
    assert f"Candidate #{in_registers} (triton)" in text and f"Candidate #{cuda} (cuda)" in text
    assert f"Within timing noise of candidate #{retunings[0]}" in text
    children = [p for p in OfflineProposer(problem=softmax).propose(softmax, history, 24, 0) if p.parent_ids]
    parents = {pid for p in children for pid in p.parent_ids}
    assert parents <= {c.id for c in history.best} and len(parents) >= 3
