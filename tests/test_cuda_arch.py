"""kgen builds CUDA candidates for the evaluating GPU, whatever architecture flags they pin.

Unit tests of the rewrite for each flag form LLMs write, then real builds with nvcc through the real
judge and sandbox (no GPU here: a CUDA candidate that compiles ends `not_run`, one that does not ends
`compile_error`): a candidate pinning every form at once compiles for kgen's target, and a candidate
using sm_90a-only PTX gets a message naming the architecture it needs when the target is an A100's.
The three evaluations run up front, two at a time.
"""

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kgen.harness.cuda_arch import arch_note, gencode_flags, newer_arch_message, sm_name, strip_arch_flags
from kgen.harness.cuda_build import retarget

from conftest import run_kgen

CANDIDATES = Path(__file__).resolve().parent / "cuda_arch_candidates"
TIMEOUT_S = 600
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.mark.parametrize(("flags", "kept", "removed"), [
    (["-O3", "-arch=sm_70"], ["-O3"], ["-arch=sm_70"]),
    (["-arch", "sm_80", "--use_fast_math"], ["--use_fast_math"], ["-arch sm_80"]),
    (["-arch sm_80"], [], ["-arch sm_80"]),
    (["--arch=sm_70"], [], ["--arch=sm_70"]),
    (["-gencode", "arch=compute_70,code=sm_70"], [], ["-gencode arch=compute_70,code=sm_70"]),
    (["-gencode=arch=compute_80,code=sm_80", "-O2"], ["-O2"], ["-gencode=arch=compute_80,code=sm_80"]),
    (["--gpu-architecture=sm_70"], [], ["--gpu-architecture=sm_70"]),
    (["--gpu-architecture", "compute_70", "--gpu-code=sm_70"], [], ["--gpu-architecture compute_70",
                                                                       "--gpu-code=sm_70"]),
    (["-arch=compute_70", "-code=sm_70,compute_70"], [], ["-arch=compute_70", "-code=sm_70,compute_70"]),
    (["-O3 --generate-code arch=compute_80,code=[sm_80,compute_80] -lineinfo"], ["-O3", "-lineinfo"],
     ["--generate-code arch=compute_80,code=[sm_80,compute_80]"]),
    (["-march=native", "-archive", "-DARCH=7", "-Xptxas=-v"], ["-march=native", "-archive", "-DARCH=7", "-Xptxas=-v"],
     []),
])
def test_strip_arch_flags_removes_each_form_and_keeps_the_rest(flags, kept, removed):
    rewrite = strip_arch_flags(flags)
    assert rewrite.flags == kept
    assert rewrite.removed == removed


def test_the_target_is_the_gpu_and_its_arch_specific_variant_from_hopper_on():
    assert [sm_name(a) for a in ("8.0", "8.6", "8.9", "9.0", "10.0", "12.0", "9.0a")] == \
        ["sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120a", "sm_90a"]
    assert gencode_flags("9.0") == ["-gencode=arch=compute_90a,code=sm_90a"]  # machine code only, no PTX


def test_retarget_rewrites_the_call_and_says_what_it_replaced(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "7.0")  # what the candidate set at import
    arguments = {"extra_cflags": ["-O3", "-arch=sm_70"], "extra_cuda_cflags": ["-O3", "-arch=sm_70", "--use_fast_math"]}
    note = retarget(arguments, cuda=True, arch="9.0", kgen_arch_list="9.0")
    assert arguments == {"extra_cflags": ["-O3"],
                         "extra_cuda_cflags": ["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a"]}
    assert note == ("architecture flags -arch=sm_70 -arch=sm_70 replaced by sm_90a; "
                    "TORCH_CUDA_ARCH_LIST=7.0 ignored (built for sm_90a)")


def test_retarget_adds_the_target_to_a_cuda_call_without_flags_and_notes_nothing(monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")  # kgen's own value
    arguments = {"extra_cflags": None, "extra_cuda_cflags": None}
    assert retarget(arguments, cuda=True, arch="8.0", kgen_arch_list="8.0") is None
    assert arguments == {"extra_cflags": None, "extra_cuda_cflags": ["-gencode=arch=compute_80,code=sm_80"]}
    cpp_only = {"extra_cflags": ["-O2"]}
    assert retarget(cpp_only, cuda=False, arch="8.0", kgen_arch_list="8.0") is None
    assert cpp_only == {"extra_cflags": ["-O2"]}


def test_the_same_flags_as_kgens_are_not_reported():
    assert arch_note(["-gencode=arch=compute_90a,code=sm_90a"], None, "9.0") is None
    assert arch_note(["-gencode=arch=compute_90,code=sm_90"], None, "9.0") == \
        "architecture flags -gencode=arch=compute_90,code=sm_90 replaced by sm_90a"


@pytest.mark.parametrize(("output", "arch", "expected"), [
    ("ptxas /tmp/tmpxft_1-6_cuda.ptx, line 26; error   : Instruction 'setmaxnreg.inc' not supported on .target "
     "'sm_80'\nptxas fatal   : Ptx assembly aborted due to errors", "8.0",
     "the source needs sm_90a or newer; the evaluating GPU is sm_80 (Instruction 'setmaxnreg.inc' not supported on "
     ".target 'sm_80')"),
    ("ptxas error   : Feature 'cp.async.bulk' requires .target sm_90 or higher", "8.6",
     "the source needs sm_90 or newer; the evaluating GPU is sm_86 (Feature 'cp.async.bulk' requires .target sm_90 "
     "or higher)"),
    ("ptxas x.ptx, line 9; error   : Instruction 'tcgen05.alloc' not supported on .target 'sm_90a'", "9.0",
     "the source needs sm_100a or newer; the evaluating GPU is sm_90a (Instruction 'tcgen05.alloc' not supported "
     "on .target 'sm_90a')"),
    ("cuda.cu(7): error: identifier \"undefined_variable\" is undefined", "8.0", None),
])
def test_a_feature_beyond_the_target_gets_a_message_that_names_both(output, arch, expected):
    assert newer_arch_message(output, arch) == expected


# -- real builds, through the judge ------------------------------------------------------------------

@pytest.fixture(scope="module")
def cache_home(tmp_path_factory):
    """One cache dir for the module: the CLI run finds the API run's builds."""
    home = tmp_path_factory.mktemp("cuda-arch-home")
    saved = os.environ.get("KGEN_CACHE_DIR")
    os.environ["KGEN_CACHE_DIR"] = str(home / "cache")
    yield home
    if saved is None:
        os.environ.pop("KGEN_CACHE_DIR", None)
    else:
        os.environ["KGEN_CACHE_DIR"] = saved


@pytest.fixture(scope="module")
def results(cache_home):
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate

    runs = {"pinned_flags": ("pinned_flags", None), "needs_sm90a@8.0": ("needs_sm90a", "8.0"),
            "needs_sm90a@9.0": ("needs_sm90a", "9.0")}

    def evaluate(label):
        name, arch = runs[label]
        source = (CANDIDATES / f"{name}.py").read_text()
        settings = EvalSettings(device="cpu", size="small", timeout_s=TIMEOUT_S, cuda_arch=arch)
        return label, evaluate_candidate("softmax", source, settings)

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(evaluate, runs))


