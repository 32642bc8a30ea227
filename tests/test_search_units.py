"""The search's parts that need no cluster: its configuration, best-so-far counting, the summary, and
the checks made before Ray starts."""

import io
import time
from dataclasses import asdict

import pytest
from rich.console import Console

from kgen.core.errors import KgenError
from kgen.core.records import EvalResult
from kgen.search.cluster import _check_reachable
from kgen.search.loop import SearchConfig, SearchSummary, validate
from kgen.search.progress import SearchCounts, SearchProgress, summary_lines


def correct(speedup_eager=None, speedup_compile=None) -> EvalResult:
    return EvalResult(outcome="correct", speedup_eager=speedup_eager, speedup_compile=speedup_compile)


def test_best_so_far_is_the_fastest_timed_candidate():
    counts = SearchCounts()
    assert counts.record(1, correct(1.2, 0.9))
    assert not counts.record(2, correct(1.1, 1.3))
    assert counts.record(3, correct(2.0, 1.1))
    assert not counts.record(4, EvalResult(outcome="incorrect"))
    assert (counts.best_candidate_id, counts.best_speedup_eager, counts.best_speedup_compile) == (3, 2.0, 1.3)
    assert (counts.done, counts.outcomes["correct"], counts.failed) == (4, 3, 1)


def test_without_timings_the_first_correct_candidate_leads():
    counts = SearchCounts()
    assert not counts.record(1, EvalResult(outcome="compile_error"))
    assert counts.record(2, correct())
    assert not counts.record(3, correct())
    assert counts.best_candidate_id == 2 and counts.best_speedup_eager is None


def test_eta_is_candidates_left_times_the_time_per_finished_candidate():
    # 3 of 5 rounds proposed (4, 4, then 2: the proposer ran short), 6 done in 60 s since round 1 began:
    # 10 s each; left: 4 proposed and unfinished, and 2 rounds of 2 (the latest round's size)
    counts = SearchCounts(rounds_total=5, rounds_proposed=3, last_round_size=2, proposed=10, done=6,
                          first_round_started=time.monotonic() - 60.0)
    assert counts.eta_s() == pytest.approx((4 + 2 * 2) * 10.0, rel=0.01)
    assert SearchCounts(rounds_total=5).eta_s() is None  # nothing finished yet: no pace to go by


def test_eta_leaves_out_the_cluster_start_and_follows_the_events():
    progress = SearchProgress(Console(file=io.StringIO()))
    progress.start(run_id=1, problem="softmax", size="small", device="cpu", proposer="offline", rounds_total=3,
                   rounds_done=0, evaluators=1, resumed=False)
    progress.counts.started -= 100.0  # the cluster took 100 s to start: not part of the pace
    progress.round_started(0)
    progress.counts.first_round_started -= 20.0
    progress.proposed(4, 0)
    for cid in (1, 2):
        progress.evaluated(cid, correct(), was_timing=False)
    # 20 s for 2 candidates; left: 2 of round 1 and 2 rounds of 4
    assert progress.counts.eta_s() == pytest.approx(10 * 10.0, rel=0.01)


def test_plain_progress_writes_one_line_per_event():
    out = io.StringIO()
    progress = SearchProgress(Console(file=out, width=60))
    progress.start(run_id=7, problem="softmax", size="small", device="cpu", proposer="offline", rounds_total=2,
                   rounds_done=0, evaluators=1, resumed=False)
    progress.round_started(0)
    progress.proposed(2, 1)
    progress.compiling(5)
    progress.timing(5)
    progress.evaluated(5, EvalResult(outcome="runtime_error", message="illegal memory access\nmore"), True)
    progress.round_finished(0)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("starting run 7: softmax (small size) on cpu, proposer offline, rounds 0/2 done, "
                             "1 evaluation worker(s)")
    assert lines[2].endswith("proposed 2 (1 without code)")
    assert lines[3].endswith("candidate 5: runtime_error: illegal memory access")
    assert "round 1/2 done: 2 evaluated, 0 correct" in lines[4]
    assert progress.counts.outcomes == {"no_code": 1, "runtime_error": 1}


