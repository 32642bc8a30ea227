"""`kgen export`: a correct candidate as a standalone module that needs torch and triton (or a CUDA
toolchain for CUDA C++ kernels) but never kgen.

The module is the candidate's own source (its kernels and `ModelNew`, minus kgen-only settings such
as `KGEN_TUNABLE`) under a docstring holding its provenance, followed by a plain function named after
the problem that takes the forward's inputs and then the reference module's parameters:

    softmax(x)                         # a problem without parameters
    conv2d(x, weight, bias)            # Model's nn.Conv2d parameters, after the forward's inputs
    conv2d(x, weight, bias, init_inputs=[3, 16, 11, 4, 2])   # another layer configuration

`init_inputs` are the constructor arguments (the problem's `get_init_inputs()`, defaulting to its
full size); the parameters are put into a cached `ModelNew(*init_inputs)` for the call with
`torch.func.functional_call`.

What the kernel runs on is what kgen verified: every tensor on a CUDA device (CPU tensors only under
TRITON_INTERPRET=1, for a Triton kernel) that is a GPU kgen found it correct on (VERIFIED_GPUS; any
GPU when it was verified only under the interpreter), of the problem's dtype and rank, contiguous; with
`ONLY_VERIFIED_SHAPES = True` set on the module, also exactly the input shapes kgen verified
(VERIFIED_SHAPES). A call that differs in any of these runs the reference PyTorch code instead (the
problem's Model, embedded as REFERENCE_SOURCE) and warns once per argument and kind of difference,
naming it. A call that is wrong for the reference too still raises: an argument that is not a tensor,
tensors on different devices, parameters not shaped as the module built from `init_inputs` has them
(and a wrong number of arguments, as Python raises for any function).

Re-verification: on a machine with a CUDA GPU, the export first runs the candidate through the judge
on that GPU at the full size, with the tolerance kgen verified it at, and refuses (KgenError) unless
it is still correct there; the docstring says what was found, or why it was not re-verified (no GPU
on the exporting machine, or --no-verify).

`--aot` (kgen.outputs.aot): the module also carries its compiled kernels. The judge re-verifies the module's own
text (not the candidate's source), so its compile step compiles exactly the kernels of that text for
this GPU; they are appended after all the code, and the module's top installs them at import. It needs
a GPU and the re-verification (refused without either).

`--with-test` writes `test_<module>.py` beside it: the reference source embedded (full size on a GPU,
small size on CPU under Triton's interpreter), checked on fresh random inputs with the tolerance kgen
verified at.
"""

from __future__ import annotations

import ast
import datetime as dt
import inspect
import keyword
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kgen import __version__
from kgen.core import fmt, pyast
from kgen.core.errors import KgenError
from kgen.store.db import Candidate, Database, Evaluation, Run, db_option

# Names the exported module adds at its top level; a candidate that defines one of them is refused
# rather than silently shadowed.
ADDED_NAMES = ("PROBLEM", "LANGUAGE", "INIT_INPUTS", "INPUTS", "PARAMETERS", "VERIFIED_SHAPES", "VERIFIED_GPUS",
               "ONLY_VERIFIED_SHAPES", "REFERENCE_SOURCE", "_entry_os", "_entry_torch", "_entry_warnings",
               "_entry_models", "_entry_references", "_entry_warned", "_entry_check_tensor", "_entry_model",
               "_entry_reference", "_entry_fallback", "_entry_forward", "_entry_call")
LANGUAGE_NAMES = {"triton": "Triton", "cuda": "CUDA C++"}
DEFAULT_RTOL = 1e-5  # fp32, as the evaluator verifies when the evaluation did not record its own
DEFAULT_ATOL = 1e-5


@dataclass
class Exported:
    """What `export_candidate` wrote."""

    module_path: Path
    test_path: Optional[Path]
    candidate_id: int
    function: str
    language: str
    device: str
    speedup_eager: Optional[float]
    notes: list[str]
    reverified_on: Optional[str] = None  # this GPU, where the export found it still correct
    aot: Optional[str] = None  # what the module carries (kgen export --aot)

    def summary_lines(self) -> list[str]:
        speed = f", {self.speedup_eager:.2f}x vs eager" if self.speedup_eager is not None else ""
        again = f", re-verified correct on {self.reverified_on}" if self.reverified_on else ""
        lines = [f"wrote {self.module_path}: candidate {self.candidate_id} ({self.language}, verified on "
                 f"{self.device}{speed}{again}); call {self.module_path.stem}.{self.function}(...)"]
        if self.aot is not None:
            lines.append(f"carries {self.aot}")
        if self.test_path is not None:
            python = fmt.python_program()
            run = shlex.join([python, str(self.test_path)])
            lines.append(f"wrote {self.test_path}: run it with {run} (pytest not needed; to use pytest: "
                         f"{shlex.join([python, '-m', 'pip', 'install', 'pytest'])}, then "
                         f"{shlex.join([python, '-m', 'pytest', str(self.test_path)])})")
        return lines + [f"note: {n}" for n in self.notes]


