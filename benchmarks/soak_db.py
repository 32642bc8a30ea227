"""Soak test of the results DB (issue 19): several `kgen search` runs at once on one SQLite DB on the CPU, a
reader running `kgen leaderboard` and `kgen runs` every second, one search SIGKILLed once it has stored an
evaluation and then resumed (while the others still run). At the end it checks that no process said
"database is locked", that every candidate has exactly one evaluation (none lost, none stored twice, the
killed run's earlier ones unchanged), that `PRAGMA integrity_check` is ok and that every run is finished;
and it prints the figures, among them the longest time a write waited for the DB's write lock.

    python benchmarks/soak_db.py [--searches 4] [--rounds 2] [--candidates 2] [--dir DIR] [--json]

Exit 0 when every check passes, 1 otherwise. The searches are the real CLI (offline proposer, Triton at the
small size, in the interpreter); each runs under a wrapper that times its SQLite `BEGIN IMMEDIATE`
statements, which is how kgen takes the write lock, through SQLAlchemy's public event hooks.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

LOCKED = "database is locked"

# Runs the kgen CLI with every BEGIN IMMEDIATE timed (seconds it waited, one line each, to $KGEN_SOAK_WAITS).
TIMED_KGEN = r"""
import os, time
from sqlalchemy import event
from sqlalchemy.engine import Engine

waits = open(os.environ["KGEN_SOAK_WAITS"], "a", buffering=1)

@event.listens_for(Engine, "before_cursor_execute")
def _lock_asked(conn, cursor, statement, *args):
    if statement == "BEGIN IMMEDIATE":
        conn.info["soak_asked"] = time.perf_counter()

@event.listens_for(Engine, "after_cursor_execute")
def _lock_taken(conn, cursor, statement, *args):
    if statement == "BEGIN IMMEDIATE":
        waits.write(f"{time.perf_counter() - conn.info.pop('soak_asked'):.6f}\n")