def test_a_round_proposed_before_the_last_one_finished_says_so():
    out = io.StringIO()
    progress = SearchProgress(Console(file=out, width=200))
    progress.start(run_id=1, problem="softmax", size="small", device="cpu", proposer="offline", rounds_total=3,
                   rounds_done=0, evaluators=1, resumed=False)
    progress.round_started(0)
    progress.round_started(1)  # overlapped: round 1 is still being evaluated
    progress.round_finished(0)
    progress.round_started(2)  # round 2 is still being evaluated
    progress.round_finished(1)
    lines = out.getvalue().splitlines()
    assert lines[1].endswith("round 1/3")
    assert lines[2].endswith("round 2/3 (proposed while round 1 is still evaluated)")
    assert lines[4].endswith("round 3/3 (proposed while round 2 is still evaluated)")


def test_summary_names_the_winner_its_speedups_and_the_export_command():
    summary = SearchSummary(run_id=3, status="finished", problem="softmax", device="NVIDIA H100", rounds_done=10,
                            rounds_planned=10, candidates=80, correct=31, best_id=42, best_runtime_ms=0.5,
                            best_speedup_eager=2.5, best_speedup_compile=1.4, best_roofline_pct=81.0,
                            tokens_in=1000, tokens_out=500, wall_s=600)
    text = "\n".join(summary_lines(summary))
    assert "best: candidate 42: 0.500 ms, 2.50x vs eager, 1.40x vs torch.compile, 81.0% of roofline" in text
    assert "tokens: 1000 in, 500 out" in text
    assert "export: kgen export 42 -o softmax_kernel.py" in text


def test_a_cpu_search_summary_says_what_its_correct_did_not_audit():
    summary = SearchSummary(run_id=4, status="finished", problem="softmax", device="cpu", rounds_done=3,
                            rounds_planned=3, candidates=12, correct=12, best_id=1, tokens_in=0, tokens_out=0,
                            wall_s=64)
    text = "\n".join(summary_lines(summary))
    assert ("best: candidate 1: correct (CPU: outputs checked; who did the work not audited); untimed: no GPU, "
            "so no speedups or roofline %") in text


def test_settings_stored_in_a_run_give_back_the_same_config():
    config = SearchConfig(problem="softmax", rounds=3, candidates=4, proposer="offline", size="small", seed=9)
    stored = dict(asdict(config), added_by_a_later_kgen=True)
    assert SearchConfig.from_settings(stored) == config


@pytest.mark.parametrize("change, message", [
    (dict(rounds=0), "--rounds must be at least 1"),
    (dict(candidates=0), "--candidates must be at least 1"),
    (dict(timeout_s=0), "--timeout must be positive"),
    (dict(proposer="oracle"), "unknown proposer 'oracle'"),
    (dict(language="rust"), "unknown language 'rust'"),
])
def test_bad_configuration_is_refused(change, message):
    config = SearchConfig(problem="softmax", proposer="offline", size="small")
    for key, value in change.items():
        setattr(config, key, value)
    with pytest.raises(KgenError, match=message):
        validate(config)


@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:9", "cannot reach the Ray cluster"),
    ("ray://127.0.0.1:9", "cannot reach the Ray cluster"),
    ("127.0.0.1:port", "the port is not a number"),
    ("http://127.0.0.1:8265", "bad --ray-address"),
])
def test_an_unreachable_or_malformed_ray_address_fails_fast(address, message):
    with pytest.raises(KgenError, match=message):
        _check_reachable(address, timeout_s=2)