def this_device() -> str:
    """The device name evaluations on this machine are recorded under."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _correct_evaluation(cand: Candidate, device: Optional[str]) -> Optional[Evaluation]:
    """The evaluation an export stands on: the latest correct one on `device` if any, else the latest
    correct one at the full size, else any correct one."""
    correct = [e for e in cand.evaluations if e.outcome == "correct"]
    for pick in ([e for e in correct if e.device == device], [e for e in correct if e.size == "full"], correct):
        if pick:
            return pick[-1]
    return None


def resolve_target(db: Database, target: str) -> tuple[int, Optional[str]]:
    """A candidate id, or a problem name → its leaderboard winner on this device."""
    from kgen.store.leaderboard import leaderboard

    if target.isdigit():
        return int(target), None
    device = this_device()
    rows = [r for r in leaderboard(db, problem=target) if r.device == device]
    if rows:
        return rows[0].candidate_id, device
    elsewhere = sorted({r.device for r in leaderboard(db, problem=target)})
    if elsewhere:
        best = leaderboard(db, problem=target)[0]
        example = fmt.command("export", best.candidate_id, "-o", fmt.default_module_file(target),
                              db=db_option(db.url))
        raise KgenError(f"no correct candidate for {target} on this device ({device}); there are on "
                        f"{', '.join(elsewhere)}: export one by id, e.g. {example}")
    raise KgenError(f"no correct candidate for problem '{target}' in {db.url}")


def _load_reference(run: Optional[Run], cand: Candidate, size: str):
    from kgen.problems.problem import load_problem

    where = run.problem_path if run is not None and run.problem_path and Path(run.problem_path).is_file() \
        else cand.problem
    return load_problem(where, size)


def _module_bound_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


@dataclass
class _Body:
    docstring: Optional[str]
    future_imports: list[str]
    code: str
    bound_names: set[str]
    referenced_names: set[str]


def split_candidate(source: str) -> _Body:
    """The candidate without its docstring, `from __future__` lines (they must come first, so they are
    hoisted) and top-level `KGEN_*` settings nothing else in it reads."""
    try:
        tree = pyast.parse(source)
    except SyntaxError as e:
        raise KgenError(f"the candidate's source does not parse (line {e.lineno}: {e.msg})") from e
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()
    docstring = ast.get_docstring(tree, clean=True)
    body = tree.body
    if docstring is not None:
        drop |= set(range(body[0].lineno, body[0].end_lineno + 1))
    loads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    futures = []
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            futures.append(ast.get_source_segment(source, node))
            drop |= set(range(node.lineno, node.end_lineno + 1))
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id.startswith("KGEN_") and node.targets[0].id not in loads):
            drop |= set(range(node.lineno, node.end_lineno + 1))
    code = "".join(line for i, line in enumerate(lines, start=1) if i not in drop)
    code = re.sub(r"\n{3,}(?=\S)", "\n\n\n", code.strip("\n")) + "\n"
    return _Body(docstring=docstring, future_imports=futures, code=code, bound_names=_module_bound_names(tree),
                 referenced_names=loads)


def _literal(value: Any) -> str:
    text = repr(value)
    try:
        if ast.literal_eval(text) != value:
            raise ValueError
    except (ValueError, SyntaxError):
        raise KgenError(f"the problem's constructor argument {text[:60]} is not a plain literal; "
                        "it cannot be written into a standalone module") from None
    return text


def _input_names(problem, count: int) -> list[str]:
    try:
        params = list(inspect.signature(problem.module.Model.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) != count or any(keyword.iskeyword(n) for n in names):
        names = [f"input{i}" for i in range(count)]
    return names


def _parameter_specs(problem) -> list[tuple[str, tuple[int, ...], str]]:
    from kgen.problems.problem import on_device

    with on_device("meta"):
        model = problem.module.Model(*problem.init_inputs())
    return [(name, tuple(p.shape), str(p.dtype).removeprefix("torch.")) for name, p in model.named_parameters()]


def _argument_names(param_names: list[str], taken: set[str]) -> list[str]:
    """`conv.weight, conv.bias` → `weight, bias` (a shared first component dropped when that leaves
    distinct names); else dots become underscores."""
    def ident(name: str) -> str:
        out = re.sub(r"\W", "_", name)
        return f"p_{out}" if not out or out[0].isdigit() or keyword.iskeyword(out) else out

    heads = {n.split(".", 1)[0] for n in param_names}
    if len(heads) == 1 and all("." in n for n in param_names):
        short = [ident(n.split(".", 1)[1]) for n in param_names]
        if len(set(short)) == len(short) and not set(short) & taken:
            return short
    return [ident(n) for n in param_names]


def _function_name(problem_name: str, body: _Body) -> str:
    name = re.sub(r"\W", "_", problem_name)
    if not name or name[0].isdigit() or keyword.iskeyword(name):
        name = f"run_{name}"
    if name in body.bound_names or name in body.referenced_names or name in ADDED_NAMES:
        name = f"{name}_forward"
    return name


def _provenance(cand: Candidate, ev: Evaluation, run: Optional[Run], problem, function: str, module_name: str,
                rtol: float, atol: float, body: _Body, language: str, inputs_doc: str, shape_doc: str,
                verified_doc: str, params_doc: str, export_check: str, exported_at: dt.datetime,
                aot_line: Optional[str] = None) -> str:
    def when_ms(ms, speedup):
        return f"{fmt.ms(ms)} ms ({fmt.speedup(speedup)} faster)" if ms is not None else "not timed"

    versions = ", ".join(f"{k} {v}" for k, v in (("torch", ev.torch_version), ("triton", ev.triton_version),
                                                 ("CUDA", ev.cuda_version)) if v) or "not recorded"
    runtime = (f"{fmt.ms(ev.runtime_ms)} ms" if ev.runtime_ms is not None
               else "not timed (verified without a GPU, under Triton's interpreter)")
    needs = "torch and triton" if language == "triton" else "torch and a CUDA toolchain (nvcc) for load_inline"
    device_note = ("CUDA tensors (CPU tensors only under TRITON_INTERPRET=1)" if language == "triton"
                   else "CUDA tensors")
    lines = [
        f"{problem.name}: a {LANGUAGE_NAMES.get(language, language)} kernel found by kgen, exported as a standalone "
        "module.",
        "",
        f"Needs {needs}; not kgen. Forward only (no autograd).",
        "",
        f"    from {module_name} import {function}",
        f"    y = {function}({inputs_doc})",
        "",
        f"Inputs at the problem's full size: {shape_doc}; kgen verified the kernel at the {ev.size} size"
        + (f" ({verified_doc})." if ev.size != "full" else "."),
    ]
    if params_doc:
        lines += [f"Parameters (the reference module's, after the inputs): {params_doc}.",
                  "`init_inputs=` gives other constructor arguments (default: INIT_INPUTS, the problem's).",
                  "ModelNew (same constructor and forward as the reference Model) is here too."]
    lines += [
        f"The kernel runs on {device_note},",
        "of the dtypes and ranks above, contiguous, on a GPU in VERIFIED_GPUS (if any); any other call runs the",
        "reference PyTorch code instead"
        " (REFERENCE_SOURCE, at the end) with a one-time warning naming what differed."
        + (" Misshapen parameters raise." if params_doc else ""),
        "Other shapes of the same rank run the same kernel but kgen verified only the ones above: test yours"
        + (f" (test_{module_name}.py)" if module_name else "")
        + ", or set ONLY_VERIFIED_SHAPES = True.",
        "",
    ]
    if aot_line is not None:
        lines += [
            "Compiled kernels (kgen export --aot): the end of this file carries the kernels kgen's judge compiled",
            "from this very module for the GPU named below (\"compiled\"), in its sandboxed compile step, and that",
            "its verified run loaded. On a GPU of that compute capability with the same Triton (torch, CUDA) versions,",
            "importing the module puts them into Triton's cache and loads its CUDA extensions from them: calls at",
            "the verified shapes compile nothing. Anywhere else it warns once and they compile as usual. They are",
            "binaries: importing the module runs them as the judge's sandbox built them.",
            "",
        ]
    lines += [
        "Provenance:",
        f"    problem       {problem.name} ({problem.path.name}, evaluated at the {ev.size} size)",
        f"    candidate     {cand.id}: run {cand.run_id if cand.run_id is not None else '-'}, round "
        f"{cand.round if cand.round is not None else '-'}, proposer {cand.proposer}"
        + (f", model {cand.model}" if cand.model else ""),
    ]
    if cand.idea:
        lines.append(f"    idea          {cand.idea}")
    lines += [
        f"    device        {ev.device}",
        f"    versions      {versions}",
        f"    runtime       {runtime}",
        f"    vs eager      {when_ms(ev.eager_ms, ev.speedup_eager)}",
        f"    vs compile    {when_ms(ev.compile_ms, ev.speedup_compile)} (torch.compile)",
        f"    roofline      {'-' if ev.roofline_pct is None else f'{ev.roofline_pct:.1f}%'}",
        f"    tolerance     rtol {rtol:g}, atol {atol:g}"
        + (f" (max abs err {ev.max_abs_err:.2e})" if ev.max_abs_err is not None else ""),
        f"    torch ops     {', '.join(ev.torch_ops) if ev.torch_ops else 'none (all work in its own kernels)'}",
        f"    on export     {export_check}",
    ]
    if aot_line is not None:
        lines.append(f"    compiled      {aot_line}")
    lines += [
        f"    exported      {exported_at:%Y-%m-%d %H:%M} UTC by kgen {__version__}",
    ]
    if run is not None and run.kgen_version:
        lines[-1] += f" (searched with kgen {run.kgen_version})"
    if body.docstring:
        lines += ["", "The kernel's own notes:", ""] + [f"    {x}".rstrip() for x in body.docstring.splitlines()]
    text = "\n".join(lines)
    return '"""' + text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"') + '\n"""\n'


