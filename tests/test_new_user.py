"""What a new user meets after the first command (issue 31), through the real CLI: kgen usable after
the quick start (hints name the kgen that runs when it is not on PATH), an exported test that runs with
what the export says, waits that say what they wait for, piped output that is complete and copyable,
messages that do not mislead, and a README whose first screen is the short path."""

import io
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from kgen.core.records import EvalResult, Proposal
from kgen.store import queries
from kgen.store.db import open_db

from conftest import REPO, run_kgen
from test_leaderboard_fixtures import build_results_db

VENV_BIN = Path(sys.executable).parent
VENV_KGEN = VENV_BIN / "kgen"  # the console script the quick start installs
CANDIDATES = Path(__file__).resolve().parent / "candidates"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# a PATH without the venv: what a shell has after the quick start, before `source .venv/bin/activate`
BARE_PATH = os.pathsep.join(p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                            if Path(p).absolute() != VENV_BIN.absolute()) or "/usr/bin:/bin"
needs_script = pytest.mark.skipif(not VENV_KGEN.is_file(), reason="no kgen console script beside this Python")


def run_script(*args: str, path: str = BARE_PATH, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """The installed `kgen` script, called by its path as the quick start does (not `python -m kgen`)."""
    env = dict(os.environ, PATH=path)
    return subprocess.run([str(VENV_KGEN), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def terminal(width: int) -> dict:
    return {"TTY_COMPATIBLE": "1", "COLUMNS": str(width), "NO_COLOR": "1"}


def first_stderr_line(args: list[str], timeout_s: float = 60) -> tuple[str, float]:
    """The first line `kgen ARGS` writes to stderr and how long it took; the command (and the compilers
    it started) is then killed: what matters is that it says what it waits for before the wait."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kgen", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        line = proc.stderr.readline()
        return line, time.monotonic() - started
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)


@pytest.fixture
def interrupted_db(tmp_path):
    """One run interrupted after 1 of its 3 candidates was evaluated."""
    from kgen.problems.problem import load_problem

    path = tmp_path / "interrupted.db"
    p = load_problem("softmax", "small")
    db = open_db(str(path))
    try:
        run = queries.create_run(db, problem=p.name, problem_path=str(p.path), problem_hash=p.source_hash,
                                 size="small", proposer="offline", model=None, language="triton", seed=0, rounds=2,
                                 candidates_per_round=3, settings={}, device="cpu")
        ids = [queries.add_proposal(db, Proposal(source=f"x = {i}\n", proposer="offline", language="triton"),
                                    run_id=run, round_index=0, problem=p.name, problem_hash=p.source_hash)
               for i in range(3)]
        queries.add_evaluation(db, ids[0], EvalResult(outcome="incorrect", language="triton", device="cpu",
                                                      size="small"))
        queries.set_run_status(db, run, "interrupted", rounds_done=0)
    finally:
        db.close()
    return path


# -- 1. kgen usable after the quick start ----------------------------------------------------------

@needs_script
def test_a_hint_names_kgen_by_its_path_when_kgen_is_not_on_path_and_the_hint_works(results, tmp_path):
    path, ids = results
    # conv2d's winner ran on an H100: exporting it by name here says which id to export, as a command
    r = run_script("export", "conv2d", "-o", "conv2d_kernel.py", "--db", str(path), cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    hint = shlex.split(r.stderr.split("e.g. ")[1])
    assert hint[0] == str(VENV_KGEN) and hint[1:3] == ["export", str(ids["conv_best"])]
    done = subprocess.run(hint, cwd=tmp_path, env=dict(os.environ, PATH=BARE_PATH), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "conv2d_kernel.py").is_file()
    # with the venv activated (its bin on PATH) the hint says plain `kgen`
    on_path = run_script("export", "conv2d", "-o", "c.py", "--db", str(path), cwd=tmp_path,
                         path=os.pathsep.join([str(VENV_BIN), BARE_PATH]))
    assert shlex.split(on_path.stderr.split("e.g. ")[1])[0] == "kgen"


# -- 2. the exported test runs with what the export says -------------------------------------------

@needs_script
def test_the_exported_test_runs_with_the_command_the_export_prints_with_or_without_pytest(results, tmp_path):
    path, ids = results
    r = run_script("export", str(ids["cpu_first"]), "-o", "sm.py", "--with-test", "--db", str(path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("wrote test_sm.py: run it with "))
    command = shlex.split(line.split("run it with ")[1].split(" (")[0])
    # the venv is not on PATH: its Python, by its path (a bare `python` would lack torch, or not exist)
    assert Path(command[0]).parent == VENV_BIN and Path(command[0]).name.startswith("python")
    assert command[1:] == ["test_sm.py"] and f"{command[0]} -m pip install pytest" in line
    ran = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.count("ok test_") == 5 and "all tests passed" in ran.stdout
    # where pytest cannot be imported at all, the same file still runs every test
    no_pytest = "import runpy, sys; sys.modules['pytest'] = None; runpy.run_path('test_sm.py', run_name='__main__')"
    ran = subprocess.run([sys.executable, "-c", no_pytest], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and ran.stdout.count("ok test_") == 5, ran.stdout + ran.stderr
    # and it fails a kernel that is wrong
    module = tmp_path / "sm.py"
    module.write_text(module.read_text() + "\n\n_right = softmax\n\n\ndef softmax(*args, **kwargs):\n"
                                           "    return _right(*args, **kwargs) + 1e-3\n")
    ran = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 1 and "FAILED test_matches_the_reference_on_fresh_random_inputs[0]" in ran.stdout


def test_the_repositorys_pytest_config_does_not_warn_without_pytest_timeout(tmp_path):
    test = tmp_path / "test_trivial.py"
    test.write_text("def test_one():\n    assert True\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:timeout",
                        "-c", str(REPO / "pyproject.toml"), str(test)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Unknown config option" not in r.stdout + r.stderr and "1 passed" in r.stdout


def test_tests_still_get_a_time_limit_where_pytest_timeout_is_installed(request):
    if not request.config.pluginmanager.hasplugin("timeout"):
        pytest.skip("pytest-timeout is not installed")
    if request.config.getoption("timeout", None) is not None:
        pytest.skip("--timeout given on the command line")
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.args == (900,)


# -- 3. waits say what they wait for ---------------------------------------------------------------

def test_eval_of_a_cuda_candidate_without_a_gpu_says_before_nvcc_runs_that_it_only_compiles():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU runs CUDA candidates")
    line, took_s = first_stderr_line(["eval", "softmax", str(CANDIDATES / "cuda_light_softmax.py")])
    assert line.startswith("kgen: a CUDA C++ candidate")
    assert "not_run" in line and ("compiling it with nvcc" in line or "no GPU or nvcc" in line)
    assert took_s < 30  # before nvcc's minutes, not after


def test_eval_at_the_full_size_without_a_gpu_says_its_own_work_counts_against_the_timeout():
    line, _ = first_stderr_line(["eval", "softmax", str(CANDIDATES / "good_triton_softmax.py"), "--device", "cpu",
                                 "--size", "full", "--timeout", "30"])
    assert line.startswith("kgen: the full size without a GPU") and "--timeout" in line and "--size small" in line


# -- 4. piped output is complete and copyable -------------------------------------------------------

def test_show_piped_prints_the_source_as_stored(results):
    path, ids = results
    with open_db(str(path), read_only=True).session() as s:
        from kgen.store.db import Candidate

        source = s.get(Candidate, ids["cpu_first"]).source
    r = run_kgen("show", str(ids["cpu_first"]), "--db", str(path), env={"COLUMNS": "40"})
    assert r.returncode == 0, r.stderr
    assert f"source of candidate {ids['cpu_first']}:\n{source.rstrip()}\n" in r.stdout  # no gutter, nothing wrapped
    shown = run_kgen("show", str(ids["cpu_first"]), "--db", str(path), env=terminal(60))
    assert "│" in shown.stdout or " 1 " in shown.stdout  # a terminal still gets line numbers


def test_help_lists_every_commands_summary_in_full():
    from typer.main import get_command

    from kgen.cli.main import app

    r = run_kgen("--help", env={"COLUMNS": "80"})
    listing = r.stdout.split("Commands:")[1]
    flat = " ".join(listing.split())
    assert "..." not in listing
    for name, command in get_command(app).commands.items():
        summary = " ".join(command.help.split("\n\n")[0].split())
        assert f"{name} {summary}" in flat, name


def test_piped_leaderboard_and_runs_are_complete(results):
    path, _ = results
    board = run_kgen("leaderboard", "--db", str(path)).stdout.splitlines()
    assert {"rtol", "round", "proposer", "run", "when"} <= set(board[1].split())
    assert board[-2].startswith("empty here: torch ops")  # named, though it holds nothing
    runs = run_kgen("runs", "--db", str(path)).stdout.splitlines()
    assert {"settings", "device", "candidates", "tokens"} <= set(runs[1].split())
    assert "seed 0" in runs[2]


@pytest.mark.parametrize("command", ["leaderboard", "runs"])
def test_a_terminal_view_names_the_columns_it_left_out_and_a_wide_terminal_shows_them(results, command):
    path, _ = results
    narrow = ANSI.sub("", run_kgen(command, "--db", str(path), env=terminal(80)).stdout)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    left_out = re.search(r"not shown: ([^;(]+)", narrow).group(1)
    names = [" ".join(n.split()) for n in left_out.split(",")]  # the line wraps like a sentence
    header = narrow.splitlines()[1].split("  ")
    assert names and not set(names) & {h.strip() for h in header}
    assert "(--wide shows every column)" in narrow
    wide = ANSI.sub("", run_kgen(command, "--db", str(path), env=terminal(250)).stdout)
    assert "not shown:" not in wide
    shown = {h.strip() for h in wide.splitlines()[1].split("  ")}
    assert set(names) <= shown


def test_piped_problems_are_an_aligned_table_with_a_header():
    lines = run_kgen("problems", env={"COLUMNS": "40"}).stdout.splitlines()
    header, rows = lines[0], lines[1:]
    assert header.split()[:3] == ["problem", "size", "dtype"] and len(rows) == 10
    for column in ("size", "dtype", "inputs → outputs"):
        at = header.index(column)
        assert all(row[at - 2:at] == "  " and row[at] != " " for row in rows), column


# -- 5. messages that do not mislead ---------------------------------------------------------------

def test_the_round_line_counts_the_round_and_the_run_apart():
    from kgen.search.progress import SearchProgress

    out = io.StringIO()
    progress = SearchProgress(Console(file=out, width=300))
    progress.start(run_id=1, problem="softmax", size="small", device="cpu", proposer="offline", rounds_total=3,
                   rounds_done=0, evaluators=1, resumed=False)
    for round_index, ids in ((0, (1, 2, 3)), (1, (4, 5))):
        progress.round_started(round_index)
        progress.proposed(len(ids), 0)
        for cid in ids:
            progress.compiling(cid)
    for cid in (1, 2, 3, 4):  # round 2's candidate 4 finishes before round 1 is counted done
        progress.evaluated(cid, EvalResult(outcome="correct" if cid != 2 else "incorrect"), was_timing=False)
    progress.round_finished(0)
    progress.evaluated(5, EvalResult(outcome="correct"), was_timing=False)
    progress.round_finished(1)
    done = [line.split("] ", 1)[1] for line in out.getvalue().splitlines() if " done: " in line]
    assert done[0].startswith("round 1/3 done: 3 evaluated, 2 correct; run so far: 4 evaluated, 3 correct")
    assert done[1].startswith("round 2/3 done: 2 evaluated, 2 correct; run so far: 5 evaluated, 4 correct, "
                              "best candidate 1 (untimed);")  # no GPU: no "- vs eager"


def test_an_interrupted_run_counts_candidates_not_evaluated_yet_apart_from_failures(interrupted_db):
    r = run_kgen("runs", "--db", str(interrupted_db))
    row = r.stdout.splitlines()[2]
    assert "interrupted" in row and "0/1 (2 not evaluated yet)" in row
    assert "0/3" not in row


@pytest.mark.parametrize("args", [["leaderboard", "--problem", "softmx"], ["runs", "--problem", "softmx"],
                                  ["export", "softmx", "-o", "k.py"], ["report", "--problem", "softmx"]])
def test_an_unknown_problem_name_is_one_line_and_exit_2_everywhere(results, args):
    path, _ = results
    r = run_kgen(*args, "--db", str(path))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "kgen: error: unknown problem 'softmx'; did you mean 'softmax'? "
        "(bundled: conv2d, conv_relu_maxpool, layernorm, matmul, softmax)"]


def test_a_bundled_problem_without_results_is_no_error(results):
    path, _ = results
    r = run_kgen("leaderboard", "--problem", "layernorm", "--db", str(path))
    assert r.returncode == 0 and "no correct candidates yet for layernorm" in r.stdout


def test_show_of_a_non_number_says_the_id_must_be_a_number(results):
    path, _ = results
    r = run_kgen("show", "abc", "--db", str(path))
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["kgen: error: ID must be a whole number, not 'abc' "
                                     "(kgen leaderboard lists candidate ids)"]


def test_per_dollar_ranks_runs_that_asked_no_llm_first_as_free_without_prices(tmp_path):
    path = tmp_path / "offline.db"
    build_results_db(path)
    with open_db(str(path)).session() as s:  # keep only the offline runs (softmax on the H100 and on the CPU)
        from sqlalchemy import delete

        from kgen.store.db import Candidate, Evaluation, LLMCall, Run

        conv = [c.id for c in s.query(Candidate).filter(Candidate.problem == "conv2d")]
        s.execute(delete(Evaluation).where(Evaluation.candidate_id.in_(conv)))
        s.execute(delete(Candidate).where(Candidate.id.in_(conv)))
        s.execute(delete(LLMCall))
        s.execute(delete(Run).where(Run.problem == "conv2d"))
    r = run_kgen("leaderboard", "--sort", "per-dollar", "--db", str(path))
    assert r.returncode == 0, r.stderr
    timed = next(line for line in r.stdout.splitlines() if " NVIDIA " in line)
    assert "free" in timed.split()
    # an LLM run with no prices known still asks for them
    build_results_db(tmp_path / "with_llm.db")
    llm = run_kgen("leaderboard", "--sort", "per-dollar", "--db", str(tmp_path / "with_llm.db"))
    assert llm.returncode == 2 and "needs token prices for the LLM runs (2)" in llm.stderr


# -- 6. the README's first screen -------------------------------------------------------------------

def test_the_readmes_first_screen_is_the_short_path_with_the_venv_activated():
    lines = (REPO / "README.md").read_text().splitlines()
    first = "\n".join(lines[:60])
    install = next(x for x in lines[:60] if "kgen search --problem softmax" in x)
    assert ".venv/bin/pip install -e ." in install and install.endswith(".venv/bin/kgen search --problem softmax "
                                                                        "--rounds 3")
    marker = lines.index("<!-- test-command -->")
    assert marker < 60 and lines[marker + 1] == "```bash" and "-m pytest" in lines[marker + 2]  # as .ci/run reads it
    activate = first.index("source .venv/bin/activate")
    following = [x.split("#")[0].split() for x in first[activate:].splitlines()[1:6]]
    assert [w[:2] for w in following[:3]] == [["kgen", "leaderboard"], ["kgen", "show"], ["kgen", "export"]]
    assert following[3][:2] == ["python", "test_softmax_kernel.py"]
    for words in following[:3]:  # the commands it shows exist and take what it passes
        assert run_kgen(words[1], "--help").returncode == 0
    assert first.index("## Quick start") < first.index("<!-- test-command -->") < first.index("## What kgen does")


# -- a real search: Ray start said at once, rounds counted apart, why it stopped, hints that work ----

@needs_script
@pytest.mark.slow  # a local Ray cluster and 1 candidate in Triton's interpreter: about 40 s on 2 cores
def test_a_search_says_ray_is_starting_counts_its_rounds_and_says_why_it_stopped_early(tmp_path):
    starters = tmp_path / "starters"
    starters.mkdir()
    # one starter with nothing to retune: round 2 has nothing to propose
    (starters / "only.py").write_text((CANDIDATES / "good_triton_softmax.py").read_text())
    r = run_script("search", "--problem", "softmax", "--rounds", "3", "--candidates", "1", "--starters",
                   str(starters), "--db", "s.db", cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert "starting a local Ray cluster" in lines[0]
    assert any("round 1/3 done: 1 evaluated, 1 correct; run so far: 1 evaluated, 1 correct" in x for x in lines)
    summary = next(x for x in lines if x.startswith("run 1 finished"))
    assert "1/3 rounds" in summary and "(stopped early: the offline proposer had nothing more to propose)" in summary
    hint = shlex.split(next(x for x in lines if x.startswith("export: ")).removeprefix("export: "))
    assert hint[0] == str(VENV_KGEN)
    done = subprocess.run(hint, cwd=tmp_path, env=dict(os.environ, PATH=BARE_PATH), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    runs = run_kgen("runs", "--db", str(tmp_path / "s.db")).stdout
    assert "finished early: proposer ran out" in runs
