"""Nsight Compute profiles (kgen.judge.ncu_profile): the parser on a log ncu wrote on the H100, hostile logs,
the summary the prompt shows, where the profiles are stored and read, and the sandbox wrapper that
starts ncu around the runner. ncu and a GPU do not exist here: the recorded log stands in for them
(tests/data/ncu_softmax_h100.csv: `benchmarks/probe_ncu.py OUT record`, kgen's own ncu command line, ncu
2025.3.1 inside kgen's bubblewrap sandbox, Triton softmax 4096x8192 on an H100), and the end-to-end run is a GPU test in
tests/test_eval_gpu.py."""

import os
import sys
import textwrap

import pytest

from kgen.core.records import EvalResult, EvalSettings, Proposal
from kgen.judge import ncu_profile
from kgen.judge.sandbox import SandboxMode, check_sandbox
from kgen.judge.spares import start_process
from kgen.problems.problem import load_problem
from kgen.store import queries
from kgen.store.db import open_db
from kgen.store.history import profile_summaries

from conftest import REPO

RECORDED = (REPO / "tests/data/ncu_softmax_h100.csv").read_text()
SOFTMAX_STARTER = (REPO / "problems/starters/softmax/triton_online_two_pass.py").read_text()


def test_the_recorded_h100_log_parses_into_the_kernels_figures():
    profile = ncu_profile.parse(RECORDED)
    assert "error" not in profile
    [k] = profile["kernels"]
    assert k["name"] == "softmax_kernel" and k["launches"] == 1
    assert 80 < k["us"] < 95 and k["share_pct"] == 100.0  # 256 MB read and written at ~3 TB/s
    assert 50 < k["dram_pct"] < 100 and k["registers"] == 94
    assert k["occupancy_limit"] == "registers"  # 5 blocks by registers, 14 by shared memory, 16 by warps
    assert 200e6 < k["dram_bytes"] < 300e6 and 0 < k["sm_pct"] < 100  # 2 x 128 MiB at the minimum
    assert k["local_loads"] == 0 and k["local_stores"] == 0
    reasons = [r for r, _ in k["stalls"]]
    assert reasons[0] == "long_scoreboard" and "selected" not in reasons and len(reasons) == 5
    assert [v for _, v in k["stalls"]] == sorted((v for _, v in k["stalls"]), reverse=True)


def test_the_summary_names_time_bandwidth_occupancy_spills_and_stalls():
    profile = ncu_profile.parse(RECORDED)
    text = ncu_profile.summary(profile)
    k = profile["kernels"][0]
    assert text.startswith("Nsight Compute: softmax_kernel (")
    for part in (f"{k['us']:.1f} us", f"DRAM {k['dram_pct']:.0f}% of peak", "limited by registers",
                 "94 registers/thread", "no spills",
                 "top stalls long_scoreboard 8.8 (waiting on global/local memory)"):
        assert part in text, (part, text)


def _log(header, rows):
    def line(cells):
        return ",".join(f'"{c}"' for c in cells)
    return "==PROF== Connected to process 7\n" + "\n".join(line(r) for r in [header, [""] * len(header), *rows])


HEADER = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
          "launch__registers_per_thread", "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
          "smsp__sass_inst_executed_op_local_ld.sum"]


def test_launches_of_one_kernel_add_up_and_hostile_fields_are_dropped_or_cut():
    text = _log(HEADER, [
        ["0", "k" * 5000, "1,000", "50", "32", "1.5", "12"],
        ["1", "k" * 5000, "3,000", "70", "32", "2.5", "12"],
        ["2", "other", "nan", "1", "1", "1", "0"],        # no duration: not a kernel row
        ["3", "huge", "1e40", "1", "1", "1", "0"],        # past any real figure: dropped
        ["4", "short"],                                    # a cut row
        ["5", "tiny", "500", "inf", "9" * 30, "x", "0"],
    ])
    profile = ncu_profile.parse(text)
    first, second = profile["kernels"]
    assert len(first["name"]) == 200 and first["launches"] == 2 and first["us"] == 4.0
    assert first["dram_pct"] == 70 and first["local_loads"] == 12  # the longer launch's counters
    assert second["name"] == "tiny" and second["dram_pct"] is None and second["registers"] is None
    assert second["stalls"] == []
    assert first["share_pct"] == pytest.approx(88.9, abs=0.1)
    assert "12 local-memory (spill) instructions" in ncu_profile.summary(profile)


