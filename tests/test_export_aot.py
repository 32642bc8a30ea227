"""`kgen export --aot`: the exported module carries the kernels the judge compiled for its own text.

On this CPU machine no kernel can run, but Triton compiles real kernels for a GPU target (its own
ptxas), and g++ builds real C++ extensions: the tests below pack those, import the module in a fresh
Python with an empty cache and check what a GPU import would use. What is mocked is only the GPU
(torch.cuda's availability, name and compute capability, and the judge's result on it), and each test
says so. The tests marked `gpu` do it all for real on a GPU and skip here.
"""

import ast
import base64
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
import torch

from kgen.core.records import EvalResult, Proposal
from kgen.outputs import aot
from kgen.problems.problem import load_problem
from kgen.store import queries
from kgen.store.db import open_db

from conftest import run_kgen
from test_leaderboard_fixtures import starter

GPU_NAME = "NVIDIA H100 80GB HBM3"
CAPABILITY = (9, 0)

# Compiles every @triton.jit kernel of the given files for an sm_90 target into a Triton cache, with
# Triton's own compiler and cache (no GPU needed to compile), as the judge's compile step would on an
# H100: pointers fp32, integers i32, constexprs 64. Also puts a compiled module (a launcher `.so`) into
# the cache through Triton's cache manager, as Triton's driver does.
COMPILE = textwrap.dedent("""
    import hashlib, importlib.util, os, sys, sysconfig
    os.environ["TRITON_CACHE_DIR"] = sys.argv[1]
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource
    from triton.runtime.cache import get_cache_manager
    from triton.runtime.jit import JITFunction

    def kernels(path):
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return [v for v in vars(module).values() if isinstance(v, JITFunction)]

    def source(fn):
        signature = {p.name: "constexpr" if p.is_constexpr else "*fp32" if p.name.endswith("_ptr") else "i32"
                     for p in fn.params}
        return ASTSource(fn, signature, constexprs={p.name: 64 for p in fn.params if p.is_constexpr})

    mode = sys.argv[2]
    if mode == "compile":
        for path in sys.argv[3:]:
            for fn in kernels(path):
                triton.compile(source(fn), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        key = hashlib.sha256(b"a launcher's C source").hexdigest()
        get_cache_manager(key).put(b"\\x7fELF launcher", "__triton_launcher" + sysconfig.get_config_var("EXT_SUFFIX"))
    else:  # "import": the GPU mocked (unless NO_GPU), the exported module imported; its kernels compiled again
        import torch
        if not os.environ.get("NO_GPU"):
            torch.cuda.is_available = lambda: True
            torch.cuda.get_device_capability = lambda device=None: (9, 0)
        hits = []
        triton.knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = __import__(sys.argv[3])
        for w in caught:
            print("warning:", w.message)
        print("cache dir:", triton.knobs.cache.dir)
        print("installed:", sorted(os.listdir(sys.argv[1])) if os.path.isdir(sys.argv[1]) else [])
        for fn in [v for v in vars(module).values() if isinstance(v, JITFunction)]:
            triton.compile(source(fn), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        print("cache hits:", hits)
""")

