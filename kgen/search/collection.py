"""`kgen eval COLLECTION`: evaluate many candidates written elsewhere (by an LLM, a paper, a person)
with the search's harness, on the search's Ray stages, as one run in the results DB.

A collection is one of:
- a KernelBench generations folder, `level_{L}_problem_{P}_sample_{S}_kernel.py` files (KernelBench's
  `runs/{run_name}/`), each judged against problem P of level L of a KernelBench checkout (`--kernelbench`);
- a folder of pairs, `NAME.py` (the candidate) beside `NAME_ref.py` (its reference);
- a `.jsonl` file, one entry a line: `reference` (a bundled name or a file) or `level` + `problem_id`
  (in the KernelBench checkout), `candidate` (a file) or `source` (the code itself), and optionally
  `name`, `sample`, `claimed_speedup` (over eager) and `claimed_speedup_compile` (over torch.compile).
Relative paths are read from the collection's folder.

The run: every entry is stored as a candidate of one run (proposer `collection`) before anything is
evaluated; the entries, their claims and the bad rows (no reference, unreadable file, a reference that
needs a package not installed here) are kept in the run's settings. Each result is committed as it
arrives, so `kgen eval --resume RUN_ID` after Ctrl-C or kill -9 evaluates only what is missing. On a
GPU, each problem's baselines are timed once (and kept in the DB) on the evaluators, beside the candidates,
as many at once as the GPU's memory and the CPUs allow (kgen.search.baseline_queue), those of problems whose
candidates wait for the GPU first; a candidate timed before its problem's baselines are in gets its speedups
when they are. Static checks and CUDA builds run meanwhile on the CPUs.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, TextIO

from kgen.core.errors import KgenError
from kgen.core.records import EvalSettings, Proposal
from kgen.search.baseline_queue import BaselineQueue, footprint_bytes
from kgen.search.collection_summary import BAD_ROW, PENDING, EntryResult
from kgen.store import queries
from kgen.store.db import Database, open_db

PROPOSER = "collection"
GENERATION = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


@dataclass
class Entry:
    """One (reference, candidate) pair of a collection, as read; `error` makes it a bad row."""

    label: str
    reference: Optional[str] = None  # a bundled name or a file path, as load_problem takes it
    source: Optional[str] = None
    sample: Optional[int] = None
    claimed_eager: Optional[float] = None
    claimed_compile: Optional[float] = None
    error: Optional[str] = None
    # filled once the reference is loaded
    problem: Optional[str] = None
    problem_hash: Optional[str] = None


# ---- reading a collection ----

def kernelbench_problem(kernelbench: Optional[str], level: int, problem_id: int) -> str:
    """The file of KernelBench's problem `problem_id` of `level` in a checkout (its root or its
    KernelBench/ folder); a KgenError names what is missing."""
    if not kernelbench:
        raise KgenError("names a KernelBench level/problem: give --kernelbench DIR (a KernelBench checkout)")
    root = Path(kernelbench).expanduser()
    for folder in (root / "KernelBench" / f"level{level}", root / f"level{level}"):
        if folder.is_dir():
            found = sorted(folder.glob(f"{problem_id}_*.py"))
            if found:
                return str(found[0].resolve())
            raise KgenError(f"no problem {problem_id} in {folder}")
    raise KgenError(f"no level{level} folder in {root} (is it a KernelBench checkout?)")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise KgenError(f"file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise KgenError(f"cannot read {path}: {e}") from None


def _entry(label: str, build, *args) -> Entry:
    """An entry from `build(*args)`, or a bad row saying why it could not be read."""
    try:
        return build(*args)
    except KgenError as e:
        return Entry(label=label, error=str(e))


def _generations(folder: Path, files: list[Path], kernelbench: Optional[str]) -> list[Entry]:
    if not kernelbench:
        raise KgenError(f"{folder} is a KernelBench generations folder: give --kernelbench DIR, the KernelBench "
                        "checkout whose problems its kernels answer")
    entries = []
    for path in files:
        level, problem_id, sample = (int(x) for x in GENERATION.match(path.name).groups())
        entries.append(_entry(path.name, _generation, path, kernelbench, level, problem_id, sample))
    return entries


def _generation(path: Path, kernelbench: str, level: int, problem_id: int, sample: int) -> Entry:
    return Entry(label=path.name, reference=kernelbench_problem(kernelbench, level, problem_id), source=_read(path),
                 sample=sample)


def _pairs(folder: Path) -> list[Entry]:
    entries = []
    for path in sorted(p for p in folder.glob("*.py") if not p.stem.endswith("_ref")):
        entries.append(_entry(path.name, _pair, path))
    return entries


def _pair(path: Path) -> Entry:
    ref = path.with_name(f"{path.stem}_ref.py")
    if not ref.is_file():
        raise KgenError(f"no reference {ref.name} beside it")
    return Entry(label=path.name, reference=str(ref.resolve()), source=_read(path))


def _number(row: dict, key: str) -> Optional[float]:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise KgenError(f"{key} must be a positive number (got {value!r})")
    return float(value)


def _jsonl_entry(row: object, label: str, base: Path, kernelbench: Optional[str]) -> Entry:
    if not isinstance(row, dict):
        raise KgenError("not a JSON object")
    if row.get("reference") is not None:
        reference = str(row["reference"])
        if reference.endswith(".py") or "/" in reference:
            reference = str((base / reference).resolve())
    elif row.get("level") is not None and row.get("problem_id") is not None:
        try:
            reference = kernelbench_problem(kernelbench, int(row["level"]), int(row["problem_id"]))
        except (TypeError, ValueError):
            raise KgenError("level and problem_id must be whole numbers") from None
    else:
        raise KgenError("no reference (give reference, or level and problem_id)")
    if isinstance(row.get("source"), str):
        source = row["source"]
    elif isinstance(row.get("candidate"), str):
        source = _read(base / row["candidate"])
    else:
        raise KgenError("no candidate (give candidate, a file, or source, the code)")
    sample = row.get("sample")
    if sample is not None and (isinstance(sample, bool) or not isinstance(sample, int)):
        raise KgenError(f"sample must be a whole number (got {sample!r})")
    return Entry(label=label, reference=reference, source=source, sample=sample,
                 claimed_eager=_number(row, "claimed_speedup"), claimed_compile=_number(row, "claimed_speedup_compile"))


def _jsonl(path: Path, kernelbench: Optional[str]) -> list[Entry]:
    entries, labels = [], Counter()
    for number, line in enumerate(_read(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            entries.append(Entry(label=f"line {number}", error=f"not JSON: {e}"))
            continue
        name = row.get("name") if isinstance(row, dict) and isinstance(row.get("name"), str) else None
        label = name or f"line {number}"
        labels[label] += 1
        if labels[label] > 1:  # labels name candidates in the DB: they must be unique
            label = f"{label} (line {number})"
        entries.append(_entry(label, _jsonl_entry, row, label, path.parent, kernelbench))
    return entries


def read_collection(collection: str, kernelbench: Optional[str] = None) -> list[Entry]:
    """The entries of a collection (a folder or a .jsonl file); bad rows are entries with `error` set."""
    path = Path(collection).expanduser()
    if path.is_file():
        if path.suffix != ".jsonl":
            raise KgenError(f"{collection}: a collection is a folder or a .jsonl file (to evaluate one candidate: "
                            "kgen eval PROBLEM CANDIDATE.py)")
        entries = _jsonl(path, kernelbench)
    elif path.is_dir():
        generations = sorted((p for p in path.glob("*.py") if GENERATION.match(p.name)),
                             key=lambda p: tuple(int(x) for x in GENERATION.match(p.name).groups()))
        entries = _generations(path, generations, kernelbench) if generations else _pairs(path)
    else:
        raise KgenError(f"collection not found: {collection}")
    if not entries:
        raise KgenError(f"{collection} holds no entries: expected level_L_problem_P_sample_S_kernel.py files, "
                        "NAME.py + NAME_ref.py pairs, or JSONL rows")
    return entries


def load_references(entries: list[Entry], size: str) -> dict[str, object]:
    """Load each entry's reference once (kgen.problems.problem.Problem by reference); an entry whose reference
    cannot be loaded (a missing package, a file that is not a KernelBench problem) becomes a bad row."""
    from kgen.problems.problem import load_problem

    problems: dict[str, object] = {}
    failures: dict[str, str] = {}
    for entry in entries:
        if entry.error or entry.reference is None:
            continue
        if entry.reference not in problems and entry.reference not in failures:
            try:
                problems[entry.reference] = load_problem(entry.reference, size)
            except KgenError as e:
                failures[entry.reference] = f"reference {Path(entry.reference).name}: {e}"
            except Exception as e:  # noqa: BLE001 - the reference's own code failed: this row is bad, not the run
                failures[entry.reference] = f"reference {Path(entry.reference).name}: {type(e).__name__}: {e}"
        if entry.reference in failures:
            entry.error = failures[entry.reference]
        else:
            entry.problem = problems[entry.reference].name
            entry.problem_hash = problems[entry.reference].source_hash
    # samples without an id are numbered per problem in the order they appear
    seen: Counter = Counter()
    for entry in entries:
        if entry.sample is None:
            entry.sample = seen[entry.problem_hash]
        seen[entry.problem_hash] = max(seen[entry.problem_hash], entry.sample + 1)
    return problems


# ---- progress ----

QUIET_LINE_S = 60.0  # after this long without a line, one saying what is in flight
# The ETA: none before ETA_AFTER results of this session (the first come from the cheapest stage: static
# rejections in seconds, while the GPU waits for its first build); then the pace of the last ETA_WINDOW
# results (from the start until there are that many), so a fast or slow stretch moves it only so far.
ETA_AFTER = 5
ETA_WINDOW = 30


class CollectionProgress:
    """One line per finished entry (on stderr): done/total, its outcome, the counts so far and an ETA
    from this session's recent pace."""

    def __init__(self, stream: Optional[TextIO] = None):
        self.stream = stream or sys.stderr
        self.counts: Counter = Counter()
        self.done = self.total = self._done_before = 0
        self.started = self._last_line = time.monotonic()
        self._finished_at: deque = deque(maxlen=ETA_WINDOW)  # when (monotonic) the latest results came

    def note(self, text: str) -> None:
        print(f"kgen: {text}", file=self.stream, flush=True)
        self._last_line = time.monotonic()

    def start(self, total: int, done: int) -> None:
        self.total, self.done, self._done_before = total, done, done
        self.started = time.monotonic()
        self._finished_at.clear()

    def quiet_for(self) -> float:
        """Seconds since the last line."""
        return time.monotonic() - self._last_line

    def waiting(self, compiling: int, ready: int, on_gpu: list[tuple[str, float]]) -> None:
        """A line while nothing finishes (CUDA builds, a long evaluation): what the run is waiting for."""
        gpus = "; ".join(f"{label} for {_duration(s)}" for label, s in on_gpu) or "none"
        self.note(f"waiting: {compiling} in the compile stage (static checks, builds), {ready} compiled and queued "
                  f"for an evaluator, on the evaluators: {gpus}")

    def eta(self) -> str:
        """The time left at the recent pace: the span of the last ETA_WINDOW results (back to the start while
        there are fewer) over their count; none before ETA_AFTER results."""
        here = self.done - self._done_before
        if here < ETA_AFTER:
            return f"ETA after {ETA_AFTER} results"
        since = self._finished_at[0] if here > ETA_WINDOW else self.started
        count = len(self._finished_at) - 1 if here > ETA_WINDOW else here
        pace_s = (self._finished_at[-1] - since) / count
        return f"ETA {_duration(pace_s * (self.total - self.done))}"

    def finished(self, label: str, outcome: str, speedup: Optional[float]) -> None:
        self.done += 1
        self.counts[outcome] += 1
        self._finished_at.append(time.monotonic())
        speed = f" {speedup:.2f}x eager" if speedup else ""
        counts = ", ".join(f"{o} {n}" for o, n in self.counts.most_common())
        print(f"[{self.done}/{self.total}] {label}: {outcome}{speed} | {counts} | {self.eta()}",
              file=self.stream, flush=True)
        self._last_line = time.monotonic()


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


