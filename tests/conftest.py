"""Shared test setup: the real CLI runs in subprocesses with this venv's Python; no test touches the
user's results.db or cache (both point into the test's temp dir)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pg_server"]

REPO = Path(__file__).resolve().parent.parent
PROBLEM_FILES = Path(__file__).resolve().parent / "problem_files"


DEFAULT_TIMEOUT_S = 900  # per test, where pytest-timeout is installed (the [test] extra) and no --timeout given


def pytest_collection_modifyitems(config, items):
    """Each test's time limit, as `timeout = 900` in pyproject would set it, but only where pytest-timeout
    is installed: the ini key would make pytest warn "Unknown config option" everywhere else."""
    if not config.pluginmanager.hasplugin("timeout") or config.getoption("timeout", None) is not None:
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT_S))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "kgen-cache"))
    monkeypatch.delenv("KGEN_DB", raising=False)
    monkeypatch.delenv("KGEN_DEBUG", raising=False)
    for name in ("KGEN_PRICE_IN", "KGEN_PRICE_OUT"):  # the caller's token prices would change what costs show
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def run_kgen(*args: str, cwd=None, env=None, timeout: float = 600, input: str | None = None):
    """Run the real `kgen` CLI (python -m kgen) in a subprocess."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "kgen", *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout, input=input)


@pytest.fixture
def kgen_cli():
    return run_kgen


# Fixtures several test modules share (a module that needs another kind defines its own, which wins).

@pytest.fixture(scope="module")
def problem():
    """The softmax problem at its small size."""
    from kgen.problems.problem import load_problem

    return load_problem("softmax", "small")


@pytest.fixture
def db(tmp_path):
    """A fresh SQLite results DB in the test's temp dir."""
    from kgen.store.db import open_db

    database = open_db(str(tmp_path / "results.db"))
    yield database
    database.close()


@pytest.fixture
def results(tmp_path):
    """(path, ids) of a results DB filled by test_leaderboard_fixtures.build_results_db."""
    from test_leaderboard_fixtures import build_results_db

    path = tmp_path / "results.db"
    return path, build_results_db(path)


@pytest.fixture
def out_dir(tmp_path):
    """A folder beside the test's working directory, for files a command writes."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    return d