class _InstantStages:
    """Stand-in for the Ray stages (no cluster here): a submitted job leaves the compile stage at once
    and finishes, correct, one per poll, so later rounds are proposed while earlier ones are open."""

    compiling_count = 0

    def __init__(self):
        self.pending = []

    def submit(self, jobs, settings):
        self.pending += jobs
        return []

    def poll(self, timing_open=True):
        from kgen.search.workers import StageEvent

        done, self.pending = self.pending[:1], self.pending[1:]
        return [StageEvent("done", job.candidate_id, EvalResult(outcome="correct", language="triton", device="cpu",
                                                                size="small")) for job in done]

    def cancel(self):
        pass


class _ProposesFromResults:
    """Like the offline proposer once the starters are tried: nothing new until this run has a
    correct candidate to retune."""

    def __init__(self):
        self.asked = []

    def propose(self, problem, history, n, round_index):
        from kgen.core.records import Proposal

        self.asked.append((round_index, history.correct_count))
        if round_index > 0 and history.correct_count == 0:
            return []
        return [Proposal(source=f"# round {round_index} candidate {i}\n", proposer="test", language="triton")
                for i in range(n)]


def test_a_proposer_with_nothing_new_yet_is_asked_again_once_results_arrive(tmp_path):
    # Seen on the H100: with overlapping rounds, round 2 was asked for before round 1 was timed, the
    # offline proposer had no parent yet, and the search stopped after one round of four.
    from kgen.core.records import EvalSettings
    from kgen.problems.problem import load_problem
    from kgen.search.loop import Search
    from kgen.store.db import Candidate, open_db

    db = open_db(str(tmp_path / "k.db"))
    config = SearchConfig(problem="softmax", rounds=3, candidates=2, proposer="offline", size="small")
    proposer = _ProposesFromResults()
    search = Search(db, config, load_problem("softmax", "small"), proposer,
                    SearchProgress(Console(file=io.StringIO())))
    search._open_run("cpu", 0)
    search._rounds(_InstantStages(), EvalSettings(device="cpu", size="small"), 0, "cpu", None)
    with db.reader() as s:
        rounds = sorted(c.round for c in s.query(Candidate).filter_by(run_id=search.run_id))
    assert rounds == [1, 1, 2, 2, 3, 3]
    assert (1, 0) in proposer.asked  # asked early, had nothing, and was asked again later


def test_an_evaluator_on_a_gpu_starts_its_first_sandboxes_and_warms_the_judge_before_any_candidate(monkeypatch):
    """The GPU stood in: prestart starts the compile step's sandboxes first (the first candidate needs them
    first), then the runners, as many as the first two evaluations take (the spares fill up to their depth
    as candidates take them), and tells them to make their CUDA contexts; warm_up does the judge's one-time
    work. A warm-up that fails is no verdict: the first candidate meets the fault and reports it."""
    from kgen.judge import judge, sandbox, spares
    from kgen.judge.spares import processes_per_evaluation
    from kgen.search.workers import _Evaluator

    calls = []
    monkeypatch.setattr(sandbox, "probe_early", lambda gpu: calls.append(("probe_early", gpu)))
    monkeypatch.setattr(spares.SpareRunners, "prestart", lambda self, device, counts: calls.append(
        ("prestart", device, list(counts.items()))))
    monkeypatch.setattr(spares.SpareRunners, "warm", lambda self: calls.append(("warm",)))
    monkeypatch.setattr(_Evaluator, "_judge_device", staticmethod(lambda: "cuda:0"))
    monkeypatch.setattr(judge.Judge, "warm_up", lambda self: calls.append(("warm_up", str(self.device))) or 4.5)
    evaluator = _Evaluator("softmax", "small", None)
    assert evaluator.prestart("bwrap", "triton") is None
    assert evaluator.warm_up("bwrap", "triton") == 4.5
    assert calls == [("probe_early", False),  # as the evaluator starts (no GPU of Ray's here, outside Ray)
                     ("prestart", "cuda:0", [("compile", 2), ("run", 4)]), ("warm",), ("warm_up", "cuda:0")]

    def broken(self):
        raise RuntimeError("no GPU memory left")

    monkeypatch.setattr(judge.Judge, "warm_up", broken)
    assert evaluator.warm_up("bwrap", "triton") is None
    assert _Evaluator(None, "small", None).warm_up("bwrap", "triton") is None  # a collection's: no problem of its own
    # a runner spare takes 8.5-11 s to be ready on the H100 boxes, an evaluation 4.4-5 s: three evaluations ahead
    assert spares.SpareRunners.DEPTH["run"] == 3 * processes_per_evaluation("triton", "cuda")["run"]
    assert _Evaluator.PRESTART["run"] <= spares.SpareRunners.DEPTH["run"]


