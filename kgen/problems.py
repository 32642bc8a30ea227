"""Problems: KernelBench-format reference modules, loaded by name or path, at the full or small size.

A problem file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`, with its sizes
as module-level int constants. Sizes are changed by rewriting those constants in the source before it
runs, so constants derived from them (`out = in * 2`) follow. kgen's own problems name their small size
in `KGEN_SMALL = {"name": value}`; any other file is shrunk automatically (halving its largest
constants while its forward still runs on the meta device).
"""

from __future__ import annotations

import ast
import hashlib
import os
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kgen import pyast
from kgen.errors import KgenError
from kgen.records import SIZES

# Inputs + parameters + outputs, in elements, that the small size aims under: a few seconds of
# Triton interpreter time on one core.
SMALL_ELEMENTS_BUDGET = 1 << 17


from kgen.resources import problems_dir  # noqa: E402  (re-exported: the bundled problem set)


def problem_names() -> list[str]:
    d = problems_dir()
    return sorted(p.stem for p in d.glob("*.py") if not p.name.startswith("_")) if d.is_dir() else []


def resolve_problem_path(problem: str) -> Path:
    """A bundled problem name, or a path to any KernelBench-format file."""
    if problem.endswith(".py") or os.sep in problem or "/" in problem:
        path = Path(problem).expanduser()
        if not path.is_file():
            raise KgenError(f"problem file not found: {problem}")
        return path.resolve()
    path = problems_dir() / f"{problem}.py"
    if not path.is_file():
        known = ", ".join(problem_names()) or "none"
        raise KgenError(f"unknown problem '{problem}' (known: {known}; or pass a path to a KernelBench-format file)")
    return path.resolve()


def int_constants(source: str) -> dict[str, int]:
    """Top-level `NAME = <int literal>` assignments: the sizes a problem can be run at."""
    out: dict[str, int] = {}
    for node in pyast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int):
            out[node.targets[0].id] = node.value.value
    return out


def rewrite_constants(source: str, overrides: dict[str, int]) -> str:
    """The source with top-level int constants replaced, formatting elsewhere untouched."""
    if not overrides:
        return source
    lines = source.splitlines(keepends=True)
    for node in reversed(pyast.parse(source).body):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in overrides and isinstance(node.value, ast.Constant)
                and node.lineno == node.end_lineno):
            v = node.value
            line = lines[v.lineno - 1]
            lines[v.lineno - 1] = line[: v.col_offset] + repr(int(overrides[node.targets[0].id])) + line[v.end_col_offset:]
    return "".join(lines)


def _exec_module(name: str, source: str, path: Path) -> types.ModuleType:
    module = types.ModuleType(f"kgen_problem_{name}")
    module.__file__ = str(path)
    try:
        code = compile(source, str(path), "exec")
        exec(code, module.__dict__)
    except SyntaxError as e:
        raise KgenError(f"{path}: syntax error on line {e.lineno}: {e.msg}") from e
    except Exception as e:  # the problem file itself failed: the user's input
        raise KgenError(f"{path}: failed to load: {type(e).__name__}: {e}") from e
    for required in ("Model", "get_inputs", "get_init_inputs"):
        if required not in module.__dict__:
            raise KgenError(f"{path}: not a KernelBench-format problem: it defines no '{required}'")
    if not (isinstance(module.Model, type) and issubclass(module.Model, torch.nn.Module)):
        raise KgenError(f"{path}: 'Model' is not a torch.nn.Module subclass")
    return module


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()

    def __str__(self) -> str:
        return "×".join(map(str, self.shape)) + f" {self.dtype}"


@dataclass
class Problem:
    """One problem at one size: its module (constants rewritten) and what it takes and gives."""

    name: str
    path: Path
    size: str
    source: str  # the file as the user wrote it
    overrides: dict[str, int] = field(default_factory=dict)
    module: types.ModuleType = field(repr=False, default=None)  # type: ignore[assignment]

    @property
    def sized_source(self) -> str:
        return rewrite_constants(self.source, self.overrides)

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.sized_source.encode()).hexdigest()[:16]

    def init_inputs(self) -> list[Any]:
        return list(self.module.get_init_inputs())

    def make_model(self, seed: int = 0, device: str | torch.device = "cpu") -> torch.nn.Module:
        """The reference, its parameters drawn from `seed`, none left constant (LayerNorm's ones and
        zeros would hide a kernel that ignores its weight and bias)."""
        torch.manual_seed(seed)
        with torch.device(device):
            model = self.module.Model(*self.init_inputs())
        gen = torch.Generator(device="cpu").manual_seed(seed + 7919)
        with torch.no_grad():
            for p in model.parameters():
                if p.is_floating_point() and p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                    noise = torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.device, p.dtype)
                    p.add_(0.1 * noise * (p.abs().mean() + 1))
                elif p.is_floating_point() and p.numel() == 1:
                    p.add_(0.1)
        return model.eval()

    def make_inputs(self, seed: int, device: str | torch.device = "cpu", scale: float = 1.0) -> list[Any]:
        """Fresh random inputs from `seed`; floating inputs that came out constant (zeros) are
        redrawn, so no check ever runs on zeros."""
        torch.manual_seed(seed)
        with torch.device(device):
            inputs = list(self.module.get_inputs())
        out = []
        for x in inputs:
            if isinstance(x, torch.Tensor):
                x = x.to(device)
                if x.is_floating_point():
                    if x.numel() > 1 and bool((x == x.flatten()[0]).all()):
                        x = torch.randn_like(x)
                    if scale != 1.0:
                        x = x * scale
            out.append(x)
        return out

    def input_specs(self) -> list[TensorSpec | Any]:
        return [TensorSpec(tuple(x.shape), str(x.dtype).removeprefix("torch.")) if isinstance(x, torch.Tensor) else x
                for x in _meta_inputs(self)]

    def output_specs(self) -> list[TensorSpec]:
        outs = _meta_forward(self)
        return [TensorSpec(tuple(o.shape), str(o.dtype).removeprefix("torch.")) for o in outs]

    @property
    def dtype(self) -> str:
        floats = [s.dtype for s in self.input_specs() if isinstance(s, TensorSpec) and "float" in s.dtype]
        return floats[0] if floats else "float32"


