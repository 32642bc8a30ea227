"""The results database: SQLAlchemy 2.0 typed ORM over SQLite (WAL, foreign keys on) or PostgreSQL.

`results.db` in the current directory unless `--db URL` or `KGEN_DB` names another SQLAlchemy URL (a bare
path is a SQLite file; `postgresql://` uses the psycopg driver). The schema is Alembic's (kgen/store/migrations).

- Commands that write open the DB with `open_db(db)`: it is created if missing and upgraded if an older kgen
  wrote it, by one process at a time (SQLite: a write transaction taken at once, BEGIN IMMEDIATE;
  PostgreSQL: an advisory lock); every other process opening it then waits, and goes on with the result.
- Commands that only read use `open_db(db, read_only=True)`: the DB is opened read-only and nothing in it
  changes, not even its journal mode; a missing DB, another application's, or one of another schema is
  refused in one line.
- `kgen_meta` marks a DB as kgen's and keeps its schema version (the latest migration's number), which
  kgens before Alembic also checked: a DB from a newer kgen is refused, not misread.
- A DB URL is only ever shown through `mask_url`: its password never appears.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

from sqlalchemy import (
    JSON,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship, sessionmaker
from sqlalchemy.types import TypeDecorator

from kgen.core.errors import KgenError

SCHEMA_VERSION = 3  # the latest revision in kgen/store/migrations/versions ("0003")
DEFAULT_DB = "results.db"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# How long a SQLite writer waits for another's transaction to end. kgen's transactions take milliseconds;
# a minute covers a slow disk, and a writer that waits longer says so in one line.
BUSY_TIMEOUT_S = 60.0
# The advisory lock every kgen process takes on PostgreSQL before it creates or upgrades the schema: a
# 64-bit key of kgen's own ("kgendb" in ASCII), which no other application is expected to use.
PG_SCHEMA_LOCK_KEY = 0x6B67656E6462

log = logging.getLogger("kgen.db")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


class StoredText(TypeDecorator):
    """Text that both databases store: PostgreSQL's text cannot hold NUL characters (a candidate's output,
    which ends up in error messages, can), so there they become U+FFFD; SQLite keeps them as they are."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Optional[str], dialect) -> Optional[str]:
        if value is not None and dialect.name == "postgresql" and "\x00" in value:
            return value.replace("\x00", "\ufffd")
        return value


class Base(DeclarativeBase):
    pass


