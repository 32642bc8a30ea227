"""`ast.parse` for kgen's threads. CPython 3.11 keeps the AST constructor's recursion depth in
per-interpreter state, so two threads parsing at once can fail with "SystemError: AST constructor
recursion depth mismatch" (cpython gh-106905). A search parses in more than one thread (the
baselines thread beside the round loop; the evaluation tests run candidates two at a time), so every
parse in kgen goes through one lock. Parsing a kernel file takes about a millisecond."""

from __future__ import annotations

import ast
import threading

_lock = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _lock:
        return ast.parse(source, filename)
