"""CUDA build: a candidate's `load_inline` / `load` calls, built into a shared cache keyed by content.

The worker replaces `torch.utils.cpp_extension.load_inline` and `load` before the candidate is
imported. Each call is rebuilt under a module name and build directory keyed by the sha256 of its
sources, functions and flags, the torch and CUDA versions and the GPU arch, so the same source never
builds twice (in any process sharing the cache) and two different sources never share a module name
(a process never reloads a changed library under an old name). Builds of one key are serialized by
an flock on the key's directory, which the kernel releases when a builder dies; a torch FileBaton
`lock` file found while holding it was therefore left by a killed build, and is removed (torch would
otherwise wait on it forever). Compiler errors are trimmed to the lines that say 'error' and a little
context: they go back to an LLM.

Without a CUDA-enabled torch (this includes every CPU-only machine) nothing can be loaded: the CUDA
sources are compiled with `nvcc -c` (and the C++ sources checked with `c++ -fsyntax-only`) against
torch's headers, for the target arch, so compile errors are still caught; a clean compile raises
`CudaNotRunnable` and the evaluation reports the outcome `not_run` (never `correct`: nothing ran).
Either verdict is cached in the key's directory. A source that includes torch/extension.h takes minutes
to check on a small CPU machine (less where its CUDA sources' include is trimmed: see trim_torch_include);
KGEN_NVCC_CHECK=0 skips the check (outcome not_run, not compiled).

The cache: KGEN_CACHE_DIR/cuda_build, else ~/.cache/kgen.harness.cuda_build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from kgen.harness.cuda_arch import arch_note, gencode_flags, newer_arch_message, sm_name, strip_arch_flags, target_arch

NVCC_TIMEOUT_S = 600
TRIMMED_MAX_LINES = 40
BUILT_STAMP = ".kgen-built"  # written after a build's load_inline returned: the .so beside it is complete
CALLS_STAMP = ".kgen-calls"  # the call_digest of each call that built or loaded it, one a line (kgen export --aot)
STALE_LOCK_AGE_S = 30.0  # a torch lock younger than this may belong to a build outside kgen's flock


class CudaBuildError(Exception):
    """The candidate's CUDA/C++ sources did not compile; the message is the trimmed compiler output."""


class CudaNotRunnable(Exception):
    """The sources compiled, but this torch has no CUDA: nothing can be loaded or run here."""


class CudaNotBuilt(Exception):
    """A build the runner needs was not made by the compile step (the runner never starts a compiler)."""


def cache_root() -> Path:
    """Where this process's builds go: KGEN_CUDA_BUILD_DIR (the judge gives each candidate source its
    own directory, writable only by that source's compile step), else the cache's cuda_build/."""
    if os.environ.get("KGEN_CUDA_BUILD_DIR"):
        return Path(os.environ["KGEN_CUDA_BUILD_DIR"])
    from kgen.core.resources import cache_dir

    return cache_dir() / "cuda_build"


def nvcc_path() -> Optional[str]:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    return None


