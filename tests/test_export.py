"""`kgen export`: a correct candidate as a standalone module, checked in a fresh Python that cannot
import kgen (its sys.path holds only the venv's site-packages, without the editable-install hook),
under Triton's interpreter on the CPU."""

import ast
import importlib.util
import os
import site
import subprocess
import sys
import textwrap

import pytest

from kgen import store
from kgen.db import open_db
from kgen.problems import load_problem
from kgen.records import EvalResult, Proposal

from conftest import run_kgen
from test_leaderboard_fixtures import H100, build_results_db, starter

# Runs in `python -I -S`: no site processing, so no .pth hooks (kgen is installed editable through one);
# only the venv's site-packages on sys.path, for torch, triton and pytest.
ISOLATED_BOOT = textwrap.dedent("""
    import sys
    sys.path.append(sys.argv[1])
    try:
        import kgen
    except ImportError:
        print("kgen is not importable here")
    else:
        sys.exit(f"kgen is importable here: {kgen.__file__}")
    mode, rest = sys.argv[2], sys.argv[3:]
    if mode == "pytest":
        import pytest
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *rest]))
    import os
    sys.path.insert(0, os.getcwd())  # the exported module's folder, as for a user running there
    exec(rest[0])
""")


def run_isolated(cwd, mode: str, *args: str, interpret: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KGEN_", "TRITON_"))}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, "-I", "-S", "-c", ISOLATED_BOOT, site.getsitepackages()[0], mode, *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "results.db"
    return path, build_results_db(path)


@pytest.fixture
def out_dir(tmp_path):
    d = tmp_path / "elsewhere"
    d.mkdir()
    return d


def test_export_by_problem_takes_this_devices_winner_and_its_test_passes_without_kgen(results, out_dir):
    path, ids = results
    r = run_kgen("export", "softmax", "-o", str(out_dir / "softmax_kernel.py"), "--with-test", "--db", str(path))
    assert r.returncode == 0, r.stderr
    assert f"candidate {ids['cpu_first']} " in r.stdout  # no GPU here: the CPU run's first correct candidate
    assert (out_dir / "test_softmax_kernel.py").is_file()
    result = run_isolated(out_dir, "pytest", "test_softmax_kernel.py")
    assert "kgen is not importable here" in result.stdout
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout


def test_the_module_imports_nothing_of_kgen_drops_kgen_settings_and_states_its_provenance(results, out_dir):
    path, ids = results
    out = out_dir / "sm.py"
    assert run_kgen("export", str(ids["softmax_best"]), "-o", str(out), "--db", str(path)).returncode == 0
    text = out.read_text()
    tree = ast.parse(text)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "kgen" not in imported and imported <= {"torch", "triton", "os"}
    assert "KGEN_TUNABLE" not in text and "BLOCK_SIZE = 4096" in text and "NUM_WARPS = 16" in text
    doc = ast.get_docstring(tree)
    for needle in ("softmax: a Triton kernel",
                   f"candidate     {ids['softmax_best']}: run {ids['softmax_run']}, round 3",
                   f"device        {H100}", "torch 2.5.1+cu124, triton 3.1.0, CUDA 12.4", "runtime       0.810 ms",
                   "1.620 ms (2.00x faster)", "1.180 ms (1.46x faster) (torch.compile)", "roofline      84.0%",
                   "rtol 1e-05, atol 1e-05", "by kgen 0.1.0", "16 warps: two rows per SM stay in L2",
                   "Pass 1 streams the row", "y = softmax(x)"):
        assert needle in doc, needle
    assert [n.name for n in tree.body if isinstance(n, ast.FunctionDef)][-1] == "softmax"


def test_a_module_with_parameters_takes_them_after_the_inputs_and_passes_its_test(results, out_dir):
    path, ids = results
    r = run_kgen("export", str(ids["conv_triton"]), "-o", str(out_dir / "conv_kernel.py"), "--with-test",
                 "--db", str(path))
    assert r.returncode == 0, r.stderr
    text = (out_dir / "conv_kernel.py").read_text()
    assert "def conv2d(x, weight, bias, *, init_inputs=None):" in text and "INIT_INPUTS = [3, 96, 11, 4, 2]" in text
    result = run_isolated(out_dir, "pytest", "test_conv_kernel.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_entry_point_checks_device_dtype_contiguity_rank_and_parameter_shapes(results, out_dir):
    path, ids = results
    assert run_kgen("export", str(ids["conv_triton"]), "-o", str(out_dir / "conv_kernel.py"),
                    "--db", str(path)).returncode == 0
    snippet = textwrap.dedent("""
        import os, torch
        import conv_kernel as k
        init = [3, 16, 11, 4, 2]
        x, w, b = torch.randn(2, 3, 35, 39), torch.randn(16, 3, 11, 11), torch.randn(16)
        def message(*args, **kw):
            try:
                k.conv2d(*args, **kw)
            except (ValueError, TypeError) as e:
                return str(e)
            return "accepted"
        print("dtype:", message(x.double(), w, b, init_inputs=init))
        print("rank:", message(x[0], w, b, init_inputs=init))
        print("contiguous:", message(x.transpose(2, 3), w, b, init_inputs=init))
        print("shape:", message(x, w, b))
        print("type:", message(x, w.tolist(), b, init_inputs=init))
        print("ok:", tuple(k.conv2d(x, w, b, init_inputs=init).shape))
        os.environ.pop("TRITON_INTERPRET")
        print("device:", message(x, w, b, init_inputs=init))
    """)
    result = run_isolated(out_dir, "exec", snippet)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
    assert lines["dtype"] == "conv2d: x must be float32, got float64"
    assert lines["rank"] == "conv2d: x must be 4-D, got shape (3, 35, 39)"
    assert lines["contiguous"] == "conv2d: x must be contiguous (call .contiguous() first)"
    assert lines["shape"].startswith("conv2d: weight must have shape (96, 3, 11, 11) for init_inputs [3, 96, 11, 4, 2]")
    assert lines["type"] == "conv2d: weight must be a torch.Tensor, got list"
    assert lines["ok"] == "(2, 16, 8, 9)"
    assert lines["device"] == ("conv2d: x must be on a CUDA device, got cpu "
                               "(CPU tensors only under TRITON_INTERPRET=1)")


def test_the_exported_test_fails_a_kernel_that_is_wrong(tmp_path, out_dir):
    """A candidate the DB calls correct but whose kernel is off by 0.1%: its exported test catches it."""
    db = open_db(str(tmp_path / "lying.db"))
    p = load_problem("softmax", "small")
    source = starter("softmax", "triton_online_two_pass", BLOCK_SIZE=1024).replace(
        "y = tl.exp(x - row_max) * inv", "y = tl.exp(x - row_max) * inv * 1.001")
    assert "* 1.001" in source
    cid = store.add_proposal(db, Proposal(source=source, proposer="offline", language="triton"), run_id=None,
                             round_index=None, problem="softmax", problem_hash=p.source_hash)
    store.add_evaluation(db, cid, EvalResult(outcome="correct", language="triton", device="cpu", size="small",
                                             rtol=1e-5, atol=1e-5))
    db.close()
    assert run_kgen("export", str(cid), "-o", str(out_dir / "wrong.py"), "--with-test",
                    "--db", str(tmp_path / "lying.db")).returncode == 0
    result = run_isolated(out_dir, "pytest", "test_wrong.py")
    assert result.returncode == 1 and "3 failed, 2 passed" in result.stdout, result.stdout


def test_export_refuses_what_it_cannot_stand_behind(results, out_dir):
    path, ids = results
    db = ["--db", str(path)]
    cases = [
        (["export", "conv2d", "-o", str(out_dir / "c.py")],
         f"no correct candidate for conv2d on this device (cpu); there are on {H100}: export one by id, "
         f"e.g. kgen export {ids['conv_best']} -o conv2d_kernel.py"),  # the DB here is the default one
        (["export", "matmul", "-o", str(out_dir / "m.py")], "no correct candidate for problem 'matmul'"),
        (["export", str(ids["softmax_compile_error"]), "-o", str(out_dir / "x.py")],
         f"candidate {ids['softmax_compile_error']} has no correct evaluation "
         "(its latest evaluation is compile_error)"),
        (["export", str(ids["softmax_suspicious"]), "-o", str(out_dir / "x.py")], "latest evaluation is suspicious"),
        (["export", "4242", "-o", str(out_dir / "x.py")], "no candidate with id 4242"),
        (["export", "softmax", "-o", str(out_dir / "softmax-kernel.py")], "-o must name an importable Python file"),
        (["export", "softmax", "-o", str(out_dir / "nowhere" / "k.py")], "does not exist"),
    ]
    for args, needle in cases:
        r = run_kgen(*args, *db)
        assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    assert sorted(p.name for p in out_dir.iterdir()) == []


def test_a_candidate_whose_names_clash_with_the_entry_point_gets_a_distinct_one(tmp_path, out_dir):
    db = open_db(str(tmp_path / "clash.db"))
    p = load_problem("softmax", "small")
    source = starter("softmax", "triton_online_two_pass", BLOCK_SIZE=1024).replace(
        "class ModelNew(nn.Module):", "def softmax(x):\n    return ModelNew()(x)\n\n\nclass ModelNew(nn.Module):")
    cid = store.add_proposal(db, Proposal(source=source, proposer="offline", language="triton"), run_id=None,
                             round_index=None, problem="softmax", problem_hash=p.source_hash)
    store.add_evaluation(db, cid, EvalResult(outcome="correct", language="triton", device="cpu", size="small"))
    db.close()
    r = run_kgen("export", str(cid), "-o", str(out_dir / "clash.py"), "--with-test",
                 "--db", str(tmp_path / "clash.db"))
    assert r.returncode == 0 and "the entry point is 'softmax_forward'" in r.stdout
    assert run_isolated(out_dir, "pytest", "test_clash.py").returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("kgen.evaluate") is None,
                    reason="waits on kgen/evaluate.py (the evaluator `kgen search` runs candidates through)")
def test_round_trip_from_a_real_cpu_search(tmp_path, out_dir):
    db = str(tmp_path / "search.db")
    r = run_kgen("search", "--problem", "softmax", "--rounds", "2", "--size", "small", "--candidates", "2",
                 "--language", "triton", "--quiet", "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    board = run_kgen("leaderboard", "--problem", "softmax", "--format", "json", "--db", db)
    assert board.returncode == 0 and board.stdout.strip() != "[]", board.stdout + board.stderr
    r = run_kgen("export", "softmax", "-o", str(out_dir / "softmax_kernel.py"), "--with-test", "--db", db)
    assert r.returncode == 0, r.stderr
    result = run_isolated(out_dir, "pytest", "test_softmax_kernel.py")
    assert "kgen is not importable here" in result.stdout
    assert result.returncode == 0, result.stdout + result.stderr