def _meta_inputs(problem: Problem) -> list[Any]:
    with torch.device("meta"):
        return list(problem.module.get_inputs())


def _meta_forward(problem: Problem) -> list[torch.Tensor]:
    """Run the reference on the meta device: shapes without memory or time."""
    with torch.device("meta"):
        model = problem.module.Model(*problem.init_inputs())
        inputs = list(problem.module.get_inputs())
        with torch.no_grad():
            out = model(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _footprint_elements(problem: Problem) -> int:
    with torch.device("meta"):
        model = problem.module.Model(*problem.init_inputs())
    params = sum(t.numel() for t in list(model.parameters()) + list(model.buffers()))
    inputs = sum(x.numel() for x in _meta_inputs(problem) if isinstance(x, torch.Tensor))
    return params + inputs + sum(o.numel() for o in _meta_forward(problem))


def _try_load(name: str, path: Path, source: str, size: str, overrides: dict[str, int]) -> Problem:
    module = _exec_module(name, rewrite_constants(source, overrides), path)
    return Problem(name=name, path=path, size=size, source=source, overrides=dict(overrides), module=module)


def _auto_small(name: str, path: Path, source: str) -> dict[str, int]:
    """Halve the largest size constants, one at a time, while the forward still runs on the meta
    device, until inputs + parameters + outputs fit the small budget."""
    constants = int_constants(source)
    overrides: dict[str, int] = {}
    frozen: set[str] = set()
    try:
        current = _footprint_elements(_try_load(name, path, source, "small", overrides))
    except KgenError:
        raise
    except Exception as e:
        raise KgenError(f"{path}: cannot make a small size automatically: its forward does not run on the meta "
                        f"device ({type(e).__name__}: {e}); add KGEN_SMALL = {{...}} to the file") from e
    while current > SMALL_ELEMENTS_BUDGET:
        live = sorted((k for k in constants if k not in frozen and overrides.get(k, constants[k]) > 2),
                      key=lambda k: -overrides.get(k, constants[k]))
        if not live:
            break
        name_k = live[0]
        trial = dict(overrides, **{name_k: overrides.get(name_k, constants[name_k]) // 2})
        try:
            elements = _footprint_elements(_try_load(name, path, source, "small", trial))
        except Exception:
            frozen.add(name_k)
            continue
        if elements < current:
            overrides, current = trial, elements
        else:
            frozen.add(name_k)
    if current > SMALL_ELEMENTS_BUDGET * 8:
        raise KgenError(f"{path}: cannot make a small size automatically (still {current} elements after shrinking "
                        f"its size constants); add KGEN_SMALL = {{...}} to the file")
    return overrides


def load_problem(problem: str, size: str = "full") -> Problem:
    """Load a problem by bundled name or path, at `size` ('full' or 'small')."""
    if size not in SIZES:
        raise KgenError(f"unknown size '{size}' (choose full or small)")
    path = resolve_problem_path(problem)
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise KgenError(f"cannot read problem file {path}: {e}") from e
    name = path.stem
    full = _try_load(name, path, source, "full", {})
    if size == "full":
        return full
    declared = getattr(full.module, "KGEN_SMALL", None)
    if declared is not None:
        if not isinstance(declared, dict) or not all(isinstance(v, int) for v in declared.values()):
            raise KgenError(f"{path}: KGEN_SMALL must be a dict of constant names to ints")
        unknown = set(declared) - set(int_constants(source))
        if unknown:
            raise KgenError(f"{path}: KGEN_SMALL names constants the file does not define: {', '.join(sorted(unknown))}")
        return _try_load(name, path, source, "small", declared)
    return _try_load(name, path, source, "small", _auto_small(name, path, source))