# ---- the run ----

@dataclass
class CollectionConfig:
    """What defines a collection run; stored in the run's settings, so a resume is the same run."""

    collection: str
    kernelbench: Optional[str] = None
    size: Optional[str] = None  # None: full with a GPU, small without
    timeout_s: float = 300.0
    sandbox: str = "bwrap"


def _manifest_hash(entries: list[Entry]) -> str:
    text = json.dumps([(e.label, e.problem_hash, e.source and queries.normalized_source_hash(e.source), e.error)
                       for e in entries])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _entry_record(entry: Entry) -> dict:
    return {k: v for k, v in asdict(entry).items() if k != "source"}


def create_collection_run(db: Database, config: CollectionConfig, entries: list[Entry], device: str) -> int:
    """The run and a candidate per evaluable entry (origin: its label), all stored before any evaluation."""
    name = Path(config.collection).name
    run_id = queries.create_run(
        db, problem=f"collection {name}", problem_path=config.collection, problem_hash=_manifest_hash(entries),
        size=config.size, proposer=PROPOSER, model=None, language="any", seed=0, rounds=1,
        candidates_per_round=len(entries), device=device,
        settings=dict(asdict(config), kind=PROPOSER, entries=[_entry_record(e) for e in entries]))
    store_candidates(db, run_id, entries)
    return run_id