ENTRY_HELPERS = '''
import os as _entry_os
import warnings as _entry_warnings

import torch as _entry_torch

_entry_models = {}
_entry_references = {}
_entry_warned = set()


def _entry_check_tensor(name, value, shape, dtype, device, differs):
    """Raise where the call is wrong for the reference too; note in `differs` where it is only not
    what kgen verified the kernel on. Returns the device the tensors are on."""
    if not isinstance(value, _entry_torch.Tensor):
        raise TypeError(f"{PROBLEM}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if device is not None and value.device != device:
        raise ValueError(f"{PROBLEM}: {name} is on {value.device}, the other tensors on {device}")
    interpreted = LANGUAGE == "triton" and _entry_os.environ.get("TRITON_INTERPRET") == "1"
    if value.device.type != "cuda" and not interpreted:
        hint = " (CPU tensors run the kernel only under TRITON_INTERPRET=1)" if LANGUAGE == "triton" else ""
        differs.append((name, "device", f"{name} is on {value.device}, not a CUDA device{hint}"))
    elif value.device.type == "cuda" and VERIFIED_GPUS and device is None:  # the others are on the same one
        gpu = _entry_torch.cuda.get_device_name(value.device)
        if gpu not in VERIFIED_GPUS:
            differs.append((name, "device", f"{name} is on {gpu}, verified on {' and '.join(VERIFIED_GPUS)}"))
    got = str(value.dtype).replace("torch.", "")
    if got != dtype:
        differs.append((name, "dtype", f"{name} is {got}, verified {dtype}"))
    if value.dim() != len(shape):
        differs.append((name, "rank", f"{name} is {value.dim()}-D (shape {tuple(value.shape)}), verified "
                                      f"{len(shape)}-D"))
    if not value.is_contiguous():
        differs.append((name, "layout", f"{name} is not contiguous (call .contiguous() to run the kernel)"))
    return value.device


def _entry_model(init_inputs, device):
    key = (repr(init_inputs), str(device))
    if key not in _entry_models:
        with _entry_torch.device(device):
            _entry_models[key] = ModelNew(*init_inputs).eval()
    return _entry_models[key]


def _entry_reference(init_inputs, device):
    """The reference Model(*init_inputs), from REFERENCE_SOURCE, on `device`."""
    if "namespace" not in _entry_references:
        namespace = {"__name__": f"{__name__}_reference"}
        exec(compile(REFERENCE_SOURCE, f"<{PROBLEM} reference>", "exec"), namespace)
        _entry_references["namespace"] = namespace
    key = (repr(init_inputs), str(device))
    if key not in _entry_references:
        with _entry_torch.device(device):
            _entry_references[key] = _entry_references["namespace"]["Model"](*init_inputs).eval()
    return _entry_references[key]


def _entry_fallback(inputs, parameters, init_inputs, device, differs):
    """The reference PyTorch code on a call kgen did not verify the kernel for; one warning per
    argument and kind of difference."""
    new = [text for name, kind, text in differs if (name, kind) not in _entry_warned]
    _entry_warned.update((name, kind) for name, kind, _ in differs)
    if new:
        _entry_warnings.warn(f"{PROBLEM}: running the reference PyTorch code, not the kernel: " + "; ".join(new)
                             + " (warned once each)", stacklevel=4)
    model = _entry_reference(init_inputs, device or "cpu")
    return _entry_forward(model, [name for _, name, _, _ in PARAMETERS], inputs, parameters, init_inputs)


def _entry_forward(model, targets, inputs, parameters, init_inputs):
    """`model` on the inputs, with the caller's parameters in place of its own (`targets`: their names
    in `model`, in PARAMETERS' order)."""
    own = dict(model.named_parameters())
    swapped = {}
    for (arg, _, _, _), target, value in zip(PARAMETERS, targets, parameters):
        if tuple(value.shape) != tuple(own[target].shape):
            raise ValueError(f"{PROBLEM}: {arg} must have shape {tuple(own[target].shape)} for init_inputs "
                             f"{init_inputs}, got {tuple(value.shape)} (pass init_inputs= for another configuration)")
        swapped[target] = value
    with _entry_torch.no_grad():
        if swapped:
            return _entry_torch.func.functional_call(model, swapped, tuple(inputs))
        return model(*inputs)


def _entry_call(inputs, parameters, init_inputs):
    """Check the inputs and parameters, then run ModelNew(*init_inputs) on them, or the reference
    where they are not what kgen verified the kernel on."""
    device = None
    differs = []
    for (name, shape, dtype), value in zip(INPUTS, inputs):
        if dtype is not None:
            device = _entry_check_tensor(name, value, shape, dtype, device, differs)
    for (arg, _, shape, dtype), value in zip(PARAMETERS, parameters):
        device = _entry_check_tensor(arg, value, shape, dtype, device, differs)
    shapes = [tuple(v.shape) for (_, _, dtype), v in zip(INPUTS, inputs) if dtype is not None]
    if ONLY_VERIFIED_SHAPES and not differs and shapes not in [list(map(tuple, s)) for s in VERIFIED_SHAPES]:
        differs.append(("inputs", "shape", f"input shapes {shapes} are not among VERIFIED_SHAPES"))
    init_inputs = list(INIT_INPUTS if init_inputs is None else init_inputs)
    if differs:
        return _entry_fallback(inputs, parameters, init_inputs, device, differs)
    model = _entry_model(init_inputs, device or "cpu")
    own = dict(model.named_parameters())
    if len(own) != len(PARAMETERS):
        raise TypeError(f"{PROBLEM}: ModelNew has {len(own)} parameters, the reference {len(PARAMETERS)}")
    # by the reference's names; by position where ModelNew names them otherwise
    targets = [name for _, name, _, _ in PARAMETERS] if set(own) == {n for _, n, _, _ in PARAMETERS} else list(own)
    return _entry_forward(model, targets, inputs, parameters, init_inputs)
'''


