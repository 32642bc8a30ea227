"""Static checks on a candidate's source, before any of it runs: it parses, defines `ModelNew`,
defines a kernel of its own and launches it, and names none of the things a candidate may not use
(torch.compile, CUDA streams, threads, processes).

These read the syntax tree, so `getattr(torch, "com" + "pile")` slips past them: every rule here is
enforced again at run time (kgen.harness.trace records what the candidate really calls). They exist to
reject the plain cases fast, without a process, and to give the LLM a precise message.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Optional

from kgen.core import pyast

TRITON_DECORATORS = {"jit", "autotune", "heuristics"}
CUDA_BUILDERS = {"load_inline", "load"}
# Dotted names (as written, after import aliases are resolved) that a candidate must not touch.
FORBIDDEN_NAMES = {
    "torch.compile": "calls torch.compile (the baseline it is compared with)",
    "torch._dynamo": "uses torch._dynamo (torch.compile's compiler)",
    "torch._inductor": "uses torch._inductor (torch.compile's code generator)",
    "torch.cuda.Stream": "creates a CUDA stream (side-stream work escapes timing)",
    "torch.cuda.stream": "switches CUDA streams (side-stream work escapes timing)",
    "torch.cuda.ExternalStream": "uses an external CUDA stream",
    "torch.cuda.set_stream": "switches CUDA streams",
    "torch.Stream": "creates a stream",
    "gc": "walks the garbage collector's heap (where the evaluator keeps its references)",
    "threading": "uses threads",
    "_thread": "uses threads",
    "multiprocessing": "starts processes",
    "concurrent.futures": "uses thread or process pools",
    "subprocess": "starts processes",
    "os.fork": "forks processes",
    "os.forkpty": "forks processes",
    "os.system": "runs shell commands",
    "os.popen": "runs shell commands",
    "os.posix_spawn": "starts processes",
    "os.posix_spawnp": "starts processes",
}
# What kgen's runner times, waits and reports with (kgen.harness.pins): a candidate may not assign to, delete
# or setattr anything under these (torch.backends' flags excepted). Spelled through a variable, a getattr or a
# gc walk it slips past this; the runner's identity check after every call catches it then.
PROTECTED_NAMES = ("torch", "time", "socket", "json", "pickle", "struct", "select", "signal", "sys", "builtins",
                   "kgen", "triton.runtime", "triton.compiler")
UNPROTECTED_NAMES = ("torch.backends",)
SETATTR_CALLS = {"setattr", "delattr", "type.__setattr__", "object.__setattr__", "type.__delattr__",
                 "object.__delattr__"}
CUDA_SOURCE_FORBIDDEN = {
    r"\bcudaStreamCreate\w*": "creates a CUDA stream in its CUDA source (side-stream work escapes timing)",
    r"\bgetStreamFromPool\b": "takes a side stream from the pool in its CUDA source",
    r"\bcudaDeviceReset\b": "resets the device in its CUDA source",
    r"\bstd::thread\b": "starts threads in its CUDA source",
}


@dataclass(frozen=True)
class StaticVerdict:
    """None-or-message verdict of the static checks, and what was learned on the way."""

    rejection: Optional[str]
    language: str
    triton_kernels: tuple[str, ...] = ()


def detect_language(source: str) -> str:
    """'cuda' for load_inline/load with CUDA C++ (a `__global__` function), 'triton' for @triton.jit
    kernels, else 'unknown'."""
    if "__global__" in source and re.search(r"\bload(_inline)?\s*\(", source):
        return "cuda"
    # `import torch, triton`, `import triton as tr` with `@tr.jit` too
    if re.search(r"^\s*import\s+([\w.]+\s*(as\s+\w+\s*)?,\s*)*triton\b|^\s*from\s+triton\b", source, re.M) \
            and re.search(r"@\s*(\w+\s*\.\s*)?(jit|autotune|heuristics)\b", source):
        return "triton"
    if "__global__" in source:
        return "cuda"
    return "unknown"


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted module path it stands for (`import torch.cuda as tc`, `from os import fork`)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node: ast.AST, aliases: dict[str, str]) -> Optional[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def _forbidden_use(tree: ast.Module, aliases: dict[str, str]) -> Optional[str]:
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, (ast.Attribute, ast.Name)):
            name = _dotted(node, aliases)
            if name:
                imported.append(name)
    for name in imported:
        for forbidden, why in FORBIDDEN_NAMES.items():
            if name == forbidden or name.startswith(forbidden + "."):
                return f"{why}: '{name}' is not allowed in a candidate"
    return None


def _protected(name: Optional[str]) -> bool:
    def under(prefixes: tuple[str, ...]) -> bool:
        return any(name == p or name.startswith(p + ".") for p in prefixes)

    return name is not None and under(PROTECTED_NAMES) and not under(UNPROTECTED_NAMES)


def _namespace_of(node: ast.AST, aliases: dict[str, str]) -> Optional[str]:
    """The dotted name whose namespace an expression writes into: `torch.cuda.Event.record` (an attribute
    assigned), `vars(torch.Tensor)[...]`, `torch.Tensor.__dict__[...]`."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" and node.args:
        return _dotted(node.args[0], aliases)
    return _dotted(node, aliases)