def store_candidates(db: Database, run_id: int, entries: list[Entry]) -> None:
    """A candidate for each evaluable entry the run does not hold yet (a run killed while it was being
    created gets the rest on resume); its origin is the entry's label."""
    from kgen.judge.static_checks import detect_language

    stored = _candidates(db, run_id)
    for entry in entries:
        if entry.error is None and entry.label not in stored:
            queries.add_proposal(db, Proposal(source=entry.source, proposer=PROPOSER,
                                              language=detect_language(entry.source), origin=entry.label),
                                 run_id=run_id, round_index=0, problem=entry.problem, problem_hash=entry.problem_hash)


def _candidates(db: Database, run_id: int) -> dict[str, tuple[int, str, str]]:
    """label -> (candidate id, source, language) of a collection run's candidates."""
    from sqlalchemy import select

    from kgen.store.db import Candidate

    with db.reader() as s:
        return {origin: (cid, source, language) for cid, origin, source, language in s.execute(
            select(Candidate.id, Candidate.origin, Candidate.source, Candidate.language)
            .where(Candidate.run_id == run_id))}


def load_collection_run(db: Database, run_id: int) -> tuple[CollectionConfig, list[Entry]]:
    run = queries.get_run(db, run_id)
    if run is None:
        raise KgenError(f"no run {run_id} in {db.url}")
    settings = dict(run.settings or {})
    if settings.get("kind") != PROPOSER:
        raise KgenError(f"run {run_id} is a search, not a collection: `kgen search --resume {run_id}` continues it")
    known = set(CollectionConfig.__dataclass_fields__)
    config = CollectionConfig(**{k: v for k, v in settings.items() if k in known})
    entries = [Entry(**{k: v for k, v in e.items() if k in Entry.__dataclass_fields__}) for e in settings["entries"]]
    return config, entries


