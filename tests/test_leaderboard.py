"""`kgen leaderboard`, `kgen show`, `kgen runs` over a results DB written as a search writes it."""

import csv
import io
import json

import pytest

from kgen.core.errors import KgenError
from kgen.core.records import EvalResult
from kgen.store import queries
from kgen.store.db import open_db
from kgen.store.leaderboard import candidate_detail, leaderboard, run_rows

from conftest import run_kgen
from test_leaderboard_fixtures import H100


def test_default_board_is_the_best_correct_candidate_per_problem_device_and_size(results):
    path, ids = results
    db = open_db(str(path), create=False)
    rows = leaderboard(db)
    assert [(r.problem, r.device, r.size, r.candidate_id) for r in rows] == [
        ("conv2d", H100, "full", ids["conv_best"]),
        ("softmax", H100, "full", ids["softmax_best"]),
        ("softmax", "cpu", "small", ids["cpu_first"]),  # untimed: the first found
    ]
    best = rows[1]
    assert best.runtime_ms == 0.81 and best.speedup_eager == pytest.approx(1.62 / 0.81)
    assert best.round == 3 and best.proposer == "offline" and best.rtol == 1e-5


def test_all_lists_every_correct_candidate_fastest_first_and_never_a_suspicious_one(results):
    path, ids = results
    rows = leaderboard(open_db(str(path), create=False), problem="softmax", include_all=True)
    timed = [r.runtime_ms for r in rows if r.device == H100]
    assert timed == sorted(timed) and len(timed) == 5
    assert ids["softmax_suspicious"] not in {r.candidate_id for r in rows}
    assert [r.candidate_id for r in rows if r.device == "cpu"] == [ids["cpu_first"], ids["cpu_second"]]
    assert [r.rank for r in rows if r.device == H100] == [1, 2, 3, 4, 5]


def test_hybrids_list_the_torch_ops_they_still_use(results):
    path, ids = results
    rows = leaderboard(open_db(str(path), create=False), problem="conv2d", include_all=True)
    assert {r.candidate_id: r.torch_ops for r in rows}[ids["conv_hybrid"]] == ["aten.unfold"]


def test_device_filter_matches_part_of_the_name(results):
    path, ids = results
    db = open_db(str(path), create=False)
    assert {r.device for r in leaderboard(db, device="h100")} == {H100}
    assert [r.candidate_id for r in leaderboard(db, device="cpu")] == [ids["cpu_first"]]


def test_a_later_failed_evaluation_on_the_same_device_takes_a_candidate_off_the_board(results):
    path, ids = results
    db = open_db(str(path), create=False)
    queries.add_evaluation(db, ids["softmax_best"], EvalResult(outcome="incorrect", device=H100, size="full",
                                                               message="re-checked: max abs error 0.3"))
    queries.add_evaluation(db, ids["softmax_best"], EvalResult(outcome="correct", device="NVIDIA A100", size="full",
                                                               runtime_ms=1.4))
    rows = leaderboard(db, problem="softmax")
    assert {(r.device, r.candidate_id) for r in rows if r.size == "full"} == {
        (H100, ids["softmax_best"] + 3), ("NVIDIA A100", ids["softmax_best"])}  # +3: the 0.86 ms retune


def test_show_gives_the_lineage_back_to_the_first_proposal(results):
    path, ids = results
    detail = candidate_detail(open_db(str(path), create=False), ids["softmax_best"])
    steps = [(a.depth, a.candidate_id, a.seen) for a in detail.lineage]
    # best <- (d <- a), (c <- a): a is listed once in full, then marked as seen
    d, c, a = ids["softmax_best"] - 3, ids["softmax_first"] + 2, ids["softmax_first"]
    assert steps == [(1, d, False), (2, a, False), (1, c, False), (2, a, True)]
    assert detail.evaluations[-1].outcome == "correct"


def test_show_on_the_cli_prints_idea_evaluation_lineage_and_source(results):
    path, ids = results
    r = run_kgen("show", str(ids["softmax_best"]), "--db", str(path), env={"COLUMNS": "250"})
    assert r.returncode == 0, r.stderr
    for needle in ("16 warps: two rows per SM stay in L2", "correct", "0.810", "2.00x",
                   f"lineage of {ids['softmax_best']}", "starter: online two-pass softmax", "_softmax_online_kernel",
                   "class ModelNew"):
        assert needle in r.stdout, needle


def test_show_a_failed_candidate_prints_its_error(results):
    path, ids = results
    r = run_kgen("show", str(ids["softmax_compile_error"]), "--db", str(path), env={"COLUMNS": "250"})
    assert r.returncode == 0 and "compile_error" in r.stdout and "__shfl_xor" in r.stdout


