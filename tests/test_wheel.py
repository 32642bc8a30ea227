"""A built wheel works outside the checkout: it carries the problems, starters and prompt templates,
and `kgen problems` and a one-round CPU search run from a fresh venv in a folder with no checkout.

Kept cheap: the wheel is built from a copy of the tree without build isolation (this venv's
setuptools), and the fresh venv installs only the wheel (`--no-deps`); its dependencies (torch, Ray,
...) come from this test venv through a `.pth` line, which adds that site-packages folder to the
path without running its `.pth` files, so the editable install of kgen there stays invisible.
"""

import os
import shutil
import site
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

IGNORED = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
                                 "results.db*", ".pytest_cache", ".ruff_cache")


def _run(args, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("src") / "kgen"
    shutil.copytree(REPO, source, ignore=IGNORED)
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out),
          str(source)])
    (built,) = out.glob("kgen-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venv") / "v"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    Path(purelib, "test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)])
    return venv


def _env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KGEN_PROBLEMS_DIR")}
    env.update(KGEN_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")
    return env


def test_the_wheel_carries_problems_starters_and_prompts(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"kgen/_data/problems/softmax.py", "kgen/_data/prompts/system.j2", "kgen/_data/prompts/propose.j2",
            "kgen/_data/prompts/repair.j2", "kgen/harness/trace.py"} <= names
    assert any(n.startswith("kgen/_data/problems/starters/softmax/triton_") for n in names)
    assert not any("__pycache__" in n for n in names)


def test_the_wheel_carries_every_module_of_the_package_the_migrations_among_them(wheel):
    """pyproject.toml lists the packages one by one: a subpackage left off that list would be missing here."""
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(REPO)) for p in (REPO / "kgen").rglob("*.py")}
    assert sorted(modules - names) == []
    assert {"kgen/store/migrations/env.py", "kgen/store/migrations/versions/0001_baseline.py"} <= modules


@pytest.mark.slow
def test_kgen_from_the_wheel_lists_problems_and_searches_outside_the_checkout(fresh_venv, tmp_path):
    kgen = fresh_venv / "bin" / "kgen"
    where = _run([str(fresh_venv / "bin" / "python"), "-c",
                  "import kgen, kgen.core.resources as r; print(kgen.__file__); print(r.problems_dir()); "
                  "print(r.prompts_dir())"], cwd=tmp_path, env=_env(tmp_path)).stdout.split()
    assert all(Path(p).is_relative_to(fresh_venv) for p in where), where
    assert not any(Path(p).is_relative_to(REPO) for p in where)

    listed = _run([str(kgen), "problems", "--size", "small"], cwd=tmp_path, env=_env(tmp_path))
    for name in ("matmul", "conv2d", "softmax", "layernorm", "conv_relu_maxpool"):
        assert name in listed.stdout

    searched = _run([str(kgen), "search", "--problem", "softmax", "--rounds", "1", "--candidates", "1",
                     "--quiet"], cwd=tmp_path, env=_env(tmp_path), timeout=300)
    assert "1 correct" in searched.stdout, searched.stdout
    assert "CUDA" not in searched.stdout  # no GPU: Triton only, and nothing said about CUDA
    with sqlite3.connect(tmp_path / "results.db") as conn:
        assert conn.execute("SELECT DISTINCT language FROM candidates").fetchall() == [("triton",)]