def _string_literal(text: str) -> str:
    """`text` as a readable triple-quoted literal where that is exact, else as repr()."""
    if "\\" not in text and "'''" not in text and not text.endswith("'"):
        return "'''\\\n" + text + "'''"
    return repr(text)


def _entry_point(problem, function: str, input_names: list[str], arg_names: list[str],
                 param_specs: list[tuple[str, tuple[int, ...], str]], language: str,
                 verified_shapes: list[list[tuple[int, ...]]], verified_gpus: list[str],
                 reference_source: str) -> str:
    import torch

    from kgen.problems.problem import on_device

    with on_device("meta"):
        meta_inputs = list(problem.module.get_inputs())
    specs = []
    for name, x in zip(input_names, meta_inputs):
        if isinstance(x, torch.Tensor):
            specs.append((name, tuple(x.shape), str(x.dtype).removeprefix("torch.")))
        else:
            specs.append((name, (), None))
    init_inputs = [_literal(v) for v in problem.init_inputs()]
    params_sig = "".join(f", {a}" for a in arg_names)
    doc_inputs = "; ".join(f"{n}: {'x'.join(map(str, s)) or 'scalar'} {d or ''}".strip() for n, s, d in specs)
    return "\n".join([
        "",
        "",
        "# The entry point and its checks (written by kgen export).",
        f"PROBLEM = {problem.name!r}",
        f"LANGUAGE = {language!r}",
        "# The reference's constructor arguments at the problem's full size (its get_init_inputs()).",
        f"INIT_INPUTS = [{', '.join(init_inputs)}]",
        "# The forward's inputs as kgen verified them at the full size: (name, shape, dtype or None if not a tensor).",
        f"INPUTS = {specs!r}",
        "# The reference module's parameters, in the order the entry point takes them:",
        "# (argument, name in the module, shape at the full size, dtype).",
        f"PARAMETERS = {[(a, n, s, d) for a, (n, s, d) in zip(arg_names, param_specs)]!r}",
        "# The input tensors' shapes at each size kgen verified the kernel at. Other shapes of the same rank run",
        "# the kernel too, untested by kgen; set ONLY_VERIFIED_SHAPES = True to run the reference on them instead.",
        f"VERIFIED_SHAPES = {verified_shapes!r}",
        "ONLY_VERIFIED_SHAPES = False",
        "# The GPUs kgen found the kernel correct on: CUDA tensors on another GPU run the reference (none listed: the",
        "# kernel was verified only under Triton's interpreter, and runs on any GPU).",
        f"VERIFIED_GPUS = {verified_gpus!r}",
        ENTRY_HELPERS.rstrip(),
        "",
        "",
        f"def {function}({', '.join(input_names)}{params_sig}, *, init_inputs=None):",
        f'    """{problem.name} on the exported kernel: the reference Model(*init_inputs)({", ".join(input_names)})'
        + (f" with parameters {', '.join(arg_names)}." if arg_names else ".")
        + f"\n\n    {doc_inputs}. Other devices, dtypes, ranks or layouts run the reference (one warning);"
        "\n    a non-tensor argument or misshapen parameters raise TypeError/ValueError.\n    \"\"\"",
        f"    return _entry_call([{', '.join(input_names)}], [{', '.join(arg_names)}], init_inputs)",
        "",
        "",
        "# The reference (the problem's file at its full size): what a call kgen did not verify the kernel for runs.",
        f"REFERENCE_SOURCE = {_string_literal(reference_source)}",
        "",
    ])


