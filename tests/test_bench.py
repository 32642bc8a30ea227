"""`kgen bench`'s tables: the throughput figures are computed from what a search stored (a real SQLite
file; the GPU intervals are written as a GPU search would write them, since no GPU runs here), and
the command end to end on the CPU (real Ray, offline proposer, Triton's interpreter)."""

import dataclasses
import json
import subprocess
import sys
import time

import pytest

from kgen.core.records import EvalResult, Proposal
from kgen.outputs.bench import ThroughputRow, gpu_use_rows, markdown, scaling_rows, throughput_row
from kgen.store import queries
from kgen.store.db import open_db

from conftest import run_kgen


def _run_with_gpu_intervals(db, gpus: int, intervals, timing_s: float, window_key: str = "gpu"):
    run_id = queries.create_run(db, problem="softmax", problem_path="softmax.py", problem_hash="h", size="full",
                                proposer="offline", model=None, language="any", seed=0, rounds=1,
                                candidates_per_round=len(intervals), settings={"gpus": gpus}, device="NVIDIA H100")
    for i, (start, end) in enumerate(intervals):
        cid = queries.add_proposal(db, Proposal(source=f"x = {i}", proposer="offline"), run_id=run_id, round_index=0,
                                   problem="softmax", problem_hash="h")
        window = {"gpu_start": start, "gpu_end": end} if window_key == "gpu" else \
            {"nodes": {"evaluation": {"node_id": "n1", "start": start, "end": end}}}  # the evaluator actor's record
        queries.add_evaluation(db, cid, EvalResult(outcome="correct", runtime_ms=1.0, compile_s=2.0 + i,
                                                   device="NVIDIA H100", size="full",
                                                   details=dict(window, phases={"timing_s": timing_s})))
    return run_id


def test_one_gpu_busy_share_is_the_union_of_its_intervals_over_the_span(tmp_path):
    db = open_db(str(tmp_path / "bench.db"))
    t0 = time.time()
    # 0-10 busy, 10-12 idle, 12-20 busy (an overlap 15-18 counts once): 18 of 20 s
    run_id = _run_with_gpu_intervals(db, 1, [(t0, t0 + 10), (t0 + 12, t0 + 18), (t0 + 15, t0 + 20)], timing_s=2.0)
    row = throughput_row(db, run_id)
    assert row.evaluated == 3 and row.correct == 3 and row.gpus == 1
    assert row.gpu_busy_share == pytest.approx(0.9)
    assert row.timing_share == pytest.approx(6.0 / 20)
    assert row.compile_s_median == pytest.approx(3.0)
    assert row.gpu_eval_s_median == pytest.approx(6.0)


