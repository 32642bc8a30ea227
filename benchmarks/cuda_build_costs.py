"""Where a load_inline build's CPU time goes: each compile torch's ninja build runs, timed alone.

For each candidate file given, its load_inline calls (read from the source: string literals and module-level
names bound to them; nothing of the candidate is run) are written out as load_inline writes them (main.cpp,
cuda.cu) with the build.ninja torch writes for them, and each compile of that ninja file is run and timed on
its own, then variants of the CUDA compile that say what its host-side torch includes cost:

  cxx          main.cpp as torch builds it (torch/extension.h parsed)
  cxx+pch      the same with kgen's precompiled torch/extension.h (when kgen has one for these flags)
  nvcc         cuda.cu as torch builds it
  nvcc-trimmed cuda.cu as kgen builds it when the source includes torch/extension.h and uses nothing of
               Python (kgen.harness.cuda_build.trim_torch_include), and whether its device code (the
               object's .nv_fatbin section) is byte for byte the same as the untrimmed build's
  --phases     nvcc's own per-phase times for cuda.cu (device front end, ptxas, host front end, host compile)

The link is left out where this torch has no CUDA libraries (a CPU machine): it is a second or two.

    python benchmarks/cuda_build_costs.py --arch 9.0 FILE.py [FILE.py ...] > costs.json
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def literal_calls(source: str) -> list[dict]:
    """The load_inline calls of a source whose arguments are literals or module-level names bound to them."""
    tree = ast.parse(source)
    names: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError, TypeError, SyntaxError):
                names[node.targets[0].id] = ast.literal_eval(node.value)
    calls = []
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        called = getattr(func, "attr", None) or getattr(func, "id", None)
        if not isinstance(node, ast.Call) or called != "load_inline":
            continue
        args: dict[str, object] = {}
        for keyword in node.keywords:
            value = keyword.value
            if isinstance(value, ast.Name) and value.id in names:
                args[keyword.arg] = names[value.id]
            else:
                try:
                    args[keyword.arg] = ast.literal_eval(value)
                except (ValueError, TypeError, SyntaxError):
                    args[keyword.arg] = None
        calls.append(args)
    return calls


def as_list(value) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def write_build(call: dict, work: Path, arch: str) -> dict[str, list[str]]:
    """main.cpp, cuda.cu and build.ninja as load_inline writes them; the compile commands of the ninja file."""
    from torch.utils import cpp_extension

    from kgen.harness.cuda_arch import gencode_flags, strip_arch_flags
    from kgen.harness.cuda_build import nvcc_path

    if cpp_extension.CUDA_HOME is None:  # a CPU torch leaves it unset; the build line needs it for its includes
        cpp_extension.CUDA_HOME = str(Path(nvcc_path() or "/usr/local/cuda/bin/nvcc").resolve().parent.parent)

    cpp = ["#include <torch/extension.h>", *as_list(call.get("cpp_sources"))]
    functions = call.get("functions") or []
    functions = {f: f for f in as_list(functions)} if not isinstance(functions, dict) else functions
    cpp += ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {",
            *[f'm.def("{f}", torch::wrap_pybind_function({f}), "{d}");' for f, d in functions.items()], "}"]
    (work / "main.cpp").write_text("\n".join(cpp))
    cuda = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>",
            *as_list(call.get("cuda_sources"))]
    (work / "cuda.cu").write_text("\n".join(cuda))
    cflags = strip_arch_flags(as_list(call.get("extra_cflags"))).flags
    cuda_cflags = strip_arch_flags(as_list(call.get("extra_cuda_cflags"))).flags + gencode_flags(arch)
    cpp_extension._write_ninja_file_to_build_library(
        path=str(work / "build.ninja"), name="kgen_cost", sources=[str(work / "main.cpp"), str(work / "cuda.cu")],
        extra_cflags=cflags, extra_cuda_cflags=cuda_cflags, extra_sycl_cflags=[], extra_ldflags=[],
        extra_include_paths=as_list(call.get("extra_include_paths")), with_cuda=True, with_sycl=False,
        is_standalone=False)
    text = (work / "build.ninja").read_text()
    var = {m.group(1): m.group(2) for m in re.finditer(r"^(\w+) = (.*)$", text, re.M)}
    expand = lambda s: re.sub(r"\$(\w+)", lambda m: var.get(m.group(1), ""), s)
    cxx = shlex.split(expand(f"$cxx -MMD -MF main.o.d $cflags -c {work}/main.cpp -o {work}/main.o $post_cflags"))
    nvcc = shlex.split(expand(f"$nvcc --generate-dependencies-with-compile --dependency-output cuda.o.d $cuda_cflags "
                              f"-c {work}/cuda.cu -o {work}/cuda.o $cuda_post_cflags"))
    return {"cxx": cxx, "nvcc": nvcc, "cflags": cflags}


def timed(command: list[str], cwd: Path) -> dict:
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    result = {"s": round(time.monotonic() - started, 2), "ok": done.returncode == 0}
    if done.returncode:
        result["error"] = (done.stdout + done.stderr)[-400:]
    return result


def nvcc_phases(command: list[str], work: Path) -> dict[str, float]:
    table = work / "nvcc-time.csv"
    table.unlink(missing_ok=True)
    subprocess.run([*command, "-time", str(table)], cwd=work, capture_output=True)
    phases: dict[str, float] = {}
    if table.exists():
        for row in csv.DictReader(io.StringIO(table.read_text())):
            name = (row.get("phase name") or row.get(" phase name") or "").strip()
            ms = next((v for k, v in row.items() if k and "metric" not in k and "ms" in k.lower()), None)
            if name and ms:
                phases[name] = round(phases.get(name, 0.0) + float(ms) / 1000, 2)
    return phases


def fatbin(work: Path) -> bytes | None:
    """The device code nvcc embedded in cuda.o (its .nv_fatbin section), to compare two builds' kernels."""
    out = work / "fatbin.bin"
    done = subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", str(work / "cuda.o"), str(out)],
                          capture_output=True)
    return out.read_bytes() if done.returncode == 0 and out.exists() else None