TEST_TEMPLATE = '''"""Checks {module}.py against the reference ({problem}) on fresh random inputs.

Written by kgen export. Run it with `python {test_file}` (needs torch, and triton for a Triton
kernel; no pytest), or with pytest. With a GPU it runs at the problem's full size; without one, at
its small size under Triton's interpreter (TRITON_INTERPRET=1; a CUDA C++ kernel is skipped there).
Tolerance: the one kgen verified the kernel at (rtol {rtol:g}, atol {atol:g}).
"""
import os
import re
import sys
import unittest
import warnings

import torch

try:
    import pytest
except ImportError:  # `python {test_file}` needs no pytest
    pytest = None

GPU = torch.cuda.is_available()
if not GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the module defines its kernels
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import {module} as exported  # noqa: E402

RTOL = {rtol!r}
ATOL = {atol!r}
DEVICE = "cuda" if GPU else "cpu"

# The reference, at the full size and at the small size (its size constants rewritten).
REFERENCE_FULL = {full!r}
REFERENCE_SMALL = {small!r}


def _reference():
    namespace = {{"__name__": "reference_{problem_ident}"}}
    exec(compile(REFERENCE_FULL if GPU else REFERENCE_SMALL, "reference_{problem_ident}.py", "exec"), namespace)
    return namespace


def _setup(seed):
    """The reference module (no parameter left constant: LayerNorm's ones and zeros would hide a kernel
    that ignores them) and fresh random inputs (never all zeros)."""
    ref = _reference()
    torch.manual_seed(seed)
    init_inputs = list(ref["get_init_inputs"]())
    model = ref["Model"](*init_inputs).to(DEVICE).eval()
    noise = torch.Generator().manual_seed(seed + 7919)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.add_(0.1 * torch.randn(p.shape, generator=noise).to(p) * (p.abs().mean() + 1))
    inputs = []
    for x in ref["get_inputs"]():
        if isinstance(x, torch.Tensor):
            x = x.to(DEVICE)
            if x.is_floating_point() and x.numel() > 1 and bool((x == x.flatten()[0]).all()):
                x = torch.randn_like(x)
        inputs.append(x)
    return model, inputs, init_inputs


def _outputs(y):
    return list(y) if isinstance(y, (tuple, list)) else [y]


def _skip_without_toolchain():
    if exported.LANGUAGE == "cuda" and not GPU:
        if pytest is not None:
            pytest.skip("a CUDA C++ kernel needs a GPU")
        raise unittest.SkipTest("a CUDA C++ kernel needs a GPU")


def _each_seed(test):
    """One test per seed: pytest's parametrize where pytest runs it; `python {test_file}` loops over them."""
    test.seeds = (0, 1, 2)
    return pytest.mark.parametrize("seed", test.seeds)(test) if pytest is not None else test


@_each_seed
def test_matches_the_reference_on_fresh_random_inputs(seed):
    _skip_without_toolchain()
    model, inputs, init_inputs = _setup(seed)
    params = [p.detach() for p in model.parameters()]
    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        expected = _outputs(model(*inputs))
    got = _outputs(exported.{function}(*inputs, *params, init_inputs=init_inputs))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        assert torch.isfinite(g).all() or not torch.isfinite(e).all()
        torch.testing.assert_close(g, e, rtol=RTOL, atol=ATOL)
    for x, b in zip(inputs, before):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, b), "the kernel changed its input"


def _falls_back(wrong, params, init_inputs, model, match):
    """The exported function on a call kgen did not verify: the reference's result, one warning."""
    with torch.no_grad():
        expected = _outputs(model(*wrong))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _outputs(exported.{function}(*wrong, *params, init_inputs=init_inputs))
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert any(re.search(match, text) for text in said), said
    assert len([text for text in said if "running the reference" in text]) == 1
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=RTOL, atol=ATOL)


def test_runs_the_reference_on_another_dtype():
    model, inputs, init_inputs = _setup(0)
    model = model.double()  # all of it in float64: the reference accepts that, the kernel was not verified on it
    params = [p.detach() for p in model.parameters()]
    wrong = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    _falls_back(wrong, params, init_inputs, model, "float64")


def test_runs_the_reference_on_a_non_contiguous_input():
    model, inputs, init_inputs = _setup(0)
    params = [p.detach() for p in model.parameters()]
    first = next(i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.dim() >= 2)
    wrong = list(inputs)
    wrong[first] = inputs[first].transpose(-1, -2).contiguous().transpose(-1, -2)
    _falls_back(wrong, params, init_inputs, model, "contiguous")


if __name__ == "__main__":  # `python {test_file}`: every test above, without pytest
    failed = 0
    tests = [(n, f) for n, f in list(globals().items()) if n.startswith("test_") and callable(f)]
    for name, test, args in [(n, f, a) for n, f in tests for a in ([(s,) for s in f.seeds] if hasattr(f, "seeds")
                                                                   else [()])]:
        label = name + (f"[{{args[0]}}]" if args else "")
        try:
            test(*args)
        except unittest.SkipTest as e:
            print(f"skipped {{label}}: {{e}}")
        except Exception as e:  # noqa: BLE001 - a failing test is reported, and the others still run
            failed += 1
            print(f"FAILED {{label}}: {{type(e).__name__}}: {{e}}")
        else:
            print(f"ok {{label}}")
    print(f"{{failed}} test(s) FAILED" if failed else "all tests passed")
    sys.exit(1 if failed else 0)
'''