WARM_UP = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def _kgen_warm_up(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1, mask=offsets < n)
''')


def compile_for_sm90(cache: Path, *files: Path) -> None:
    done = subprocess.run([sys.executable, "-c", COMPILE, str(cache), "compile", *map(str, files)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def import_fresh(folder: Path, module: str, cache: Path, **env: str) -> subprocess.CompletedProcess:
    """`module` imported from `folder` in a fresh Python that cannot import kgen, with Triton's cache at
    the empty `cache` and the GPU mocked (available, compute capability 9.0); then its kernels compiled
    again for sm_90 with a compilation listener."""
    env = dict({k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KGEN_", "TRITON_"))},
               TRITON_CACHE_DIR=str(cache), **env)
    boot = ("import sys; sys.path.append(sys.argv[1]); sys.path.insert(0, sys.argv[2]); sys.argv = sys.argv[2:]\n"
            "try:\n    import kgen\nexcept ImportError:\n    pass\nelse:\n    sys.exit('kgen is importable')\n"
            + COMPILE)
    import site

    return subprocess.run([sys.executable, "-I", "-S", "-c", boot, site.getsitepackages()[0], str(folder), str(cache),
                           "import", module], cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def entries_in(cache: Path) -> dict[str, list[str]]:
    if not cache.is_dir():
        return {}
    return {d.name: sorted(p.name for p in d.iterdir()) for d in cache.iterdir() if d.is_dir()}


# -- refusals, through the real CLI ------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_aot_without_a_gpu_is_refused_in_one_line_and_nothing_is_written(results, out_dir):
    path, ids = results
    r = run_kgen("export", str(ids["softmax_best"]), "-o", str(out_dir / "sm.py"), "--aot", "--db", str(path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == "kgen: error: --aot needs a GPU: the kernels are compiled for the GPU the export re-verifies " \
                       "them on\n"
    assert list(out_dir.iterdir()) == []


def test_aot_with_no_verify_is_refused_in_one_line_and_nothing_is_written(results, out_dir):
    path, ids = results
    r = run_kgen("export", str(ids["softmax_best"]), "-o", str(out_dir / "sm.py"), "--aot", "--no-verify",
                 "--db", str(path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("kgen: error: --aot cannot go with --no-verify: the re-verification on this GPU is "
                               "what compiles") and r.stderr.count("\n") == 1, r.stderr
    assert list(out_dir.iterdir()) == []


# -- the whole export, the GPU and the judge's result mocked; Triton compiling for real -----------------------

def _mock_gpu(monkeypatch, judge):
    """The GPU is mocked: the export sees one (an H100, compute capability 9.0) and the judge's result on
    it is what `judge(problem, text)` returns."""
    from kgen.judge import evaluate
    from kgen.outputs import export

    monkeypatch.setattr(export, "gpu_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: GPU_NAME)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: CAPABILITY)
    monkeypatch.setattr(evaluate, "evaluate_candidate", lambda problem, source, settings, spares=None:
                        judge(problem, source))


def _compiling_judge(tmp_path, verified: list):
    """A stand-in for the judge on an H100: it compiles the text it is given as the compile step does (kgen's
    warm-up kernel, the ablated copy, then the candidate, from files named as the runner names them) into
    the text's build directory, and finds it correct."""
    import triton

    from kgen.judge.ablation import ablate_triton_kernels
    from kgen.judge.builds import build_key, builds_root

    def judge(problem, text):
        verified.append(text)
        key = build_key(text, None)
        stage = tmp_path / "sandbox-tmp"
        stage.mkdir(exist_ok=True)
        (stage / "kgen_candidate.py").write_text(text)
        (stage / "kgen_ablated.py").write_text(ablate_triton_kernels(text))
        (stage / "runner.py").write_text(WARM_UP)
        compile_for_sm90(builds_root() / key / "triton", stage / "runner.py", stage / "kgen_ablated.py",
                         stage / "kgen_candidate.py")
        (builds_root() / key / "cuda").mkdir()
        return EvalResult(outcome="correct", device=GPU_NAME, size=problem.size, max_abs_err=2.5e-7, rtol=1e-5,
                          atol=1e-5, language="triton", torch_version=torch.__version__,
                          triton_version=triton.__version__, cuda_version="12.8",
                          details={"build_key": key, "compile_step": "compiled"})

    return judge


def _softmax_candidate(tmp_path) -> tuple[Path, int]:
    db = open_db(str(tmp_path / "aot.db"))
    p = load_problem("softmax", "small")
    cid = queries.add_proposal(db, Proposal(source=starter("softmax", "triton_online_two_pass", BLOCK_SIZE=1024),
                                            proposer="offline", language="triton"),
                               run_id=None, round_index=None, problem="softmax", problem_hash=p.source_hash)
    queries.add_evaluation(db, cid, EvalResult(outcome="correct", language="triton", device="cpu", size="small",
                                               rtol=1e-5, atol=1e-5))
    db.close()
    return tmp_path / "aot.db", cid


def test_aot_module_carries_the_kernels_compiled_from_its_own_text_and_a_fresh_import_hits_them(
        tmp_path, out_dir, monkeypatch, capsys):
    """The judge (mocked, compiling for real) is given the module's text; the written module differs from
    it only in lines that move nothing, carries its kernel (not kgen's warm-up kernel, not the ablated
    copy's) and the launcher; a fresh Python with an empty cache gets them installed by Triton's own cache
    manager, and compiling the module's kernel there is a cache hit."""
    import triton

    from kgen.cli.main import main

    db, cid = _softmax_candidate(tmp_path)
    verified: list[str] = []
    _mock_gpu(monkeypatch, _compiling_judge(tmp_path, verified))
    main(["export", str(cid), "-o", str(out_dir / "sm.py"), "--aot", "--db", str(db)])
    out = capsys.readouterr().out
    assert f"re-verified correct on {GPU_NAME})" in out and "carries 1 Triton kernel built for " in out, out

    # what the judge verified is the module, and the file differs from it in three lines plus the payload
    [text] = verified
    written = (out_dir / "sm.py").read_text()
    assert "_softmax_online_kernel" in text and "def softmax(x, *, init_inputs=None):" in text
    lines, written_lines = text.splitlines(), written.splitlines()
    differ = [(a, b) for a, b in zip(lines, written_lines) if a != b]
    assert [a.split()[0] for a, _ in differ] == ["on", "compiled", "_KGEN_AOT_SHA256"], differ
    assert differ[2][0] == "_KGEN_AOT_SHA256 = None"
    tail = written_lines[len(lines):]
    assert '_KGEN_AOT_PAYLOAD = """\\' in tail and tail[-1] == '"""' and max(map(len, tail)) <= 100, tail[:5]
    doc = ast.get_docstring(ast.parse(written))
    today = __import__("datetime").datetime.now(__import__("datetime").timezone.utc).strftime("%Y-%m-%d")
    assert f"on export     re-verified on {GPU_NAME} {today}: correct, max error 2.50e-07" in doc
    assert f"compiled      1 Triton kernel built for {GPU_NAME} (sm_90) with Triton {triton.__version__}, torch " \
           f"{torch.__version__} (" in doc
    assert "Compiled kernels (kgen export --aot)" in doc and f"VERIFIED_GPUS = ['{GPU_NAME}']" in written

    # what it carries: the candidate's kernel and the launcher, not the warm-up kernel nor the ablated copy
    built = entries_in(next((tmp_path / "kgen-cache" / "builds").iterdir()) / "triton")
    kernels = [files for files in built.values() if any(f.endswith(".cubin") for f in files)]
    assert len(kernels) == 3  # warm-up, ablated, candidate
    payload = written[written.rindex('"""\\\n') + 5:written.rindex('"""')]
    raw = base64.b64decode("".join(payload.split()))
    assert hashlib.sha256(raw).hexdigest() in written
    meta = json.loads(__import__("zlib").decompress(raw).split(b"\n", 1)[0])
    assert (meta["gpu"], meta["capability"], meta["triton_version"]) == (GPU_NAME, [9, 0], triton.__version__)
    groups = [g for e in meta["triton"] for g in e["groups"].values()]
    assert [sorted(g) for g in groups] == [["_softmax_online_kernel.cubin", "_softmax_online_kernel.json"]]
    assert sorted(f for e in meta["triton"] for f in e["files"]) == \
        ["__triton_launcher" + sysconfig.get_config_var("EXT_SUFFIX")]

    # a fresh Python, an empty cache: installed where Triton looks, every group pointing at files there
    cache = tmp_path / "fresh-cache"
    done = import_fresh(out_dir, "sm", cache)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning:" not in done.stdout, done.stdout
    assert f"cache dir: {cache}\n" in done.stdout  # the user's cache location is left as it was
    assert "cache hits: [True]\n" in done.stdout, done.stdout
    installed = entries_in(cache)
    assert sorted(map(tuple, installed.values())) == sorted([
        ("__grp___softmax_online_kernel.json", "_softmax_online_kernel.cubin", "_softmax_online_kernel.json"),
        ("__triton_launcher" + sysconfig.get_config_var("EXT_SUFFIX"),)])
    from triton.runtime.cache import FileCacheManager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    for entry in meta["triton"]:
        manager = FileCacheManager(base64.b32encode(bytes.fromhex(entry["key"])).decode().rstrip("="))
        for metadata_name in entry["groups"]:
            group = manager.get_group(metadata_name)
            assert group is not None and sorted(group) == sorted(entry["groups"][metadata_name])
            assert all(Path(p).is_file() and Path(p).parent.parent == cache for p in group.values())
        for name in entry["files"]:
            assert Path(manager.get_file(name)).read_bytes() == b"\x7fELF launcher"

    # imported again: the entries are there already, nothing rewritten, still a hit
    before = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    again = import_fresh(out_dir, "sm", cache)
    assert again.returncode == 0 and "cache hits: [True]\n" in again.stdout, again.stdout + again.stderr
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()} == before


def test_the_written_module_without_its_payload_is_a_cache_miss_so_the_hit_above_is_the_payloads(
        tmp_path, out_dir, monkeypatch):
    """The control for the test above: the same module with its checksum removed installs nothing, and
    the same compile in a fresh Python is then a miss."""
    from kgen.cli.main import main

    db, cid = _softmax_candidate(tmp_path)
    _mock_gpu(monkeypatch, _compiling_judge(tmp_path, []))
    main(["export", str(cid), "-o", str(out_dir / "sm.py"), "--aot", "--db", str(db)])
    text = (out_dir / "sm.py").read_text()
    sha = aot.SHA_NAME + " = '"
    start = text.index(sha)
    (out_dir / "bare.py").write_text(text[:start] + aot.SHA_NAME + " = None" + text[text.index("\n", start):])
    done = import_fresh(out_dir, "bare", tmp_path / "fresh-cache")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cache hits: [False]\n" in done.stdout and "warning:" not in done.stdout, done.stdout


def _packed_module(tmp_path, out_dir, name: str, **meta_changes) -> Path:
    """A module carrying a real sm_90 kernel compiled from its own text (the same steps as the export,
    done here directly), with `meta_changes` applied to what the payload records."""
    import triton

    code = aot.shim_source(None) + "\n" + WARM_UP.replace("_kgen_warm_up", "add_one")
    stage = tmp_path / f"stage-{name}"
    stage.mkdir()
    (stage / f"{name}.py").write_text(code)
    build = tmp_path / f"build-{name}"
    compile_for_sm90(build / "triton", stage / f"{name}.py")
    meta = dict(aot.target_meta(GPU_NAME, CAPABILITY, triton.__version__, torch.__version__, None), **meta_changes)
    payload = aot.payload_from_build(build, {}, "triton", meta)
    path = out_dir / f"{name}.py"
    path.write_text(code.replace(f"{aot.SHA_NAME} = None", f"{aot.SHA_NAME} = {payload.sha256!r}") + payload.text)
    return path


def test_a_payload_for_another_triton_version_or_gpu_is_not_installed_and_says_so_once(tmp_path, out_dir):
    _packed_module(tmp_path, out_dir, "old_triton", triton_version="3.0.0")
    done = import_fresh(out_dir, "old_triton", tmp_path / "cache-a")
    assert done.returncode == 0, done.stdout + done.stderr
    import triton

    said = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    assert said == [f"warning: old_triton: not using the compiled Triton kernels in this file (Triton "
                    f"{triton.__version__} here, compiled with 3.0.0): Triton compiles them on first use"], done.stdout
    assert "installed: []\n" in done.stdout and "cache hits: [False]\n" in done.stdout, done.stdout

    _packed_module(tmp_path, out_dir, "for_a100", capability=[8, 0], gpu="NVIDIA A100-SXM4-80GB")
    done = import_fresh(out_dir, "for_a100", tmp_path / "cache-b")
    said = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    assert said == ["warning: for_a100: not using the compiled Triton kernels in this file (a GPU of compute "
                    "capability 9.0 here, compiled for NVIDIA A100-SXM4-80GB (8.0)): Triton compiles them on first "
                    "use"], done.stdout
    assert "installed: []\n" in done.stdout, done.stdout


@pytest.mark.parametrize("where", ["interpreter", "no GPU"])
def test_under_the_interpreter_or_without_a_gpu_nothing_is_installed_and_nothing_said(tmp_path, out_dir, where):
    _packed_module(tmp_path, out_dir, "quiet")
    env = {"TRITON_INTERPRET": "1"} if where == "interpreter" else {"NO_GPU": "1"}
    done = import_fresh(out_dir, "quiet", tmp_path / "cache", **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning:" not in done.stdout and "installed: []\n" in done.stdout, done.stdout


def test_a_payload_changed_after_the_export_is_refused_by_its_checksum(tmp_path, out_dir):
    path = _packed_module(tmp_path, out_dir, "edited")
    text = path.read_text()
    at = text.rindex('"""') - 10
    path.write_text(text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1:])
    done = import_fresh(out_dir, "edited", tmp_path / "cache")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning: edited: not using the compiled kernels kgen export --aot embedded: its payload does not match " \
           "its checksum (the file was changed); they compile as usual" in done.stdout, done.stdout
    assert "installed: []\n" in done.stdout, done.stdout


# -- the build directory the export reads ------------------------------------------------------------------

def test_a_build_directory_without_the_modules_kernels_is_refused_in_one_line(tmp_path, out_dir, monkeypatch,
                                                                              capsys):
    """The GPU and the judge are mocked: the judge says it compiled into a build directory that holds only
    kgen's own warm-up kernel (then: none at all, then: no build directory named)."""
    from kgen.cli.main import main
    from kgen.judge.builds import builds_root

    db, cid = _softmax_candidate(tmp_path)
    only_warm_up = builds_root() / "only-warm-up"
    (tmp_path / "runner.py").write_text(WARM_UP)
    compile_for_sm90(only_warm_up / "triton", tmp_path / "runner.py")
    for details, needle in (
            ({"build_key": "only-warm-up"}, f"the judge's build directory {only_warm_up / 'triton'} holds no "
                                            "compiled Triton kernel of the module"),
            ({"build_key": "nowhere"}, f"the judge's build directory {builds_root() / 'nowhere'} is missing"),
            ({}, "the judge did not say where it compiled the module's kernels")):
        _mock_gpu(monkeypatch, lambda problem, text, details=details: EvalResult(
            outcome="correct", device=GPU_NAME, size=problem.size, rtol=1e-5, details=dict(details)))
        with pytest.raises(SystemExit) as exit_:
            main(["export", str(cid), "-o", str(out_dir / "sm.py"), "--aot", "--db", str(db)])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and needle in err, err
        assert list(out_dir.iterdir()) == []


def test_a_module_the_judge_finds_wrong_is_refused_as_the_exported_module(tmp_path, out_dir, monkeypatch, capsys):
    from kgen.cli.main import main

    db, cid = _softmax_candidate(tmp_path)
    _mock_gpu(monkeypatch, lambda problem, text: EvalResult(outcome="incorrect", message="trial 2 of 5: off",
                                                            device=GPU_NAME, size=problem.size))
    with pytest.raises(SystemExit) as exit_:
        main(["export", str(cid), "-o", str(out_dir / "sm.py"), "--aot", "--db", str(db)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err == (f"kgen: error: candidate {cid} (as the exported module) is not correct "
                                             f"on this GPU ({GPU_NAME}), so it is not exported: incorrect: trial 2 "
                                             "of 5: off (--no-verify exports it anyway)\n")
    assert list(out_dir.iterdir()) == []


# -- CUDA extensions: a real C++ extension, built with g++ through kgen's builders ---------------------------

# A C++ extension with no torch headers (so it builds in seconds); its module is named by the build.
EXTENSION = textwrap.dedent("""
    #include <Python.h>
    static PyObject* add(PyObject*, PyObject* arg) {
        long v = PyLong_AsLong(arg);
        if (v == -1 && PyErr_Occurred()) return nullptr;
        return PyLong_FromLong(v + INCREMENT);
    }
    static PyMethodDef methods[] = {{"add", add, METH_O, "v + INCREMENT"}, {nullptr, nullptr, 0, nullptr}};
    #define NAME_(x) #x
    #define NAME(x) NAME_(x)
    #define INIT_(x) PyInit_##x
    #define INIT(x) INIT_(x)
    static struct PyModuleDef definition = {PyModuleDef_HEAD_INIT, NAME(TORCH_EXTENSION_NAME), nullptr, -1, methods};
    PyMODINIT_FUNC INIT(TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&definition); }
""")

# The module's own code, as a candidate writes it: at import (`eager`), or in a function called later, the way
# kgen's CUDA starters build in forward (`lazy`).
EXTENSION_USER = {
    "eager": textwrap.dedent('''
        from torch.utils.cpp_extension import load_inline

        SOURCE = {source!r}
        ext = load_inline(name="adder", cpp_sources=SOURCE.replace("INCREMENT", "{increment}"),
                          no_implicit_headers=True, extra_cflags=["-O2"])
        {after}
    '''),
    "load": textwrap.dedent('''
        import os

        from torch.utils.cpp_extension import load

        SOURCE = {source!r}
        ext = load(name="adder", sources=[os.path.join(os.path.dirname(os.path.abspath(__file__)), "adder.cpp")],
                   extra_cflags=["-O2"])
        {after}
    '''),
    "lazy": textwrap.dedent('''
        import torch

        SOURCE = {source!r}
        _built = {{}}


        def extension():
            if "ext" not in _built:
                import torch.utils.cpp_extension as ce
                _built["ext"] = ce.load_inline(name="adder", cpp_sources=SOURCE.replace("INCREMENT", "{increment}"),
                                               no_implicit_headers=True, extra_cflags=["-O2"])
            return _built["ext"]
        {after}
    '''),
}


# The compile step's build, in a process of its own as there: kgen's keyed load_inline on the extension;
# prints the build log.
BUILD_EXTENSION = textwrap.dedent("""
    import json, sys
    from kgen.harness import cuda_build
    log = cuda_build.BuildLog()
    load_inline, load = cuda_build.keyed_builders(log, lambda name: None)
    if sys.argv[2] == "load":  # from a file of the sandbox's own
        with open("adder.cpp", "w") as f:
            f.write(sys.argv[1])
        ext = load(name="adder", sources=["adder.cpp"], extra_cflags=["-O2"])
    else:
        ext = load_inline(name="adder", cpp_sources=sys.argv[1], no_implicit_headers=True, extra_cflags=["-O2"])
    assert ext.add(1) == 2
    print(json.dumps(log.builds))
""")


def _needs_no_implicit_headers():
    import inspect

    from torch.utils.cpp_extension import load_inline

    if "no_implicit_headers" not in inspect.signature(load_inline).parameters:
        pytest.skip("this torch's load_inline has no no_implicit_headers")


def _cuda_module(tmp_path, out_dir, name: str, increment: int, style: str = "eager", after: str = "") -> Path:
    """A module whose code calls load_inline (`style`); the extension built from the call with increment 1
    through kgen's keyed builders, as the compile step builds it, and carried (built without a GPU here:
    no capability recorded)."""
    _needs_no_implicit_headers()
    build = tmp_path / f"build-{name}"
    sandbox = tmp_path / f"sandbox-{name}"
    sandbox.mkdir()
    builds = json.loads(subprocess.run([sys.executable, "-c", BUILD_EXTENSION, EXTENSION.replace("INCREMENT", "1"),
                                        "load" if style == "load" else "load_inline"], cwd=sandbox,
                                       env=dict(os.environ, KGEN_CUDA_BUILD_DIR=str(build / "cuda")),
                                       capture_output=True, text=True, timeout=300, check=True).stdout)
    [entry] = builds
    assert entry["call"] and (build / "cuda" / entry["key"]).parent.is_dir()
    meta = aot.target_meta("cpu", None, None, torch.__version__, torch.version.cuda)
    payload = aot.payload_from_build(build, {"cuda_builds": builds}, "cuda", meta)
    assert payload.cuda_builds == 1 and payload.triton_kernels == 0
    code = aot.shim_source(payload.sha256) + EXTENSION_USER[style].format(source=EXTENSION, increment=increment,
                                                                          after=after)
    path = out_dir / f"{name}.py"
    path.write_text(code + payload.text)
    if style == "load":
        (out_dir / "adder.cpp").write_text(EXTENSION.replace("INCREMENT", str(increment)))
    return path


CHECK_EXTENSION = textwrap.dedent("""
    import os, warnings, torch.utils.cpp_extension as ce
    original, original_load = ce.load_inline, ce.load
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import {name} as m
            ext = m.extension() if hasattr(m, "extension") else m.ext
        except Exception as e:
            print("import failed:", type(e).__name__, e)
        else:
            print("add(41):", ext.add(41))
    for w in caught:
        print("warning:", w.message)
    print("torch's own:", getattr(ce.load_inline, "_kgen_aot_original", ce.load_inline) is original,
          getattr(ce.load, "_kgen_aot_original", ce.load) is original_load)
    print("built:", sorted(os.listdir(os.environ["TORCH_EXTENSIONS_DIR"])) if os.path.isdir(
        os.environ["TORCH_EXTENSIONS_DIR"]) else [])
    # the very call the module carries a build for, from elsewhere: torch's load_inline, which builds it
    try:
        ce.load_inline(name="adder", cpp_sources=m.SOURCE.replace("INCREMENT", "1"), no_implicit_headers=True,
                       extra_cflags=["-O2"])
        print("elsewhere: built")
    except Exception as e:
        print("elsewhere:", type(e).__name__)
""")


def run_fresh(cwd: Path, snippet: str, **env: str) -> subprocess.CompletedProcess:
    """`snippet` in a fresh Python that cannot import kgen (tests/test_export.py's boot), run in `cwd`,
    with `env` added to an environment without PYTHON*, KGEN_* and TRITON_* variables."""
    import site

    from test_export import ISOLATED_BOOT

    full = dict({k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KGEN_", "TRITON_"))}, **env)
    return subprocess.run([sys.executable, "-I", "-S", "-c", ISOLATED_BOOT, site.getsitepackages()[0], "exec",
                           snippet], cwd=cwd, env=full, capture_output=True, text=True, timeout=600)


def _no_compilers(tmp_path) -> dict[str, str]:
    """An environment in which nothing can be built: no c++, g++, gcc, ninja or nvcc on PATH. `file` stays
    where this machine has it: Triton keys its compiled launcher and driver modules by a platform string
    that Python's platform.architecture() reads by running `file` (('64bit', 'ELF') with it, ('64bit', '')
    without), so a PATH without it is another platform to Triton, as it would be to a user's."""
    import shutil

    empty = tmp_path / "no-compilers"
    empty.mkdir(exist_ok=True)
    found = shutil.which("file")
    if found and not (empty / "file").exists():
        (empty / "file").symlink_to(found)
    return {"PATH": str(empty), "CXX": "/nonexistent/c++", "CC": "/nonexistent/cc"}


def _extension_env(tmp_path, name: str) -> dict[str, str]:
    return {"TORCH_EXTENSIONS_DIR": str(tmp_path / f"torch-extensions-{name}"), "KGEN_AOT_DIR": str(tmp_path / "aot")}


@pytest.mark.parametrize("style", ["eager", "lazy", "load"])
def test_the_module_loads_its_carried_extension_with_no_compiler_and_an_empty_extensions_dir(tmp_path, out_dir,
                                                                                             style):
    _cuda_module(tmp_path, out_dir, "carried", increment=1, style=style)
    env = dict(_extension_env(tmp_path, "carried"), **_no_compilers(tmp_path))
    done = run_fresh(out_dir, CHECK_EXTENSION.format(name="carried"), **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "add(41): 42\n" in done.stdout and "warning:" not in done.stdout, done.stdout
    assert "built: []\n" in done.stdout and "torch's own: True True\n" in done.stdout, done.stdout
    # from any code but the module's, the same call is torch's: it tries to build, and cannot here
    assert "elsewhere: RuntimeError\n" in done.stdout, done.stdout
    [where] = list((tmp_path / "aot").iterdir())
    [library] = list(where.iterdir())
    assert library.name.startswith("kgen_") and library.suffix == ".so"
    # imported again: the .so already there is used as it is
    mtime = library.stat().st_mtime_ns
    again = run_fresh(out_dir, CHECK_EXTENSION.format(name="carried"), **env)
    assert "add(41): 42\n" in again.stdout and "warning:" not in again.stdout, again.stdout + again.stderr
    assert library.stat().st_mtime_ns == mtime


def test_a_load_inline_call_other_than_the_compiled_one_warns_once_and_is_built(tmp_path, out_dir):
    _cuda_module(tmp_path, out_dir, "changed", increment=2)  # its source differs from the one built (1)
    done = run_fresh(out_dir, CHECK_EXTENSION.format(name="changed"), **_extension_env(tmp_path, "changed"))
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    assert said == ["warning: changed: this load_inline(...) call is not one kgen export --aot compiled (its sources "
                    "or flags differ): building it"], done.stdout
    assert "add(41): 43\n" in done.stdout and "built: ['adder']\n" in done.stdout, done.stdout


def test_a_module_whose_import_fails_leaves_load_inline_to_torch_for_everyone_else(tmp_path, out_dir):
    _cuda_module(tmp_path, out_dir, "failing", increment=1, after="raise RuntimeError('the module fails here')")
    snippet = CHECK_EXTENSION.format(name="failing").replace("m.SOURCE", "SOURCE").replace(
        "original, original_load = ce.load_inline, ce.load",
        f"original, original_load = ce.load_inline, ce.load\nSOURCE = {EXTENSION!r}")
    env = dict(_extension_env(tmp_path, "failing"), **_no_compilers(tmp_path))
    done = run_fresh(out_dir, snippet, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "import failed: RuntimeError the module fails here\n" in done.stdout, done.stdout
    # torch's load_inline tried to build it, and could not: no compiler here
    assert "torch's own: True True\n" in done.stdout and "elsewhere: RuntimeError\n" in done.stdout, done.stdout


def test_a_load_inline_that_someone_else_replaced_first_is_left_to_them_with_one_warning(tmp_path, out_dir):
    """As kgen's judge does in its sandbox: the module's calls go to their function, not to the carried build."""
    _cuda_module(tmp_path, out_dir, "theirs", increment=1)
    snippet = textwrap.dedent("""
        import types, warnings
        import torch.utils.cpp_extension as ce
        calls = []

        def theirs(*args, **kwargs):
            calls.append(kwargs.get("name"))
            return types.SimpleNamespace(add=lambda v: v + 100)

        theirs.__module__ = "their.builder"
        ce.load_inline = theirs
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import theirs as m
        print("add(1):", m.ext.add(1), calls, ce.load_inline is theirs)
        for w in caught:
            print("warning:", w.message)
    """)
    done = run_fresh(out_dir, snippet, **_extension_env(tmp_path, "theirs"), **_no_compilers(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "add(1): 101 ['adder'] True\n" in done.stdout, done.stdout
    said = [line for line in done.stdout.splitlines() if line.startswith("warning:")]
    assert said == ["warning: theirs: not using the compiled CUDA extensions in this file for "
                    "torch.utils.cpp_extension.load_inline (by their.builder), replaced before this module was "
                    "imported: those calls build as usual"], done.stdout


def test_a_build_the_verified_run_loaded_but_that_is_gone_is_refused(tmp_path):
    from kgen.core.errors import KgenError

    (tmp_path / "build" / "cuda").mkdir(parents=True)
    builds = [{"kind": "load_inline", "key": "0123456789abcdef0123", "arch": "sm_90a", "call": "ab" * 32}]
    with pytest.raises(KgenError, match=r"has no kgen_0123456789abcdef0123\.so with its calls recorded, for the "
                                        r"load_inline\(\.\.\.\) call the verified run loaded"):
        aot.payload_from_build(tmp_path / "build", {"cuda_builds": builds}, "cuda", {})
    with pytest.raises(KgenError, match="holds no CUDA extension built by the module's load_inline/load calls"):
        aot.payload_from_build(tmp_path / "build", {}, "cuda", {})


def test_the_call_digest_is_the_call_as_written_not_where_or_how_loudly_it_builds():
    from kgen.harness.cuda_build import call_digest

    call = {"name": "a", "cpp_sources": "int f();", "extra_cuda_cflags": ["-arch=sm_70"], "build_directory": None,
            "verbose": False}
    same = dict(call, name="b", build_directory="/tmp/x", verbose=True)
    assert call_digest(call) == call_digest(same)
    for change in ({"cpp_sources": "int g();"}, {"extra_cuda_cflags": ["-arch=sm_90"]}, {"with_cuda": True}):
        assert call_digest(dict(call, **change)) != call_digest(call), change
    # the module carries this very function's source (and the shim's), renamed only
    import inspect

    shim = aot.shim_source()
    assert inspect.getsource(call_digest).replace("def call_digest(", "def _kgen_aot_call_digest(", 1) in shim
    assert inspect.getsource(aot._kgen_aot_begin) in shim


# -- on a real GPU -------------------------------------------------------------------------------------------

GPU_CHECK = textwrap.dedent("""
    import os, shutil, sys, warnings
    import torch
    import triton
    hits = []
    triton.knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import {module} as m
        torch.manual_seed(0)
        x = torch.randn({shape}, device="cuda")
        y = m.softmax(x)
        torch.cuda.synchronize()
    print("warnings:", [str(w.message) for w in caught if any(word in str(w.message) for word in (
        "{module}", "kgen", "softmax", "compile", "build"))])
    print("compiles:", hits)
    print("close:", torch.allclose(y, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6))
    print("compilers on PATH:", [c for c in ("cc", "gcc", "g++", "c++", "nvcc", "ninja") if shutil.which(c)])
""")


def _gpu_export(tmp_path, out_dir, problem: str, name: str, module: str, language: str) -> str:
    db = open_db(str(tmp_path / f"{module}.db"))
    p = load_problem(problem, "small")
    cid = queries.add_proposal(db, Proposal(source=starter(problem, name), proposer="offline", language=language),
                               run_id=None, round_index=None, problem=problem, problem_hash=p.source_hash)
    queries.add_evaluation(db, cid, EvalResult(outcome="correct", language=language, device="cpu", size="small",
                                               rtol=1e-5, atol=1e-5))
    db.close()
    r = run_kgen("export", str(cid), "-o", str(out_dir / f"{module}.py"), "--aot", "--db",
                 str(tmp_path / f"{module}.db"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "carries " in r.stdout and f"built for {torch.cuda.get_device_name(0)}" in r.stdout, r.stdout
    return r.stdout


def _run_on_gpu(tmp_path, out_dir, module: str) -> subprocess.CompletedProcess:
    """The exported module in a fresh Python that cannot import kgen, with an empty Triton cache, an empty
    torch extensions folder and no compiler on PATH, at the problem's full size (the verified shape)."""
    shape = tuple(load_problem("softmax", "full").input_specs()[0].shape)
    env = {"TRITON_CACHE_DIR": str(tmp_path / f"triton-{module}"), "KGEN_AOT_DIR": str(tmp_path / "aot"),
           "TORCH_EXTENSIONS_DIR": str(tmp_path / f"extensions-{module}"), **_no_compilers(tmp_path)}
    return run_fresh(out_dir, GPU_CHECK.format(module=module, shape=shape), **env)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_real_gpu_an_aot_triton_module_runs_with_every_kernel_a_cache_hit_and_no_compiler(tmp_path, out_dir):
    _gpu_export(tmp_path, out_dir, "softmax", "triton_online_two_pass", "sm_triton", "triton")
    done = _run_on_gpu(tmp_path, out_dir, "sm_triton")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warnings: []\n" in done.stdout and "close: True\n" in done.stdout, done.stdout
    assert "compiles: [True]\n" in done.stdout, done.stdout  # one kernel, found in the cache the module filled
    assert "compilers on PATH: []\n" in done.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_real_gpu_an_aot_cuda_module_imports_and_runs_without_nvcc(tmp_path, out_dir):
    _gpu_export(tmp_path, out_dir, "softmax", "cuda_two_pass", "sm_cuda", "cuda")
    done = _run_on_gpu(tmp_path, out_dir, "sm_cuda")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warnings: []\n" in done.stdout and "close: True\n" in done.stdout, done.stdout
    assert "compilers on PATH: []\n" in done.stdout
    assert not (tmp_path / "extensions-sm_cuda").exists() or not any((tmp_path / "extensions-sm_cuda").iterdir())
    assert len(list((tmp_path / "aot").iterdir())) >= 1  # the carried extension, written where the module loads it
