"""A CUDA source's torch/extension.h is built as torch/types.h where that compiles (kgen.harness.cuda_build,
trim_torch_include): nvcc spends nearly all of a KernelBench build parsing torch's headers, and extension.h
(torch/all.h, pybind11, Python.h) is twice what types.h costs. A source that needs more is built as written.

Real nvcc. The fallback tests give nvcc small stand-ins for torch's headers (torch's include path pointed at
them), so each build takes seconds; one slow test builds a KernelBench-style source against torch's own.
"""

import shutil

import pytest

from kgen.harness import cuda_build
from kgen.harness.cuda_build import BuildLog, CudaBuildError, CudaNotRunnable, keyed_builders, trim_torch_include

needs_nvcc = pytest.mark.skipif(cuda_build.nvcc_path() is None, reason="needs nvcc")
needs_cpu_torch = pytest.mark.skipif(cuda_build.torch.version.cuda is not None,
                                     reason="the compile-only path is the one a torch without CUDA takes")


@pytest.fixture(autouse=True)
def trimming_on(monkeypatch):
    """Trimming is on by default: these tests are of what it does, whatever the developer's shell has set."""
    monkeypatch.delenv("KGEN_TRIM_CUDA_INCLUDE", raising=False)


@pytest.mark.parametrize(("sources", "trimmed"), [
    (["#include <torch/extension.h>\n__global__ void k() {}"], True),
    (['#include "torch/extension.h"  // for torch::Tensor\n__global__ void k() {}'], True),
    (["  # include <torch/extension.h>\n", "__global__ void k() {}"], True),
    (["#include <torch/types.h>\n__global__ void k() {}"], False),  # nothing to trim
    (["#include <cuda_runtime.h>\n__global__ void k() {}"], False),
    (["#include <torch/extension.h>\n#include <pybind11/numpy.h>\n"], False),  # uses what extension.h adds
    (["#include <torch/extension.h>\nPyObject* f(py::object o);"], False),
    (["#include <torch/extension.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}"], False),
    (["#include <torch/extension.h>\nvoid f(Py_ssize_t n);"], False),
])
def test_only_sources_that_include_torch_extension_and_use_nothing_of_python_are_trimmed(sources, trimmed):
    result = trim_torch_include(sources)
    assert (result is not None) == trimmed
    if trimmed:
        assert len(result) == len(sources)
        text = "\n".join(result)
        assert "torch/extension.h" not in text and "#include <torch/types.h>" in text
        assert "__global__ void k() {}" in text  # the rest of the source as it was
        assert text.count("#include <cmath>") == 1  # the C/C++ library headers extension.h brings


def test_kgen_trim_cuda_include_0_builds_every_source_as_written(monkeypatch):
    monkeypatch.setenv("KGEN_TRIM_CUDA_INCLUDE", "0")
    assert trim_torch_include(["#include <torch/extension.h>\n__global__ void k() {}"]) is None


@pytest.fixture
def stand_in_torch(tmp_path, monkeypatch):
    """torch's include path pointed at two small headers: types.h declares StandInTensor, extension.h
    includes it and declares OnlyInExtension (as torch/all.h declares what types.h does not)."""
    headers = tmp_path / "include" / "torch"
    headers.mkdir(parents=True)
    (headers / "types.h").write_text("#pragma once\nstruct StandInTensor { float* data; long n; };\n")
    (headers / "extension.h").write_text("#pragma once\n#include <torch/types.h>\nstruct OnlyInExtension { int x; };\n")
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "include_paths", lambda *a, **k: [str(tmp_path / "include")])
    return tmp_path


def _check(build_dir, source: str) -> tuple[dict, str]:
    """Compile `source` as a load_inline call's only CUDA source (no C++ source) the way kgen does without
    a CUDA torch; (the build log's entry, what the build left in cuda.cu)."""
    build_dir.mkdir()
    entry: dict = {}
    with pytest.raises(CudaNotRunnable, match="compiled with nvcc for sm_90a"):
        cuda_build._nvcc_check(build_dir, "kgen_t", [], [source], None, [], ["-gencode=arch=compute_90a,code=sm_90a"],
                               [], "9.0", entry=entry)
    return entry, (build_dir / "cuda.cu").read_text()


KERNEL = "__global__ void scale(float* y, float s, long n) { long i = threadIdx.x; if (i < n) y[i] *= s; }\n"


@needs_nvcc
def test_a_source_that_needs_only_torch_types_is_built_with_the_trimmed_include(stand_in_torch):
    source = "#include <torch/extension.h>\n" + KERNEL + "long size(StandInTensor t) { return t.n; }\n"
    entry, built = _check(stand_in_torch / "b", source)
    assert entry == {"trimmed_include": True}
    assert "#include <torch/types.h>" in built and "torch/extension.h" not in built


@needs_nvcc
def test_a_source_that_needs_more_than_torch_types_is_built_as_written(stand_in_torch):
    source = "#include <torch/extension.h>\n" + KERNEL + "int get(OnlyInExtension e) { return e.x; }\n"
    entry, built = _check(stand_in_torch / "b", source)
    assert entry == {}  # the log says it was not trimmed
    assert built.endswith(source)