def test_measured_dram_traffic_is_set_against_the_problems_minimum():
    header = ["ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"]
    profile = ncu_profile.parse(_log(header, [["0", "k", "900,000", "1,600,000,000", "1,075,000,000"]]))
    assert profile["kernels"][0]["dram_bytes"] == 2_675_000_000
    assert "2675 MB to/from DRAM;" in ncu_profile.summary(profile)
    profile["min_bytes"] = 2_147_483_648
    assert "2675 MB to/from DRAM = 1.25x the problem's minimum" in ncu_profile.summary(profile)


@pytest.mark.parametrize("text, why", [
    ("", "profiled no kernel"),
    ("==PROF== Connected to process 9\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
     "access NVIDIA GPU Performance Counters on the target device 0.\n", "ERR_NVGPUCTRPERM"),
    ("==WARNING== No kernels were profiled.\n", "profiled no kernel"),
    ('"ID","Kernel Name"\n""\n', "profiled no kernel"),
])
def test_a_log_without_kernels_is_an_error_that_says_why(text, why):
    profile = ncu_profile.parse(text)
    assert why in profile["error"] and "kernels" not in profile
    assert ncu_profile.summary(profile).startswith("Nsight Compute: not available (")


def test_without_a_gpu_nothing_is_profiled():
    with pytest.raises(ncu_profile.NcuUnavailable, match="no GPU"):
        ncu_profile.profile_candidate(load_problem("softmax", "small"), SOFTMAX_STARTER, EvalSettings(), 30)


def test_kgen_ncu_names_the_executable_and_a_missing_one_is_none(tmp_path, monkeypatch):
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KGEN_NCU", str(fake))
    assert ncu_profile.find_ncu() == fake.resolve()
    monkeypatch.setenv("KGEN_NCU", str(tmp_path / "missing"))
    assert ncu_profile.find_ncu() is None
    argv = ncu_profile.ncu_argv(fake, tmp_path / "log.csv")
    assert argv[:3] == [str(fake), "--clock-control", "none"]
    assert "--profile-from-start" in argv and argv[argv.index("--profile-from-start") + 1] == "off"


def _scored_db(tmp_path):
    """A real SQLite DB: a run whose round 1 has three correct candidates (one derived from a round-0
    parent) and an incorrect one."""
    db = open_db(str(tmp_path / "results.db"))
    problem = load_problem("softmax", "small")
    run_id = queries.create_run(db, problem=problem.name, problem_path=str(problem.path),
                                problem_hash=problem.source_hash,
                                size="full", proposer="offline", model=None, language="triton", seed=0, rounds=2,
                                candidates_per_round=4, settings={}, device="H100")
    ids = {}

    def add(name, round_index, runtime_ms, outcome="correct", parents=()):
        source = SOFTMAX_STARTER + f"\n# {name}\n"
        ids[name] = queries.add_proposal(db, Proposal(source=source, proposer="offline", language="triton",
                                                      parent_ids=[ids[p] for p in parents]),
                                         run_id=run_id, round_index=round_index, problem=problem.name,
                                         problem_hash=problem.source_hash)
        queries.add_evaluation(db, ids[name], EvalResult(outcome=outcome, runtime_ms=runtime_ms, device="H100",
                                                         size="full", details={"timing": {"median_ms": runtime_ms}}))

    add("parent", 0, 2.0)
    add("fast", 1, 1.0, parents=["parent"])
    add("wrong", 1, 0.5, outcome="incorrect")
    add("middle", 1, 1.5)
    add("slow", 1, 3.0)
    return db, run_id, ids


def test_a_rounds_targets_are_its_fastest_correct_candidates_and_their_parents(tmp_path):
    db, run_id, ids = _scored_db(tmp_path)
    assert queries.ncu_targets(db, run_id, 1, top=2) == [
        (ids["fast"], SOFTMAX_STARTER + "\n# fast\n"),
        (ids["parent"], SOFTMAX_STARTER + "\n# parent\n"),
        (ids["middle"], SOFTMAX_STARTER + "\n# middle\n")]
    # once profiled, a candidate is not profiled again (here the parent, already done)
    assert queries.set_ncu_profile(db, ids["parent"], ncu_profile.parse(RECORDED))
    assert [c for c, _ in queries.ncu_targets(db, run_id, 1, top=1)] == [ids["fast"]]
    assert queries.set_ncu_profile(db, 999999, {}) is False
    db.close()