NO_GPU = "not re-verified: no GPU on the exporting machine"
NO_VERIFY = "not re-verified on export (--no-verify)"
AOT_PENDING = "re-verifying this module's own text on this GPU (kgen export --aot)"
AOT_LINE_PENDING = "pending: the re-verification compiles them"


def gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


def reverify(problem, source: str, rtol: Optional[float], sandbox: str):
    """The candidate through the judge on this machine's GPU, at `problem`'s size and the tolerance
    kgen verified it at; the judge's EvalResult."""
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate

    # correctness is the question here, not speed: a short timing, enough for the judge's own checks
    return evaluate_candidate(problem, source, EvalSettings(device="cuda", size=problem.size, rtol=rtol,
                                                            sandbox=sandbox, min_timed_runs=20, min_timed_s=0.1))


def _export_check(cand: Candidate, full, rtol: Optional[float], verify: bool,
                  sandbox: str) -> tuple[str, Optional[str]]:
    """What the export found on this machine (the docstring's line) and the GPU it re-verified the
    candidate on at the full size, if it did; raises KgenError when the candidate is no longer correct here."""
    if not verify:
        return NO_VERIFY, None
    if not gpu_available():
        return NO_GPU, None
    result = reverify(full, cand.source, rtol, sandbox)
    return _judged(cand, result), result.device