def _eval_settings(config: CollectionConfig, device, problem) -> EvalSettings:
    return EvalSettings(device="cpu" if device.name == "cpu" else "cuda", size=problem.size,
                        timeout_s=config.timeout_s, sandbox=config.sandbox, cuda_arch=device.cuda_arch)


def _set_floor(settings: EvalSettings, problem) -> None:
    """The roofline floor and the impossible floor a correct time below which is `suspicious` (measuring this
    GPU's ceilings the first time, before any evaluator is busy)."""
    try:
        from kgen.problems.roofline import floors

        settings.floor_ms, settings.impossible_ms = floors(problem, settings.rtol)
    except Exception:  # noqa: BLE001 - no floor means no `suspicious` by physics; the judge's clock still checks
        settings.floor_ms = settings.impossible_ms = None


def _evaluate(db: Database, run_id: int, config: CollectionConfig, entries: list[Entry], problems: dict,
              stages, device, progress: CollectionProgress) -> None:
    """Every entry of the run not evaluated yet through the compile and timing stages, each result
    stored as it arrives."""
    from kgen.search.workers import Job, problem_ref
    from kgen.store import baselines as kgen_baselines

    candidates = _candidates(db, run_id)
    done_ids = queries.evaluated_candidate_ids(db, run_id)
    todo = [e for e in entries if e.error is None and candidates[e.label][0] not in done_ids]
    # Triton entries first: their compile stage takes seconds, a CUDA build a minute or more of a CPU, so sent
    # first they reach the GPU while the builds run, instead of queueing behind them for the CPUs
    todo.sort(key=lambda e: candidates[e.label][2] == "cuda")  # the language stored with the candidate
    label_of = {candidates[e.label][0]: e.label for e in todo}
    reference_of = {candidates[e.label][0]: e.reference for e in todo}
    progress.start(total=sum(e.error is None for e in entries), done=len(candidates) - len(todo))
    if device.name == "cpu":
        progress.note("no GPU: Triton candidates run in Triton's interpreter at the small size, CUDA ones are "
                      "only compiled (not_run); nothing is timed, so fast_p above 0 stays empty")
    by_problem = {}
    for e in todo:
        if e.reference not in by_problem:
            by_problem[e.reference] = _eval_settings(config, device, problems[e.reference])
    for e in todo:  # the CPUs start at once; the floors are in before any GPU takes a candidate (poll, below)
        problem = problems[e.reference]
        stages.submit([Job(candidates[e.label][0], candidates[e.label][1],
                           (problem_ref(str(problem.path)), problem.size, problem.source_hash))],
                      by_problem[e.reference])
    pending = {}  # baseline ref -> reference
    early: dict[str, list[int]] = {}  # reference -> its evaluations stored before its baselines were in
    queue, awaited = None, set()  # awaited: the references whose baselines are still to come
    if device.name != "cpu":
        for reference, settings in by_problem.items():
            _set_floor(settings, problems[reference])
            row = kgen_baselines.cached_baselines(db, problems[reference], device.name)
            if row is not None:
                settings.baseline_eager_ms, settings.baseline_compile_ms = row.eager_ms, row.compile_ms
        # in the order their entries went to the compile stage: the order they reach the GPU
        missing = [r for r, settings in by_problem.items() if settings.baseline_eager_ms is None]
        awaited = set(missing)
        if missing:
            queue = BaselineQueue(missing, {r: footprint_bytes(problems[r]) for r in missing},
                                  stages.gpu_free_bytes(), stages.baselines_at_once)
            progress.note(f"timing the baselines of {len(missing)} problem(s) (eager, torch.compile; kept in the "
                          f"DB) on the GPUs beside the candidates, up to {queue.cap} at once per GPU as its memory "
                          "allows (only the timed runs take turns)")
    while stages.in_flight or pending or queue:
        if queue:
            if pending:
                for reference in _collect_baselines(db, pending, problems, by_problem, device.name, progress, early):
                    queue.finished(reference)
                    awaited.discard(reference)
            # a problem with candidates compiled and waiting for the GPU first: their speedups are wanted now
            for reference, index in queue.next_starts(reference_of[c] for c in stages.queued_ids()):
                problem = problems[reference]
                pending[stages.time_baselines((problem_ref(str(problem.path)), problem.size, problem.source_hash),
                                              index)] = reference
        if progress.quiet_for() >= QUIET_LINE_S:  # a long run is never silent: say what it waits for
            compiling, ready, on_gpu = stages.waiting()
            progress.waiting(compiling, ready, [(label_of.get(cid, f"candidate {cid}"), s) for cid, s in on_gpu])
        for event in stages.poll():
            if event.kind == "done":
                reference = reference_of[event.candidate_id]
                settings = by_problem[reference]
                if event.result.eager_ms is None and settings.baseline_eager_ms is not None:  # in since it was sent
                    event.result.set_baselines(settings.baseline_eager_ms, settings.baseline_compile_ms)
                evaluation_id = queries.add_evaluation(db, event.candidate_id, event.result)
                if event.result.eager_ms is None and reference in awaited:
                    early.setdefault(reference, []).append(evaluation_id)  # its speedups when they are in
                progress.finished(label_of[event.candidate_id], event.result.outcome,
                                  event.result.speedup_eager)
            elif event.kind == "requeued":
                progress.note(f"{label_of[event.candidate_id]}: {event.note}")


