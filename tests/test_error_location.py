"""A failure's report quotes the line of the candidate's own file where it happened (issue 32), not
only Triton's frames: through the interpreter's InterpreterError to the kernel body's line, a Triton
compile error's line, a plain Python error's deepest frame in the file."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from kgen.harness.runner import classify

from conftest import run_kgen

# The report's case: a mask built from a scalar program-id test (issue 32, level 2 problem 18).
SCALAR_MASK = textwrap.dedent('''\
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl


    @triton.jit
    def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        first_rows = row >= 0
        x = tl.load(x_ptr + row * n_cols + offs, mask=(offs < n_cols) & first_rows, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=offs < n_cols)


    class ModelNew(nn.Module):
        def forward(self, x):
            y = torch.empty_like(x)
            softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
            return y
    ''')
MASK_LINE = 12
LAUNCH_LINE = 21

CLASSIFY = textwrap.dedent('''\
    import importlib.util, json, sys
    import torch
    from kgen.harness.runner import classify

    class NoBuilds:
        error = None
        not_runnable = None

    path = sys.argv[1]
    spec = importlib.util.spec_from_file_location("kgen_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.ModelNew()(torch.randn(4, 10))
    except BaseException as e:
        print(json.dumps(classify(e, "the first forward", NoBuilds(), path, ["softmax_kernel"])))
    ''')


class _NoBuilds:
    error = None
    not_runnable = None


def _interpreted(tmp_path, source: str) -> dict:
    """The runner's report on the candidate's failure in Triton's interpreter, in a fresh process
    (Triton reads TRITON_INTERPRET when a kernel is defined)."""
    candidate, script = tmp_path / "kgen_candidate.py", tmp_path / "classify.py"
    candidate.write_text(source)
    script.write_text(CLASSIFY)
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, str(script), str(candidate)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _quoted_line(message: str) -> str:
    return next(line for line in message.splitlines() if line.startswith(">"))


def test_an_interpreter_error_points_at_the_kernels_own_line(tmp_path):
    report = _interpreted(tmp_path, SCALAR_MASK)
    message = report["message"]
    assert report["outcome"] == "compile_error"
    assert "ValueError: mask has unsupported dtype" in message
    assert (f"at line {MASK_LINE} of the candidate's file, in softmax_kernel (called from line {LAUNCH_LINE} in "
            "forward):") in message
    lines = SCALAR_MASK.splitlines()
    assert _quoted_line(message) == f">   {MASK_LINE} | {lines[MASK_LINE - 1]}"
    for n in (MASK_LINE - 2, MASK_LINE - 1, MASK_LINE + 1, MASK_LINE + 2):  # two lines of context either side
        assert f"  {n:4d} | {lines[n - 1]}" in message
    assert "interpreter.py" not in message  # Triton's own frames are left out once the line is known
    assert len(message.splitlines()) <= 9


def test_a_python_error_points_at_the_deepest_line_in_the_candidates_file(tmp_path):
    source = textwrap.dedent('''\
        import torch
        import torch.nn as nn


        def helper(x):
            return x.view(3, -1, 7)


        class ModelNew(nn.Module):
            def forward(self, x):
                return helper(x)
        ''')
    candidate = tmp_path / "kgen_candidate.py"
    candidate.write_text(source)
    spec = importlib.util.spec_from_file_location("kgen_candidate_python_error", candidate)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(RuntimeError) as raised:
        module.ModelNew()(torch.randn(4, 10))
    message = classify(raised.value, "the first forward", _NoBuilds(), str(candidate), [])["message"]
    assert message.startswith("error during the first forward: RuntimeError: shape '[3, -1, 7]' is invalid")
    assert "at line 6 of the candidate's file, in helper (called from line 11 in forward):" in message
    assert _quoted_line(message) == ">    6 |     return x.view(3, -1, 7)"


def test_a_triton_compile_error_is_placed_in_the_file(tmp_path):
    """Triton's CompilationError counts lines from the kernel's `def`; the report gives the file's line."""
    from triton.compiler.errors import CompilationError

    candidate = tmp_path / "kgen_candidate.py"
    candidate.write_text(SCALAR_MASK)
    def_line = SCALAR_MASK.splitlines().index(
        "def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):") + 1
    kernel_src = "\n".join(SCALAR_MASK.splitlines()[def_line - 1:def_line + 8])
    node = ast.parse(kernel_src).body[0].body[3]  # the tl.load line
    error = CompilationError(kernel_src, node, "mask must be a block of int1")
    report = classify(error, "the compile step", _NoBuilds(), str(candidate), ["softmax_kernel"])
    assert report["outcome"] == "compile_error"
    assert "CompilationError: mask must be a block of int1" in report["message"]
    assert f"at line {MASK_LINE} of the candidate's file, in softmax_kernel:" in report["message"]


@pytest.mark.slow
def test_kgen_eval_shows_the_candidates_line_through_the_sandbox(tmp_path):
    if subprocess.run(["which", "bwrap"], capture_output=True).returncode != 0:
        pytest.skip("needs bubblewrap")
    candidate = tmp_path / "scalar_mask.py"
    candidate.write_text(SCALAR_MASK)
    done = run_kgen("eval", "softmax", str(candidate), "--device", "cpu", "--json")
    result = json.loads(done.stdout)
    assert result["outcome"] == "compile_error"
    assert f"at line {MASK_LINE} of the candidate's file, in softmax_kernel" in result["message"]
    assert "mask=(offs < n_cols) & first_rows" in _quoted_line(result["message"])
