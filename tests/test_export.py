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
import torch

from kgen.core.records import EvalResult, Proposal
from kgen.problems.problem import load_problem
from kgen.store import queries
from kgen.store.db import open_db

from conftest import run_kgen
from test_leaderboard_fixtures import H100, starter

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


def test_export_by_problem_takes_this_devices_winner_and_its_test_passes_without_kgen(results, out_dir):
    path, ids = results
    r = run_kgen("export", "softmax", "-o", str(out_dir / "softmax_kernel.py"), "--with-test", "--no-verify",
                 "--db", str(path))
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
    assert run_kgen("export", str(ids["softmax_best"]), "-o", str(out), "--no-verify",
                    "--db", str(path)).returncode == 0
    text = out.read_text()
    tree = ast.parse(text)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "kgen" not in imported and imported <= {"torch", "triton", "os", "warnings"}
    assert "KGEN_TUNABLE" not in text and "BLOCK_SIZE = 4096" in text and "NUM_WARPS = 16" in text
    doc = ast.get_docstring(tree)
    for needle in ("softmax: a Triton kernel",
                   f"candidate     {ids['softmax_best']}: run {ids['softmax_run']}, round 3",
                   f"device        {H100}", "torch 2.5.1+cu124, triton 3.1.0, CUDA 12.4", "runtime       0.810 ms",
                   "1.620 ms (2.00x faster)", "1.180 ms (1.46x faster) (torch.compile)", "roofline      84.0%",
                   "rtol 1e-05, atol 1e-05", "by kgen 0.1.0", "16 warps: two rows per SM stay in L2",
                   "Pass 1 streams the row", "y = softmax(x)",
                   "on export     not re-verified on export (--no-verify)"):
        assert needle in doc, needle
    assert [n.name for n in tree.body if isinstance(n, ast.FunctionDef)][-1] == "softmax"