def _collect_baselines(db: Database, pending: dict, problems: dict, by_problem: dict, device: str,
                       progress: CollectionProgress, early: dict[str, list[int]]) -> list[str]:
    """Store the baselines that came back, for the candidates still to come and (their speedups) for
    those evaluated before them; the references whose baselines came back (timed or not)."""
    import ray

    from kgen.store import baselines as kgen_baselines

    done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
    returned = []
    for ref in done:
        reference = pending.pop(ref)
        returned.append(reference)
        problem, settings = problems[reference], by_problem[reference]
        try:
            sent = ray.get(ref)
        except ray.exceptions.RayError as e:
            sent = None
            progress.note(f"the baselines of {problem.name} could not be timed ({type(e).__name__}); its speedups "
                          "stay empty")
        if sent is None:
            early.pop(reference, None)
            continue
        kgen_baselines.store_baselines(db, problem, device, sent)
        settings.baseline_eager_ms, settings.baseline_compile_ms = sent.get("eager_ms"), sent.get("compile_ms")
        if early.get(reference):
            queries.set_baselines(db, early.pop(reference), settings.baseline_eager_ms, settings.baseline_compile_ms)
    return returned


def entry_results(db: Database, run_id: int) -> tuple[list[EntryResult], bool]:
    """Each entry of a collection run with its latest evaluation (PENDING where it has none yet), and
    whether the run was timed (on a GPU)."""
    from kgen.store.db import Candidate, latest_evaluation

    _, entries = load_collection_run(db, run_id)
    with db.reader() as s:
        from sqlalchemy import select

        latest = {}
        for cand in s.scalars(select(Candidate).where(Candidate.run_id == run_id)):
            latest[cand.origin] = (cand.id, latest_evaluation(cand))
        run = queries.get_run(db, run_id)
        results = []
        for e in entries:
            cid, ev = latest.get(e.label, (None, None))
            r = EntryResult(label=e.label, problem=e.problem, problem_hash=e.problem_hash, sample=e.sample or 0,
                            outcome=BAD_ROW if e.error else PENDING, message=e.error or "",
                            claimed_eager=e.claimed_eager, claimed_compile=e.claimed_compile, candidate_id=cid)
            if ev is not None:
                r.outcome, r.message, r.language = ev.outcome, ev.message or "", ev.language
                r.runtime_ms, r.speedup_eager, r.speedup_compile = ev.runtime_ms, ev.speedup_eager, ev.speedup_compile
            results.append(r)
    return results, (run.device or "cpu") != "cpu"