def _replaces_protected(tree: ast.Module, aliases: dict[str, str]) -> Optional[str]:
    """What the source replaces of what kgen's runner relies on, as written: an assignment or `del` of
    an attribute under a protected name, `setattr(torch.cuda.Event, ...)` (and `type.__setattr__`,
    `object.__setattr__`, `delattr`), a write into `vars(...)` or `.__dict__` of one."""
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.Call):
            func = _dotted(node.func, aliases) or ""
            method = func.rsplit(".", 1)[-1]
            if func in SETATTR_CALLS and node.args:
                targets = [node.args[0]]
            elif method in ("__setattr__", "__delattr__") and isinstance(node.func, ast.Attribute):
                targets = [node.func.value]
            elif method in ("update", "__setitem__", "setdefault", "pop") and isinstance(node.func, ast.Attribute):
                holder = node.func.value  # vars(torch.Tensor).update(...), torch.Tensor.__dict__.update(...)
                if (isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name) and holder.func.id == "vars") \
                        or (isinstance(holder, ast.Attribute) and holder.attr == "__dict__"):
                    targets = [holder]
        for target in targets:
            for element in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                if not isinstance(element, (ast.Attribute, ast.Subscript, ast.Call, ast.Name)):
                    continue
                if isinstance(element, ast.Name) and not isinstance(node, ast.Call):
                    continue  # rebinding a plain name of its own changes nothing of kgen's
                name = _namespace_of(element, aliases)
                if _protected(name):
                    name = name.removesuffix(".__dict__")
                    return (f"replaces '{name}' (kgen's runner times, waits and reports with what is there; a "
                            "candidate may not change torch, the timing functions or the runner)")
    return None


def _string_constants(tree: ast.Module) -> list[str]:
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _is_triton_decorator(dec: ast.AST, aliases: dict[str, str]) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = _dotted(target, aliases) or ""
    return name.split(".")[-1] in TRITON_DECORATORS and ("triton" in name or name in TRITON_DECORATORS)


def check_source(source: str) -> StaticVerdict:
    """The static verdict on a candidate source: `rejection` is None when it may run."""
    language = detect_language(source)
    try:
        tree = pyast.parse(source)
    except SyntaxError as e:
        return StaticVerdict(f"syntax error on line {e.lineno}: {e.msg}", language)
    except (ValueError, RecursionError) as e:
        return StaticVerdict(f"the source does not parse: {e}", language)
    aliases = _aliases(tree)
    defines_model = any((isinstance(n, ast.ClassDef) and n.name == "ModelNew")
                        or (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ModelNew"
                                                              for t in n.targets))
                        for n in tree.body)
    if not defines_model:
        return StaticVerdict("defines no ModelNew class (a candidate must define class ModelNew(nn.Module))", language)
    forbidden = _forbidden_use(tree, aliases) or _replaces_protected(tree, aliases)
    if forbidden:
        return StaticVerdict(forbidden, language)
    strings = _string_constants(tree)
    for pattern, why in CUDA_SOURCE_FORBIDDEN.items():
        if any(re.search(pattern, s) for s in strings):
            return StaticVerdict(why, language)
    kernels = tuple(n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                    and any(_is_triton_decorator(d, aliases) for d in n.decorator_list))
    if language == "unknown" and kernels:  # Triton kernels, however its imports are spelled
        language = "triton"
    builds_cuda = any(isinstance(n, ast.Call) and (_dotted(n.func, aliases) or "").split(".")[-1] in CUDA_BUILDERS
                      for n in ast.walk(tree)) and any("__global__" in s for s in strings)
    if not kernels and not builds_cuda:
        return StaticVerdict("defines no kernel of its own (a @triton.jit function, or CUDA C++ with a __global__ "
                             "function built by load_inline)", language)
    if kernels and not builds_cuda:
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if not used.intersection(kernels):
            return StaticVerdict(f"defines Triton kernel(s) {', '.join(kernels)} but never launches one", language,
                                 kernels)
    return StaticVerdict(None, language, kernels)