def test_a_module_with_parameters_takes_them_after_the_inputs_and_passes_its_test(results, out_dir):
    path, ids = results
    r = run_kgen("export", str(ids["conv_triton"]), "-o", str(out_dir / "conv_kernel.py"), "--with-test",
                 "--no-verify", "--db", str(path))
    assert r.returncode == 0, r.stderr
    text = (out_dir / "conv_kernel.py").read_text()
    assert "def conv2d(x, weight, bias, *, init_inputs=None):" in text and "INIT_INPUTS = [3, 96, 11, 4, 2]" in text
    result = run_isolated(out_dir, "pytest", "test_conv_kernel.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_entry_point_runs_the_reference_where_the_call_is_not_what_was_verified(results, out_dir):
    """Another dtype, rank, layout or device: the reference's result and one warning per argument and
    kind of difference; a call wrong for the reference too (misshapen parameter, not a tensor, too
    few arguments) still raises."""
    path, ids = results
    assert run_kgen("export", str(ids["conv_triton"]), "-o", str(out_dir / "conv_kernel.py"), "--no-verify",
                    "--db", str(path)).returncode == 0
    snippet = textwrap.dedent("""
        import os, warnings, torch
        import torch.nn.functional as F
        import conv_kernel as k
        warnings.simplefilter("always")
        init = [3, 16, 11, 4, 2]
        x, w, b = torch.randn(2, 3, 35, 39), torch.randn(16, 3, 11, 11), torch.randn(16)
        def call(name, *args, **kw):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    y = k.conv2d(*args, **kw)
                except (ValueError, TypeError) as e:
                    print(f"{name}: raised {e}")
                    return
            said = [str(c.message) for c in caught if "running the reference" in str(c.message)]
            print(f"{name}: warnings {len(said)}: {' | '.join(said)}")
            return y
        def same(y, expected):  # the reference's own result, to the bit
            return y.shape == expected.shape and y.dtype == expected.dtype and torch.equal(y, expected)
        y = call("ok", x, w, b, init_inputs=init)
        print("ok ran:", "kernel" if k._entry_models and not k._entry_references else "reference",
              torch.allclose(y, F.conv2d(x, w, b, stride=4, padding=2), rtol=1e-4, atol=1e-4))
        xd, wd, bd = x.double(), w.double(), b.double()
        for _ in range(2):
            y = call("dtype", xd, wd, bd, init_inputs=init)
        print("dtype same:", same(y, F.conv2d(xd, wd, bd, stride=4, padding=2)))
        for _ in range(2):
            y = call("rank", x[0], w, b, init_inputs=init)
        print("rank same:", same(y, F.conv2d(x[0], w, b, stride=4, padding=2)))
        xt = x.transpose(2, 3)
        y = call("contiguous", xt, w, b, init_inputs=init)
        print("contiguous same:", same(y, F.conv2d(xt, w, b, stride=4, padding=2)))
        call("shape", x, w, b)
        call("type", x, w.tolist(), b, init_inputs=init)
        try:
            k.conv2d(x, w)
        except TypeError as e:
            print("arguments: raised TypeError")
        os.environ.pop("TRITON_INTERPRET")
        y = call("device", x, w, b, init_inputs=init)
        print("device same:", same(y, F.conv2d(x, w, b, stride=4, padding=2)))
    """)
    result = run_isolated(out_dir, "exec", snippet)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line]
    said: dict[str, list[str]] = {}
    for key, value in lines:
        said.setdefault(key, []).append(value)
    assert said["ok"] == ["warnings 0: "] and said["ok ran"] == ["kernel True"]
    prefix = "warnings 1: conv2d: running the reference PyTorch code, not the kernel: "
    assert said["dtype"] == [prefix + "x is float64, verified float32; weight is float64, verified float32; "
                             "bias is float64, verified float32 (warned once each)", "warnings 0: "]
    assert said["dtype same"] == ["True"]
    assert said["rank"] == [prefix + "x is 3-D (shape (3, 35, 39)), verified 4-D (warned once each)", "warnings 0: "]
    assert said["rank same"] == ["True"]
    assert said["contiguous"] == [prefix + "x is not contiguous (call .contiguous() to run the kernel) "
                                  "(warned once each)"]
    assert said["contiguous same"] == ["True"]
    assert said["shape"] == ["raised conv2d: weight must have shape (96, 3, 11, 11) for init_inputs "
                             "[3, 96, 11, 4, 2], got (16, 3, 11, 11) (pass init_inputs= for another configuration)"]
    assert said["type"] == ["raised conv2d: weight must be a torch.Tensor, got list"]
    assert said["arguments"] == ["raised TypeError"]
    assert said["device"][0].startswith(prefix + "x is on cpu, not a CUDA device (CPU tensors run the kernel only "
                                        "under TRITON_INTERPRET=1); weight is on cpu")
    assert said["device same"] == ["True"]


def test_a_softmax_called_in_float64_or_3_d_gets_the_reference_and_one_warning_each(results, out_dir):
    path, ids = results
    assert run_kgen("export", str(ids["cpu_first"]), "-o", str(out_dir / "sm.py"), "--no-verify",
                    "--db", str(path)).returncode == 0
    snippet = textwrap.dedent("""
        import warnings, torch
        import sm
        x, x3 = torch.randn(8, 300), torch.randn(2, 8, 300)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ys = [sm.softmax(x.double()) for _ in range(3)] + [sm.softmax(x3) for _ in range(3)]
            y = sm.softmax(x)
        print("warnings:", len(caught))
        for w in caught:
            print("warning:", w.message)
        print("float64 equal:", all(torch.equal(y64, torch.softmax(x.double(), dim=1)) for y64 in ys[:3]))
        print("3-D equal:", all(torch.equal(y3, torch.softmax(x3, dim=1)) for y3 in ys[3:]))
        print("kernel close:", y.dtype == torch.float32 and torch.allclose(y, torch.softmax(x, dim=1), atol=1e-6))
    """)
    result = run_isolated(out_dir, "exec", snippet)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "warnings: 2\n" in out and out.count("warning: softmax: running the reference PyTorch code") == 2, out
    assert "x is float64, verified float32 (warned once each)" in out
    assert "x is 3-D (shape (2, 8, 300)), verified 2-D (warned once each)" in out
    assert "float64 equal: True" in out and "3-D equal: True" in out and "kernel close: True" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_without_a_gpu_the_export_is_not_re_verified_and_says_so(results, out_dir):
    path, ids = results
    out = out_dir / "sm.py"
    r = run_kgen("export", str(ids["softmax_best"]), "-o", str(out), "--db", str(path))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert f"note: not re-verified: no GPU on the exporting machine (kgen verified it on {H100})" in r.stdout
    doc = ast.get_docstring(ast.parse(out.read_text()))
    assert "on export     not re-verified: no GPU on the exporting machine\n" in doc
    r = run_kgen("export", str(ids["softmax_best"]), "-o", str(out), "--no-verify", "--db", str(path))
    assert r.returncode == 0 and "re-verified" not in r.stdout, r.stdout
    assert "on export     not re-verified on export (--no-verify)\n" in ast.get_docstring(ast.parse(out.read_text()))


