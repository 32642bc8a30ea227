"""A throwaway PostgreSQL server for the test session (a pytest plugin, loaded by conftest.py).

The first test that asks for one starts it: `initdb` and `pg_ctl` from Debian's `postgresql` package (on
PATH or under /usr/lib/postgresql/*/bin), a cluster in a temp dir, listening on a free port of 127.0.0.1
only, with password authentication; stopped and removed when the session ends. PostgreSQL refuses to run
as root, so under root the server runs as the `postgres` user (or `nobody`). Without the binaries or the
psycopg driver the PostgreSQL tests are skipped, saying why.

Fixtures:
- `pg_server`: the server; `pg_server.new_database()` makes an empty database and returns its URL.
- `any_db`: parametrized over both backends: a `--db` value naming a new, empty results DB (a SQLite
  file in the test's temp dir, or a new PostgreSQL database).
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PG_USER = "kgen"
PG_PASSWORD = "pg-s3cret-Pw"  # tests check that this never appears in kgen's output


def _pg_bin_dir() -> str | None:
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return str(Path(on_path).resolve().parent)
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    return str(Path(versions[-1]).parent) if versions else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    bin_dir: str
    root: Path  # holds the cluster, its socket and its log
    port: int
    run_as: dict = field(default_factory=dict)  # subprocess user/group when the tests run as root
    _names: itertools.count = field(default_factory=lambda: itertools.count(1))

    def url(self, database: str) -> str:
        return f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{self.port}/{database}"

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([f"{self.bin_dir}/pg_ctl", "-D", str(self.root / "data"), *args], check=check,
                              capture_output=True, text=True, timeout=120, cwd=self.root, **self.run_as)

    def start(self) -> None:
        """Make the cluster on the first start; start the server."""
        if not (self.root / "data").exists():
            self._init()
        # fsync off: a throwaway cluster need not survive a power cut, and tests run faster
        options = f"-c port={self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} " \
                  "-c fsync=off -c max_connections=200"
        started = self._ctl("-l", str(self.root / "server.log"), "-w", "-t", "60", "-o", options, "start", check=False)
        if started.returncode != 0:
            log = (self.root / "server.log").read_text() if (self.root / "server.log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()}\n{log[-2000:]}")

    def _init(self) -> None:
        password_file = self.root / "password"
        password_file.write_text(PG_PASSWORD)
        if self.run_as:
            for path in (self.root, password_file):
                os.chown(path, self.run_as["user"], self.run_as["group"])
        subprocess.run([f"{self.bin_dir}/initdb", "-D", str(self.root / "data"), "-U", PG_USER,
                        f"--pwfile={password_file}", "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C",
                        "--no-sync"], check=True, capture_output=True, text=True, timeout=300, cwd=self.root,
                       **self.run_as)

    def stop(self) -> None:
        self._ctl("-m", "immediate", "stop", check=False)

    def new_database(self) -> str:
        import psycopg

        name = f"kgen_test_{next(self._names)}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user=PG_USER, password=PG_PASSWORD,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


@pytest.fixture(scope="session")
def pg_server():
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("PostgreSQL tests need the psycopg driver: pip install 'psycopg[binary]' (in kgen's test extra)")
    bin_dir = _pg_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL tests need the server's initdb and pg_ctl: apt-get install postgresql")
    run_as = {}
    if os.geteuid() == 0:
        account = next((a for a in ("postgres", "nobody") if _has_user(a)), None)
        if account is None:
            pytest.skip("running as root, and there is no postgres or nobody user to run PostgreSQL as")
        entry = pwd.getpwnam(account)
        run_as = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    server = PgServer(bin_dir=bin_dir, root=Path(tempfile.mkdtemp(prefix="kgen-pg-")), port=free_port(),
                      run_as=run_as)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request, tmp_path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "results.db")
    return request.getfixturevalue("pg_server").new_database()
