"""What the CLI prints, through the real CLI: help and bad flags at once (no torch, Ray or SQLAlchemy
imported), help texts written one way, tables that fit a terminal and are never cut in a pipe,
hints that are commands that work, `eval --check`, `show --prompt`, and `bench --problems` lists."""

import json
import re
import resource
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.core.records import EvalResult, Proposal
from kgen.store import queries
from kgen.store.db import open_db

from conftest import run_kgen
from test_leaderboard_fixtures import H100, build_results_db

CANDIDATES = Path(__file__).resolve().parent / "candidates"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
KERNELBENCH_NAME = "80_conv_standard_2D_square_input_asymmetric_kernel___dilated____padded__"
COMMANDS = ("problems", "eval", "search", "leaderboard", "show", "runs", "export", "report", "bench")
HEAVY = ("torch", "ray", "sqlalchemy", "triton")


def terminal(width: int) -> dict:
    """The environment of a terminal `width` columns wide (rich's documented switch for a tty)."""
    return {"TTY_COMPATIBLE": "1", "COLUMNS": str(width), "NO_COLOR": "1"}


def screen_lines(text: str) -> list[str]:
    return ANSI.sub("", text).splitlines()


@pytest.fixture
def board_db(tmp_path):
    """The shared fixture DB, plus a correct H100 candidate of a KernelBench problem with a long name."""
    path = tmp_path / "results.db"
    ids = build_results_db(path)
    db = open_db(str(path))
    try:
        run = queries.create_run(db, problem=KERNELBENCH_NAME, problem_path=f"/kb/{KERNELBENCH_NAME}.py",
                                 problem_hash="h", size="full", proposer="offline", model=None, language="any", seed=0,
                                 rounds=1, candidates_per_round=1, settings={}, device=H100)
        cid = queries.add_proposal(db, Proposal(source="x = 1\n", proposer="offline", language="triton"), run_id=run,
                                   round_index=0, problem=KERNELBENCH_NAME, problem_hash="h")
        queries.add_evaluation(db, cid, EvalResult(outcome="correct", language="triton", device=H100, size="full",
                                                   runtime_ms=12.5, eager_ms=20.0, compile_ms=15.0, speedup_eager=1.6,
                                                   speedup_compile=1.2, roofline_pct=40.0, rtol=1e-5))
        queries.set_run_status(db, run, "finished", rounds_done=1)
    finally:
        db.close()
    ids["kernelbench"] = cid
    return path, ids


# -- help and bad flags -----------------------------------------------------------------------------

HELP_AND_BAD_FLAGS = [["--help"], *([c, "--help"] for c in COMMANDS),
                      ["search", "--problem", "softmax", "--rounds", "0"],
                      ["search", "--problem", "softmax", "--language", "rust"],
                      ["search", "--problem", "softmax", "--candidates", "-1"],
                      ["search", "--bogus"], ["leaderboard", "--format", "xml"], ["eval", "softmax"],
                      ["runs", "--format", "csv"], ["bench", "--timeout", "0"]]