@needs_nvcc
def test_a_source_that_compiles_neither_way_reports_the_errors_of_its_own_source(stand_in_torch):
    source = "#include <torch/extension.h>\n" + KERNEL + "int get(OnlyInExtension e) { return e.missing; }\n"
    build_dir = stand_in_torch / "b"
    build_dir.mkdir()
    with pytest.raises(CudaBuildError) as failed:
        cuda_build._nvcc_check(build_dir, "kgen_t", [], [source], None, [], [], [], "9.0", entry={})
    message = str(failed.value)
    # the as-written build's error (the member), not the trimmed one's (OnlyInExtension undeclared)
    assert "missing" in message and "identifier \"OnlyInExtension\" is undefined" not in message
    assert (build_dir / "cuda.cu").read_text().endswith(source)


TANH = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void tanh_kernel(const float* x, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) out[idx] = tanhf(x[idx]);
}

torch::Tensor tanh_cuda(torch::Tensor x) {
    auto out = torch::zeros_like(x);
    int size = x.numel();
    tanh_kernel<<<(size + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""


@pytest.mark.slow
@needs_nvcc
@needs_cpu_torch
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs GCC")
def test_a_kernelbench_style_source_builds_trimmed_against_torchs_own_headers(tmp_path, monkeypatch):
    """The collection's form (torch/extension.h in cuda_sources, a torch::Tensor wrapper, extra_cflags=['']),
    through kgen's load_inline: it compiles with torch/types.h, and the build log says so."""
    monkeypatch.setenv("KGEN_CUDA_ARCH", "9.0")
    monkeypatch.setenv("KGEN_CUDA_BUILD_DIR", str(tmp_path / "builds"))
    monkeypatch.setenv("KGEN_TORCH_PCH", "0")
    log = BuildLog()
    load_inline, _ = keyed_builders(log, lambda name: None)
    with pytest.raises(CudaNotRunnable, match="compiled with nvcc for sm_90a"):
        load_inline(name="tanh", cpp_sources="torch::Tensor tanh_cuda(torch::Tensor x);", cuda_sources=TANH,
                    functions=["tanh_cuda"], extra_cflags=[""], extra_ldflags=[""], verbose=True)
    assert log.error is None
    [build] = log.builds
    assert build["trimmed_include"] is True
    [built] = (tmp_path / "builds").glob("*/cuda.cu")
    assert "torch/extension.h" not in built.read_text()


def test_the_switch_reaches_the_sandboxed_build(monkeypatch):
    """A build's environment is by allow-list: trimming is on there by default (nothing passed), and the judge
    passes KGEN_TRIM_CUDA_INCLUDE=0 on to it when the user turned it off."""
    from types import SimpleNamespace

    from kgen.harness.cuda_build import trim_torch_include
    from kgen.judge.compile_step import CompileSteps

    judge = SimpleNamespace(settings=SimpleNamespace(cuda_arch=None))
    source = ["#include <torch/extension.h>\n__global__ void k() {}"]
    assert "KGEN_TRIM_CUDA_INCLUDE" not in CompileSteps.build_env(judge)
    assert trim_torch_include(source) is not None  # on by default
    monkeypatch.setenv("KGEN_TRIM_CUDA_INCLUDE", "0")
    assert CompileSteps.build_env(judge)["KGEN_TRIM_CUDA_INCLUDE"] == "0"
    assert trim_torch_include(source) is None  # what the build does with that environment


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_build.torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_trimmed_build_loads_and_computes_the_reference(tmp_path, monkeypatch):
    """torch's own ninja build (a CUDA torch), through kgen's load_inline: built trimmed, loaded, and correct."""
    torch = cuda_build.torch
    major, minor = torch.cuda.get_device_capability()
    monkeypatch.setenv("KGEN_CUDA_ARCH", f"{major}.{minor}")
    monkeypatch.setenv("KGEN_CUDA_BUILD_DIR", str(tmp_path / "builds"))
    log = BuildLog()
    load_inline, _ = keyed_builders(log, lambda name: None)
    module = load_inline(name="tanh", cpp_sources="torch::Tensor tanh_cuda(torch::Tensor x);", cuda_sources=TANH,
                         functions=["tanh_cuda"], extra_cflags=[""], verbose=False)
    [build] = log.builds
    assert build["trimmed_include"] is True
    x = torch.randn(1000, device="cuda")
    torch.testing.assert_close(module.tanh_cuda(x), torch.tanh(x))


@needs_nvcc
def test_a_trimmed_build_and_one_as_written_are_kept_apart(stand_in_torch, monkeypatch):
    """Switched off, a source is built again as written, not served the trimmed build kgen cached."""
    monkeypatch.setenv("KGEN_CUDA_BUILD_DIR", str(stand_in_torch / "builds"))
    monkeypatch.setenv("KGEN_CUDA_ARCH", "9.0")
    monkeypatch.setattr(cuda_build, "_torch_include_paths", lambda: [str(stand_in_torch / "include")])
    source = "#include <torch/extension.h>\n" + KERNEL

    def build() -> dict:
        log = BuildLog()
        load_inline, _ = keyed_builders(log, lambda name: None)
        with pytest.raises(CudaNotRunnable):
            load_inline(name="scale", cpp_sources=[], cuda_sources=source, functions=None)
        return log.builds[0]

    trimmed = build()
    monkeypatch.setenv("KGEN_TRIM_CUDA_INCLUDE", "0")
    as_written = build()
    assert trimmed["trimmed_include"] is True and "trimmed_include" not in as_written
    assert trimmed["key"] != as_written["key"]