def measure(path: Path, arch: str, phases: bool) -> list[dict]:
    from kgen.harness.cuda_build import ensure_torch_pch, pch_flag_set, trim_torch_include

    os.environ["KGEN_TRIM_CUDA_INCLUDE"] = "1"  # kgen's default; explicit, as this script measures it
    rows = []
    for index, call in enumerate(literal_calls(path.read_text())):
        if not call.get("cuda_sources"):
            continue
        with tempfile.TemporaryDirectory() as scratch:
            work = Path(scratch)
            commands = write_build(call, work, arch)
            row: dict = {"file": path.name, "call": index, "cflags": commands["cflags"]}
            row["cxx"] = timed(commands["cxx"], work)
            pch = ensure_torch_pch(pch_flag_set(commands["cflags"]), True)
            if pch is not None:
                row["cxx+pch"] = timed([*commands["cxx"], f"-I{pch}"], work)
            row["nvcc"] = timed(commands["nvcc"], work)
            device_code = fatbin(work)
            if phases:
                row["nvcc_phases_s"] = nvcc_phases(commands["nvcc"], work)
            cu = (work / "cuda.cu").read_text()
            trimmed = trim_torch_include([cu])
            if trimmed is not None:
                (work / "cuda.o").unlink(missing_ok=True)
                (work / "cuda.cu").write_text(trimmed[0])
                row["nvcc-trimmed"] = timed(commands["nvcc"], work)
                row["same_device_code"] = device_code is not None and device_code == fatbin(work)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--phases", action="store_true", help="also nvcc's per-phase times (one more nvcc run)")
    parser.add_argument("--arch", default=os.environ.get("KGEN_CUDA_ARCH", "9.0"))
    args = parser.parse_args()
    rows = [row for path in args.files for row in measure(path, args.arch, args.phases)]
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
