"""The results database: SQLAlchemy 2.0 typed ORM, SQLite by default (WAL, foreign keys on).

`results.db` in the current directory unless `--db URL` or `KGEN_DB` names another SQLAlchemy URL
(a bare path is taken as a SQLite file). The schema version lives in `kgen_meta`; a DB written by a
newer kgen is refused with a clear message rather than misread.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import (JSON, Float, ForeignKey, Integer, String, Text, UniqueConstraint, create_engine, event,
                        inspect, select)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship, sessionmaker

from kgen.errors import KgenError

SCHEMA_VERSION = 1
DEFAULT_DB = "results.db"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


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
    problem_path: Mapped[str] = mapped_column(Text)
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

    candidates: Mapped[list["Candidate"]] = relationship(back_populates="run")


class LLMCall(Base):
    """One request to an LLM and its response, whether or not it held usable code."""

    __tablename__ = "llm_calls"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[Optional[int]] = mapped_column(ForeignKey("runs.id"), index=True)
    round: Mapped[Optional[int]]
    proposer: Mapped[str] = mapped_column(String(32))
    model: Mapped[Optional[str]] = mapped_column(String(200))
    base_url: Mapped[Optional[str]] = mapped_column(Text)
    template: Mapped[Optional[str]] = mapped_column(String(64))  # propose | repair
    prompt: Mapped[Optional[Any]] = mapped_column(JSON)  # the chat messages sent
    response: Mapped[Optional[str]] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(String(32))  # ok | no_code | error
    error: Mapped[Optional[str]] = mapped_column(Text)
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
    round: Mapped[Optional[int]]
    problem: Mapped[str] = mapped_column(String(200), index=True)
    problem_hash: Mapped[Optional[str]] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(Text)
    source_hash: Mapped[str] = mapped_column(String(64), index=True)
    language: Mapped[str] = mapped_column(String(16))  # triton | cuda | unknown
    parent_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    proposer: Mapped[str] = mapped_column(String(32))
    model: Mapped[Optional[str]] = mapped_column(String(200))
    idea: Mapped[Optional[str]] = mapped_column(Text)
    origin: Mapped[Optional[str]] = mapped_column(Text)  # starter file, mutation, replayed id ...
    llm_call_id: Mapped[Optional[int]] = mapped_column(ForeignKey("llm_calls.id"))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    run: Mapped[Optional[Run]] = relationship(back_populates="candidates")
    evaluations: Mapped[list["Evaluation"]] = relationship(back_populates="candidate", order_by="Evaluation.id")
    llm_call: Mapped[Optional[LLMCall]] = relationship()


class Evaluation(Base):
    """The outcome of evaluating one candidate on one device at one size."""

    __tablename__ = "evaluations"
    id: Mapped[int] = mapped_column(primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id"), index=True)
    outcome: Mapped[str] = mapped_column(String(32), index=True)
    message: Mapped[Optional[str]] = mapped_column(Text)
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
    """`--db`, else `KGEN_DB`, else results.db here; a bare path means a SQLite file."""
    value = db or os.environ.get("KGEN_DB") or DEFAULT_DB
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().absolute()}"


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


class Database:
    """An open results DB: `with db.session() as s:` for reads and writes (commit on success)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @property
    def url(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)

    def session(self) -> Session:
        return self._sessions.begin()  # type: ignore[return-value]

    def reader(self) -> Session:
        return self._sessions()

    def close(self) -> None:
        self.engine.dispose()


def open_db(db: str | None = None, create: bool = True) -> Database:
    """Open (and on first use create) the results DB, or raise KgenError saying what is wrong."""
    url_text = db_url(db)
    try:
        url = make_url(url_text)
    except ArgumentError as e:
        raise KgenError(f"bad database URL '{url_text}': {e}") from e
    is_sqlite = url.get_backend_name() == "sqlite"
    if is_sqlite and url.database and url.database != ":memory:":
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
            with open(path, "rb") as f:
                head = f.read(16)
            if head and head != b"SQLite format 3\x00":
                raise KgenError(f"{path} is not a SQLite database (refusing to touch it)")
    try:
        engine = create_engine(url, connect_args={"timeout": 30} if is_sqlite else {})
    except (ArgumentError, SQLAlchemyError, ImportError) as e:
        raise KgenError(f"cannot open database '{url_text}': {e}") from e
    if is_sqlite:
        event.listen(engine, "connect", _sqlite_pragmas)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
        _check_or_create_schema(engine, tables)  # before WAL: a refused file is left byte-for-byte as it was
        if is_sqlite and url.database not in (None, "", ":memory:"):
            with engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    except KgenError:
        engine.dispose()
        raise
    except (DatabaseError, OperationalError, sqlite3.DatabaseError) as e:
        engine.dispose()
        reason = str(getattr(e, "orig", e)).splitlines()[0]
        raise KgenError(f"cannot use database '{url_text}': {reason}") from e
    return Database(engine)


def _check_or_create_schema(engine: Engine, tables: set[str]) -> None:
    ours = {t.name for t in Base.metadata.sorted_tables}
    if "kgen_meta" in tables:
        with Session(engine) as s:
            row = s.get(Meta, "schema_version")
            version = int(row.value) if row else 0
        if version > SCHEMA_VERSION:
            raise KgenError(f"database schema version {version} is newer than this kgen's ({SCHEMA_VERSION}); "
                            "upgrade kgen to read it")
        if version < SCHEMA_VERSION:
            raise KgenError(f"database schema version {version} is older than this kgen's ({SCHEMA_VERSION}) "
                            "and no migration exists for it")
        Base.metadata.create_all(engine)  # tables added within this version (none yet); a no-op otherwise
        return
    foreign = tables - ours
    if tables and foreign:
        raise KgenError(f"database holds tables that are not kgen's ({', '.join(sorted(foreign)[:5])}); "
                        "refusing to write into it")
    Base.metadata.create_all(engine)
    with Session(engine) as s, s.begin():
        s.merge(Meta(key="schema_version", value=str(SCHEMA_VERSION)))


def latest_evaluation(candidate: Candidate) -> Optional[Evaluation]:
    return candidate.evaluations[-1] if candidate.evaluations else None


def get_candidate(session: Session, candidate_id: int) -> Candidate:
    cand = session.get(Candidate, candidate_id)
    if cand is None:
        raise KgenError(f"no candidate with id {candidate_id}")
    return cand


def runs(session: Session) -> list[Run]:
    return list(session.scalars(select(Run).order_by(Run.id)))