def test_an_evaluator_starts_its_first_sandboxes_before_its_own_imports_and_prestart_adds_only_what_is_missing(
        monkeypatch):
    """Given the search's (sandbox, language), an evaluator starts prestart's sandboxes first thing, before it
    imports torch and loads the problem (its sandbox probe and imports run beside them), for the device it knows
    without torch: Ray's GPU is cuda:0, no GPU here is the CPU; on a machine with GPUs but none of Ray's for it
    (a kgen_gpu evaluator) nothing starts early. prestart then starts what is missing, here nothing."""
    from kgen.judge import sandbox, spares
    from kgen.search import workers
    from kgen.search.workers import _Evaluator

    calls = []
    monkeypatch.setattr(sandbox, "probe_early", lambda gpu: calls.append(("probe_early",)))
    monkeypatch.setattr(workers, "_load", lambda *a: calls.append(("load",)))
    monkeypatch.setattr(spares.SpareRunners, "prestart_in_background", lambda self, device, counts, warm=False: (
        calls.append(("early", device, counts, warm)), self.spares.update(
            {(device, kind): [f"{kind} {i}" for i in range(n)] for kind, n in counts.items()}))[0])
    monkeypatch.setattr(spares, "start_process", lambda *a, **k: pytest.fail("started again"))
    monkeypatch.setattr(spares.SpareRunners, "warm", lambda self: calls.append(("warm",)))
    monkeypatch.setattr(spares, "gpu_node_here", lambda: False)

    evaluator = _Evaluator("softmax", "small", None, prestart=("bwrap", "triton"))
    assert calls == [("early", "cpu", {"run": 2}, False), ("probe_early",), ("load",)]
    monkeypatch.setattr(_Evaluator, "_judge_device", staticmethod(lambda: "cpu"))
    evaluator.prestart("bwrap", "triton")
    assert evaluator.spares.spares == {("cpu", "run"): ["run 0", "run 1"]}

    calls.clear()
    monkeypatch.setattr(workers, "_has_ray_gpu", lambda: True)
    _Evaluator("softmax", "full", None, prestart=("bwrap", "triton"))
    assert calls[0] == ("early", "cuda:0", {"compile": 2, "run": 4}, True)

    calls.clear()
    monkeypatch.setattr(workers, "_has_ray_gpu", lambda: False)
    monkeypatch.setattr(spares, "gpu_node_here", lambda: True)
    assert _Evaluator("softmax", "full", None, prestart=("bwrap", "triton")).spares is None
    assert calls == [("probe_early",), ("load",)]


def test_each_gpu_count_pass_of_kgen_bench_gets_fresh_caches_outside_its_out_folder(tmp_path, monkeypatch):
    """The caches of a `kgen bench --gpus N` pass are new, empty, not under --out (a device call returns only
    a few files: caches there crowded out bench.md), and gone after the pass, the environment as it was."""
    import os

    from kgen.outputs.bench import PASS_CACHES, pass_caches

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.delenv("KGEN_CACHE_DIR", raising=False)
    with pass_caches(2) as root:
        folders = {name: os.environ[name] for name in PASS_CACHES}
        assert all(f.startswith(str(root)) and not f.startswith(str(tmp_path)) for f in folders.values())
        assert len(set(folders.values())) == len(PASS_CACHES)
        for folder in folders.values():
            os.makedirs(os.path.join(folder, "sub"))
    assert not root.exists()
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine") and "KGEN_CACHE_DIR" not in os.environ


