"""`kgen bench`'s tables: the throughput figures are computed from what a search stored (a real SQLite
file; the GPU intervals are written as a GPU search would write them, since no GPU runs here), and
the command end to end on the CPU (real Ray, offline proposer, Triton's interpreter)."""

import json
import time

import pytest

from conftest import run_kgen
from kgen import store
from kgen.bench import markdown, throughput_row
from kgen.db import open_db
from kgen.records import EvalResult, Proposal


def _run_with_gpu_intervals(db, gpus: int, intervals, timing_s: float):
    run_id = store.create_run(db, problem="softmax", problem_path="softmax.py", problem_hash="h", size="full",
                              proposer="offline", model=None, language="any", seed=0, rounds=1,
                              candidates_per_round=len(intervals), settings={"gpus": gpus}, device="NVIDIA H100")
    for i, (start, end) in enumerate(intervals):
        cid = store.add_proposal(db, Proposal(source=f"x = {i}", proposer="offline"), run_id=run_id, round_index=0,
                                 problem="softmax", problem_hash="h")
        store.add_evaluation(db, cid, EvalResult(outcome="correct", runtime_ms=1.0, compile_s=2.0 + i,
                                                 device="NVIDIA H100", size="full",
                                                 details={"gpu_start": start, "gpu_end": end,
                                                          "phases": {"timing_s": timing_s}}))
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


@pytest.mark.slow
def test_bench_end_to_end_on_the_cpu(tmp_path):
    out = tmp_path / "out"
    done = run_kgen("bench", "--problems", "softmax", "--rounds", "1", "--candidates", "2", "--language", "triton",
                    "--out", str(out), timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "bench.json").read_text())
    (quality,) = report["quality"]
    (throughput,) = report["throughput"]
    assert quality["problem"] == "softmax" and quality["best_language"] == "triton"
    assert quality["best_ms"] is None  # no GPU: nothing is timed, so no time is claimed
    assert throughput["evaluated"] == 2 and throughput["correct"] >= 1
    assert throughput["gpu_busy_share"] is None
    assert "| softmax |" in (out / "bench.md").read_text()