def test_two_gpus_share_is_per_gpu_and_the_table_shows_per_gpu_hour(tmp_path):
    db = open_db(str(tmp_path / "bench.db"))
    t0 = time.time()
    # two GPUs each busy 0-10 s, then one of them 10-15 s: 25 GPU-seconds of 30
    run_id = _run_with_gpu_intervals(db, 2, [(t0, t0 + 10), (t0, t0 + 10), (t0 + 10, t0 + 15)], timing_s=1.0)
    row = throughput_row(db, run_id)
    assert row.gpus == 2
    assert row.gpu_busy_share == pytest.approx(25 / 30)
    table = markdown([], [row], "## test")
    line = next(l for l in table.splitlines() if l.startswith("| softmax"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == "2"  # GPUs
    assert float(cells[7]) == pytest.approx(row.evaluated_per_min * 60 / 2, abs=1)  # per GPU-hour


def test_without_the_evaluation_process_window_the_evaluator_actors_window_counts(tmp_path):
    db = open_db(str(tmp_path / "bench.db"))
    t0 = time.time() + 30  # the first candidate reaches the GPU 30 s after the run began (baselines first)
    run_id = _run_with_gpu_intervals(db, 1, [(t0, t0 + 10), (t0 + 10, t0 + 20)], timing_s=1.0, window_key="actor")
    row = throughput_row(db, run_id, elapsed_s=75.0)
    assert row.gpu_busy_share == pytest.approx(1.0)
    assert row.eval_span_s == pytest.approx(20.0)
    assert row.startup_s == pytest.approx(30.0, abs=2.0)
    assert row.elapsed_s == 75.0


def test_each_gpus_use_and_why_it_waited(tmp_path):
    """Two GPUs over one pass: GPU 0 evaluates 0-10 and 20-30 s, GPU 1 0-14 s; a CUDA candidate compiles on
    the CPUs 14-18 s. GPU 0's gap 10-20: 10-14 GPU 1 was still busy (the round's end), 14-18 compiling, 18-20
    nothing to do; GPU 1's gap 14-30: 14-18 compiling, 20-30 GPU 0 busy, 18-20 nothing."""
    db = open_db(str(tmp_path / "bench.db"))
    t0 = time.time()
    run_id = queries.create_run(db, problem="softmax", problem_path="softmax.py", problem_hash="h", size="full",
                                proposer="offline", model=None, language="any", seed=0, rounds=1,
                                candidates_per_round=4, settings={"gpus": 2}, device="NVIDIA H100")
    work = [("0", 0, 10, {}), ("1", 0, 14, {}), ("0", 20, 30, {"start": t0 + 14, "end": t0 + 18})]
    for i, (gpu, start, end, stage) in enumerate(work):
        cid = queries.add_proposal(db, Proposal(source=f"x = {i}", proposer="offline"), run_id=run_id, round_index=0,
                                   problem="softmax", problem_hash="h")
        details = {"nodes": {"evaluation": {"node_id": "abcdef0123", "gpus": [gpu], "start": t0 + start,
                                            "end": t0 + end}},
                   "phases": {"timing_s": 1.0, "reference_s": 2.0, "compile_s": 0.5}}
        if stage:
            details["compile_stage"] = stage
        queries.add_evaluation(db, cid, EvalResult(outcome="correct", runtime_ms=1.0, device="NVIDIA H100", size="full",
                                                   details=details))
    rows = {r.gpu: r for r in gpu_use_rows(db, [run_id], 2)}
    assert set(rows) == {"abcdef01 GPU 0", "abcdef01 GPU 1"}
    g0, g1 = rows["abcdef01 GPU 0"], rows["abcdef01 GPU 1"]
    assert g0.span_s == pytest.approx(30) and g0.busy_s == pytest.approx(20) and g0.evaluations == 2
    assert (g0.idle_other_gpus_busy_s, g0.idle_compiles_s, g0.idle_nothing_s) == pytest.approx((4, 4, 2))
    assert g0.timing_s == pytest.approx(2.0) and g0.reference_s == pytest.approx(4.0)
    assert g1.busy_s == pytest.approx(14)
    assert (g1.idle_other_gpus_busy_s, g1.idle_compiles_s, g1.idle_nothing_s) == pytest.approx((10, 4, 2))
    table = markdown([], [], "## test", gpu_use=[g0, g1])
    line = next(text for text in table.splitlines() if "GPU 1 |" in text)
    assert [c.strip() for c in line.strip("|").split("|")][4:] == ["47%", "3%", "7%", "2%", "33%", "13%", "7%"]
    assert gpu_use_rows(db, [run_id + 1], 2) == []  # nothing ran on a GPU there


def _pass(evaluated: int, span_s: float, wall_s: float) -> ThroughputRow:
    return ThroughputRow(problem="softmax", run_id=1, evaluated=evaluated, correct=evaluated, wall_s=wall_s,
                         evaluated_per_min=evaluated / wall_s * 60, gpu_busy_share=0.9, compile_s_median=None,
                         eval_span_s=span_s)


def test_scaling_compares_evaluations_per_hour_of_evaluation_span():
    # two GPUs: the same 40 candidates in 110 s of evaluation instead of 200; the wall times also hold the
    # baselines (timed afresh in each pass) and are shown, not compared
    one, two = scaling_rows({1: [_pass(24, 120.0, 150.0), _pass(16, 80.0, 100.0)],
                             2: [_pass(24, 66.0, 96.0), _pass(16, 44.0, 60.0)]})
    assert (one.gpus, one.evaluated, one.eval_span_s, one.per_hour) == (1, 40, 200.0, pytest.approx(720.0))
    assert (two.gpus, two.per_hour) == (2, pytest.approx(40 / 110 * 3600))
    assert two.per_hour_wall == pytest.approx(40 / 156 * 3600)
    assert two.vs_first == pytest.approx(200 / 110)
    assert two.vs_first_wall == pytest.approx(250 / 156)  # issue 27's goal is by wall: shown beside span's
    assert "| 2 | 40 | 110 | 156 | 1309 | 923 | 1.82x | 1.60x |" in markdown([], [], "## test", [one, two])


def test_a_two_pass_report_says_which_pass_each_problem_row_is():
    # the quality and breakdown tables hold one row per problem per pass: unlabelled, two "matmul" rows
    passes = {1: [dataclasses.replace(_pass(24, 120.0, 150.0), run_id=1, gpus=1)],
              2: [dataclasses.replace(_pass(24, 66.0, 96.0), run_id=2, gpus=2)]}
    text = markdown([], [t for rows in passes.values() for t in rows], "## test", scaling_rows(passes))
    assert "(1 GPU) |" in text and "(2 GPU) |" in text


@pytest.mark.parametrize("args, message", [
    (["--gpus", "1"], "cannot use 1 GPU(s): this machine has 0"),
    (["--gpus", "1", "--gpus", "2", "--db", "x.db"], "leave out --db"),
    (["--rounds", "0"], "--rounds must be at least 1 (got 0)"),
])
def test_bad_bench_options_are_one_line_and_exit_2(tmp_path, args, message):
    done = run_kgen("bench", "--out", str(tmp_path / "out"), *args, env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().count("\n") == 0 and message in done.stderr, done.stderr


@pytest.mark.slow
def test_bench_end_to_end_on_the_cpu_writes_each_problem_as_its_search_ends(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "kgen", "bench", "--problems", "softmax", "--problems", "layernorm",
                             "--rounds", "1", "--candidates", "2", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    printed = []
    for line in proc.stdout:
        printed.append(line)
        if line.startswith("| softmax |"):  # the first problem's row, printed as its search ended
            break
    # what a run cut off now (a GPU call's deadline) would leave: the files are rewritten whole before the row
    # is printed
    cut_off = json.loads((out / "bench.json").read_text())
    cut_off_md = (out / "bench.md").read_text()
    rest, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, "".join(printed) + rest
    assert not any("layernorm" in line for line in printed)  # the row came before the next search began
    assert cut_off["complete"] is False
    assert [q["problem"] for q in cut_off["quality"]] == ["softmax"] and "| softmax |" in cut_off_md
    assert [t["problem"] for t in cut_off["throughput"]] == ["softmax"]

    report = json.loads((out / "bench.json").read_text())
    assert report["complete"] is True
    assert [q["problem"] for q in report["quality"]] == ["softmax", "layernorm"]  # both searches on one cluster
    for quality, throughput in zip(report["quality"], report["throughput"]):
        assert quality["best_language"] == "triton"
        assert quality["best_ms"] is None  # no GPU: nothing is timed, so no time is claimed
        assert throughput["evaluated"] == 2 and throughput["correct"] >= 1
        assert throughput["gpu_busy_share"] is None
    assert report["throughput"][1]["elapsed_s"] > report["throughput"][0]["elapsed_s"] > 0
    assert "| layernorm |" in (out / "bench.md").read_text()
    # where the seconds went: the cluster started once (charged to the first search), each search's own start,
    # and the judge's phases summed over its evaluations; in the JSON, bench.md and the printed lines
    first, second = (t["startup"] for t in report["throughput"])
    assert first["ray_start_s"] > 0 and "ray_start_s" not in second
    for startup in (first, second):
        assert 0 < startup["evaluators_s"] <= startup["first_result_s"]
        assert 0 < startup["first_proposed_s"] <= startup["first_result_s"]  # the first round stored and compiling
        assert {"reference_s", "runner_start_s", "verify_s"} <= set(startup["judge_s"])
    assert "where the seconds went" in (out / "bench.md").read_text()
    assert "\n    seconds: evaluators up " in rest  # layernorm's (the cluster had started for softmax's search)