class Meta(Base):
    __tablename__ = "kgen_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Run(Base):
    """One search: its problem, settings and progress."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    problem: Mapped[str] = mapped_column(String(200), index=True)
    problem_path: Mapped[str] = mapped_column(StoredText)
    problem_hash: Mapped[str] = mapped_column(String(32))
    size: Mapped[str] = mapped_column(String(16))
    proposer: Mapped[str] = mapped_column(String(32))
    model: Mapped[Optional[str]] = mapped_column(String(200))
    language: Mapped[str] = mapped_column(String(16), default="any")
    seed: Mapped[int] = mapped_column(Integer, default=0)
    rounds_planned: Mapped[int] = mapped_column(Integer)
    rounds_done: Mapped[int] = mapped_column(Integer, default=0)
    candidates_per_round: Mapped[int] = mapped_column(Integer)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(16), default="running")  # running | finished | interrupted | failed
    device: Mapped[Optional[str]] = mapped_column(String(200))
    kgen_version: Mapped[Optional[str]] = mapped_column(String(32))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[Optional[dt.datetime]]

    candidates: Mapped[list[Candidate]] = relationship(back_populates="run")


class LLMCall(Base):
    """One request to an LLM and its response, whether or not it held usable code."""

    __tablename__ = "llm_calls"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[Optional[int]] = mapped_column(ForeignKey("runs.id"), index=True)
    round: Mapped[Optional[int]]  # counted from 1
    proposer: Mapped[str] = mapped_column(String(32))
    model: Mapped[Optional[str]] = mapped_column(String(200))
    base_url: Mapped[Optional[str]] = mapped_column(StoredText)
    template: Mapped[Optional[str]] = mapped_column(String(64))  # propose | repair
    prompt: Mapped[Optional[Any]] = mapped_column(JSON)  # the chat messages sent
    response: Mapped[Optional[str]] = mapped_column(StoredText)
    outcome: Mapped[str] = mapped_column(String(32))  # ok | no_code | error
    error: Mapped[Optional[str]] = mapped_column(StoredText)
    tokens_in: Mapped[Optional[int]]
    tokens_out: Mapped[Optional[int]]
    latency_s: Mapped[Optional[float]] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Candidate(Base):
    """A proposed kernel: a Python source defining ModelNew, and where it came from."""

    __tablename__ = "candidates"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[Optional[int]] = mapped_column(ForeignKey("runs.id"), index=True)
    round: Mapped[Optional[int]]  # counted from 1
    problem: Mapped[str] = mapped_column(String(200), index=True)
    problem_hash: Mapped[Optional[str]] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(StoredText)
    source_hash: Mapped[str] = mapped_column(String(64), index=True)
    language: Mapped[str] = mapped_column(String(16))  # triton | cuda | unknown
    parent_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    proposer: Mapped[str] = mapped_column(String(32))
    model: Mapped[Optional[str]] = mapped_column(String(200))
    idea: Mapped[Optional[str]] = mapped_column(StoredText)
    origin: Mapped[Optional[str]] = mapped_column(StoredText)  # starter file, mutation, replayed id ...
    llm_call_id: Mapped[Optional[int]] = mapped_column(ForeignKey("llm_calls.id"))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    run: Mapped[Optional[Run]] = relationship(back_populates="candidates")
    evaluations: Mapped[list[Evaluation]] = relationship(back_populates="candidate", order_by="Evaluation.id")
    llm_call: Mapped[Optional[LLMCall]] = relationship()


class Evaluation(Base):
    """The outcome of evaluating one candidate on one device at one size."""

    __tablename__ = "evaluations"
    id: Mapped[int] = mapped_column(primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"), index=True)
    outcome: Mapped[str] = mapped_column(String(32), index=True)
    message: Mapped[Optional[str]] = mapped_column(StoredText)
    language: Mapped[Optional[str]] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(200))
    size: Mapped[str] = mapped_column(String(16))
    max_abs_err: Mapped[Optional[float]] = mapped_column(Float)
    max_rel_err: Mapped[Optional[float]] = mapped_column(Float)
    norm_rel_err: Mapped[Optional[float]] = mapped_column(Float)
    atol: Mapped[Optional[float]] = mapped_column(Float)
    rtol: Mapped[Optional[float]] = mapped_column(Float)
    runtime_ms: Mapped[Optional[float]] = mapped_column(Float)
    eager_ms: Mapped[Optional[float]] = mapped_column(Float)
    compile_ms: Mapped[Optional[float]] = mapped_column(Float)
    speedup_eager: Mapped[Optional[float]] = mapped_column(Float)
    speedup_compile: Mapped[Optional[float]] = mapped_column(Float)
    roofline_pct: Mapped[Optional[float]] = mapped_column(Float)
    torch_ops: Mapped[list[str]] = mapped_column(JSON, default=list)  # compute ops the candidate still calls
    compile_s: Mapped[Optional[float]] = mapped_column(Float)
    eval_s: Mapped[Optional[float]] = mapped_column(Float)
    torch_version: Mapped[Optional[str]] = mapped_column(String(64))
    triton_version: Mapped[Optional[str]] = mapped_column(String(64))
    cuda_version: Mapped[Optional[str]] = mapped_column(String(64))
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    sandbox: Mapped[Optional[str]] = mapped_column(String(32))  # the sandbox the candidate ran in: bwrap, none ...
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    candidate: Mapped[Candidate] = relationship(back_populates="evaluations")


class Baseline(Base):
    """Eager and torch.compile times of a problem, timed like candidates, cached per device and versions."""

    __tablename__ = "baselines"
    __table_args__ = (UniqueConstraint("problem_hash", "size", "device", "torch_version", "triton_version"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    problem: Mapped[str] = mapped_column(String(200))
    problem_hash: Mapped[str] = mapped_column(String(32))
    size: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(200))
    torch_version: Mapped[str] = mapped_column(String(64))
    triton_version: Mapped[str] = mapped_column(String(64))
    eager_ms: Mapped[Optional[float]] = mapped_column(Float)
    compile_ms: Mapped[Optional[float]] = mapped_column(Float)
    compile_max_autotune_ms: Mapped[Optional[float]] = mapped_column(Float)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # TF32 flags etc. as users get them
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


def db_url(db: str | None = None) -> str:
    """`--db`, else `KGEN_DB`, else results.db here; a bare path means a SQLite file, and `postgresql://`
    (SQLAlchemy's default driver for it is psycopg2) means psycopg 3, the driver kgen[postgres] installs."""
    value = db or os.environ.get("KGEN_DB") or DEFAULT_DB
    if "://" not in value:
        return f"sqlite:///{Path(value).expanduser().absolute()}"
    if value.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + value.split("://", 1)[1]
    return value


_PASSWORD_IN_URL = re.compile(r"(://[^/@:]*:)[^/@]*@")
_PASSWORD_IN_QUERY = re.compile(r"(password=)[^&\s]*", re.I)


def mask_url(url: str) -> str:
    """The URL with its password shown as ***: the only form in which kgen shows a DB URL, anywhere."""
    return _PASSWORD_IN_QUERY.sub(r"\1***", _PASSWORD_IN_URL.sub(r"\1***@", url))


def db_option(url: str) -> Optional[str]:
    """What `--db` must say for a later command to open the DB at `url`: None for the default DB
    (KGEN_DB, else ./results.db), a SQLite file's path (relative to here when below it), else the URL
    with its password masked (kgen never prints a password; the user puts theirs back)."""
    if url == db_url(None):
        return None
    if not url.startswith("sqlite:///"):
        return mask_url(url)
    path = Path(url.removeprefix("sqlite:///"))
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def _reason(error: BaseException, url: URL) -> str:
    """The first line of a driver's error, with the URL's password masked should the driver repeat it."""
    lines = str(getattr(error, "orig", None) or error).strip().splitlines()
    reason = lines[0] if lines else type(error).__name__
    if url.password:
        reason = reason.replace(str(url.password), "***")
    return mask_url(reason)


class DatabaseUnavailableError(KgenError):
    """The DB could not be used for reasons outside kgen: its disk is full, its server is gone, another
    process held its lock too long. What was committed before is intact; a search stopped by it resumes."""


# How the storage under a DB fails, outside kgen: SQLite's messages, and PostgreSQL's SQLSTATE classes
# (53: insufficient resources, e.g. 53100 disk full; 08: connection; 57P: server shutting down; 25006: read-only)
_SQLITE_STORAGE_ERRORS = ("database or disk is full", "disk i/o error", "database is locked",
                          "attempt to write a readonly database", "unable to open database file")
_PG_STORAGE_SQLSTATES = ("53", "08", "57P", "25006")


def _is_storage_error(error: DBAPIError) -> bool:
    if error.connection_invalidated:
        return True
    sqlstate = getattr(error.orig, "sqlstate", None)
    if sqlstate:
        return sqlstate.startswith(_PG_STORAGE_SQLSTATES)
    if isinstance(error.orig, sqlite3.Error):
        return any(m in str(error.orig).lower() for m in _SQLITE_STORAGE_ERRORS)
    return isinstance(error, OperationalError)  # a server's driver failing below SQL: connection refused or lost


class Database:
    """An open results DB: `with db.session() as s:` for a write (committed when the block ends),
    `with db.reader() as s:` for reads."""

    def __init__(self, engine: Engine, upgraded_from: Optional[int] = None):
        self.engine = engine
        self.upgraded_from = upgraded_from  # the schema version open_db upgraded from (0: it created the DB)
        # kgen_writes: on SQLite, take the write lock when the transaction begins (see _sqlite_begin)
        self._writes = sessionmaker(engine.execution_options(kgen_writes=True), expire_on_commit=False)
        self._reads = sessionmaker(engine, expire_on_commit=False)

    @property
    def url(self) -> str:
        return mask_url(self.engine.url.render_as_string(hide_password=True))

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One write transaction. A write the storage cannot take (a full disk, a lost server) raises
        DatabaseUnavailableError, one line; the transaction is rolled back and what was committed stays."""
        with self._storage_errors("write to"), self._writes.begin() as s:
            yield s

    @contextmanager
    def reader(self) -> Iterator[Session]:
        with self._storage_errors("read"), self._reads() as s:
            yield s

    @contextmanager
    def _storage_errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except DBAPIError as e:
            if _is_storage_error(e):
                raise DatabaseUnavailableError(f"cannot {doing} the results DB {self.url}: "
                                               f"{_reason(e, self.engine.url)}") from e
            raise

    def close(self) -> None:
        self.engine.dispose()


def open_db(db: str | None = None, *, create: bool = True, read_only: bool = False) -> Database:
    """Open the results DB named by `db` (see db_url), or raise KgenError saying in one line what is wrong.

    To write (the default): create it if missing (unless `create` is False: resuming needs the DB it
    resumes) and upgrade an older schema, one process at a time. `read_only`: change nothing; refuse a
    missing DB, one that is not kgen's, and one of another schema version."""
    url_text = db_url(db)
    try:
        url = make_url(url_text)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise KgenError(f"bad database URL '{mask_url(url_text)}'") from None
    shown = mask_url(url_text)
    try:
        if url.get_backend_name() == "sqlite":
            engine = _sqlite_engine(url, create=create and not read_only, read_only=read_only)
        else:
            # connect_timeout: an unreachable server is an error in seconds, not a hang
            connect_args: dict[str, Any] = {"connect_timeout": 15} if url.get_backend_name() == "postgresql" else {}
            if read_only and url.get_backend_name() == "postgresql":
                connect_args["options"] = "-c default_transaction_read_only=on"
            engine = create_engine(url, connect_args=connect_args, pool_pre_ping=True)
    except (ArgumentError, ImportError) as e:
        hint = "; `pip install 'kgen[postgres]'` installs the psycopg driver" \
            if url.get_backend_name() == "postgresql" else ""
        raise KgenError(f"cannot open database '{shown}': {_reason(e, url)}{hint}") from None
    try:
        if read_only:
            _check_readable(engine, shown)
            return Database(engine)
        upgraded_from = _create_or_upgrade(engine, shown)
        return Database(engine, upgraded_from)
    except KgenError:
        engine.dispose()
        raise
    except (SQLAlchemyError, sqlite3.Error) as e:
        engine.dispose()
        raise KgenError(f"cannot use database '{shown}': {_reason(e, url)}") from None


def _sqlite_engine(url: URL, *, create: bool, read_only: bool) -> Engine:
    if url.database in (None, "", ":memory:"):  # sqlite:// (tests): a DB that lives as long as its engine
        if not create:
            raise KgenError("an in-memory SQLite DB holds no results to read or resume")
        return _with_sqlite_events(create_engine(url))
    path = Path(url.database)
    if path.is_dir():
        raise KgenError(f"database path {path} is a directory")
    if not path.exists():
        if not create:
            raise KgenError(f"no results database at {path}")
        if not path.parent.is_dir():
            raise KgenError(f"cannot create database {path}: folder {path.parent} does not exist")
        if not os.access(path.parent, os.W_OK):
            raise KgenError(f"cannot create database {path}: folder {path.parent} is not writable")
    else:
        try:
            with open(path, "rb") as f:
                head = f.read(16)
        except OSError as e:
            raise KgenError(f"cannot read database {path}: {e.strerror or e}") from None
        if head and head != b"SQLite format 3\x00":
            raise KgenError(f"{path} is not a SQLite database (refusing to touch it)")
        if not read_only and not os.access(path.parent, os.W_OK):  # SQLite writes its -wal and -shm files there
            raise KgenError(f"cannot write to database {path}: its folder is not writable")
        if not read_only and not os.access(path, os.W_OK):
            raise KgenError(f"cannot write to database {path}: the file is not writable")
    if read_only:
        # A WAL DB opens read-only only where SQLite can create its -shm file, or as immutable: that is
        # safe in a folder nobody can write (no writer can be at work without its -wal file there).
        immutable = not os.access(path.parent, os.W_OK) and not Path(f"{path}-wal").exists()
        target = f"file:{quote(str(path))}?mode=ro" + ("&immutable=1" if immutable else "")
    else:
        target = str(path)

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(target, uri=read_only, timeout=BUSY_TIMEOUT_S, check_same_thread=False)

    return _with_sqlite_events(create_engine(url, creator=connect))


def _with_sqlite_events(engine: Engine) -> Engine:
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect(dbapi_connection, _record) -> None:
    # kgen begins transactions itself (_sqlite_begin) instead of the sqlite3 module, which would begin none
    # before DDL (so a schema change would not be one transaction) and take the write lock only at the
    # first write (so two writers could deadlock upgrading their read locks, "database is locked" at once).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    # a write transaction takes the write lock at once, waiting up to BUSY_TIMEOUT_S for another writer
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("kgen_writes") else "BEGIN")