def test_a_stored_profile_reaches_the_summaries_the_prompt_shows_and_a_failed_one_does_not(tmp_path):
    db, _, ids = _scored_db(tmp_path)
    queries.set_ncu_profile(db, ids["fast"], ncu_profile.parse(RECORDED))
    queries.set_ncu_profile(db, ids["middle"], {"error": "ERR_NVGPUCTRPERM"})
    shown = profile_summaries(db, [ids["fast"], ids["middle"], ids["slow"]])
    assert shown[ids["fast"]].startswith("Nsight Compute: softmax_kernel")
    assert ids["middle"] not in shown and ids["slow"] not in shown
    with db.reader() as s:  # stored beside what the evaluation already held
        from kgen.store.db import Evaluation
        ev = s.query(Evaluation).filter_by(candidate_id=ids["fast"]).one()
        assert ev.details["timing"] == {"median_ms": 1.0} and ev.details["ncu"]["kernels"][0]["registers"] == 94
    db.close()


WRAPPER = textwrap.dedent('''
    """Stands in for ncu (none here): writes a log where it was told to, as the sandbox's user, then
    runs the harness as its child, as ncu does."""
    import os, subprocess, sys
    argv = sys.argv[1:]
    log = argv[argv.index("--log-file") + 1]
    with open(log, "w") as f:
        f.write(f"uid {os.getuid()} pid {os.getpid()}\\n")
    sys.exit(subprocess.call(argv[argv.index("--") + 1:], pass_fds=[int(argv[-1])]))
''')


def test_a_wrapper_starts_the_runner_inside_the_same_sandbox_and_writes_only_where_it_is_given(tmp_path):
    """kgen.judge.spares.start_process with a wrapper (what profile_candidate gives it: ncu's command line):
    the wrapper runs in the sandbox (PID 1 of its namespace, uid 65534), writes its log in the one
    directory bound writable, and the runner it starts still answers on the judge's channel."""
    check_sandbox(SandboxMode.BWRAP)
    tools = tmp_path / "tools"
    tools.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(tools, 0o755)
    (tools / "fake_ncu.py").write_text(WRAPPER)
    (tools / "fake_ncu.py").chmod(0o755)
    logdir = tmp_path / "log"
    logdir.mkdir()
    slot = start_process("cpu", SandboxMode.BWRAP, "run",
                         wrapper=(sys.executable, str(tools / "fake_ncu.py"), "--log-file", str(logdir / "ncu.csv"),
                                  "--"),
                         read_only=(tools,), writable=(logdir,))
    try:
        ready = slot.channel.receive(timeout_s=180)
        assert ready["type"] == "ready", ready
    finally:
        slot.close()
    written = (logdir / "ncu.csv").read_text()
    assert written.startswith("uid 65534 pid 1\n"), written


class FakeStages:
    """Stands in for the GPU evaluator (none here): answers each profile request with the recorded H100
    profile after `seconds`, and remembers what it was asked."""

    def __init__(self, seconds=0.0, answer=None):
        self.asked, self.seconds, self.answer = [], seconds, answer

    def ncu_profile(self, source, settings, budget_s):
        import time
        self.asked.append((source, budget_s))
        time.sleep(self.seconds)
        return dict(self.answer or ncu_profile.parse(RECORDED), s=self.seconds)


class Notes:
    def __init__(self):
        self.lines = []

    def note(self, text):
        self.lines.append(text)


def _search(db, run_id, started_s_ago, **config):
    import time

    from kgen.search.loop import Search, SearchConfig

    config = dict({"ncu_budget_s": 60.0}, **config)
    search = Search(db, SearchConfig(problem="softmax", **config), load_problem("softmax", "small"), None, Notes(),
                    run_id=run_id)
    search.started = time.monotonic() - started_s_ago
    return search


