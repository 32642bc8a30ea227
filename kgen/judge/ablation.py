"""The ablation check's source rewrite: the candidate with its own kernels' bodies removed.

If a candidate's output is still correct when every Triton kernel it launches does nothing, its
kernels are not what computes the result (torch, numpy, a thread or a kernel launched only at
import do). The judge runs this rewrite, not the candidate, so the only way for a candidate to tell
the ablated run from the real one is to read its own kernels' source back, which no honest kernel
does. Device helpers (`@triton.jit` functions called from other kernels) keep their bodies: the
kernels that call them are emptied, and a helper with an empty body would not compile.

CUDA candidates are not ablated this way (that would mean a second nvcc build); on a GPU the judge's
kernel audit covers them.
"""

from __future__ import annotations

import ast
from typing import Optional

from kgen.core import pyast
from kgen.judge.static_checks import _aliases, _is_triton_decorator


def _kernels_to_empty(tree: ast.Module) -> list[ast.FunctionDef]:
    """The Triton kernels whose bodies the ablated run removes: every one that is not a device helper."""
    aliases = _aliases(tree)
    kernels = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
               and any(_is_triton_decorator(d, aliases) for d in n.decorator_list)}
    helpers = {call.func.id for fn in kernels.values() for call in ast.walk(fn)
               if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in kernels}
    return [fn for name, fn in kernels.items() if name not in helpers] or list(kernels.values())


def _parse(source: str) -> Optional[ast.Module]:
    try:
        return pyast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None


def ablate_triton_kernels(source: str) -> Optional[str]:
    """The source with the body of every Triton kernel that is not a device helper replaced by `pass`;
    None when the source defines no Triton kernel (or does not parse)."""
    tree = _parse(source)
    emptied = _kernels_to_empty(tree) if tree is not None else []
    if not emptied:
        return None
    for fn in emptied:
        fn.body = [ast.Pass()]
    return ast.unparse(tree) + "\n"


def ablated_kernel_names(source: str) -> list[str]:
    """Names of the kernels `ablate_triton_kernels` empties (for messages)."""
    tree = _parse(source)
    return sorted(fn.name for fn in _kernels_to_empty(tree)) if tree is not None else []