@needs_nvcc
def test_every_pinned_flag_form_compiles_for_kgens_target(results):
    result = results["pinned_flags"]
    assert result.outcome == "not_run", result.message  # compile_error if any pinned arch reached nvcc
    assert "sm_90a" in result.message
    [build] = result.details["cuda_builds"]
    assert build["note"] == ("architecture flags -arch=sm_70 -arch sm_80 -gencode arch=compute_70,code=sm_70 "
                             "--gpu-architecture=sm_75 -code=sm_70 "
                             "--generate-code arch=compute_80,code=[sm_80,compute_80] -arch=sm_70 replaced by sm_90a; "
                             "TORCH_CUDA_ARCH_LIST=7.0 ignored (built for sm_90a)")


@needs_nvcc
def test_load_from_files_is_retargeted_too(tmp_path, monkeypatch):
    """torch's `load` (sources in files), through kgen's builder directly: real nvcc, for sm_80."""
    from kgen.harness.cuda_build import BuildLog, CudaNotRunnable, keyed_builders

    monkeypatch.setenv("KGEN_CUDA_ARCH", "8.0")
    monkeypatch.setenv("KGEN_CUDA_BUILD_DIR", str(tmp_path / "builds"))
    (tmp_path / "scale.cu").write_text(SCALE_CU)
    (tmp_path / "scale.cpp").write_text(SCALE_CPP)
    log = BuildLog()
    _, load = keyed_builders(log, lambda name: None)
    with pytest.raises(CudaNotRunnable, match="compiled with nvcc for sm_80"):
        load(name="scale", sources=[str(tmp_path / "scale.cpp"), str(tmp_path / "scale.cu")],
             extra_cuda_cflags=["-O3", "--gpu-architecture", "compute_70", "--gpu-code=sm_70"])
    assert log.error is None
    assert log.builds[0]["note"] == \
        "architecture flags --gpu-architecture compute_70 --gpu-code=sm_70 replaced by sm_80"


SCALE_CU = r"""
#include <cuda_runtime.h>
#include <stdint.h>
__global__ void scale_kernel(float* y, float s, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] *= s;
}
void launch_scale(int64_t y, float s, int64_t n) { scale_kernel<<<(n + 255) / 256, 256>>>((float*)y, s, n); }
"""
SCALE_CPP = r"""
#include <pybind11/pybind11.h>
#include <stdint.h>
void launch_scale(int64_t y, float s, int64_t n);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("launch_scale", &launch_scale); }
"""


@needs_nvcc
def test_the_build_notes_are_what_kgen_show_prints(results):
    from kgen.core.fmt import build_notes

    shown = build_notes(results["pinned_flags"].details)
    assert "-arch=sm_70" in shown and "replaced by sm_90a" in shown and "TORCH_CUDA_ARCH_LIST=7.0 ignored" in shown
    assert build_notes(results["needs_sm90a@9.0"].details) == "-"  # it pinned nothing


@needs_nvcc
def test_sm90a_code_for_an_a100_fails_saying_what_it_needs(results):
    result = results["needs_sm90a@8.0"]
    assert result.outcome == "compile_error", result.message
    assert "the source needs sm_90a or newer; the evaluating GPU is sm_80" in result.message
    assert "ptxas fatal" not in result.message  # the verdict, not the compiler's raw output


@needs_nvcc
def test_the_same_sm90a_code_compiles_for_an_h100(results):
    result = results["needs_sm90a@9.0"]
    assert result.outcome == "not_run", result.message
    assert "compiled with nvcc for sm_90a" in result.message


@needs_nvcc
def test_kgen_eval_json_reports_the_pinned_candidate_built(cache_home, results):
    done = run_kgen("eval", "softmax", str(CANDIDATES / "pinned_flags.py"), "--json", "--device", "cpu",
                    "--timeout", str(TIMEOUT_S), cwd=cache_home, env={"KGEN_CACHE_DIR": str(cache_home / "cache")},
                    timeout=TIMEOUT_S + 120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outcome"] == "not_run", result["message"]