@pytest.mark.parametrize("fmt", ["json", "csv", "markdown", "table"])
def test_every_format_holds_the_same_rows(results, fmt):
    path, _ = results
    r = run_kgen("leaderboard", "--all", "--format", fmt, "--wide", "--db", str(path))
    assert r.returncode == 0, r.stderr
    expected = [row.candidate_id for row in leaderboard(open_db(str(path), create=False), include_all=True)]
    if fmt == "json":
        rows = json.loads(r.stdout)
        assert [x["candidate_id"] for x in rows] == expected
        assert {"runtime_ms", "eager_ms", "compile_ms", "speedup_eager", "speedup_compile", "roofline_pct", "rtol",
                "torch_ops", "round", "proposer", "model", "run_id", "evaluated_at", "language"} <= set(rows[0])
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(r.stdout)))
        assert [int(x["candidate_id"]) for x in rows] == expected
        assert {x["torch_ops"] for x in rows} == {"", "aten.unfold"}
    elif fmt == "markdown":
        lines, note = r.stdout.strip().split("\n\n")  # the table, then what its CPU rows did not audit
        assert note.startswith("cpu rows: correct (CPU:")
        lines = lines.splitlines()
        assert len(lines) == 2 + len(expected) and lines[1].startswith("| ---:")
        assert [int(line.split("|")[1]) for line in lines[2:]] == expected
        assert all(line.count("|") == lines[0].count("|") for line in lines)
    else:
        assert "kgen leaderboard" in r.stdout and "aten.unfold" in r.stdout and "openai/gpt-4.1" in r.stdout
        assert "ranked by correctness only" in r.stdout


def test_runs_show_status_rounds_best_speedup_and_tokens(results):
    path, ids = results
    rows = {r.run_id: r for r in run_rows(open_db(str(path), create=False))}
    conv = rows[ids["conv_run"]]
    assert (conv.status, conv.rounds_done, conv.tokens_in, conv.tokens_out) == ("finished", 2, 5210 * 2 + 6020 * 2,
                                                                                1630 + 2875 + 410 + 1980)
    assert conv.best_candidate_id == ids["conv_best"] and conv.best_speedup_eager == pytest.approx(3.05 / 1.87)
    cpu = rows[ids["cpu_run"]]
    assert (cpu.status, cpu.rounds_done, cpu.best_speedup_eager, cpu.correct) == ("interrupted", 1, None, 2)
    r = run_kgen("runs", "--wide", "--db", str(path))
    assert r.returncode == 0 and "interrupted" in r.stdout and "22.46 k" in r.stdout
    listed = json.loads(run_kgen("runs", "--format", "json", "--db", str(path)).stdout)
    assert listed[1]["tokens_out"] == conv.tokens_out


@pytest.mark.parametrize("args", [["leaderboard"], ["show", "1"], ["runs"], ["report", "-o", "r.html"],
                                  ["export", "softmax", "-o", "k.py"]])
def test_read_only_commands_on_a_missing_db_say_so_in_one_line_and_create_nothing(tmp_path, args):
    missing = tmp_path / "nope.db"
    r = run_kgen(*args, "--db", str(missing))
    assert r.returncode == 2 and r.stderr.strip() == f"kgen: error: no results database at {missing}"
    assert not missing.exists()


@pytest.mark.parametrize("args,needle", [(["show", "999"], "no candidate with id 999"),
                                         (["leaderboard", "--format", "xml"], "unknown format 'xml'"),
                                         (["show", "abc"], "ID must be a whole number, not 'abc'")])
def test_bad_ids_and_formats_give_one_line_and_exit_2(results, args, needle):
    path, _ = results
    r = run_kgen(*args, "--db", str(path))
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_an_empty_db_has_an_empty_board(tmp_path):
    open_db(str(tmp_path / "empty.db")).close()
    r = run_kgen("leaderboard", "--db", str(tmp_path / "empty.db"))
    assert r.returncode == 0 and "no correct candidates yet" in r.stdout
    assert json.loads(run_kgen("leaderboard", "-f", "json", "--db", str(tmp_path / "empty.db")).stdout) == []


def test_candidate_detail_of_an_unknown_id_is_a_kgen_error(results):
    path, _ = results
    with pytest.raises(KgenError, match="no candidate with id 4242"):
        candidate_detail(open_db(str(path), create=False), 4242)


def test_a_result_evaluated_without_the_sandbox_says_so_on_the_board(tmp_path):
    from test_leaderboard_fixtures import _add, _run, starter

    path = tmp_path / "results.db"
    db = open_db(str(path))
    try:
        p, run = _run(db, "softmax", "full", H100, "offline", None, 1, 2)
        fast = _add(db, p, run, 0, starter("softmax", "triton_online_two_pass"), "triton", "correct",
                    runtime_ms=0.9, eager_ms=1.4)
        # the same search's other candidate, evaluated with --no-sandbox (its details say so, as the judge writes them)
        slow = _add(db, p, run, 0, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=1024), "triton", "correct")
        queries.add_evaluation(db, slow, EvalResult(outcome="correct", language="triton", device=H100, size="full",
                                                    runtime_ms=0.8, details={"sandbox": {"kind": "none"}}))
    finally:
        db.close()
    rows = leaderboard(open_db(str(path), create=False), include_all=True)
    assert {r.candidate_id: r.sandbox for r in rows} == {slow: "none", fast: None}  # the fixture records no kind
    listed = list(csv.DictReader(io.StringIO(run_kgen("leaderboard", "--all", "--format", "csv", "--db",
                                                       str(path)).stdout)))
    assert {int(r["candidate_id"]): r["sandbox"] for r in listed} == {slow: "none", fast: ""}
    table = run_kgen("leaderboard", "--all", "--format", "markdown", "--db", str(path)).stdout
    marked = [line for line in table.splitlines() if "[no sandbox]" in line]
    assert len(marked) == 1 and f"| {slow} |" in marked[0]
