"""Where the bytecode of what kgen imports is kept, where the install keeps none (issue 26).

Python compiles each module's source on import and keeps the bytecode beside it (`__pycache__`), unless it
is told not to (PYTHONDONTWRITEBYTECODE) or cannot write there. An install with no bytecode of its own in
such an environment compiles torch's sources again in every process: the H100 image kgen is measured on has
PYTHONDONTWRITEBYTECODE=1 and not one .pyc under torch, and `import kgen.judge.evaluate, triton` took 5.8 s
there against 2.4 s with the bytecode kept (benchmarks/pyc_probe.sh). `kgen eval` runs up to five Python
processes (itself, three sandboxes: the compile step and two runners, and the baselines' worker), a search dozens.

There, and only there, kgen keeps the bytecode under its cache instead (`sys.pycache_prefix`, and
PYTHONPYCACHEPREFIX for the processes it starts: Ray's workers, the sandboxes, which read it but never write
it). The install is left as it is; a PYTHONPYCACHEPREFIX of the user's own is kept; KGEN_BYTECODE_CACHE=0
turns this off.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional

from kgen.core.resources import cache_dir

PROBE = "torch"  # the package whose bytecode decides: the bulk of every kgen process's imports
OFF = ("0", "off", "no", "false")


def bytecode_missing(package: str = PROBE) -> bool:
    """Whether `package` (found, not imported) has no bytecode beside its source and Python will not write
    it there: each process that imports it compiles its sources."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    cached = importlib.util.cache_from_source(spec.origin)
    if os.path.exists(cached):
        return False
    where = os.path.dirname(cached)  # its __pycache__, or the source's folder where Python would make one
    writable = os.access(where if os.path.isdir(where) else os.path.dirname(spec.origin), os.W_OK)
    return sys.dont_write_bytecode or not writable


def keep_bytecode(package: str = PROBE) -> Optional[Path]:
    """Keep this process's and its children's bytecode under kgen's cache where `package` has none of its own
    (module docstring). Returns the prefix in use (the user's own included), or None. Call it before the heavy
    imports: what is already imported stays as it was."""
    if os.environ.get("KGEN_BYTECODE_CACHE", "").strip().lower() in OFF:
        return None
    if sys.pycache_prefix is not None:
        return Path(sys.pycache_prefix)
    if not bytecode_missing(package):
        return None
    prefix = cache_dir() / "pycache"
    try:
        prefix.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(prefix, os.W_OK):
        return None
    sys.pycache_prefix = str(prefix)
    sys.dont_write_bytecode = False  # the bytecode goes under kgen's cache, never beside the install's sources
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    return prefix