@dataclass
class _SchemaState:
    tables: set[str]
    schema_version: Optional[int]  # kgen_meta's, None without kgen_meta
    revision: Optional[str]  # alembic_version's, None before kgen used Alembic

    @property
    def current(self) -> bool:
        return self.schema_version == SCHEMA_VERSION and self.revision is not None


def _schema_state(conn: Connection) -> _SchemaState:
    tables = set(inspect(conn).get_table_names())
    version = revision = None
    if "kgen_meta" in tables:
        value = conn.execute(text("SELECT value FROM kgen_meta WHERE \"key\" = 'schema_version'")).scalar()
        version = int(value) if value is not None and str(value).isdigit() else 0
    if "alembic_version" in tables:
        revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return _SchemaState(tables, version, revision)


def _refuse_unknown(state: _SchemaState, shown: str) -> None:
    """Refuse a DB that is not kgen's, or that a newer kgen wrote; either is left as it is."""
    if state.schema_version is None:
        names = ", ".join(sorted(state.tables)[:5])
        raise KgenError(f"{shown} holds tables that are not kgen's ({names}) and no kgen_meta; refusing to touch it")
    if state.schema_version > SCHEMA_VERSION:
        raise KgenError(f"database {shown} has schema version {state.schema_version}, newer than this kgen's "
                        f"({SCHEMA_VERSION}); upgrade kgen to use it")


