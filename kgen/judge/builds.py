"""Where a source's compiled kernels live: one directory per build key under kgen's cache (builds_root),
filled once by the judge's compile step (kgen.judge.compile_step) and read-only from then on; the CPU
compile stage's CUDA builds wait beside it (PREBUILT_SUFFIX) until the GPU's compile step takes them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

PREBUILT_SUFFIX = ".cuda-prebuilt"  # the CPU compile stage's CUDA builds of a source, before its GPU compile step


def build_key(source: str, arch: Optional[str], shapes: str = "") -> str:
    """Where a source's compiled kernels live: one directory per (source, GPU arch, versions, and for
    Triton the input shapes). The CPU compile stage and the GPU's judge compute the same key (the search
    pins the arch for both). Triton compiles a kernel per specialization (its constexprs, which integer
    arguments are 1 or multiples of 16), so kernels compiled for one size are not those another size
    needs, and the runner may not compile: keyed without the shapes, `--size small` after `--size full`
    of the same source was a runtime_error."""
    import torch
    import triton

    parts = [source, arch or "cpu", torch.__version__, str(torch.version.cuda), triton.__version__]
    payload = "\0".join(parts + ([shapes] if shapes else []))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def builds_root() -> Path:
    from kgen.core.resources import cache_dir

    return cache_dir() / "builds"