def run_collection(db: str | None, config: Optional[CollectionConfig] = None, *, resume_run_id: Optional[int] = None,
                   ray_address: Optional[str] = None, progress: Optional[CollectionProgress] = None,
                   cluster=None) -> int:
    """Evaluate a collection (or resume run `resume_run_id`) to its end; returns the run id. Ctrl-C marks
    the run interrupted and re-raises KeyboardInterrupt. Bad input raises KgenError before any DB exists."""
    from kgen.judge.sandbox import SandboxMode, check_sandbox
    from kgen.search import cluster as ray_cluster

    progress = progress or CollectionProgress()
    if resume_run_id is None:
        entries = read_collection(config.collection, config.kernelbench)
        check_sandbox(SandboxMode(config.sandbox))
        if config.size is None:
            import torch

            config.size = "full" if torch.cuda.is_available() else "small"
        problems = load_references(entries, config.size)
    database = open_db(db, create=resume_run_id is None)
    run_id = resume_run_id
    try:
        if resume_run_id is not None:
            config, entries = load_collection_run(database, resume_run_id)
            if queries.get_run(database, resume_run_id).status == "finished":
                return resume_run_id
            check_sandbox(SandboxMode(config.sandbox))
            problems = _reload(entries, config.size)
            _store_missing(database, run_id, config, entries)
        bad = [e for e in entries if e.error]
        for e in bad:
            progress.note(f"bad row {e.label}: {e.error}")
        connected = cluster or ray_cluster.connect(ray_address)
        stages = None
        try:
            from kgen.search.workers import Stages

            stages = Stages(connected, None, config.size)
            device = stages.device()
            if device.name != "cpu":  # the first candidates' sandboxes start while the first builds run (on a
                stages.prestart(config.sandbox, "cuda")  # GPU every language gets a compile step and a runner)
            if run_id is None:
                run_id = create_collection_run(database, config, entries, device.name)
                progress.note(f"run {run_id}: {len(entries) - len(bad)} entries to evaluate, {len(bad)} bad row(s), "
                              f"{stages.evaluator_count} evaluator(s) ({connected.placement.described})")
            else:
                queries.set_run_status(database, run_id, "running")
            queries.set_run_process(database, run_id)
            _evaluate(database, run_id, config, entries, problems, stages, device, progress)
            queries.set_run_status(database, run_id, "finished", rounds_done=1)
        except BaseException as e:
            if run_id is not None:
                queries.set_run_status(database, run_id,
                                       "interrupted" if isinstance(e, KeyboardInterrupt) else "failed")
                if isinstance(e, KeyboardInterrupt):
                    progress.note(f"interrupted: run {run_id} marked interrupted; `kgen eval --resume {run_id}` "
                                  "continues it")
            raise
        finally:
            if stages is not None:
                stages.close()
            if cluster is None:
                ray_cluster.shutdown()
        return run_id
    finally:
        database.close()


def _store_missing(db: Database, run_id: int, config: CollectionConfig, entries: list[Entry]) -> None:
    """The candidates a run killed while it was being created never stored, read again from the collection."""
    stored = _candidates(db, run_id)
    missing = [e for e in entries if e.error is None and e.label not in stored]
    if not missing:
        return
    sources = {e.label: e.source for e in read_collection(config.collection, config.kernelbench)}
    for e in missing:
        if sources.get(e.label) is None:
            raise KgenError(f"{e.label} is no longer in {config.collection}; start a new run")
        e.source = sources[e.label]
    store_candidates(db, run_id, missing)


def _reload(entries: list[Entry], size: str) -> dict:
    """A resumed run's references, each checked against the hash its run stored."""
    from kgen.problems.problem import load_problem

    problems = {}
    for e in entries:
        if e.error or e.reference in problems:
            continue
        problem = load_problem(e.reference, size)
        if problem.source_hash != e.problem_hash:
            raise KgenError(f"the reference {e.reference} changed since the run started; start a new run")
        problems[e.reference] = problem
    return problems
