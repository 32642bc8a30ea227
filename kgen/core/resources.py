"""Where kgen's files are: the bundled problems, starters and prompt templates, and the cache.

One place for every path, so a wheel and a checkout find the same things:
- bundled data: `kgen/_data/{problems,prompts}` inside an installed package (the wheel maps the
  repository's top-level `problems/` and `prompts/` there at build time), else the repository's
  top-level folders beside the package (an editable install or a plain checkout);
- the cache (device ceilings, CUDA and Triton builds): `KGEN_CACHE_DIR`, else `~/.cache/kgen`.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # kgen/ (this file is kgen/core/resources.py)


def _bundled(name: str) -> Path:
    inside = PACKAGE_DIR / "_data" / name
    return inside if inside.is_dir() else PACKAGE_DIR.parent / name


def problems_dir() -> Path:
    """The bundled problem set (`KGEN_PROBLEMS_DIR` overrides it)."""
    env = os.environ.get("KGEN_PROBLEMS_DIR")
    return Path(env) if env else _bundled("problems")


def prompts_dir() -> Path:
    """The bundled Jinja2 prompt templates."""
    return _bundled("prompts")


def cache_dir() -> Path:
    """kgen's cache: `KGEN_CACHE_DIR`, else ~/.cache/kgen."""
    root = os.environ.get("KGEN_CACHE_DIR")
    return Path(root) if root else Path(os.path.expanduser("~")) / ".cache" / "kgen"