def _fake_gpu(monkeypatch, outcome: str, message: str = "", max_abs_err=None) -> list:
    """The GPU is mocked: the export sees one, and the judge's result on it is `outcome`; returns the
    settings each re-verification was asked for."""
    from kgen.judge import evaluate
    from kgen.outputs import export

    asked = []

    def judged(problem, source, settings, spares=None):
        asked.append((problem.name, problem.size, settings))
        return EvalResult(outcome=outcome, message=message, device="NVIDIA H200", size=problem.size,
                          max_abs_err=max_abs_err, rtol=settings.rtol, atol=1e-5)

    monkeypatch.setattr(export, "gpu_available", lambda: True)
    monkeypatch.setattr(evaluate, "evaluate_candidate", judged)
    return asked


def test_on_a_gpu_a_candidate_the_judge_no_longer_passes_is_refused_and_nothing_written(results, out_dir,
                                                                                      monkeypatch, capsys):
    from kgen.cli.main import main

    path, ids = results
    asked = _fake_gpu(monkeypatch, "incorrect", "output: 3 of 268435456 elements off\nworst at (7, 12)")
    with pytest.raises(SystemExit) as exit_:
        main(["export", str(ids["softmax_best"]), "-o", str(out_dir / "sm.py"), "--with-test", "--db", str(path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert err == (f"kgen: error: candidate {ids['softmax_best']} is not correct on this GPU (NVIDIA H200), so it is "
                   "not exported: incorrect: output: 3 of 268435456 elements off (--no-verify exports it anyway)\n")
    assert list(out_dir.iterdir()) == []
    # the judge was asked at the full size, with the tolerance kgen verified it at, in the sandbox
    [(name, size, settings)] = asked
    assert (name, size, settings.device, settings.size, settings.rtol, settings.sandbox) == \
        ("softmax", "full", "cuda", "full", 1e-5, "bwrap")


def test_on_a_gpu_a_candidate_still_correct_is_exported_with_what_the_judge_found(results, out_dir, monkeypatch,
                                                                                capsys):
    from kgen.cli.main import main

    path, ids = results
    asked = _fake_gpu(monkeypatch, "correct", max_abs_err=2.5e-7)
    main(["export", str(ids["cpu_first"]), "-o", str(out_dir / "sm.py"), "--no-sandbox", "--db", str(path)])
    out = capsys.readouterr().out
    assert "verified on cpu, re-verified correct on NVIDIA H200)" in out and "note:" not in out, out
    assert asked[0][2].sandbox == "none"
    text = (out_dir / "sm.py").read_text()
    today = __import__("datetime").datetime.now(__import__("datetime").timezone.utc).strftime("%Y-%m-%d")
    assert f"on export     re-verified on NVIDIA H200 {today}: correct, max error 2.50e-07 (full size, rtol 1e-05)" \
        in ast.get_docstring(ast.parse(text))
    # verified at the small size (on the CPU) and now at the full size (on this GPU)
    assert "VERIFIED_SHAPES = [[(64, 1000)], [(4096, 65536)]]" in text and "VERIFIED_GPUS = ['NVIDIA H200']" in text
    asked.clear()
    main(["export", str(ids["cpu_first"]), "-o", str(out_dir / "sm.py"), "--no-verify", "--db", str(path)])
    assert asked == [] and "not re-verified on export (--no-verify)" in (out_dir / "sm.py").read_text()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_real_gpu_the_export_re_verifies_and_refuses_a_wrong_kernel(tmp_path, out_dir):
    """The judge on this GPU, at the full size: a correct kernel is exported with what it found; one
    that is off by 0.1% but recorded correct (verified elsewhere, say) is refused."""
    db = open_db(str(tmp_path / "gpu.db"))
    p = load_problem("softmax", "small")
    good = starter("softmax", "triton_online_two_pass", BLOCK_SIZE=1024)
    bad = good.replace("y = tl.exp(x - row_max) * inv", "y = tl.exp(x - row_max) * inv * 1.001")
    assert "* 1.001" in bad
    ids = {}
    for name, source in (("good", good), ("bad", bad)):
        ids[name] = queries.add_proposal(db, Proposal(source=source, proposer="offline", language="triton"),
                                         run_id=None, round_index=None, problem="softmax", problem_hash=p.source_hash)
        queries.add_evaluation(db, ids[name], EvalResult(outcome="correct", language="triton", device="cpu",
                                                         size="small", rtol=1e-5, atol=1e-5))
    db.close()
    database = ["--db", str(tmp_path / "gpu.db")]
    r = run_kgen("export", str(ids["good"]), "-o", str(out_dir / "good.py"), *database)
    assert r.returncode == 0, r.stderr
    device = torch.cuda.get_device_name(0)
    assert f"re-verified correct on {device}" in r.stdout
    assert f"on export     re-verified on {device} " in (out_dir / "good.py").read_text()
    snippet = textwrap.dedent("""
        import warnings, torch
        import good
        x = torch.randn(512, 3000, device="cuda")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = good.softmax(x)  # this GPU, which the export re-verified it on: the kernel, no warning
            print("kernel:", len(caught), bool(good._entry_models), torch.allclose(y, torch.softmax(x, 1), atol=1e-6))
            good.VERIFIED_GPUS = ["Some Other GPU"]  # as if this were not a GPU it was verified on
            y = good.softmax(x)
            print("reference:", len(caught), torch.equal(y, torch.softmax(x, 1)))
            print("said:", caught[-1].message)
    """)
    result = run_isolated(out_dir, "exec", snippet, interpret=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kernel: 0 True True" in result.stdout and "reference: 1 True" in result.stdout, result.stdout
    assert f"x is on {device}, verified on Some Other GPU" in result.stdout
    r = run_kgen("export", str(ids["bad"]), "-o", str(out_dir / "bad.py"), *database)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"candidate {ids['bad']} is not correct on this GPU ({device}), so it is not exported: incorrect" \
        in r.stderr
    assert not (out_dir / "bad.py").exists()


def test_the_exported_test_fails_a_kernel_that_is_wrong(tmp_path, out_dir):
    """A candidate the DB calls correct but whose kernel is off by 0.1%: its exported test catches it."""
    db = open_db(str(tmp_path / "lying.db"))
    p = load_problem("softmax", "small")
    source = starter("softmax", "triton_online_two_pass", BLOCK_SIZE=1024).replace(
        "y = tl.exp(x - row_max) * inv", "y = tl.exp(x - row_max) * inv * 1.001")
    assert "* 1.001" in source
    cid = queries.add_proposal(db, Proposal(source=source, proposer="offline", language="triton"), run_id=None,
                               round_index=None, problem="softmax", problem_hash=p.source_hash)
    queries.add_evaluation(db, cid, EvalResult(outcome="correct", language="triton", device="cpu", size="small",
                                               rtol=1e-5, atol=1e-5))
    db.close()
    assert run_kgen("export", str(cid), "-o", str(out_dir / "wrong.py"), "--with-test", "--no-verify",
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
    cid = queries.add_proposal(db, Proposal(source=source, proposer="offline", language="triton"), run_id=None,
                               round_index=None, problem="softmax", problem_hash=p.source_hash)
    queries.add_evaluation(db, cid, EvalResult(outcome="correct", language="triton", device="cpu", size="small"))
    db.close()
    r = run_kgen("export", str(cid), "-o", str(out_dir / "clash.py"), "--with-test", "--no-verify",
                 "--db", str(tmp_path / "clash.db"))
    assert r.returncode == 0 and "the entry point is 'softmax_forward'" in r.stdout
    assert run_isolated(out_dir, "pytest", "test_clash.py").returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("kgen.judge.evaluate") is None,
                    reason="waits on kgen/judge/evaluate.py (the evaluator `kgen search` runs candidates through)")
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
