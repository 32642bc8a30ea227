"""The text `kgen export` writes (kgen.outputs.export says what it holds and why): the module's docstring with
its provenance, the candidate's own code, the entry point named after the problem with the checks that
send any call kgen did not verify to the reference, and the test file beside it.
"""

from __future__ import annotations

import ast
import datetime as dt
import inspect
import keyword
import re
from dataclasses import dataclass
from typing import Any, Optional

from kgen import __version__
from kgen.core import fmt, pyast
from kgen.core.errors import KgenError
from kgen.store.db import Candidate, Evaluation, Run

# Names the exported module adds at its top level; a candidate that defines one of them is refused
# rather than silently shadowed.
ADDED_NAMES = ("PROBLEM", "LANGUAGE", "INIT_INPUTS", "INPUTS", "PARAMETERS", "VERIFIED_SHAPES", "VERIFIED_GPUS",
               "ONLY_VERIFIED_SHAPES", "REFERENCE_SOURCE", "_entry_os", "_entry_torch", "_entry_warnings",
               "_entry_models", "_entry_references", "_entry_warned", "_entry_check_tensor", "_entry_model",
               "_entry_reference", "_entry_fallback", "_entry_forward", "_entry_call")
LANGUAGE_NAMES = {"triton": "Triton", "cuda": "CUDA C++"}


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


def _entry_judged_mode(model):
    """The mode kgen verified the kernel in: as the module's __init__ leaves it (nn.Module's default is
    training, as KernelBench calls its modules), with every dropout layer off."""
    for m in model.modules():
        if isinstance(m, _entry_torch.nn.modules.dropout._DropoutNd):
            m.eval()
    return model


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
            _entry_models[key] = _entry_judged_mode(ModelNew(*init_inputs))
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
            _entry_references[key] = _entry_judged_mode(_entry_references["namespace"]["Model"](*init_inputs))
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
    model = ref["Model"](*init_inputs).to(DEVICE)
    for m in model.modules():  # the mode kgen judged in: as built (training by default), dropout off
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.eval()
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
