"""`kgen eval COLLECTION`: reading the three collection formats (bad rows one line each), the summary's
figures against values worked out by hand (KernelBench's fast_p), and end to end on the CPU: the real
CLI, a real local Ray cluster, real SQLite, Triton candidates in the interpreter, a CUDA one compiled
with nvcc and not run, a kill -9 and a resume."""

import csv
import io
import json
import math
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_kgen

CANDIDATES = Path(__file__).resolve().parent / "candidates"
SOFTMAX = REPO / "problems" / "softmax.py"


def rows(db: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, args).fetchall()


def kernelbench_checkout(root: Path) -> Path:
    """A KernelBench checkout with two level-1 problems: softmax, and one that needs a package that is
    not installed."""
    level = root / "KernelBench" / "level1"
    level.mkdir(parents=True)
    shutil.copy(SOFTMAX, level / "23_Softmax.py")
    (level / "40_NeedsPackage.py").write_text("import kgen_no_such_package\n" + SOFTMAX.read_text())
    return root


# ---- reading collections ----

def test_a_kernelbench_generations_folder_resolves_level_and_problem_and_keeps_bad_rows(tmp_path):
    from kgen.search.collection import load_references, read_collection

    kb = kernelbench_checkout(tmp_path / "kb")
    run = tmp_path / "runs" / "my_run"
    run.mkdir(parents=True)
    shutil.copy(CANDIDATES / "good_triton_softmax.py", run / "level_1_problem_23_sample_0_kernel.py")
    shutil.copy(CANDIDATES / "no_kernel.py", run / "level_1_problem_23_sample_1_kernel.py")
    shutil.copy(CANDIDATES / "good_triton_softmax.py", run / "level_1_problem_40_sample_0_kernel.py")
    shutil.copy(CANDIDATES / "good_triton_softmax.py", run / "level_1_problem_77_sample_0_kernel.py")
    (run / "eval_results.json").write_text("{}")  # KernelBench's own files beside them are not entries
    entries = read_collection(str(run), str(kb))
    load_references(entries, "small")
    got = {e.label: (e.problem, e.sample, e.error) for e in entries}
    assert got["level_1_problem_23_sample_0_kernel.py"] == ("23_Softmax", 0, None)
    assert got["level_1_problem_23_sample_1_kernel.py"] == ("23_Softmax", 1, None)
    assert "kgen_no_such_package" in got["level_1_problem_40_sample_0_kernel.py"][2]
    assert got["level_1_problem_77_sample_0_kernel.py"][2].startswith("no problem 77 in ")
    assert len(entries) == 4


def test_a_generations_folder_without_a_kernelbench_checkout_is_bad_input(tmp_path, kgen_cli):
    shutil.copy(CANDIDATES / "good_triton_softmax.py", tmp_path / "level_1_problem_23_sample_0_kernel.py")
    result = kgen_cli("eval", str(tmp_path), "--db", str(tmp_path / "r.db"))
    assert result.returncode == 2, result.stderr
    assert "give --kernelbench DIR" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.db").exists()


def test_a_folder_of_pairs_reads_name_and_name_ref_and_keeps_bad_rows(tmp_path):
    from kgen.search.collection import load_references, read_collection

    shutil.copy(CANDIDATES / "good_triton_softmax.py", tmp_path / "good.py")
    shutil.copy(SOFTMAX, tmp_path / "good_ref.py")
    shutil.copy(CANDIDATES / "good_triton_softmax.py", tmp_path / "orphan.py")
    (tmp_path / "binary.py").write_bytes(b"\xff\xfe\x00 not text")
    shutil.copy(SOFTMAX, tmp_path / "binary_ref.py")
    entries = read_collection(str(tmp_path))
    load_references(entries, "small")
    got = {e.label: (e.problem, e.error) for e in entries}
    assert got["good.py"] == ("good_ref", None)
    assert got["orphan.py"] == (None, "no reference orphan_ref.py beside it")
    assert got["binary.py"][1].startswith("cannot read ")
    assert set(got) == {"good.py", "orphan.py", "binary.py"}