def build_key(spec: dict[str, Any], arch: str) -> str:
    """sha256 of what the build depends on: sources, functions, flags, torch/CUDA versions, arch."""
    payload = json.dumps({"spec": spec, "torch": torch.__version__, "cuda": torch.version.cuda, "arch": arch},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def call_digest(arguments: dict) -> str:
    """sha256 of a load_inline/load call as the candidate wrote it: its bound arguments (defaults applied;
    for `load`, `sources` replaced by the files' texts, in the call's order) less the three that only say
    where and how loudly to build (name, build_directory, verbose), taken before kgen retargets the
    architecture flags. Recorded with each build (`call`); a module written by `kgen export --aot` carries
    this function's source verbatim and finds the extension it carries for each of its calls by it, so it
    is self-contained: its imports inside, builtin annotations only."""
    import hashlib
    import json

    call = {k: v for k, v in arguments.items() if k not in ("name", "build_directory", "verbose")}
    text = json.dumps(call, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def trim_compiler_output(text: str, context: int = 2, max_lines: int = TRIMMED_MAX_LINES) -> str:
    """The lines that mention an error, with `context` lines around each, at most `max_lines`; the
    temporary build paths shortened to file names."""
    text = re.sub(r"/[^\s:\"']*/(main\.cpp|cuda\.cu|[\w.-]+\.(cu|cpp|cuh|h))", r"\1", text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    hits = [i for i, ln in enumerate(lines) if re.search(r"\berror\b|\bError\b|fatal", ln)
            and not ln.lstrip().startswith(("ninja: build stopped", "FAILED:", "[", "subprocess.CalledProcessError"))]
    if not hits:
        return "\n".join(lines[-max_lines:])
    keep: list[int] = []
    for i in hits:
        for j in range(max(0, i - context), min(len(lines), i + context + 1)):
            if j not in keep:
                keep.append(j)
    out = [lines[j] for j in sorted(keep)]
    if len(out) > max_lines:
        out = [*out[:max_lines], f"[... {len(out) - max_lines} more lines ...]"]
    return "\n".join(out)


@contextmanager
def build_lock(build_dir: Path) -> Iterator[None]:
    """Hold the key's flock; clear a torch `lock` file a killed build left behind."""
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".kgen-build.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            clear_stale_torch_lock(build_dir)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def clear_stale_torch_lock(build_dir: Path, min_age_s: float = STALE_LOCK_AGE_S) -> bool:
    """Remove torch's FileBaton `lock` file when it is stale: we hold the flock, so no kgen build of
    this key is running; the age guard leaves alone a build outside kgen started a moment ago."""
    lock = build_dir / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    if age >= min_age_s:
        lock.unlink(missing_ok=True)
        return True
    return False


@dataclass
class BuildLog:
    """What the candidate's builds did in this process: kept by the worker, read after the run."""

    builds: list[dict[str, Any]] = field(default_factory=list)
    error: Optional[str] = None
    not_runnable: Optional[str] = None


class ExtensionProxy:
    """The loaded extension module, with each call into it counted as a launch of the candidate's own
    kernels."""

    def __init__(self, module: Any, count: Callable[[str], None]):
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_count", count)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if callable(value) and not name.startswith("__"):
            count = self._count

            def call(*args, **kwargs):
                count(name)
                return value(*args, **kwargs)

            call.__name__ = name
            call.__doc__ = getattr(value, "__doc__", None)
            return call
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._module, name, value)

    def __dir__(self):
        return dir(self._module)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _cxx_standard() -> str:
    """The C++ standard this torch's own extension builds use (c++20 from torch 2.10 on)."""
    from torch.utils import cpp_extension

    try:
        return "c++20" if "-std=c++20" in inspect.getsource(cpp_extension) else "c++17"
    except (OSError, TypeError):
        return "c++17"


# -- torch/extension.h in a CUDA source ------------------------------------------------------------------
# LLM-written cuda_sources include torch/extension.h (251 of the 252 calls of the 240-entry KernelBench
# collection) for torch::Tensor in their host wrappers. That header is torch/all.h and torch/python.h
# (pybind11, Python.h), and in cuda.cu nvcc parses it three times (cudafe++, cicc, the host compiler) with
# no precompiled header possible (nvcc's host compile reads cudafe++'s preprocessed output): nearly all of a
# build's CPU time, the kernels themselves taking milliseconds (benchmarks/RESULTS.md, "ninth session"). A
# CUDA source that uses nothing of Python is built with torch/types.h in its place (what load_inline itself
# puts first in cuda.cu), plus the standard headers extension.h brings, so calls resolve against the same
# C/C++ library overloads; one that fails to compile that way is built as written (its errors are then the
# ones its own source gives). The build log says which (`trimmed_include`). On by default since the H100 run of
# benchmarks/cuda_build_gpu.sh (16 of 16 builds with byte-identical device code; torch's ninja path built, loaded and
# computed the reference): KGEN_TRIM_CUDA_INCLUDE=0 builds every source as written.

EXTENSION_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/extension\.h[>"][^\n]*$', re.M)
PYTHON_USE = re.compile(r"pybind11|PYBIND11|\bpy::|\bPy[A-Z_]\w*|\b_Py\w*|torch/python\.h|Python\.h|"
                        r"TORCH_EXTENSION_NAME")
TRIMMED_INCLUDE = "\n".join(f"#include <{h}>" for h in (
    "torch/types.h", "cmath", "math.h", "cstdlib", "stdlib.h", "cstdio", "cstring", "cstdint", "climits", "cassert",
    "algorithm", "vector", "string", "memory", "iostream"))


TRIM_ENV = "KGEN_TRIM_CUDA_INCLUDE"


def trimming_on() -> bool:
    return os.environ.get(TRIM_ENV, "1") != "0"


def trim_env() -> dict[str, str]:
    """What the judge puts in a build's environment (which is by allow-list): the switch, when turned off."""
    return {} if trimming_on() else {TRIM_ENV: "0"}


def trim_torch_include(cuda_sources: list[str]) -> Optional[list[str]]:
    """The CUDA sources with torch/extension.h replaced by torch/types.h (and the standard headers it brings), or
    None where that does not apply: no torch/extension.h, anything of Python or pybind11 used, or turned off."""
    if not trimming_on():
        return None
    text = "\n".join(cuda_sources)
    if not EXTENSION_INCLUDE.search(text) or PYTHON_USE.search(text):
        return None
    return [EXTENSION_INCLUDE.sub(TRIMMED_INCLUDE, source) for source in cuda_sources]


# -- the precompiled torch/extension.h -------------------------------------------------------------------
# A binding TU that includes torch/extension.h spends most of its compile parsing it. kgen precompiles
# that header once per (torch, compiler, C++ flags) with GCC (a `.gch` that GCC picks up in place of the
# header when the flags match, and ignores otherwise); the builder puts its directory first on the C++
# include path of a build whose flags are the ones it was made with. The judge makes them, in its own
# process, from torch's header and kgen's fixed flag sets only (`ensure_torch_pch`), never from a
# candidate's flags (which could be any compiler option) and never in a candidate's process: a
# candidate's sandbox sees them read-only (they sit under the judge's builds root), so none can plant
# code for another. KGEN_TORCH_PCH=0 turns them off.

PCH_HEADER = "torch/extension.h"
PCH_FLAG_SETS = ((), ("-O3",), ("-O2",))  # the C++ flags LLM-written load_inline calls pass; one PCH each
PCH_ROOT_ENV = "KGEN_TORCH_PCH_ROOT"  # where the judge keeps them; set in a build's environment by the judge
PCH_BUILD_TIMEOUT_S = 900


def pch_root() -> Path:
    from kgen.core.resources import cache_dir

    return cache_dir() / "builds" / "torch-pch"


def cxx_compiler() -> str:
    from torch.utils.cpp_extension import get_cxx_compiler

    return get_cxx_compiler()


def torch_cxx_flags(extra_cflags: list[str], extra_include_paths: list[str], with_cuda: bool) -> Optional[list[str]]:
    """The flags torch's ninja build gives the C++ sources of an extension with these arguments (the
    extension's name left out: it is the one macro that differs between builds); None when this
    torch's build writer cannot be asked (a private function: its signature may change)."""
    from torch.utils import cpp_extension

    writer = getattr(cpp_extension, "_write_ninja_file_to_build_library", None)
    if writer is None:
        return None
    with tempfile.TemporaryDirectory() as work:
        sources = [os.path.join(work, "main.cpp"), *([os.path.join(work, "cuda.cu")] if with_cuda else [])]
        arguments = dict(path=os.path.join(work, "build.ninja"), name="kgen_flags", sources=sources,
                         extra_cflags=list(extra_cflags), extra_cuda_cflags=gencode_flags("9.0"), extra_sycl_cflags=[],
                         extra_ldflags=[], extra_include_paths=list(extra_include_paths), with_cuda=with_cuda,
                         with_sycl=False, is_standalone=False)
        try:
            parameters = inspect.signature(writer).parameters
            writer(**{k: v for k, v in arguments.items() if k in parameters})
            text = Path(arguments["path"]).read_text()
        except Exception:  # noqa: BLE001 - any failure of a private torch function means: no PCH
            return None
    line = next((ln for ln in text.splitlines() if ln.startswith("cflags = ")), None)
    if line is None:
        return None
    return [f for f in shlex.split(line.removeprefix("cflags = ")) if not f.startswith("-DTORCH_EXTENSION_NAME=")]


def torch_pch_dir(flags: list[str], root: Optional[Path] = None) -> Path:
    """Where the PCH for these compiler flags lives: keyed by torch's version, the compiler binary and
    the flags (which hold the include paths)."""
    compiler = shutil.which(cxx_compiler()) or cxx_compiler()
    try:
        stat = os.stat(compiler)
        identity = [os.path.realpath(compiler), stat.st_size, int(stat.st_mtime)]
    except OSError:
        identity = [compiler]
    payload = json.dumps({"torch": torch.__version__, "compiler": identity, "flags": flags}, sort_keys=True)
    return (root or pch_root()) / hashlib.sha256(payload.encode()).hexdigest()[:32]


def ensure_torch_pch(extra_cflags: tuple[str, ...], with_cuda: bool, root: Optional[Path] = None) -> Optional[Path]:
    """Trusted side (the judge): the PCH of torch/extension.h for one of kgen's flag sets, built once
    (a flock serializes builders; the directory appears complete or not at all). None when it cannot be
    made (no GCC, torch's flags unknown, the compile failed): builds then parse the header as before."""
    if tuple(extra_cflags) not in PCH_FLAG_SETS or os.environ.get("KGEN_TORCH_PCH") == "0":
        return None
    flags = torch_cxx_flags(list(extra_cflags), [], with_cuda)
    if flags is None:
        return None
    final = torch_pch_dir(flags, root)
    if (final / (PCH_HEADER + ".gch")).exists():
        return final
    header = next((Path(p) / PCH_HEADER for p in _torch_include_paths() if (Path(p) / PCH_HEADER).exists()), None)
    if header is None:
        return None
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / (PCH_HEADER + ".gch")).exists():
            return final
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
        target = staging / (PCH_HEADER + ".gch")
        target.parent.mkdir(parents=True)
        try:
            done = subprocess.run([cxx_compiler(), "-x", "c++-header", str(header), "-o", str(target), *flags],
                                  capture_output=True, timeout=PCH_BUILD_TIMEOUT_S)
            if done.returncode != 0 or not target.exists():
                return None
            for path in (target, target.parent, staging):  # read-only from now on, for everyone
                path.chmod(0o444 if path.is_file() else 0o555)
            os.rename(staging, final)
        except (OSError, subprocess.TimeoutExpired):
            return None
        finally:
            if staging.exists():
                for path in (target.parent, staging):
                    with contextlib.suppress(OSError):
                        path.chmod(0o755)
                shutil.rmtree(staging, ignore_errors=True)
    return final


def pch_env() -> dict[str, str]:
    """What the judge puts in a build's environment so the builder finds the PCHs (nothing when off)."""
    return {} if os.environ.get("KGEN_TORCH_PCH") == "0" else {PCH_ROOT_ENV: str(pch_root())}


def pch_flag_set(extra_cflags: list[str]) -> tuple[str, ...]:
    """A build's C++ flags as PCH_FLAG_SETS lists them: empty ones left out (KernelBench's generations pass
    `extra_cflags=[""]`, which torch's build line drops: the same build as no flags)."""
    return tuple(f for f in extra_cflags if f.strip())


def usable_torch_pch(extra_cflags: list[str], extra_include_paths: list[str], with_cuda: bool) -> Optional[Path]:
    """Builder side (the candidate's sandbox): the judge's PCH made with exactly this build's C++ flags,
    if there is one; never built here."""
    root = os.environ.get(PCH_ROOT_ENV)
    if not root or os.environ.get("KGEN_TORCH_PCH") == "0" or pch_flag_set(extra_cflags) not in PCH_FLAG_SETS:
        return None
    flags = torch_cxx_flags(extra_cflags, extra_include_paths, with_cuda)
    if flags is None:
        return None
    found = torch_pch_dir(flags, Path(root))
    return found if (found / (PCH_HEADER + ".gch")).is_file() else None


def wanted_pch_flag_sets(source: str) -> list[tuple[str, ...]]:
    """kgen's flag sets a candidate's load_inline/load calls name literally (its architecture flags left
    out): the PCHs worth making before its compile step. Read from the source, never run."""
    import ast

    if PCH_HEADER not in source and "load_inline" not in source:
        return []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    wanted: list[tuple[str, ...]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if func not in ("load_inline", "load"):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        no_headers = keywords.get("no_implicit_headers")
        if func == "load_inline" and isinstance(no_headers, ast.Constant) and no_headers.value and \
                PCH_HEADER not in source:
            continue
        value = keywords.get("extra_cflags")
        try:
            flags = [] if value is None else ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            continue
        if flags is None or (isinstance(flags, (list, tuple)) and all(isinstance(f, str) for f in flags)):
            kept = pch_flag_set(strip_arch_flags(list(flags or [])).flags)
            if kept in PCH_FLAG_SETS and kept not in wanted:
                wanted.append(kept)
    return wanted


def _torch_include_paths() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    return include_paths()


def _nvcc_check(build_dir: Path, name: str, cpp_sources: list[str], cuda_sources: list[str], functions: Any,
                cflags: list[str], cuda_cflags: list[str], include_paths: list[str], arch: str,
                implicit_headers: bool = True, pch: Optional[Path] = None, entry: Optional[dict] = None) -> None:
    """Compile without a CUDA torch: nvcc -c for the CUDA sources (torch/extension.h trimmed where it can be,
    see trim_torch_include; `entry` notes it), c++ -fsyntax-only for the C++ ones (with the pybind bindings
    load_inline would add). Raises CudaBuildError or CudaNotRunnable; the verdict is cached as a file in
    build_dir."""
    ok_stamp, error_stamp = build_dir / "nvcc.ok", build_dir / "nvcc.error"
    if ok_stamp.exists():
        raise CudaNotRunnable(ok_stamp.read_text())
    if error_stamp.exists():
        raise CudaBuildError(error_stamp.read_text())
    if os.environ.get("KGEN_NVCC_CHECK") == "0":
        raise CudaNotRunnable("CUDA sources not compiled (KGEN_NVCC_CHECK=0) and not runnable here (torch has no CUDA)")
    nvcc = nvcc_path()
    if nvcc is None:
        raise CudaNotRunnable("no nvcc on this machine: CUDA sources not compiled, not run")
    from torch.utils.cpp_extension import include_paths as torch_include_paths

    includes = [f"-I{p}" for p in [*torch_include_paths(), sysconfig.get_paths()["include"], *include_paths]]
    defines = [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    std = _cxx_standard()
    jobs = []
    trimmed = trim_torch_include(cuda_sources) if cuda_sources else None
    headers = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" if implicit_headers else ""
    cu = build_dir / "cuda.cu"
    nvcc_job = [nvcc, "-c", str(cu), "-o", str(build_dir / "cuda.o"), f"-std={std}", "--expt-relaxed-constexpr",
                *defines, *includes, *cuda_cflags]
    if cuda_sources:
        cu.write_text(headers + "\n".join(trimmed or cuda_sources))
        jobs.append(nvcc_job)
    if cpp_sources:
        bindings = ""
        if functions:
            names = functions.items() if isinstance(functions, dict) else ((f, f) for f in _as_list(functions))
            bindings = "\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n" + "".join(
                f'm.def("{fn}", &{fn}, "{doc}");\n' for fn, doc in names) + "}\n"
        cpp = build_dir / "main.cpp"
        cpp.write_text(("#include <torch/extension.h>\n" if implicit_headers else "") + "\n".join(cpp_sources)
                       + bindings)
        torch_flags = torch_cxx_flags(cflags, include_paths, with_cuda=False)  # as torch's build would compile it
        cxx = shutil.which(cxx_compiler()) or shutil.which("c++") or shutil.which("g++")
        if cxx and torch_flags is not None:
            jobs.append([cxx, "-fsyntax-only", str(cpp), f"-DTORCH_EXTENSION_NAME={name}", *torch_flags,
                         *([f"-I{pch}"] if pch else [])])
        elif cxx:
            jobs.append([cxx, "-fsyntax-only", f"-std={std}", str(cpp), *defines, *includes,
                         *[f for f in cflags if f.startswith(("-D", "-I", "-std"))]])
    failures = _run_compilers(jobs, build_dir)
    if trimmed is not None and failures and failures[0] is not None:  # built as written: its own errors, or none
        cu.write_text(headers + "\n".join(cuda_sources))
        failures[0] = _run_compilers([nvcc_job], build_dir)[0]
    elif trimmed is not None and entry is not None:
        entry["trimmed_include"] = True
    failures = [f for f in failures if f is not None]
    if failures:
        trimmed = trim_compiler_output("\n".join(failures))
        error_stamp.write_text(trimmed)
        raise CudaBuildError(trimmed)
    message = (f"compiled with nvcc for {sm_name(arch)}; not runnable here (torch has no CUDA): not run, not verified, "
               "not timed")
    ok_stamp.write_text(message)
    raise CudaNotRunnable(message)


def _run_compilers(jobs: list[list[str]], build_dir: Path) -> list[Optional[str]]:
    """Run the compilers at once; for each, None or its output where it failed."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=build_dir) for cmd in jobs]
    failures: list[Optional[str]] = []
    for proc in procs:
        try:
            output, _ = proc.communicate(timeout=NVCC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            failures.append(f"compiler timed out after {NVCC_TIMEOUT_S} s")
            continue
        failures.append(output.decode(errors="replace") if proc.returncode != 0 else None)
    return failures


def _load_built(build_dir: Path, name: str, bound: inspect.BoundArguments) -> Any:
    """The extension a finished build of this key left (its stamp is written only after load_inline
    returned), imported without asking ninja: the key already covers everything the build depends on,
    and torch re-runs ninja in every new process, which rebuilt sources the compile stage had built
    (seen on the H100: 50 s of nvcc in the GPU stage for a prebuilt candidate). None: build it."""
    if not bound.arguments.get("is_python_module", True) or not (build_dir / BUILT_STAMP).exists():
        return None
    if not (build_dir / f"{name}.so").exists():
        return None
    from torch.utils.cpp_extension import _import_module_from_library

    return _import_module_from_library(name, str(build_dir), True)


def note_call(build_dir: Path, call: str) -> None:
    """Record beside a build the digest of a call it serves (a load_inline called in forward is in no
    build log the judge sees; `kgen export --aot` finds its builds by these)."""
    stamp = build_dir / CALLS_STAMP
    known = stamp.read_text().split() if stamp.exists() else []
    if call not in known:
        with open(stamp, "a") as f:
            f.write(call + "\n")


def _cuda_in(sources: list[str], with_cuda: Any) -> bool:
    return bool(with_cuda) or bool(sources)


def retarget(arguments: dict[str, Any], cuda: bool, arch: str, kgen_arch_list: Optional[str]) -> Optional[str]:
    """Rewrite a load_inline/load call's arguments, in place, to build for `arch` and nothing else:
    every architecture flag the candidate passed (extra_cuda_cflags, extra_cflags) removed, the others
    kept, and the target's one gencode flag added to a CUDA build's flags (torch then adds none of its
    own, whatever TORCH_CUDA_ARCH_LIST says). Returns the note for the evaluation record, or None when
    the candidate pinned nothing; a TORCH_CUDA_ARCH_LIST that differs from kgen's (`kgen_arch_list`,
    read before the candidate was imported) was set by the candidate and is named in the note."""
    removed: list[str] = []
    for option in ("extra_cuda_cflags", "extra_cflags"):
        rewrite = strip_arch_flags(_as_list(arguments.get(option)))
        removed += rewrite.removed
        flags = rewrite.flags + (gencode_flags(arch) if option == "extra_cuda_cflags" and cuda else [])
        if flags or arguments.get(option) is not None:
            arguments[option] = flags
    env_list = os.environ.get("TORCH_CUDA_ARCH_LIST")
    return arch_note(removed, env_list if env_list != kgen_arch_list else None, arch)


@contextmanager
def kgen_arch_env(kgen_arch_list: Optional[str]) -> Iterator[None]:
    """TORCH_CUDA_ARCH_LIST as kgen set it, for the length of a build; the candidate's value after."""
    theirs = os.environ.get("TORCH_CUDA_ARCH_LIST")
    _set_env("TORCH_CUDA_ARCH_LIST", kgen_arch_list)
    try:
        yield
    finally:
        _set_env("TORCH_CUDA_ARCH_LIST", theirs)


def _set_env(name: str, value: Optional[str]) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def keyed_builders(log: BuildLog, count: Callable[[str], None], allow_build: bool = True) -> tuple[Callable, Callable]:
    """Replacements for `load_inline` and `load` that build under keyed names and directories."""
    from torch.utils import cpp_extension

    original_inline, original_load = cpp_extension.load_inline, cpp_extension.load
    inline_sig, load_sig = inspect.signature(original_inline), inspect.signature(original_load)
    arch = target_arch()
    kgen_arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")  # before the candidate's import can change it

    def build(kind: str, bound: inspect.BoundArguments, spec: dict[str, Any], cpp: list[str], cuda: list[str],
              run: Callable[[str, str, list[str], dict], Any], note: Optional[str], call: str) -> Any:
        key = build_key(spec, arch)
        name = f"kgen_{key[:20]}"
        build_dir = cache_root() / key[:32]
        started = time.monotonic()
        entry: dict[str, Any] = {"kind": kind, "key": key[:20], "arch": sm_name(arch), "call": call}
        if note:
            entry["note"] = note
        # the runner's build directories are read-only: it only loads, so it needs no lock
        a = bound.arguments
        cflags, include_paths = _as_list(a.get("extra_cflags")), _as_list(a.get("extra_include_paths"))
        with_cuda = _cuda_in(cuda, a.get("with_cuda"))
        pch = usable_torch_pch(cflags, include_paths, with_cuda and torch.version.cuda is not None) \
            if cpp and allow_build else None
        if pch is not None:
            entry["pch"] = True
        with build_lock(build_dir) if allow_build else contextlib.nullcontext():
            try:
                if torch.version.cuda is None and with_cuda:
                    _nvcc_check(build_dir, name, cpp, cuda, a.get("functions"), cflags,
                                _as_list(a.get("extra_cuda_cflags")), include_paths, arch,
                                kind == "load_inline" and not a.get("no_implicit_headers", False), pch, entry)
                module = _load_built(build_dir, name, bound) if torch.version.cuda else None
                cached = module is not None
                if module is None and not allow_build:
                    raise CudaNotBuilt(f"the CUDA extension {kind}(...) was not built by the compile step "
                                       "(are its arguments different at run time?)")
                if module is None:
                    with kgen_arch_env(kgen_arch_list):
                        module = run(name, str(build_dir), [f"-I{pch}"] if pch else [], entry)
                    if torch.version.cuda:
                        (build_dir / BUILT_STAMP).write_text(name)
                if allow_build:
                    note_call(build_dir, call)
            except CudaNotRunnable as e:
                log.not_runnable = str(e)
                log.builds.append(dict(entry, s=round(time.monotonic() - started, 2)))
                raise
            except CudaNotBuilt:
                raise
            except Exception as e:  # noqa: BLE001 - torch raises RuntimeError with the compiler output in it
                output = str(e)
                trimmed = output if isinstance(e, CudaBuildError) else trim_compiler_output(output)
                log.error = newer_arch_message(output, arch) or trimmed
                log.builds.append(dict(entry, s=round(time.monotonic() - started, 2), failed=True))
                raise CudaBuildError(log.error) from None
        log.builds.append(dict(entry, s=round(time.monotonic() - started, 2), cached=cached))
        return ExtensionProxy(module, count) if bound.arguments.get("is_python_module", True) else module

    from kgen.harness.trace import trust

    trust(build)

    def load_inline(*args, **kwargs):
        bound = inline_sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        cpp, cuda = _as_list(a.get("cpp_sources")), _as_list(a.get("cuda_sources"))
        call = call_digest(a)  # the call as written, before retarget rewrites its flags
        note = retarget(a, _cuda_in(cuda, a.get("with_cuda")), arch, kgen_arch_list)
        spec = {k: v for k, v in a.items() if k not in ("name", "build_directory", "verbose")}
        if cuda and trim_torch_include(cuda) is not None:  # keyed apart from a build as written (switched off)
            spec["kgen_cuda_include"] = "torch/types.h"

        def run(name: str, build_dir: str, more_cflags: list[str], entry: dict):
            cflags = [*_as_list(a.get("extra_cflags")), *more_cflags]
            arguments = dict(a, name=name, build_directory=build_dir, verbose=False, extra_cflags=cflags)
            trimmed = trim_torch_include(cuda) if cuda else None
            if trimmed is not None:
                try:
                    module = original_inline(**dict(arguments, cuda_sources=trimmed))
                    entry["trimmed_include"] = True
                    return module
                except Exception:  # noqa: BLE001 - it needs more than torch/types.h: built as written, its own errors
                    pass
            return original_inline(**arguments)

        return build("load_inline", bound, spec, cpp, cuda, run, note, call)

    def load(*args, **kwargs):
        bound = load_sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        files = _as_list(a.get("sources"))
        texts = {}
        for f in files:
            try:
                texts[f] = Path(f).read_text()
            except OSError as e:
                raise CudaBuildError(f"cannot read source {f}: {e}") from None
        cuda = [t for f, t in texts.items() if f.endswith((".cu", ".cuh"))]
        cpp = [t for f, t in texts.items() if not f.endswith((".cu", ".cuh"))]
        call = call_digest(dict(a, sources=[texts[f] for f in files]))
        note = retarget(a, _cuda_in(cuda, a.get("with_cuda")), arch, kgen_arch_list)
        spec = {k: v for k, v in a.items() if k not in ("name", "build_directory", "verbose", "sources")}
        spec["sources"] = sorted(texts.values())

        def run(name: str, build_dir: str, more_cflags: list[str], entry: dict):
            cflags = [*_as_list(a.get("extra_cflags")), *more_cflags]
            return original_load(**dict(a, name=name, build_directory=build_dir, verbose=False, extra_cflags=cflags))

        return build("load", bound, spec, cpp, cuda, run, note, call)

    return load_inline, load


def prepare_torch_pch(source: str) -> dict[str, Any]:
    """Judge side, before a CUDA source's compile step: make the PCHs its literal flags can use, and
    say what was done (for the evaluation's details)."""
    started = time.monotonic()
    made = [ensure_torch_pch(flags, torch.version.cuda is not None) for flags in wanted_pch_flag_sets(source)]
    return {"ready": sum(m is not None for m in made), "wanted": len(made), "s": round(time.monotonic() - started, 2)}


def install(log: BuildLog, count: Callable[[str], None], allow_build: bool = True) -> None:
    """Replace torch.utils.cpp_extension.load_inline/load (before the candidate is imported); with
    `allow_build` False they only load what the compile step built, and never start a compiler."""
    from torch.utils import cpp_extension

    cpp_extension.load_inline, cpp_extension.load = keyed_builders(log, count, allow_build)