def _check_readable(engine: Engine, shown: str) -> None:
    with engine.connect() as conn:
        state = _schema_state(conn)
    if not state.tables:
        raise KgenError(f"{shown} holds no kgen results yet")
    _refuse_unknown(state, shown)
    if not state.current:
        raise KgenError(f"database {shown} has schema version {state.schema_version}, older than this kgen's "
                        f"({SCHEMA_VERSION}); `kgen migrate` with the same --db upgrades it (so does any command "
                        "that writes)")


def _create_or_upgrade(engine: Engine, shown: str) -> Optional[int]:
    """Bring the DB to this kgen's schema; the schema version it upgraded from (0: it created the DB), or
    None if it was current. Checked first without a lock, since it almost always is; otherwise one process
    at a time checks again and migrates, in one transaction with its lock."""
    with engine.connect() as conn:
        state = _schema_state(conn)
    if state.tables:
        _refuse_unknown(state, shown)
    upgraded_from = None
    if not state.current:
        config = _alembic_config()  # before the lock: importing Alembic takes a moment, others would wait on it
        with engine.execution_options(kgen_writes=True).begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_SCHEMA_LOCK_KEY})
            state = _schema_state(conn)  # another process may have done it while this one waited
            if state.tables:
                _refuse_unknown(state, shown)
            if not state.current:
                upgraded_from = state.schema_version or 0
                _migrate(conn, state, shown, config)
        if upgraded_from:
            log.warning("kgen: upgraded the results DB %s from schema version %d to %d (older kgens refuse it now)",
                        shown, upgraded_from, SCHEMA_VERSION)
    if engine.dialect.name == "sqlite":
        _use_wal(engine)
    return upgraded_from