def test_help_and_bad_flags_import_no_torch_ray_or_sqlalchemy():
    script = (
        "import json, sys\n"
        "from kgen.cli.main import main\n"
        "out = []\n"
        f"for argv in {HELP_AND_BAD_FLAGS!r}:\n"
        "    try:\n"
        "        main(argv)\n"
        "        out.append((argv, 0))\n"
        "    except SystemExit as e:\n"
        "        out.append((argv, e.code))\n"
        f"print(json.dumps([out, [m for m in {HEAVY!r} if m in sys.modules]]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    codes, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert heavy == []
    assert [code for argv, code in codes if argv[-1] in ("--help",)] == [0] * (1 + len(COMMANDS))
    assert [code for argv, code in codes if argv[-1] != "--help"] == [2] * (len(HELP_AND_BAD_FLAGS) - 1 - len(COMMANDS))


def cpu_seconds(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    """The real CLI run once, and the CPU time it took (user + system): unlike wall time, not
    stretched by whatever else a loaded CI machine runs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = run_kgen(*args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.parametrize("args, message", [
    (["search", "--problem", "softmax", "--rounds", "0"], "kgen: error: --rounds must be at least 1 (got 0)"),
    (["search", "--problem", "softmax", "--language", "rust"],
     "kgen: error: unknown language 'rust' (choose triton, cuda, any)"),
    (["leaderboard", "--format", "xml"], "kgen: error: unknown format 'xml' (choose table, json, csv, markdown)"),
    (["search", "--bogus"], "kgen: error: No such option: --bogus"),
])
def test_bad_flags_answer_in_one_line_within_a_second(args, message):
    r, cpu_s = cpu_seconds(*args)
    assert r.returncode == 2 and r.stderr.startswith(message) and len(r.stderr.strip().splitlines()) == 1
    assert cpu_s < 1.0, f"{args}: {cpu_s:.2f} s"


def test_help_answers_within_a_second():
    r, cpu_s = cpu_seconds("search", "--help")
    assert r.returncode == 0 and "--rounds R" in r.stdout
    assert cpu_s < 1.0, f"{cpu_s:.2f} s"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_values_documents_every_option_and_gives_defaults_once(command):
    from typer.main import get_command

    from kgen.cli.main import app

    click_command = get_command(app).commands[command]
    text = run_kgen(command, "--help", env={"COLUMNS": "100"}).stdout
    assert not re.search(r"<(str|int|float|bool|path)>", text)  # values are named, not typed
    assert "(default" not in text and "default " not in text.replace("[default: ", "")  # one way: [default: X]
    for param in click_command.params:
        if getattr(param, "hidden", False):
            continue
        assert param.help and param.help.endswith("."), f"{command} {param.name}: no help sentence"
        name = param.opts[0] if param.param_type_name == "option" else param.metavar
        assert name in text, f"{command}: {name} not listed"
    flat = " ".join(text.split())
    assert flat.count("[default: ") == len(re.findall(r"\[default: [^\]]*\]", flat))
    for default in re.findall(r"\[default: ([^\]]*)\]", flat):
        assert "[default:" not in default


# -- tables -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [80, 100])
def test_default_leaderboard_fits_the_terminal_with_ids_and_problem_names_in_full(board_db, width):
    path, ids = board_db
    r = run_kgen("leaderboard", "--all", "--db", str(path), env=terminal(width))
    assert r.returncode == 0, r.stderr
    lines = screen_lines(r.stdout)
    assert max(len(line) for line in lines) <= width
    assert any(KERNELBENCH_NAME in line for line in lines)
    first_cells = [line.split()[0] for line in lines if line.strip() and line.split()[0].isdigit()]
    for key in ("softmax_best", "conv_best", "cpu_first", "kernelbench"):
        assert str(ids[key]) in first_cells


def test_piped_tables_are_plain_lines_never_cut(board_db):
    path, ids = board_db
    r = run_kgen("leaderboard", "--all", "--db", str(path), env={"COLUMNS": "40"})
    lines = r.stdout.splitlines()
    assert not any("\x1b" in line or "━" in line or "─" in line for line in lines)
    row = next(line for line in lines if line.startswith(f"{ids['kernelbench']} "))
    assert KERNELBENCH_NAME in row and H100 in row and "1.60x" in row and "12.500" in row
    wide = run_kgen("leaderboard", "--all", "--wide", "--db", str(path), env={"COLUMNS": "40"}).stdout
    header = wide.splitlines()[1].split()
    assert {"eager", "compile", "torch", "proposer", "when", "rtol"} <= set(header)
    assert "openai/gpt-4.1" in wide and "aten.unfold" in wide


def test_columns_empty_here_are_hidden_and_wide_shows_them(tmp_path):
    path = tmp_path / "results.db"
    build_results_db(path)
    r = run_kgen("leaderboard", "--device", "cpu", "--db", str(path))
    header = r.stdout.splitlines()[1]
    # nothing timed without a GPU; piped, every column that holds data, and a line naming the empty ones
    assert header.split() == ["id", "problem", "lang", "device", "size", "rtol", "round", "proposer", "run", "when"]
    assert ("empty here: runtime ms, eager ms, compile ms, vs eager, vs compile, roofline, torch ops "
            "(--wide shows every column)") in r.stdout
    wide = run_kgen("leaderboard", "--device", "cpu", "--wide", "--db", str(path)).stdout.splitlines()[1]
    assert "runtime ms" in wide and "vs compile" in wide and "roofline" in wide


@pytest.mark.parametrize("width", [80, 100])
def test_default_runs_view_fits_the_terminal(board_db, width):
    path, _ = board_db
    r = run_kgen("runs", "--db", str(path), env=terminal(width))
    lines = screen_lines(r.stdout)
    assert r.returncode == 0 and max(len(line) for line in lines) <= width
    assert any(KERNELBENCH_NAME in line for line in lines)
    # the other columns come after the keys, as many as fit: beside a 72-character problem name, the
    # status still fits in 100 columns; and the view says what it left out
    assert ("interrupted" in r.stdout) == (width == 100)
    assert "not shown: " in r.stdout and "(--wide shows every column)" in r.stdout


def test_a_run_whose_process_is_gone_gets_a_resume_command_with_its_db(tmp_path):
    path = tmp_path / "other.db"
    build_results_db(path)
    with open_db(str(path)).session() as s:
        from kgen.store.db import Run

        run = s.get(Run, 1)
        run.status = "running"
        gone = {"host": socket.gethostname(), "pid": 2 ** 22 + 7}  # above Linux's largest pid
        run.settings = dict(run.settings or {}, process=gone)
    r = run_kgen("runs", "--db", str(path))
    assert "running, process gone" in r.stdout
    hint = next(line for line in r.stdout.splitlines() if "resume it:" in line).split("resume it: ")[1]
    assert shlex.split(hint) == ["kgen", "search", "--resume", "1", "--db", "other.db"]


# -- hints that work --------------------------------------------------------------------------------

KERNELBENCH_RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

TRITON_RELU = '''import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        return out
'''


def test_the_export_hint_after_a_search_on_a_kernelbench_file_is_a_command_that_works(tmp_path):
    from kgen.problems.problem import load_problem
    from kgen.search.loop import SearchSummary
    from kgen.search.progress import summary_lines

    problem_file = tmp_path / "19_ReLU.py"
    problem_file.write_text(KERNELBENCH_RELU)
    problem = load_problem(str(problem_file), "small")
    db = open_db(str(tmp_path / "other.db"))
    run = queries.create_run(db, problem=problem.name, problem_path=str(problem.path), problem_hash=problem.source_hash,
                             size="small", proposer="offline", model=None, language="triton", seed=0, rounds=1,
                             candidates_per_round=1, settings={}, device="cpu")
    cid = queries.add_proposal(db, Proposal(source=TRITON_RELU, proposer="offline", language="triton"), run_id=run,
                               round_index=0, problem=problem.name, problem_hash=problem.source_hash)
    queries.add_evaluation(db, cid, EvalResult(outcome="correct", language="triton", device="cpu", size="small",
                                               rtol=1e-5, atol=1e-5))
    db.close()
    summary = SearchSummary(run_id=run, status="finished", problem=problem.name, device="cpu", rounds_done=1,
                            rounds_planned=1, candidates=1, correct=1, best_id=cid)
    hint = next(line for line in summary_lines(summary, db="other.db") if line.startswith("export: "))
    words = shlex.split(hint.removeprefix("export: "))
    assert words[:3] == ["kgen", "export", str(cid)]
    done = run_kgen(*words[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "kernel_19_relu.py").is_file()


# -- eval, show, bench ------------------------------------------------------------------------------

def test_eval_check_exits_1_unless_correct_and_times_no_baseline_without_a_gpu(tmp_path):
    rejected = run_kgen("eval", "softmax", str(CANDIDATES / "no_kernel.py"), "--check")
    assert rejected.returncode == 1 and "static_reject" in rejected.stdout
    assert run_kgen("eval", "softmax", str(CANDIDATES / "no_kernel.py")).returncode == 0
    good = run_kgen("eval", "softmax", str(CANDIDATES / "good_triton_softmax.py"), "--check", "--json")
    assert good.returncode == 0, good.stdout + good.stderr
    assert json.loads(good.stdout)["outcome"] == "correct"
    assert not (tmp_path / "results.db").exists()  # no GPU: no baselines, so no DB to keep them in


def test_show_prompt_prints_the_stored_chat_and_reply(board_db):
    path, ids = board_db
    r = run_kgen("show", str(ids["conv_triton"]), "--prompt", "--db", str(path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"candidate {ids['conv_triton']}: ") and "gpt-4.1" in lines[0] and "5210" in lines[0]
    assert lines[1:3] == ["--- user ---", "make it faster"]
    assert lines[3] == "--- response ---" and "class ModelNew" in "\n".join(lines[4:])
    offline = run_kgen("show", str(ids["softmax_best"]), "--prompt", "--db", str(path))
    assert offline.returncode == 2 and "not an LLM" in offline.stderr
    assert len(offline.stderr.strip().splitlines()) == 1


def test_bench_problems_take_space_and_comma_separated_lists():
    from kgen.cli.main import expand_list_options
    from kgen.outputs.bench import DEFAULT_PROBLEMS, parse_problems

    assert expand_list_options(["bench", "--problems", "softmax", "matmul,conv2d", "--rounds", "1"]) == [
        "bench", "--problems", "softmax", "--problems", "matmul,conv2d", "--rounds", "1"]
    assert expand_list_options(["search", "--problem", "softmax", "x"]) == ["search", "--problem", "softmax", "x"]
    assert parse_problems(["softmax", "matmul,conv2d", "softmax"]) == ["softmax", "matmul", "conv2d"]
    assert parse_problems(None) == list(DEFAULT_PROBLEMS)
    r = run_kgen("bench", "--problems", "softmax", "matmul,no_such_problem", "--out", "b")
    assert r.returncode == 2 and "unknown problem 'no_such_problem'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_piped_problems_list_is_never_cut():
    r = run_kgen("problems", env={"COLUMNS": "40"})
    row = next(line for line in r.stdout.splitlines() if line.startswith("conv_relu_maxpool  full"))
    assert "float32  100×3×224×224 → 100×96×27×27" in row and "88.34 MB" in row and len(row) > 40


def test_number_formatting_is_one_rule():
    import datetime as dt

    from kgen.core import fmt

    assert [fmt.ms(v) for v in (None, 0.01234, 1.62, 250.55)] == ["-", "0.0123", "1.620", "250.6"]
    assert [fmt.speedup(1.625), fmt.pct(45.66), fmt.tol(1e-5)] == ["1.62x", "45.7%", "1e-05"]
    assert [fmt.si(2.147e9, "B"), fmt.si(137.44e9), fmt.si(512, "B"), fmt.si(None)] == [
        "2.15 GB", "137.44 G", "512 B", "-"]
    assert [fmt.duration(65), fmt.duration(3725), fmt.duration(None)] == ["01:05", "1:02:05", "-"]
    assert fmt.when(dt.datetime(2026, 11, 22, 21, 55, 7)) == "2026-11-22 21:55"
    assert fmt.command("export", 3, "-o", "a b.py", db="x.db") == "kgen export 3 -o 'a b.py' --db x.db"


@pytest.mark.parametrize("message, cause", [
    ("illegal memory access\nmore", "illegal memory access"),
    ("Triton kernel failed to compile (launch):\nAttributeError: module 'triton.language' has no attribute "
     "'expp'\n  File \"c.py\", line 3", "Triton kernel failed to compile (launch): AttributeError: module "
                                          "'triton.language' has no attribute 'expp'"),
    ("CUDA build failed:\nninja: build stopped\nmain.cu(12): error: identifier \"x\" is undefined\n1 error",
     "CUDA build failed: main.cu(12): error: identifier \"x\" is undefined"),
    ("trial 2 of 5 (seed 7): max abs error 0.25 > atol 1e-05\nworst at (3, 1)",
     "trial 2 of 5 (seed 7): max abs error 0.25 > atol 1e-05"),
    ("", ""),
])
def test_progress_lines_show_the_first_cause(message, cause):
    from kgen.search.progress import first_cause

    assert first_cause(message) == cause


@pytest.mark.parametrize("source, language", [
    ("import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr): pass\n", "triton"),
    ("import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(x_ptr): pass\n", "triton"),
    ("from torch.utils.cpp_extension import load_inline\nsrc = '__global__ void k() {}'\n"
     "m = load_inline('m', '', src)\n", "cuda"),
    ("from torch.utils.cpp_extension import load_inline\n", "unknown"),  # no kernel of its own
    ("import torch\nclass ModelNew(torch.nn.Module): pass\n", "unknown"),
])
def test_language_detection_is_one_rule(source, language):
    from kgen.judge.evaluate import detect_language as public
    from kgen.judge.static_checks import detect_language

    assert detect_language(source) == public(source) == language


def test_a_finished_eval_or_search_ends_without_the_interpreter_s_teardown_but_with_its_output_and_code():
    """quick_exit: the atexit handlers run and what was printed is flushed, with the command's exit code, but
    the interpreter's teardown (0.8-1.2 s of `kgen eval` with torch loaded) is skipped; with a non-daemon thread
    still running it exits normally, which waits for that thread."""
    script = ("import atexit, sys, threading, time\n"
              "from kgen.cli.main import quick_exit\n"
              "atexit.register(lambda: print('atexit ran', flush=True))\n"
              "if sys.argv[1] == 'thread':\n"
              "    threading.Thread(target=lambda: (time.sleep(0.5), print('thread done'))).start()\n"
              "print('printed', end=' ')\n"
              "sys.stderr.write('said')\n"
              "quick_exit(3)\n")
    for case in ("alone", "thread"):
        done = subprocess.run([sys.executable, "-c", script, case], capture_output=True, text=True, timeout=60)
        assert done.returncode == 3 and done.stderr == "said"
        assert done.stdout == ("printed atexit ran\n" if case == "alone" else "printed thread done\natexit ran\n")
    from kgen.cli.main import QUICK_EXIT

    assert QUICK_EXIT == ("eval", "search")