def test_after_a_round_the_search_profiles_its_best_and_stores_what_the_prompt_shows(tmp_path):
    """A real DB and the search's own round-end step; only the GPU evaluator is a stand-in."""
    db, run_id, ids = _scored_db(tmp_path)
    search = _search(db, run_id, started_s_ago=1000, ncu_top=1)
    stages = FakeStages()
    search._stall_profiles(stages, EvalSettings(device="cuda"), 1)
    # first the parents the next prompt shows (where a profile is read), then the round's best and its parent
    from kgen.store.history import build_history

    parents = [c.id for c in build_history(db, load_problem("softmax", "small"), run_id=run_id).best]
    assert set(parents) == {ids["fast"], ids["middle"], ids["parent"], ids["slow"]}
    by_source = {SOFTMAX_STARTER + f"\n# {name}\n": ids[name] for name in ids}
    assert [by_source[src] for src, _ in stages.asked] == parents
    shown = profile_summaries(db, [ids["fast"], ids["parent"]])
    assert shown[ids["fast"]].startswith("Nsight Compute: softmax_kernel (") and ids["parent"] in shown
    assert "MB to/from DRAM = " in shown[ids["fast"]] and "x the problem's minimum" in shown[ids["fast"]]
    with db.reader() as s:
        from kgen.store.db import Evaluation
        stored = s.query(Evaluation).filter_by(candidate_id=ids["fast"]).one().details["ncu"]
    from kgen.problems.roofline import compute_roofline
    assert stored["min_bytes"] == compute_roofline(load_problem("softmax", "small")).bytes_moved
    assert search.progress.lines[-1].startswith(f"  Nsight Compute profiled {', '.join(f'#{i}' for i in parents)} in ")
    db.close()


def test_profiles_stop_at_their_share_of_the_search_and_when_ncu_cannot_run(tmp_path):
    db, run_id, _ = _scored_db(tmp_path)
    # 100 s into the search, 8 s of which went to profiles: 15% allows 7 s more, less than a profile needs
    search = _search(db, run_id, started_s_ago=100, ncu_top=2)
    search._ncu_s = 8.0
    stages = FakeStages()
    search._stall_profiles(stages, EvalSettings(device="cuda"), 1)
    assert stages.asked == []
    assert "4 candidate(s) of round 2 not profiled" in search.progress.lines[-1]
    # later in the search there is room again
    search.started -= 100
    search._stall_profiles(stages, EvalSettings(device="cuda"), 1)
    assert len(stages.asked) == 4  # the four the next prompt shows (the round's best among them)
    # ncu that cannot run here: said once, and never asked again in this search
    (tmp_path / "again").mkdir()
    db2, run2, _ = _scored_db(tmp_path / "again")
    search = _search(db2, run2, started_s_ago=1000)
    refusing = FakeStages(answer={"unavailable": "ERR_NVGPUCTRPERM: no access to the GPU's counters"})
    search._stall_profiles(refusing, EvalSettings(device="cuda"), 1)
    search._stall_profiles(refusing, EvalSettings(device="cuda"), 1)
    assert len(refusing.asked) == 1
    assert search.progress.lines == ["stall profiles are off: ERR_NVGPUCTRPERM: no access to the GPU's counters"]
    db.close()
    db2.close()


@pytest.mark.parametrize("proposer, asked", [("openai", 60.0), ("offline", 0.0), ("replay", 0.0)])
def test_only_a_model_s_prompts_get_profiles_by_default(tmp_path, proposer, asked):
    """The offline and replay proposers read no prompt: by default their searches hold the GPU for no profile
    (16.7 s of a 138 s search on the H100); --ncu-budget still asks for them."""
    from kgen.search.loop import SearchConfig, resolve_defaults

    assert resolve_defaults(SearchConfig(problem="softmax", proposer=proposer)).ncu_budget_s == asked
    assert resolve_defaults(SearchConfig(problem="softmax", proposer=proposer, ncu_budget_s=30.0)).ncu_budget_s == 30.0
    db, run_id, _ = _scored_db(tmp_path)
    resolved = vars(resolve_defaults(SearchConfig(problem="softmax", proposer=proposer)))
    search = _search(db, run_id, started_s_ago=1000, **{k: v for k, v in resolved.items() if k != "problem"})
    stages = FakeStages()
    search._stall_profiles(stages, EvalSettings(device="cuda"), 1)
    assert bool(stages.asked) == (asked > 0)
    db.close()