def _alembic_config():
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    return config


def _migrate(conn: Connection, state: _SchemaState, shown: str, config) -> None:
    from alembic import command

    config.attributes["connection"] = conn  # env.py runs the migrations on it, in its transaction
    if state.tables and state.revision is None:  # written before kgen used Alembic: the baseline's schema
        if state.schema_version != 1:
            raise KgenError(f"database {shown} has kgen_meta but no schema version kgen knows "
                            f"({state.schema_version}); refusing to touch it")
        command.stamp(config, "0001")
    command.upgrade(config, "head")


def _use_wal(engine: Engine) -> None:
    """WAL: readers never wait for the writer, nor it for them. Set outside any transaction (SQLite's
    rule), after the schema checks, so a refused file is left byte for byte as it was. Two processes
    switching at once both hold a read lock and want the exclusive one; SQLite answers one of them "database
    is locked" at once rather than deadlock, so that one tries again (and then finds WAL set)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        while cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            try:
                cursor.execute("PRAGMA journal_mode=WAL")
                break  # switched, or a DB that has no WAL (in memory)
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        cursor.close()
    finally:
        raw.close()


def latest_evaluation(candidate: Candidate) -> Optional[Evaluation]:
    return candidate.evaluations[-1] if candidate.evaluations else None


def get_candidate(session: Session, candidate_id: int) -> Candidate:
    cand = session.get(Candidate, candidate_id)
    if cand is None:
        raise KgenError(f"no candidate with id {candidate_id}")
    return cand


def runs(session: Session) -> list[Run]:
    return list(session.scalars(select(Run).order_by(Run.id)))