def _judged(cand: Candidate, result, what: str = "") -> str:
    """The docstring's line for a re-verification on this GPU; KgenError unless it found it correct."""
    if result.outcome != "correct":
        why = (result.message or "").strip().splitlines()
        why = f": {why[0][:200]}" if why else ""
        raise KgenError(f"candidate {cand.id}{what} is not correct on this GPU ({result.device}), so it is not "
                        f"exported: {result.outcome}{why} (--no-verify exports it anyway)")
    error = f"max error {result.max_abs_err:.2e}" if result.max_abs_err is not None else "max error not recorded"
    return (f"re-verified on {result.device} {dt.datetime.now(dt.timezone.utc):%Y-%m-%d}: correct, {error} "
            f"(full size, rtol {fmt.tol(result.rtol)})")


def _aot_payload(result, language: str):
    """What the module carries: the kernels the judge's compile step built for the text it just verified
    (kgen.outputs.aot), for this GPU and the versions the verified run had."""
    import torch

    from kgen.judge.builds import builds_root
    from kgen.judge.evaluate import _versions
    from kgen.outputs import aot

    key = result.details.get("build_key")
    if not isinstance(key, str) or not key:
        raise KgenError("the judge did not say where it compiled the module's kernels (no compile step ran), so "
                        "there is nothing to carry")
    here = _versions()  # where the verified run did not report its own
    meta = aot.target_meta(result.device, tuple(torch.cuda.get_device_capability()),
                           result.triton_version or here["triton_version"],
                           result.torch_version or here["torch_version"], result.cuda_version or here["cuda_version"])
    return aot.payload_from_build(builds_root() / key, result.details, language, meta)


def _same_lines_but_results(verified: str, final: str) -> None:
    """The written module's code must be the verified text's, line for line: only the docstring's two
    result lines and the payload's checksum may differ (else a kernel could have moved)."""
    from kgen.outputs.aot import SHA_NAME

    before, after = verified.splitlines(), final.splitlines()
    moved = len(before) != len(after) or any(
        a != b and not a.startswith(("    on export     ", "    compiled      ", f"{SHA_NAME} = "))
        for a, b in zip(before, after))
    if moved:
        raise KgenError("the exported module's code changed after its re-verification; this is a kgen bug, please "
                        "report it")


