"""kgen's precompiled torch/extension.h: made by trusted code for kgen's own flag sets, used by builds
whose flags match, read-only to candidates.

Real GCC and real builds: a C++-only `load_inline` extension (torch/extension.h, pybind11 bindings)
builds and loads on this CPU torch, so two builds through kgen's builder with the PCH are imported and
called. The PCH is made once for the module (minutes on a small loaded machine).
"""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kgen.harness import cuda_build
from kgen.harness.cuda_build import (
    PCH_HEADER,
    PCH_ROOT_ENV,
    BuildLog,
    ensure_torch_pch,
    keyed_builders,
    torch_cxx_flags,
    usable_torch_pch,
    wanted_pch_flag_sets,
)

CANDIDATES = Path(__file__).resolve().parent / "cuda_arch_candidates"
needs_gcc = pytest.mark.skipif(shutil.which("g++") is None, reason="needs GCC")


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def pch_home(tmp_path_factory):
    """A cache dir whose torch-pch holds the PCH for `-O3` C++ builds (with_cuda=False: this torch has no CUDA)."""
    home = tmp_path_factory.mktemp("pch-home")
    saved = os.environ.get("KGEN_CACHE_DIR")
    os.environ["KGEN_CACHE_DIR"] = str(home / "cache")
    made = ensure_torch_pch(("-O3",), with_cuda=False)
    yield home, made
    if saved is None:
        os.environ.pop("KGEN_CACHE_DIR", None)
    else:
        os.environ["KGEN_CACHE_DIR"] = saved


def test_only_kgens_flag_sets_written_literally_ask_for_a_pch():
    def wanted(call: str) -> list:
        return wanted_pch_flag_sets(f"from torch.utils.cpp_extension import load_inline\nm = {call}\n")

    assert wanted('load_inline("m", cpp_sources="", extra_cflags=["-O3"])') == [("-O3",)]
    assert wanted('load_inline("m", cpp_sources="")') == [()]
    # KernelBench's generations pass an empty flag (104 of the 240-entry collection): torch drops it, so must we
    assert wanted('load_inline("m", cpp_sources="", extra_cflags=[""])') == [()]
    assert wanted('load_inline("m", cpp_sources="", extra_cflags=["-O3", " "])') == [("-O3",)]
    assert wanted('load_inline("m", cpp_sources="", extra_cflags=["-O2", "-arch=sm_70"])') == [("-O2",)]
    assert wanted('load_inline("m", cpp_sources="", extra_cflags=["-O3", "-fplugin=/tmp/x.so"])') == []
    assert wanted('load_inline("m", cpp_sources="", extra_cflags=FLAGS)') == []  # not literal: never evaluated
    assert wanted('load_inline("m", cpp_sources="", no_implicit_headers=True)') == []  # no torch header to precompile


def test_a_candidates_build_never_makes_a_pch(tmp_path, monkeypatch):
    monkeypatch.setenv(PCH_ROOT_ENV, str(tmp_path / "torch-pch"))
    assert usable_torch_pch(["-O3"], [], with_cuda=False) is None
    assert not (tmp_path / "torch-pch").exists()
    assert usable_torch_pch(["-O3", "-fplugin=/tmp/x.so"], [], with_cuda=False) is None


@needs_gcc
def test_the_pch_is_made_once_read_only_and_valid_for_its_flags(pch_home, tmp_path, monkeypatch):
    _home, made = pch_home
    assert made is not None
    monkeypatch.setenv(PCH_ROOT_ENV, str(made.parent))
    assert usable_torch_pch(["-O3"], [], with_cuda=False) == made
    assert usable_torch_pch(["-O3", ""], [], with_cuda=False) == made  # an empty flag: the same build
    gch = made / (PCH_HEADER + ".gch")
    assert gch.stat().st_mode & 0o222 == 0 and made.stat().st_mode & 0o222 == 0  # no write bit for anyone
    assert ensure_torch_pch(("-O3",), with_cuda=False, root=made.parent) == made  # found, not made again
    assert gch.stat().st_mtime_ns == (made / (PCH_HEADER + ".gch")).stat().st_mtime_ns
    # GCC takes it for a TU with these flags (-Werror=invalid-pch: a rejected PCH is an error)
    tu = tmp_path / "tu.cpp"
    tu.write_text("#include <torch/extension.h>\nint f() { return 1; }\n")
    flags = torch_cxx_flags(["-O3"], [], with_cuda=False)
    done = subprocess.run([cuda_build.cxx_compiler(), "-fsyntax-only", str(tu), "-DTORCH_EXTENSION_NAME=any",
                           *flags, f"-I{made}", "-Werror=invalid-pch"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


BINDING = r"""
torch::Tensor apply(torch::Tensor x) { return x %s; }
"""


@needs_gcc
def test_two_builds_of_a_binding_with_the_pch_give_working_extensions(pch_home, monkeypatch):
    import torch

    home, made = pch_home
    monkeypatch.setenv(PCH_ROOT_ENV, str(made.parent))
    monkeypatch.setenv("KGEN_CUDA_BUILD_DIR", str(home / "builds"))
    log = BuildLog()
    load_inline, _ = keyed_builders(log, lambda name: None)
    plus = load_inline(name="plus", cpp_sources=BINDING % "+ 1", functions=["apply"], extra_cflags=["-O3"])
    times = load_inline(name="times", cpp_sources=BINDING % "* 2", functions=["apply"], extra_cflags=["-O3"])
    x = torch.arange(4.0)
    assert torch.equal(plus.apply(x), x + 1) and torch.equal(times.apply(x), x * 2)
    assert [b.get("pch") for b in log.builds] == [True, True]


@needs_gcc
def test_a_candidate_cannot_write_the_pch(pch_home, monkeypatch):
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate

    home, made = pch_home
    monkeypatch.setenv("KGEN_CACHE_DIR", str(home / "cache"))  # the judge names this PCH root to the sandbox
    before = _tree_digest(made.parent)
    source = (CANDIDATES / "writes_the_pch.py").read_text()
    result = evaluate_candidate("softmax", source, EvalSettings(device="cpu", size="small", timeout_s=600))
    assert result.outcome in ("not_run", "compile_error"), result.message  # not "planted ..."
    assert "planted" not in result.message
    after = _tree_digest(made.parent)
    assert {path: after.get(path) for path in before} == before  # every file as the judge made it
    assert not [path for path in after if "planted" in path]