def test_jsonl_rows_take_every_kind_of_reference_and_candidate_and_each_bad_row_says_why(tmp_path):
    from kgen.search.collection import load_references, read_collection

    kb = kernelbench_checkout(tmp_path / "kb")
    shutil.copy(CANDIDATES / "good_triton_softmax.py", tmp_path / "good.py")
    shutil.copy(SOFTMAX, tmp_path / "ref.py")
    source = (CANDIDATES / "no_kernel.py").read_text()
    lines = [
        {"name": "bundled", "reference": "softmax", "candidate": "good.py", "claimed_speedup": 2.5},
        {"name": "file", "reference": "ref.py", "source": source, "claimed_speedup_compile": 1.5},
        {"name": "kernelbench", "level": 1, "problem_id": 23, "candidate": "good.py", "sample": 3},
        "not json {",
        {"name": "no file", "reference": "softmax", "candidate": "missing.py"},
        {"name": "no reference", "candidate": "good.py"},
        {"name": "bad claim", "reference": "softmax", "candidate": "good.py", "claimed_speedup": -1},
        {"name": "package", "level": 1, "problem_id": 40, "candidate": "good.py"},
        {"name": "bundled", "reference": "softmax", "candidate": "good.py"},
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n\n")
    entries = read_collection(str(path), str(kb))
    load_references(entries, "small")
    by_label = {e.label: e for e in entries}
    assert [e.label for e in entries] == ["bundled", "file", "kernelbench", "line 4", "no file", "no reference",
                                          "bad claim", "package", "bundled (line 9)"]
    assert (by_label["bundled"].problem, by_label["bundled"].claimed_eager) == ("softmax", 2.5)
    assert (by_label["file"].problem, by_label["file"].claimed_compile, by_label["file"].source) == ("ref", 1.5, source)
    assert (by_label["kernelbench"].problem, by_label["kernelbench"].sample) == ("23_Softmax", 3)
    assert by_label["line 4"].error.startswith("not JSON")
    assert by_label["no file"].error.startswith("file not found")
    assert by_label["no reference"].error.startswith("no reference")
    assert by_label["bad claim"].error == "claimed_speedup must be a positive number (got -1)"
    assert "kgen_no_such_package" in by_label["package"].error
    # samples without an id are numbered per problem (one reference text, whatever its file) in order,
    # after the highest so far: bundled 0, file 1, kernelbench 3 (its own), then 4
    assert [by_label[k].sample for k in ("bundled", "file", "kernelbench", "bundled (line 9)")] == [0, 1, 3, 4]
    assert len({by_label[k].problem_hash for k in ("bundled", "file", "kernelbench")}) == 1


# ---- the summary, against figures worked out by hand ----

def hand_results():
    from kgen.search.collection_summary import EntryResult

    def r(label, problem, sample, outcome, eager=None, compile_=None, **kw):
        return EntryResult(label=label, problem=problem, problem_hash=problem, sample=sample, outcome=outcome,
                           speedup_eager=eager, speedup_compile=compile_, **kw)
    return [
        r("a0", "A", 0, "correct", 2.5, 1.2, claimed_eager=3.0, claimed_compile=1.0),
        r("a1", "A", 1, "correct", 4.0, 4.0),  # not sample 0: counts nowhere in fast_p
        r("b0", "B", 0, "correct", 1.2, 1.5, claimed_eager=1.25),  # 1.5 vs torch.compile: not > 1.5
        r("c0", "C", 0, "incorrect", claimed_eager=5.0, message="output 0 differs"),
        r("c1", "C", 1, "correct", 3.0, 3.0),
        r("d1", "D", 1, "correct", 1.6, 1.6),  # D has no sample 0: KernelBench counts it as not correct
        r("e0", "E", 0, "static_reject", message="syntax error on line 3: invalid syntax"),
        r("e1", "E", 1, "static_reject", message="syntax error on line 9: unexpected indent"),
        r("e2", "E", 2, "static_reject", message="defines Triton kernel(s) k1, k2 but never launches one"),
        r("line 9", None, 0, "bad_row", message="no reference (give reference, or level and problem_id)"),
    ]


def test_the_summary_matches_kernelbench_fast_p_worked_out_by_hand():
    from kgen.search.collection_summary import summarize

    s = summarize(hand_results())
    # five problems (A-E); the bad row has none. Sample 0 of each: A correct (2.5x, 1.2x), B correct
    # (1.2x, 1.5x), C incorrect, D none, E static_reject.
    assert (s.entries, s.problems, s.counted_correct) == (10, 5, 2)
    assert s.fast_p["eager"] == {"0": 2 / 5, "1": 2 / 5, "1.5": 1 / 5, "2": 1 / 5}
    assert s.fast_p["torch.compile"] == {"0": 2 / 5, "1": 2 / 5, "1.5": 0.0, "2": 0.0}
    assert s.geomean_speedup["eager"] == pytest.approx(math.sqrt(2.5 * 1.2))
    assert s.geomean_speedup["torch.compile"] == pytest.approx(math.sqrt(1.2 * 1.5))
    assert s.outcomes == {"correct": 5, "static_reject": 3, "incorrect": 1, "bad_row": 1}
    assert s.static_reject_reasons == {"syntax error on line N": 2,
                                       "defines Triton kernel(s) ... but never launches one": 1}
    assert s.bad_rows == [("line 9", "no reference (give reference, or level and problem_id)")]
    # claims that do not hold first (the failed one before the one that fell short), then those that do
    assert [(c.label, c.baseline, c.verdict) for c in s.claims] == [
        ("c0", "eager", "does not hold"), ("a0", "eager", "does not hold"),
        ("b0", "eager", "holds"), ("a0", "torch.compile", "holds")]


def test_untimed_results_give_fast_0_only_and_claims_stay_untimed():
    from kgen.search.collection_summary import summarize

    results = hand_results()
    for r in results:
        r.speedup_eager = r.speedup_compile = None
    s = summarize(results, timed=False)
    assert s.fast_p["eager"] == {"0": 2 / 5, "1": None, "1.5": None, "2": None}
    assert s.geomean_speedup == {"eager": None, "torch.compile": None}
    assert {c.label: c.verdict for c in s.claims} == {"c0": "does not hold", "a0": "untimed", "b0": "untimed"}


def test_the_summary_renders_as_table_markdown_json_and_csv():
    from kgen.search.collection_summary import render, summarize

    results = hand_results()
    s = summarize(results)
    table = render(s, results, "table")
    assert "fast_1.5" in table and "20.0%" in table and "1.73x" in table and "does not hold" in table
    markdown = render(s, results, "markdown")
    assert "### Claimed vs measured" in markdown and "| fast_2 | 20.0% | 0.0% |" in markdown
    data = json.loads(render(s, results, "json"))
    assert data["summary"]["fast_p"]["eager"]["1.5"] == 0.2 and len(data["entries"]) == 10
    lines = list(csv.DictReader(io.StringIO(render(s, results, "csv"))))
    assert [line["entry"] for line in lines] == [r.label for r in results]
    assert lines[6]["reason"] == "syntax error on line N" and lines[0]["speedup_eager"] == "2.5"


# ---- end to end on the CPU ----

def wait_for_evaluations(proc: subprocess.Popen, db: Path, count: int, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            if db.exists() and rows(db, "SELECT COUNT(*) FROM evaluations")[0][0] >= count:
                return
        except sqlite3.OperationalError:  # tables not created yet
            pass
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"no {count} evaluation(s) within {timeout_s} s")


def test_a_collection_runs_on_ray_survives_kill_9_and_resumes_evaluating_each_entry_once(tmp_path):
    """One run for CI's sake (each start of Ray and the sandboxes costs tens of seconds on 2 cores): the
    JSONL format with a bundled reference and a KernelBench level/problem one; the other formats'
    reading is tested above."""
    db = tmp_path / "results.db"
    kb = kernelbench_checkout(tmp_path / "kb")
    lines = [
        {"name": "good", "reference": "softmax", "candidate": str(CANDIDATES / "good_triton_softmax.py"),
         "claimed_speedup": 3.0},
        {"name": "wrong", "level": 1, "problem_id": 23, "candidate": str(CANDIDATES / "low_precision.py")},
        {"name": "cuda", "reference": "softmax", "candidate": str(CANDIDATES / "cuda_light_softmax.py")},
        {"name": "no kernel", "reference": "softmax", "candidate": str(CANDIDATES / "no_kernel.py")},
        {"name": "missing", "reference": "softmax", "candidate": "nowhere.py"},
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    proc = subprocess.Popen([sys.executable, "-m", "kgen", "eval", str(path), "--kernelbench", str(kb), "--db", str(db),
                             "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for_evaluations(proc, db, 1)  # the static rejection comes first, from the compile stage
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = rows(db, "SELECT COUNT(*) FROM evaluations")[0][0]
    assert done_before < 4 and rows(db, "SELECT id, status, proposer FROM runs") == [(1, "running", "collection")]
    assert rows(db, "SELECT COUNT(*) FROM candidates") == [(4,)]  # every entry stored before any evaluation

    result = run_kgen("eval", "--resume", "1", "--format", "json", "--db", str(db))
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    outcomes = {e["label"]: e["outcome"] for e in data["entries"]}
    assert outcomes == {"good": "correct", "wrong": "incorrect", "cuda": "not_run", "no kernel": "static_reject",
                        "missing": "bad_row"}
    assert rows(db, "SELECT COUNT(*), COUNT(DISTINCT candidate_id) FROM evaluations") == [(4, 4)]
    assert rows(db, "SELECT status FROM runs") == [("finished",)]
    assert data["summary"]["bad_rows"][0]["entry"] == "missing"
    assert data["summary"]["fast_p"]["eager"]["0"] == 1.0  # one problem (the same text twice); sample 0: "good"
    assert data["summary"]["claims"][0]["verdict"] == "untimed"  # no GPU: nothing is timed
    assert f"[{done_before + 1}/4]" in result.stderr and "[4/4]" in result.stderr

    again = run_kgen("eval", "--resume", "1", "--format", "markdown", "--db", str(db))  # finished: its summary
    assert again.returncode == 0 and "| fast_0 | 100.0% | 100.0% |" in again.stdout
    runs = run_kgen("runs", "--db", str(db))
    assert "collection c.jsonl" in runs.stdout and "finished" in runs.stdout
    board = run_kgen("leaderboard", "--db", str(db), "--format", "json")
    assert [r["problem"] for r in json.loads(board.stdout)] == ["softmax"]


# ---- the GPU path, with the GPU mocked: stand-in evaluators that say they own one ----

class _GpuStandIn:
    """An evaluator on a pretend GPU: its baselines take a moment (eager 2 ms, torch.compile 1 ms), and
    every candidate runs in 0.5 ms, with the speedups the judge would work out from the settings it got."""

    def __init__(self, problem, size, source_hash):
        pass

    def device(self):
        import ray

        from kgen.search.workers import Device

        return Device(name="Stand-in GPU", cuda_arch="9.0", node_id=ray.get_runtime_context().get_node_id())

    def baselines(self, problem, max_autotune):
        time.sleep(3.0)  # candidates compiled meanwhile (at once: _compiled_at_once) must wait for these
        return {"eager_ms": 2.0, "compile_ms": 1.0, "settings": {"stand_in": True}}

    def evaluate(self, source, settings, problem=None):
        from kgen.core.records import EvalResult

        eager, compiled = settings.baseline_eager_ms, settings.baseline_compile_ms
        return EvalResult(outcome="correct", runtime_ms=0.5, eager_ms=eager, compile_ms=compiled,
                          speedup_eager=eager / 0.5 if eager else None,
                          speedup_compile=compiled / 0.5 if compiled else None,
                          device="Stand-in GPU", size=settings.size, details={"problem": problem})


def _compiled_at_once(problem, size, source_hash, source, settings):
    return None, {}, {}


def test_on_gpus_each_problems_baselines_are_timed_once_on_an_evaluator_before_its_candidates(tmp_path, monkeypatch):
    import logging
    import os

    import ray
    from ray import cloudpickle

    from kgen.search.cluster import Cluster, Placement
    from kgen.search.collection import CollectionConfig, CollectionProgress, entry_results, run_collection
    from kgen.search.collection_summary import summarize
    from kgen.search.workers import Stages
    from kgen.store.db import open_db

    monkeypatch.setattr(Stages, "evaluator_class", _GpuStandIn)
    monkeypatch.setattr(Stages, "compile_function", staticmethod(_compiled_at_once))
    relu, tanh = tmp_path / "relu_ref.py", tmp_path / "tanh_ref.py"
    relu.write_text(SOFTMAX.read_text().replace("torch.softmax", "torch.relu"))
    tanh.write_text(SOFTMAX.read_text().replace("torch.softmax", "torch.tanh"))
    path = tmp_path / "c.jsonl"
    good = str(CANDIDATES / "good_triton_softmax.py")
    path.write_text("".join(json.dumps(x) + "\n" for x in [
        {"name": "s0", "reference": "softmax", "candidate": good, "claimed_speedup": 8.0},
        {"name": "s1", "reference": "softmax", "candidate": good},
        {"name": "r0", "reference": str(relu), "candidate": good, "claimed_speedup_compile": 2.0},
        {"name": "t0", "reference": str(tanh), "candidate": good}]))  # 3 problems, 2 evaluators: one waits its turn
    saved_env = dict(os.environ)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        cluster = Cluster(address=None, num_cpus=2, num_gpus=2, placement=Placement(2, dict(num_cpus=0.5)))
        run_id = run_collection(str(tmp_path / "r.db"), CollectionConfig(collection=str(path), size="small"),
                                cluster=cluster, progress=CollectionProgress(io.StringIO()))
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        os.environ.clear()
        os.environ.update(saved_env)
    db = tmp_path / "r.db"
    assert rows(db, "SELECT problem, device, eager_ms, compile_ms FROM baselines ORDER BY problem") == [
        ("relu_ref", "Stand-in GPU", 2.0, 1.0), ("softmax", "Stand-in GPU", 2.0, 1.0),
        ("tanh_ref", "Stand-in GPU", 2.0, 1.0)]
    # every timed candidate got its problem's baselines: none was dispatched before they were in
    assert rows(db, "SELECT COUNT(*) FROM evaluations WHERE outcome = 'correct' AND eager_ms = 2.0") == [(4,)]
    database = open_db(str(db), read_only=True)
    try:
        results, timed = entry_results(database, run_id)
    finally:
        database.close()
    s = summarize(results, timed)
    assert timed and s.problems == 3 and s.fast_p["eager"] == {"0": 1.0, "1": 1.0, "1.5": 1.0, "2": 1.0}
    assert s.fast_p["torch.compile"]["2"] == 0.0 and s.geomean_speedup["eager"] == pytest.approx(4.0)
    assert [(c.label, c.verdict) for c in s.claims] == [("s0", "does not hold"), ("r0", "holds")]



class _GpuWithMemory(_GpuStandIn):
    """A pretend GPU with 7 GiB free (3.5 GiB for baselines: three of ~1 GiB each) whose baselines write when
    each starts and ends to the file KGEN_TEST_BASELINES_LOG names."""

    def gpu_free_bytes(self):
        return 7 << 30

    def baselines(self, problem, max_autotune):
        import os

        with open(os.environ["KGEN_TEST_BASELINES_LOG"], "a") as log:
            log.write(f"{time.time()} 1\n")
        time.sleep(2.0)
        with open(os.environ["KGEN_TEST_BASELINES_LOG"], "a") as log:
            log.write(f"{time.time()} -1\n")
        return {"eager_ms": 2.0, "compile_ms": 1.0, "settings": {"stand_in": True}}


def test_baselines_in_flight_follow_the_gpus_free_memory_and_the_cpus(tmp_path, monkeypatch):
    """Five problems, one evaluator with 8 CPUs (4 baselines at once by its CPUs) and 7 GiB of free GPU memory
    (3 by memory): 3 in flight at once, not the old constant 2 nor the CPUs' 4; every candidate gets its speedups."""
    import logging
    import os

    import ray
    from ray import cloudpickle

    from kgen.search.cluster import Cluster, Placement
    from kgen.search.collection import CollectionConfig, CollectionProgress, run_collection
    from kgen.search.workers import Stages

    monkeypatch.setattr(Stages, "evaluator_class", _GpuWithMemory)
    monkeypatch.setattr(Stages, "compile_function", staticmethod(_compiled_at_once))
    log = tmp_path / "baselines.log"
    log.touch()
    good = str(CANDIDATES / "good_triton_softmax.py")
    lines = []
    for op in ("relu", "tanh", "sigmoid", "exp", "abs"):
        ref = tmp_path / f"{op}_ref.py"
        ref.write_text(SOFTMAX.read_text().replace("torch.softmax(x, dim=1)", f"torch.{op}(x)"))
        lines.append({"name": op, "reference": str(ref), "candidate": good})
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    saved_env = dict(os.environ)
    os.environ["KGEN_TEST_BASELINES_LOG"] = str(log)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    out = io.StringIO()
    try:
        cluster = Cluster(address=None, num_cpus=8, num_gpus=1, placement=Placement(1, dict(num_cpus=0.5)))
        run_collection(str(tmp_path / "r.db"), CollectionConfig(collection=str(path), size="small"),
                       cluster=cluster, progress=CollectionProgress(out))
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        os.environ.clear()
        os.environ.update(saved_env)
    events = sorted((float(t), int(d)) for t, d in (line.split() for line in log.read_text().splitlines()))
    in_flight = [sum(d for _, d in events[:k + 1]) for k in range(len(events))]
    assert len(events) == 10 and max(in_flight) == 3
    assert "up to 4 at once per GPU as its memory allows" in out.getvalue()
    db = tmp_path / "r.db"
    assert rows(db, "SELECT COUNT(*) FROM baselines") == [(5,)]
    assert rows(db, "SELECT COUNT(*) FROM evaluations WHERE eager_ms = 2.0 AND speedup_eager = 4.0") == [(5,)]

def test_a_quiet_collection_says_what_it_waits_for():
    """While nothing finishes (CUDA builds, a long evaluation) the run prints, once a minute, what is in the
    compile stage, queued, and on each evaluator for how long; the stages report exactly what they hold."""
    from collections import deque

    from kgen.search.collection import QUIET_LINE_S, CollectionProgress
    from kgen.search.workers import Job, Stages

    stages = object.__new__(Stages)  # its bookkeeping only: no Ray, nothing dispatched
    stages._compiling = {"ref-a": None, "ref-b": None}
    stages._ready = deque([(Job(3, "src", None), None)])
    stages._timing = {"ref-c": (Job(7, "src", None), None, 0, time.monotonic() - 95.0)}
    compiling, ready, on_gpu = stages.waiting()
    assert (compiling, ready, [cid for cid, _ in on_gpu]) == (2, 1, [7]) and 94.0 < on_gpu[0][1] < 120.0

    out = io.StringIO()
    progress = CollectionProgress(out)
    progress.start(total=4, done=0)
    assert progress.quiet_for() < QUIET_LINE_S
    progress.waiting(compiling, ready, [("gpt-4o L1 19_ReLU", on_gpu[0][1])])
    line = out.getvalue().strip()
    assert line.startswith("kgen: waiting: 2 in the compile stage") and "1 compiled and queued" in line
    assert "gpt-4o L1 19_ReLU for 1 min 3" in line  # 95 s
    assert progress.quiet_for() < 1.0  # the line itself resets the clock: one line a minute, not one a poll


def test_the_eta_waits_for_a_few_results_then_follows_the_recent_pace(monkeypatch):
    """The 240-entry run's log: a static rejection at 8 s gave "ETA 31 min", the first GPU result at 160 s
    "326 min", then the ETA fell with every quick result. Now: no ETA before ETA_AFTER results, then the pace
    since the start, then the pace of the last ETA_WINDOW results only."""
    from types import SimpleNamespace

    from kgen.search import collection
    from kgen.search.collection import ETA_AFTER, ETA_WINDOW, CollectionProgress

    clock = [0.0]
    monkeypatch.setattr(collection, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    out = io.StringIO()
    progress = CollectionProgress(out)
    progress.start(total=240, done=0)

    def finish_at(t: float) -> str:
        clock[0] = t
        progress.finished("entry", "correct", None)
        return out.getvalue().splitlines()[-1].rsplit("| ", 1)[1]

    assert finish_at(8.0) == f"ETA after {ETA_AFTER} results"
    assert [finish_at(t) for t in (160.0, 170.0, 175.0)] == [f"ETA after {ETA_AFTER} results"] * 3
    assert finish_at(178.0) == "ETA 139 min 26 s"  # 178 s / 5 results x 235 left
    t = 178.0
    for _ in range(ETA_WINDOW + 5):  # a steady 40 s a result: the window holds only these
        t += 40.0
        line = finish_at(t)
    assert progress.done == 40 and line == "ETA 133 min 20 s"  # 40 s x 200 left
    for _ in range(3):  # a burst of quick ones moves it by their share of the window only
        t += 1.0
        line = finish_at(t)
    assert line == "ETA 118 min 05 s"  # (26 x 40 s + 3 x 1 s) / 29 intervals x 197 left


def test_a_resumed_runs_eta_counts_only_this_sessions_results(monkeypatch):
    """A resumed run's ETA counts only this session's results (the stored ones came in another session)."""
    from types import SimpleNamespace

    from kgen.search import collection
    from kgen.search.collection import ETA_AFTER, CollectionProgress

    clock = [0.0]
    monkeypatch.setattr(collection, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    out = io.StringIO()
    progress = CollectionProgress(out)
    progress.start(total=100, done=40)
    for k in range(ETA_AFTER):
        clock[0] = 10.0 * (k + 1)
        progress.finished("entry", "correct", None)
    assert out.getvalue().splitlines()[-1].endswith("| ETA 9 min 10 s")  # 10 s a result, 55 left