from kgen.cli.main import main
main()
"""


@dataclass
class Figures:
    searches: int
    rounds: int
    candidates_per_round: int
    wall_s: float = 0.0
    runs_finished: int = 0
    candidates: int = 0
    evaluations: int = 0
    killed_run: int | None = None
    killed_after_evaluations: int = 0
    write_transactions: int = 0
    longest_write_wait_s: float = 0.0
    p99_write_wait_s: float = 0.0
    reader_calls: int = 0
    reader_failures: int = 0
    longest_reader_call_s: float = 0.0
    integrity_check: str = ""
    problems: list[str] = field(default_factory=list)  # every failed check, in words


def query(db: Path, sql: str, *args) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def has_schema(db: Path) -> bool:
    try:
        return bool(query(db, "SELECT 1 FROM sqlite_master WHERE name = 'kgen_meta'"))
    except sqlite3.Error:
        return False


def kgen(args: list[str], out: Path, env: dict) -> subprocess.Popen:
    with open(out, "w") as log:
        return subprocess.Popen([sys.executable, "-c", TIMED_KGEN, *args], stdout=log, stderr=subprocess.STDOUT,
                                env=env)


class Reader(threading.Thread):
    """`kgen leaderboard` and `kgen runs` one after the other, a second apart, until stopped."""

    def __init__(self, db: Path, env: dict):
        super().__init__(daemon=True)
        self.db, self.env = db, env
        self.stop = threading.Event()
        self.calls: list[tuple[list[str], int, float, str]] = []  # (command, exit code, seconds, stderr)

    def run(self) -> None:
        while not self.stop.is_set():
            for command in (["leaderboard", "--format", "csv"], ["runs", "--json"]):
                started = time.monotonic()
                done = subprocess.run([sys.executable, "-m", "kgen", *command, "--db", str(self.db)],
                                      capture_output=True, text=True, env=self.env)
                self.calls.append((command, done.returncode, time.monotonic() - started, done.stdout + done.stderr))
            self.stop.wait(1.0)


def soak(work: Path, searches: int, rounds: int, candidates: int) -> Figures:
    figures = Figures(searches=searches, rounds=rounds, candidates_per_round=candidates)
    db = work / "results.db"
    env = dict(os.environ, KGEN_SOAK_WAITS=str(work / "write_waits.txt"))
    started = time.monotonic()
    procs = [kgen(["search", "--problem", "softmax", "--rounds", str(rounds), "--candidates", str(candidates),
                   "--language", "triton", "--size", "small", "--proposer", "offline", "--seed", str(i), "--quiet",
                   "--db", str(db)], work / f"search{i}.log", env) for i in range(searches)]
    while not has_schema(db):
        time.sleep(0.05)
    reader = Reader(db, env)
    reader.start()

    victim = procs[0]
    killed_run, before_kill = None, []
    while victim.poll() is None:
        found = [rid for rid, settings in query(db, "SELECT id, settings FROM runs")
                 if (json.loads(settings).get("process") or {}).get("pid") == victim.pid]
        if found and query(db, "SELECT COUNT(*) FROM evaluations e JOIN candidates c ON c.id = e.candidate_id "
                               "WHERE c.run_id = ?", found[0])[0][0] >= 1:
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed_run = found[0]
            before_kill = query(db, "SELECT e.id, e.candidate_id, e.outcome, e.created_at FROM evaluations e "
                                    "JOIN candidates c ON c.id = e.candidate_id WHERE c.run_id = ? ORDER BY e.id",
                                    killed_run)
            break
        time.sleep(0.05)
    if killed_run is None:
        figures.problems.append("the search to kill ended before it stored an evaluation")
    else:
        figures.killed_run, figures.killed_after_evaluations = killed_run, len(before_kill)
        unevaluated = query(db, "SELECT COUNT(*) FROM candidates c WHERE c.run_id = ? AND NOT EXISTS "
                                "(SELECT 1 FROM evaluations e WHERE e.candidate_id = c.id)", killed_run)[0][0]
        if unevaluated == 0 and query(db, "SELECT rounds_done FROM runs WHERE id = ?", killed_run)[0][0] >= rounds:
            figures.problems.append("the killed search had already finished its work; kill it sooner")
        procs[0] = kgen(["search", "--resume", str(killed_run), "--quiet", "--db", str(db)], work / "resume.log", env)

    for i, proc in enumerate(procs):
        if proc.wait() != 0:
            figures.problems.append(f"search {i} exited {proc.returncode} (see {work}/search{i}.log)")
    figures.wall_s = time.monotonic() - started
    reader.stop.set()
    reader.join()

    for log in sorted(work.glob("*.log")):
        if LOCKED in log.read_text():
            figures.problems.append(f"{log.name} says '{LOCKED}'")
    figures.reader_calls = len(reader.calls)
    failed = [(c, code, out) for c, code, _, out in reader.calls if code != 0]
    figures.reader_failures = len(failed)
    figures.problems += [f"`kgen {' '.join(c)}` exited {code}: {out.strip()[-300:]}" for c, code, out in failed[:3]]
    figures.longest_reader_call_s = max((s for _, _, s, _ in reader.calls), default=0.0)

    waits = sorted(float(x) for x in (work / "write_waits.txt").read_text().split())
    figures.write_transactions = len(waits)
    figures.longest_write_wait_s = waits[-1] if waits else 0.0
    figures.p99_write_wait_s = waits[int(0.99 * (len(waits) - 1))] if waits else 0.0

    runs = query(db, "SELECT id, status FROM runs")
    figures.runs_finished = sum(status == "finished" for _, status in runs)
    if len(runs) != searches or figures.runs_finished != searches:
        figures.problems.append(f"runs and their status: {runs}")
    per_candidate = query(db, "SELECT c.id, COUNT(e.id) FROM candidates c LEFT JOIN evaluations e "
                              "ON e.candidate_id = c.id GROUP BY c.id")
    figures.candidates = len(per_candidate)
    figures.evaluations = sum(n for _, n in per_candidate)
    lost = [cid for cid, n in per_candidate if n == 0]
    twice = [cid for cid, n in per_candidate if n > 1]
    if lost or twice:
        figures.problems.append(f"candidates without an evaluation: {lost}; evaluated more than once: {twice}")
    if killed_run is not None:
        after = query(db, "SELECT e.id, e.candidate_id, e.outcome, e.created_at FROM evaluations e JOIN candidates c "
                          "ON c.id = e.candidate_id WHERE c.run_id = ? ORDER BY e.id", killed_run)
        if after[:len(before_kill)] != before_kill:
            figures.problems.append("the killed run's evaluations changed after it was resumed")
    figures.integrity_check = "; ".join(r[0] for r in query(db, "PRAGMA integrity_check"))
    if figures.integrity_check != "ok":
        figures.problems.append(f"integrity_check: {figures.integrity_check}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=2)
    parser.add_argument("--dir", help="where the DB and the logs go (default: a new temp dir, kept)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kgen-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    figures = soak(work, args.searches, args.rounds, args.candidates)
    if args.json:
        print(json.dumps(asdict(figures)))
    else:
        for name, value in asdict(figures).items():
            print(f"{name:28} {value}")
        print(f"logs and DB: {work}")
    return 1 if figures.problems else 0


if __name__ == "__main__":
    sys.exit(main())
