"""kgen.core.bytecode: where the install keeps no bytecode and Python may not write it (PYTHONDONTWRITEBYTECODE,
as on the H100 image), kgen keeps it under its cache, for itself and the processes it starts, and the sandboxes
read it without being able to write it. Each case runs in a fresh interpreter (the flag and the prefix are read
at its start) over a package made here, with no bytecode of its own."""
import json
import os
import py_compile
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kgen.judge.sandbox import bwrap_path

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def package(tmp_path):
    site = tmp_path / "site"
    (site / "probepkg").mkdir(parents=True)
    (site / "probepkg" / "__init__.py").write_text("VALUE = 42\n")
    return site


def _fresh(code: str, site: Path, cache: Path, **env) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "KGEN_BYTECODE_CACHE")}
    base.update({"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "KGEN_CACHE_DIR": str(cache),
                 "PYTHONDONTWRITEBYTECODE": "1"})
    for name, value in env.items():
        if value is None:
            base.pop(name, None)
        else:
            base[name] = value
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=base,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


KEEP = """
    import json, os, sys
    from kgen.core.bytecode import keep_bytecode
    prefix = keep_bytecode("probepkg")
    import probepkg
    print(json.dumps({"prefix": str(prefix) if prefix else None, "cached": probepkg.__cached__,
                      "cached_exists": os.path.exists(probepkg.__cached__),
                      "env_prefix": os.environ.get("PYTHONPYCACHEPREFIX"),
                      "env_dont_write": os.environ.get("PYTHONDONTWRITEBYTECODE")}))
"""


def test_without_bytecode_and_told_not_to_write_it_goes_under_kgens_cache(package, tmp_path):
    cache = tmp_path / "cache"
    out = _fresh(KEEP, package, cache)
    assert out["prefix"] == str(cache / "pycache")
    assert out["cached"].startswith(str(cache / "pycache")) and out["cached_exists"]
    assert not (package / "probepkg" / "__pycache__").exists()  # the install is left as it is
    assert out["env_prefix"] == str(cache / "pycache") and out["env_dont_write"] is None  # for its children
    # a child started with that environment reads it (the same file, not compiled again: its mtime unchanged)
    before = os.stat(out["cached"]).st_mtime_ns
    child = _fresh(KEEP, package, cache, PYTHONPYCACHEPREFIX=out["env_prefix"], PYTHONDONTWRITEBYTECODE=None)
    assert child["cached"] == out["cached"] and os.stat(out["cached"]).st_mtime_ns == before


def test_an_install_with_its_own_bytecode_is_left_alone(package, tmp_path):
    py_compile.compile(str(package / "probepkg" / "__init__.py"), doraise=True)
    out = _fresh(KEEP, package, tmp_path / "cache")
    assert out["prefix"] is None and out["env_prefix"] is None and out["env_dont_write"] == "1"
    assert not (tmp_path / "cache" / "pycache").exists()


def test_where_python_may_write_beside_the_sources_nothing_changes(package, tmp_path):
    out = _fresh(KEEP, package, tmp_path / "cache", PYTHONDONTWRITEBYTECODE=None)
    assert out["prefix"] is None and out["env_prefix"] is None
    assert (package / "probepkg" / "__pycache__").is_dir()  # Python's own default


def test_turned_off_or_the_users_own_prefix_wins(package, tmp_path):
    off = _fresh(KEEP, package, tmp_path / "cache", KGEN_BYTECODE_CACHE="0")
    assert off["prefix"] is None and not (tmp_path / "cache" / "pycache").exists()
    own = tmp_path / "mine"
    mine = _fresh(KEEP, package, tmp_path / "cache", PYTHONPYCACHEPREFIX=str(own))
    assert mine["prefix"] == str(own) and mine["cached"].startswith(str(own))


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")
def test_a_sandboxed_process_reads_the_kept_bytecode_and_cannot_write_it(package, tmp_path):
    """The parent keeps probepkg's bytecode; a process in bubblewrap, the way the judge starts its runner
    (kgen.judge.sandbox's environment and binds), imports probepkg from it and cannot change it."""
    cache = tmp_path / "cache"
    out = _fresh("""
        import json, os, subprocess, sys
        from kgen.core.bytecode import keep_bytecode
        from kgen.harness import seccomp
        from kgen.judge.sandbox import SandboxMode, SandboxSpec, bwrap_command, sandbox_env
        keep_bytecode("probepkg")
        import probepkg
        site = os.path.dirname(os.path.dirname(probepkg.__file__))
        spec = SandboxSpec(read_only=[site])
        env = dict(sandbox_env(spec, SandboxMode.BWRAP, "/tmp"), PYTHONPATH=site)
        code = ("import json, os, sys, probepkg; c = probepkg.__cached__; w = 'written'\\n"
                "try:\\n open(c, 'ab').close()\\nexcept OSError as e:\\n w = type(e).__name__\\n"
                "print(json.dumps({'prefix': sys.pycache_prefix, 'cached': c, 'exists': os.path.exists(c),"
                " 'write': w, 'dont_write': sys.flags.dont_write_bytecode}))")
        fd = os.memfd_create("seccomp"); os.write(fd, seccomp.escape_filter_bpf()); os.lseek(fd, 0, os.SEEK_SET)
        done = subprocess.run(bwrap_command([sys.executable, "-c", code], spec, fd, "/tmp"), capture_output=True,
                              text=True, pass_fds=[fd], env=env, timeout=120)
        inside = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else done.stderr[-2000:]
        print(json.dumps({"parent_cached": probepkg.__cached__, "inside": inside}))
    """, package, cache)
    inside = out["inside"]
    assert isinstance(inside, dict), inside
    assert inside["prefix"] == str((cache / "pycache").resolve()) or inside["prefix"] == str(cache / "pycache")
    assert inside["cached"] == out["parent_cached"] and inside["exists"]
    assert inside["write"] in ("OSError", "PermissionError")  # bound read-only
    assert inside["dont_write"] == 1  # the sandbox never tries to write it


def test_the_kgen_command_keeps_bytecode_before_torchs_import(tmp_path):
    """`python -m kgen` (and the `kgen` script, the same main) sets the prefix up first thing: checked with
    the probe pointed at a package without bytecode, by asking what the process had when a command ran."""
    site = tmp_path / "site"
    (site / "torchless").mkdir(parents=True)
    (site / "torchless" / "__init__.py").write_text("")
    out = _fresh("""
        import json, sys
        import kgen.core.bytecode as bytecode
        bytecode.PROBE = "torchless"
        keep = bytecode.keep_bytecode
        bytecode.keep_bytecode = lambda package=None: keep("torchless")
        import kgen.cli.main as main
        main.keep_bytecode = bytecode.keep_bytecode
        sys.argv = ["kgen", "problems"]
        try:
            main.main()
        except SystemExit:
            pass
        print(json.dumps({"prefix": sys.pycache_prefix}))
    """, site, tmp_path / "cache")
    assert out["prefix"] == str(tmp_path / "cache" / "pycache")
