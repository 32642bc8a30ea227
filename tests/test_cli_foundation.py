"""The real CLI in a subprocess: problems, --version, python -m kgen, and one-line errors with exit 2."""


import pytest

from kgen import __version__

from conftest import run_kgen


def test_version_and_module_entry_point_agree():
    r = run_kgen("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"kgen {__version__}"


def test_problems_lists_the_five_with_shapes_flops_and_bytes():
    r = run_kgen("problems", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    for name in ("matmul", "conv2d", "softmax", "layernorm", "conv_relu_maxpool"):
        assert name in r.stdout
    assert "4096×65536" in r.stdout and "2.15 GB" in r.stdout  # softmax's 2×4096×65536×4 bytes
    assert "137.44 G" in r.stdout  # matmul's 2×4096³ FLOPs
    assert "no GPU" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["problems", "--size", "huge"], "unknown size"),
    (["nonsense-command"], "No such command"),
])
def test_bad_arguments_give_one_line_and_exit_2(args, needle):
    r = run_kgen(*args)
    assert r.returncode == 2
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_corrupt_db_file_is_refused_and_untouched(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"not sqlite" * 100)
    from kgen.core.errors import KgenError
    from kgen.store.db import open_db

    with pytest.raises(KgenError, match="not a SQLite database"):
        open_db(str(bad))
    assert bad.read_bytes() == b"not sqlite" * 100


def test_debug_env_shows_the_traceback():
    r = run_kgen("problems", "--size", "huge", env={"KGEN_DEBUG": "1"})
    assert r.returncode == 2 and "Traceback" in r.stderr