def test_a_triton_candidate_leaves_the_compile_stage_without_torch_or_the_problem(tmp_path):
    """The compile stage has nothing to build for Triton: the static checks pass it on at once, in a fresh worker
    that imports neither torch nor the problem (on the H100 box the search's first candidate waited ~4 s for
    that). A rejected source still gets its static_reject result there; the Ray node lookup is the stand-in."""
    import json
    import subprocess
    import sys

    from conftest import REPO

    script = """
import json, sys
from kgen.core.records import EvalSettings
from kgen.search import workers
workers.where_am_i = lambda: {"node_id": "n", "ip": "127.0.0.1"}
def stage(path):
    result, info, node = workers._compile("softmax", "small", None, open(path).read(), EvalSettings())
    return {"outcome": result and result.outcome, "timed": "start" in info and "end" in info,
            "torch": "torch" in sys.modules}
print(json.dumps([stage(sys.argv[1]), stage(sys.argv[2])]))
"""
    sources = [str(REPO / "problems/starters/softmax/triton_online_two_pass.py"),
               str(REPO / "tests/candidates/no_kernel.py")]
    done = subprocess.run([sys.executable, "-c", script, *sources], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    triton, rejected = json.loads(done.stdout)
    assert triton == {"outcome": None, "timed": True, "torch": False}
    assert rejected["outcome"] == "static_reject" and rejected["timed"]


def test_the_roofline_and_this_machine_s_facts_are_worked_out_while_its_local_cluster_starts(monkeypatch, tmp_path):
    """With a local cluster the search works out, while Ray starts, this machine's facts (with a GPU here; on a
    fresh cache its GPU's ceilings) and the problem's roofline (its first meta run imports torch's
    decompositions), in a thread, and the run uses the facts measured. The GPU is the stand-in (no GPU here:
    its measurement only takes time), and so is the cluster's start, which only looks and stops the search."""
    import threading

    import torch

    from kgen.judge import evaluator_facts
    from kgen.problems import roofline
    from kgen.problems.problem import load_problem
    from kgen.search import cluster, loop

    began = {"facts": threading.Event(), "roofline": threading.Event()}
    real_roofline = roofline.compute_roofline

    def measuring():
        began["facts"].set()
        time.sleep(0.3)
        return "this machine's facts"

    def roofline_of(problem):
        began["roofline"].set()
        return real_roofline(problem)

    def connect(address=None):  # both begin while the cluster is still starting
        seen["beside the cluster's start"] = all(e.wait(10) for e in began.values())
        raise KgenError("stopped where the cluster would start")

    seen = {}
    monkeypatch.setenv("KGEN_DRIVER_LANE", "0")  # the lane would judge on the stand-in GPU (tests/test_driver_lane.py)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(evaluator_facts, "this_machine", measuring)
    monkeypatch.setattr(roofline, "compute_roofline", roofline_of)
    monkeypatch.setattr(cluster, "connect", connect)
    config = SearchConfig(problem="softmax", size="small", language="triton", proposer="offline")
    with pytest.raises(KgenError, match="stopped where the cluster would start"):
        loop.run_search(str(tmp_path / "results.db"), config, progress=SearchProgress(Console(file=io.StringIO())))
    assert seen == {"beside the cluster's start": True}
    quiet = SearchProgress(Console(file=io.StringIO()))
    search = loop.Search(None, config, load_problem("softmax", "small"), None, quiet)
    search.prepare_beside_cluster_start()
    assert search._machine_facts() == "this machine's facts"
    search.settle_background()