def export_candidate(db: Database, target: str, out: str | Path, *, with_test: bool = False, verify: bool = True,
                     aot: bool = False, sandbox: str = "bwrap") -> Exported:
    """Write candidate `target` (an id, or a problem name → its winner on this device) to `out`; on a
    machine with a GPU, only once the judge found it still correct there (unless `verify` is False).
    `aot`: the judge re-verifies the module's own text, and the module carries the kernels it compiled."""
    if aot:
        from kgen.outputs import aot as aot_part

        if not verify:
            raise KgenError(aot_part.NEEDS_VERIFY)
        if not gpu_available():
            raise KgenError(aot_part.NEEDS_GPU)
    out_path = Path(out).expanduser()
    if out_path.suffix != ".py" or not out_path.stem.isidentifier() or keyword.iskeyword(out_path.stem):
        raise KgenError(f"-o must name an importable Python file (like softmax_kernel.py), got '{out}'")
    if not out_path.parent.is_dir():
        raise KgenError(f"cannot write {out_path}: folder {out_path.parent} does not exist")
    candidate_id, device = resolve_target(db, target)
    with db.reader() as s:
        cand = s.get(Candidate, candidate_id)
        if cand is None:
            raise KgenError(f"no candidate with id {candidate_id} in {db.url}")
        ev = _correct_evaluation(cand, device or this_device())
        if ev is None:
            latest = cand.evaluations[-1] if cand.evaluations else None
            why = f"its latest evaluation is {latest.outcome}" if latest else "it has not been evaluated"
            raise KgenError(f"candidate {candidate_id} has no correct evaluation ({why}); only correct candidates "
                            "are exported")
        run = s.get(Run, cand.run_id) if cand.run_id is not None else None
        verified_sizes = {e.size for e in cand.evaluations if e.outcome == "correct"}
        verified_gpus = {e.device for e in cand.evaluations if e.outcome == "correct" and e.device != "cpu"}
        s.expunge_all()

    notes: list[str] = []
    full = _load_reference(run, cand, "full")
    small = _load_reference(run, cand, "small")
    evaluated = full if ev.size == "full" else small
    if cand.problem_hash and cand.problem_hash not in (full.source_hash, small.source_hash):
        notes.append(f"the problem file {full.path} changed since candidate {cand.id} was evaluated; "
                     "the exported test checks it against the file as it is now")

    body = split_candidate(cand.source)
    clash = body.bound_names & set(ADDED_NAMES)
    if aot:
        from kgen.outputs.aot import NAME_PREFIX, PAYLOAD_NAME, SHA_NAME

        clash |= {n for n in body.bound_names if n.startswith(NAME_PREFIX) or n in (PAYLOAD_NAME, SHA_NAME)}
    if clash:
        raise KgenError(f"candidate {cand.id} defines {', '.join(sorted(clash))}, which the exported module "
                        "needs for its entry point")
    if "ModelNew" not in body.bound_names:
        raise KgenError(f"candidate {cand.id} defines no ModelNew")
    language = ev.language or cand.language
    function = _function_name(full.name, body)
    if function != full.name:
        notes.append(f"the candidate already uses the name '{full.name}'; the entry point is '{function}'")
    param_specs = _parameter_specs(full)
    input_names = _input_names(full, len(full.input_specs()))
    arg_names = _argument_names([n for n, _, _ in param_specs], set(input_names))
    rtol = ev.rtol if ev.rtol is not None else DEFAULT_RTOL
    atol = ev.atol if ev.atol is not None else DEFAULT_ATOL
    if aot:  # the module's own text is re-verified below, once it is written, on the GPU the judge will use
        from kgen.judge.evaluate import _device_name

        export_check, reverified_on = AOT_PENDING, _device_name("cuda")
    else:
        export_check, reverified_on = _export_check(cand, full, ev.rtol, verify, sandbox)
    if export_check == NO_GPU:
        notes.append(f"{NO_GPU} (kgen verified it on {ev.device}); the module's docstring says so")
    sizes = verified_sizes | ({"full"} if reverified_on else set())
    verified_gpus = sorted(verified_gpus | ({reverified_on} if reverified_on else set()))
    verified_shapes = [[tuple(x.shape) for x in problem.input_specs() if hasattr(x, "shape")]
                       for problem in (small, full) if problem.size in sizes]

    shape_doc = ", ".join(f"{n} {s}" for n, s in zip(input_names, full.input_specs()))
    params_doc = ", ".join(f"{a} {'x'.join(map(str, shape))} {dtype}" for a, (_, shape, dtype)
                           in zip(arg_names, param_specs))
    verified_doc = ", ".join(f"{n} {s}" for n, s in zip(input_names, evaluated.input_specs()))
    exported_at = dt.datetime.now(dt.timezone.utc)

    def docstring(check: str, aot_line: Optional[str]) -> str:
        return _provenance(cand, ev, run, evaluated, function, out_path.stem, rtol, atol, body, language,
                           ", ".join(input_names + arg_names), shape_doc, verified_doc, params_doc, check, exported_at,
                           aot_line)

    def code(sha256: Optional[str] = None) -> str:
        from kgen.outputs import aot as aot_part

        text = "\n".join(body.future_imports) + "\n" if body.future_imports else ""
        if aot:
            text += "\n" + aot_part.shim_source(sha256)
        text += "\n" + body.code
        return text + _entry_point(full, function, input_names, arg_names, param_specs, language, verified_shapes,
                                   verified_gpus, full.sized_source)

    text = docstring(export_check, AOT_LINE_PENDING if aot else None) + code()
    payload = None
    if aot:
        # the judge compiles and verifies exactly this text; the written file differs from it only in lines
        # that move no kernel: the docstring's two lines of results, the payload's checksum, the payload after
        # everything (Triton's cache key holds each kernel's source and its first line number)
        result = reverify(full, text, ev.rtol, sandbox)
        export_check = _judged(cand, result, " (as the exported module)")
        payload = _aot_payload(result, language)
        verified = text
        text = docstring(export_check, payload.summary) + code(payload.sha256)
        _same_lines_but_results(verified, text)
        text += payload.text
    try:
        compile(text, str(out_path), "exec")
    except SyntaxError as e:
        raise KgenError(f"the exported module does not compile (line {e.lineno}: {e.msg}); "
                        "this is a kgen bug, please report it") from e
    out_path.write_text(text)

    test_path = None
    if with_test:
        test_path = out_path.with_name(f"test_{out_path.stem}.py")
        test_path.write_text(TEST_TEMPLATE.format(
            module=out_path.stem, test_file=test_path.name, problem=full.name,
            problem_ident=re.sub(r"\W", "_", full.name), function=function,
            rtol=rtol, atol=atol, full=full.sized_source, small=small.sized_source))
    return Exported(module_path=out_path, test_path=test_path, candidate_id=cand.id, function=function,
                    language=language, device=ev.device, speedup_eager=ev.speedup_eager, notes=notes,
                    reverified_on=reverified_on, aot=payload.summary if payload is not None else None)
