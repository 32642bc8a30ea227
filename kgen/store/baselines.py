"""The baselines (kgen.judge.baselines: eager, torch.compile and its max-autotune mode, timed in a child
process) cached in the DB's `baselines` table per (problem hash, size, device, torch version, triton
version): timed once, then read back.
"""

from __future__ import annotations

from importlib import metadata
from typing import Optional

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from kgen.judge.baselines import time_baselines
from kgen.problems.problem import Problem
from kgen.store.db import Baseline, Database, open_db


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def _device_key(device: str) -> Optional[str]:
    """The GPU's name for 'cuda'/'cuda:N', the name itself when given one, None for the CPU."""
    if device == "cpu":
        return None
    if device == "cuda" or device.startswith("cuda:"):
        import torch

        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_name(torch.device(device))
    return device


def _cached(db: Database, problem: Problem, device_name: str, torch_version: str,
            triton_version: str) -> Optional[Baseline]:
    with db.reader() as s:
        return s.scalars(select(Baseline).where(
            Baseline.problem_hash == problem.source_hash, Baseline.size == problem.size,
            Baseline.device == device_name, Baseline.torch_version == torch_version,
            Baseline.triton_version == triton_version)).first()


def cached_baselines(db: Database, problem: Problem, device_name: str) -> Optional[Baseline]:
    """The stored baselines of `problem` on the GPU named `device_name` with this torch and triton."""
    import torch

    return _cached(db, problem, device_name, torch.__version__, _version("triton"))


def store_baselines(db: Database, problem: Problem, device_name: str, sent: dict) -> None:
    """Keep what time_baselines measured (another process storing the same row first wins)."""
    import torch

    settings = dict(sent.get("settings") or {}, errors=sent.get("errors") or {})
    try:
        with db.session() as s:
            s.add(Baseline(problem=problem.name, problem_hash=problem.source_hash, size=problem.size,
                           device=device_name, torch_version=torch.__version__, triton_version=_version("triton"),
                           eager_ms=sent.get("eager_ms"), compile_ms=sent.get("compile_ms"),
                           compile_max_autotune_ms=sent.get("compile_max_autotune_ms"), settings=settings))
    except IntegrityError:  # another process stored the same baseline first: use theirs
        pass


def get_baselines(db: Database, problem: Problem, device: str, max_autotune: bool = True,
                  ) -> Optional[tuple[Optional[float], Optional[float], Optional[float]]]:
    """(eager_ms, compile_ms, compile_max_autotune_ms) of `problem` on `device` (cuda, cuda:N or a GPU's
    name), from the DB or measured now and stored; None on the CPU (no times are claimed there).
    `max_autotune` False skips the slowest of the three (minutes of autotuning) when not cached."""
    device_name = _device_key(device)
    if device_name is None:
        return None
    row = cached_baselines(db, problem, device_name)
    if row is None:
        sent = time_baselines(problem, max_autotune)
        if sent is None:
            return None
        store_baselines(db, problem, device_name, sent)
        row = cached_baselines(db, problem, device_name)
        if row is None:
            return sent.get("eager_ms"), sent.get("compile_ms"), sent.get("compile_max_autotune_ms")
    return row.eager_ms, row.compile_ms, row.compile_max_autotune_ms


def get_baselines_at(url: Optional[str], problem: Problem, device: str, max_autotune: bool = True,
                     ) -> Optional[tuple[Optional[float], Optional[float], Optional[float]]]:
    """get_baselines from the results DB at `url` (`--db`: KGEN_DB, else ./results.db, when None), opened
    for this call only: what `kgen eval` gives kgen.judge.evaluate.evaluate_one."""
    database = open_db(url)
    try:
        return get_baselines(database, problem, device, max_autotune=max_autotune)
    finally:
        database.close()
