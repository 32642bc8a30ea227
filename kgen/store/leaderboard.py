"""What a search found, read back from the results DB: the leaderboard, one candidate in full
(`kgen show`), and the runs. Read-only: nothing here writes to the DB.

A candidate's standing on a device is its latest evaluation there. The leaderboard ranks correct
candidates (suspicious ones never) per (problem, device, size). The best is kgen.store.promotion's: the
candidate found first (lowest id) until a later one beats it beyond the timing noise (its 95%
interval of the median wholly below, and at least 2% faster); a later one that is faster only
within the noise is a tie and does not displace it. Below the best, the others fastest first, then
untimed ones (a machine without a GPU claims no times) oldest first. Each time comes with its
spread: the half-width of that interval. Sizes are kept apart because a runtime at the small size
says nothing about the full one.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from dataclasses import asdict, dataclass, field
from operator import itemgetter
from typing import Optional

from sqlalchemy import func, select

from kgen.core import fmt
from kgen.core.errors import KgenError
from kgen.core.fmt import Column
from kgen.core.records import CPU_CORRECT, verdict_label
from kgen.store import ledger
from kgen.store.db import Candidate, Database, Evaluation, LLMCall, Run
from kgen.store.promotion import RuntimeSpread, promotion_order, samples_of, spread_of, within_noise
from kgen.store.queries import process_alive

FORMATS = ("table", "json", "csv", "markdown")


@dataclass
class LeaderboardRow:
    """One correct candidate on one device, as the leaderboard lists it."""

    rank: int  # 1 = the best of its (problem, device, size)
    candidate_id: int
    problem: str
    language: str
    device: str
    size: str
    runtime_ms: Optional[float]
    eager_ms: Optional[float]
    compile_ms: Optional[float]
    speedup_eager: Optional[float]
    speedup_compile: Optional[float]
    roofline_pct: Optional[float]
    rtol: Optional[float]
    atol: Optional[float]
    torch_ops: list[str]
    round: Optional[int]
    proposer: str
    model: Optional[str]
    run_id: Optional[int]
    evaluated_at: dt.datetime
    evaluation_id: int
    sandbox: Optional[str] = None  # "none": evaluated with --no-sandbox (the table says so beside the device)
    spread_ms: Optional[float] = None  # half-width of the 95% interval of the median; None without timed runs
    ci_low_ms: Optional[float] = None
    ci_high_ms: Optional[float] = None
    timed_runs: int = 0  # the timed runs stored with the evaluation, behind the interval
    tied_with: Optional[int] = None  # the group's best, where this one is within its timing noise
    # filled by `--sort per-dollar|per-gpu-hour` (kgen.store.ledger.sort_board): speedup vs eager per dollar its run
    # spent on tokens, or per GPU-hour it used; free: its run spent nothing on tokens
    speedup_per_usd: Optional[float] = None
    speedup_per_gpu_hour: Optional[float] = None
    free: bool = False

    @property
    def verdict(self) -> str:
        """Its outcome as users read it (a CPU row's says what was not audited: kgen.core.records.CPU_CORRECT)."""
        return verdict_label("correct", self.device)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["evaluated_at"] = self.evaluated_at.isoformat(timespec="seconds")
        d["verdict"] = self.verdict
        return d


def _latest_per_device():
    """Ids of each candidate's latest evaluation on each device (no_code rows have device '-')."""
    return (select(func.max(Evaluation.id)).where(Evaluation.device != "-")
            .group_by(Evaluation.candidate_id, Evaluation.device).scalar_subquery())


def _spread(e: Evaluation) -> RuntimeSpread:
    return spread_of(e.runtime_ms, samples_of(e.details))


def leaderboard(db: Database, *, problem: Optional[str] = None, device: Optional[str] = None,
                run_id: Optional[int] = None, include_all: bool = False) -> list[LeaderboardRow]:
    """The best correct candidate per (problem, device, size), or every correct one with
    `include_all`, grouped in that order. `device` matches any device name containing it."""
    q = (select(Candidate, Evaluation).join(Evaluation, Evaluation.candidate_id == Candidate.id)
         .where(Evaluation.id.in_(_latest_per_device()), Evaluation.outcome == "correct"))
    if problem is not None:
        q = q.where(Candidate.problem == problem)
    if run_id is not None:
        q = q.where(Candidate.run_id == run_id)
    if device is not None:
        q = q.where(func.lower(Evaluation.device).contains(device.lower()))
    with db.reader() as s:
        pairs = list(s.execute(q))
    groups: dict[tuple[str, str, str], list[tuple[Candidate, Evaluation]]] = {}
    for c, e in pairs:
        groups.setdefault((c.problem, e.device, e.size), []).append((c, e))
    rows: list[LeaderboardRow] = []
    # full before small: the size users run; devices with timings before CPU
    for key in sorted(groups, key=lambda k: (k[0], k[2] != "full", k[1] == "cpu", k[1])):
        found = [(c, e, _spread(e)) for c, e in sorted(groups[key], key=lambda ce: ce[0].id)]
        ranked = promotion_order(found, itemgetter(2))
        lead = ranked[0][2]
        for rank, (c, e, spread) in enumerate(ranked if include_all else ranked[:1], start=1):
            rows.append(LeaderboardRow(
                rank=rank, candidate_id=c.id, problem=c.problem, language=e.language or c.language,
                device=e.device, size=e.size, runtime_ms=e.runtime_ms, eager_ms=e.eager_ms,
                compile_ms=e.compile_ms, speedup_eager=e.speedup_eager, speedup_compile=e.speedup_compile,
                roofline_pct=e.roofline_pct, rtol=e.rtol, atol=e.atol, torch_ops=list(e.torch_ops or []),
                round=c.round, proposer=c.proposer, model=c.model, run_id=c.run_id, evaluated_at=e.created_at,
                evaluation_id=e.id, sandbox=e.sandbox, spread_ms=spread.half_width_ms, ci_low_ms=spread.low_ms,
                ci_high_ms=spread.high_ms, timed_runs=spread.runs,
                tied_with=ranked[0][0].id if rank > 1 and within_noise(spread, lead) else None))
    return rows


def check_problem(db: Database, name: Optional[str]) -> None:
    """A problem name that is neither bundled nor in the DB is a typo to report (one line, exit 2),
    not an empty result: `--problem softmx` must not read as "no results yet for softmx"."""
    if name is None:
        return
    from difflib import get_close_matches

    from kgen.problems.problem import problem_names

    bundled = problem_names()
    with db.reader() as s:
        stored = sorted(set(s.scalars(select(Run.problem).distinct())) | set(s.scalars(
            select(Candidate.problem).distinct())))
    if name in bundled or name in stored:
        return
    close = get_close_matches(name, sorted({*bundled, *stored}), n=1)
    others = [p for p in stored if p not in bundled]
    raise KgenError(f"unknown problem '{name}'" + (f"; did you mean '{close[0]}'?" if close else "")
                    + f" (bundled: {', '.join(bundled) or 'none'}"
                    + (f"; also in this DB: {', '.join(others)}" if others else "") + ")")


# -- the table: the CLI, the markdown and the report share its columns ------------------------------

COLUMNS = (
    Column("id", numeric=True, key=True), Column("problem", key=True), Column("lang"), Column("device"),
    Column("size"), Column("runtime ms", numeric=True), Column("eager ms", numeric=True, default=False),
    Column("compile ms", numeric=True, default=False), Column("vs eager", numeric=True),
    Column("vs compile", numeric=True), Column("roofline", numeric=True), Column("rtol", numeric=True, default=False),
    Column("torch ops", default=False), Column("round", numeric=True, default=False),
    Column("proposer", default=False), Column("run", numeric=True, default=False), Column("when", default=False),
)


def row_cells(r: LeaderboardRow) -> list[str]:
    device = f"{r.device} [no sandbox]" if r.sandbox == "none" else r.device
    return [str(r.candidate_id), r.problem, r.language, device, r.size, fmt.ms_spread(r.runtime_ms, r.spread_ms),
            fmt.ms(r.eager_ms), fmt.ms(r.compile_ms), fmt.speedup(r.speedup_eager), fmt.speedup(r.speedup_compile),
            fmt.pct(r.roofline_pct), fmt.tol(r.rtol), ", ".join(r.torch_ops) or fmt.MISSING,
            fmt.MISSING if r.round is None else str(r.round), fmt.proposer(r.proposer, r.model),
            fmt.MISSING if r.run_id is None else str(r.run_id), fmt.when(r.evaluated_at)]


def to_json(rows: list[LeaderboardRow]) -> str:
    return json.dumps([r.to_dict() for r in rows], indent=2)


def to_csv(rows: list[LeaderboardRow]) -> str:
    out = io.StringIO()
    names = [*LeaderboardRow.__dataclass_fields__, "verdict"]
    writer = csv.DictWriter(out, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        d = r.to_dict()
        d["torch_ops"] = ";".join(r.torch_ops)
        writer.writerow({k: "" if v is None else v for k, v in d.items()})
    return out.getvalue()


def to_markdown(rows: list[LeaderboardRow]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(c.header for c in COLUMNS) + " |",
             "| " + " | ".join("---:" if c.numeric else "---" for c in COLUMNS) + " |"]
    lines += ["| " + " | ".join(cell(x) for x in row_cells(r)) + " |" for r in rows]
    note = cpu_note(rows)
    return "\n".join(lines + ([f"\n{note}"] if note else [])) + "\n"


def cpu_note(rows: list[LeaderboardRow]) -> Optional[str]:
    """What a board with CPU rows must say about them (kgen.core.records.CPU_CORRECT); None without any."""
    if not any(r.device == "cpu" for r in rows):
        return None
    return f"cpu rows: {CPU_CORRECT}"


def print_board(rows: list[LeaderboardRow], console, *, title: str, wide: bool = False) -> None:
    """The leaderboard as a table (see fmt.print_table: on a terminal the default view fits its width,
    ids and problem names in full); `wide` shows every column. The best of each group in bold."""
    # what its CPU rows did not audit: piped, in the title line (the lines below it are the table's own); on a
    # terminal, after the table, wrapped to its width like a sentence
    note = cpu_note(rows)
    piped = not console.is_terminal
    fmt.print_table(console, COLUMNS, [row_cells(r) for r in rows], title=f"{title} ({note})" if note and piped
                    else title, wide=wide, styles=["bold" if r.rank == 1 else None for r in rows])
    if note and not piped:
        console.print(note, style="dim", highlight=False, markup=False)
    best_ms = {r.candidate_id: r.runtime_ms for r in rows if r.rank == 1}
    for r in rows:
        if r.tied_with is not None and (best_ms.get(r.tied_with) or 0.0) > r.runtime_ms:
            console.print(f"candidate {r.candidate_id} is faster than {r.tied_with} only within the timing noise: "
                          f"a tie, and {r.tied_with}, found first, stays the best", highlight=False, markup=False,
                          soft_wrap=True)


def _figure(row, sort: str) -> str:
    value = row.speedup_per_usd if sort == "per-dollar" else row.speedup_per_gpu_hour
    if value is None:
        return "free" if sort == "per-dollar" and row.free else fmt.MISSING
    return f"{value:,.3g}"


def print_cost_board(rows: list, console, *, sort: str, title: str, wide: bool = False) -> None:
    """The leaderboard as print_board shows it, with the sort's figure (kgen.store.ledger.sort_board) after
    `vs eager`."""
    at = next(i for i, c in enumerate(COLUMNS) if c.header == "vs eager") + 1
    header = "vs eager/$" if sort == "per-dollar" else "vs eager/GPU-h"
    columns = (*COLUMNS[:at], Column(header, numeric=True), *COLUMNS[at:])
    cells = []
    for r in rows:
        row = row_cells(r)
        cells.append([*row[:at], _figure(r, sort), *row[at:]])
    fmt.print_table(console, columns, cells, title=title, wide=wide,
                    styles=["bold" if r.rank == 1 else None for r in rows])


# -- one candidate: kgen show ----------------------------------------------------------------------

@dataclass
class Ancestor:
    """One step of a candidate's lineage: `depth` 1 is a parent, 2 a grandparent ..."""

    depth: int
    candidate_id: int
    round: Optional[int]
    language: str
    proposer: str
    origin: Optional[str]
    idea: Optional[str]
    outcome: Optional[str]  # as users read it (verdict_label: a CPU correct says what it did not audit)
    speedup_eager: Optional[float]
    missing: bool = False  # a parent id the DB does not hold
    seen: bool = False  # already listed above (two parents share an ancestor)


@dataclass
class CandidateDetail:
    candidate: Candidate
    evaluations: list[Evaluation]
    lineage: list[Ancestor] = field(default_factory=list)
    cost: Optional[ledger.CandidateCost] = None  # its cost ledger (kgen.store.ledger)


def candidate_detail(db: Database, candidate_id: int) -> CandidateDetail:
    """A candidate, every evaluation of it, and its ancestors (depth first, each listed once)."""
    with db.reader() as s:
        cand = s.get(Candidate, candidate_id)
        if cand is None:
            raise KgenError(f"no candidate with id {candidate_id} in {db.url}")
        evaluations = list(cand.evaluations)
        lineage: list[Ancestor] = []
        listed: set[int] = {cand.id}

        def walk(parent_ids: list[int], depth: int) -> None:
            for pid in parent_ids:
                parent = s.get(Candidate, pid)
                if parent is None:
                    lineage.append(Ancestor(depth, pid, None, "?", "?", None, None, None, None, missing=True))
                    continue
                latest = parent.evaluations[-1] if parent.evaluations else None
                seen = pid in listed
                lineage.append(Ancestor(depth, pid, parent.round, parent.language, parent.proposer, parent.origin,
                                        parent.idea, verdict_label(latest.outcome, latest.device) if latest else None,
                                        latest.speedup_eager if latest else None, seen=seen))
                if not seen:
                    listed.add(pid)
                    walk(list(parent.parent_ids or []), depth + 1)

        walk(list(cand.parent_ids or []), 1)
        s.expunge_all()
    return CandidateDetail(candidate=cand, evaluations=evaluations, lineage=lineage,
                           cost=ledger.candidate_cost(db, candidate_id))


@dataclass
class PromptExchange:
    """The LLM call that produced a candidate: the chat sent and the reply (`kgen show ID --prompt`)."""

    candidate_id: int
    model: Optional[str]
    template: Optional[str]
    messages: list[dict]
    response: Optional[str]
    tokens_in: Optional[int]
    tokens_out: Optional[int]
    latency_s: Optional[float]

    def text(self) -> str:
        """Plain text, every message in full: a header line per message, then its content."""
        head = (f"candidate {self.candidate_id}: {self.template or 'prompt'} to {self.model or 'the model'}, "
                f"{fmt.MISSING if self.tokens_in is None else self.tokens_in} tokens in, "
                f"{fmt.MISSING if self.tokens_out is None else self.tokens_out} out, "
                f"{fmt.MISSING if self.latency_s is None else f'{self.latency_s:.1f}'} s")
        parts = [head]
        for m in self.messages:
            parts += [f"--- {m.get('role', '?')} ---", str(m.get("content", "")).rstrip()]
        parts += ["--- response ---", (self.response or "(no response stored)").rstrip()]
        return "\n".join(parts) + "\n"


def candidate_prompt(db: Database, candidate_id: int) -> PromptExchange:
    """The stored prompt and response of an LLM-proposed candidate; a KgenError for any other."""
    with db.reader() as s:
        cand = s.get(Candidate, candidate_id)
        if cand is None:
            raise KgenError(f"no candidate with id {candidate_id} in {db.url}")
        call = cand.llm_call
        if call is None:
            raise KgenError(f"candidate {candidate_id} was proposed by {cand.proposer}, not an LLM: no prompt is "
                            "stored (kgen show ID prints its source)")
        messages = call.prompt if isinstance(call.prompt, list) else [{"role": "user", "content": call.prompt}]
        return PromptExchange(candidate_id=cand.id, model=call.model, template=call.template,
                              messages=[m if isinstance(m, dict) else {"content": m} for m in messages],
                              response=call.response, tokens_in=call.tokens_in, tokens_out=call.tokens_out,
                              latency_s=call.latency_s)


# -- the runs: kgen runs ---------------------------------------------------------------------------

@dataclass
class RunRow:
    run_id: int
    problem: str
    size: str
    device: Optional[str]
    proposer: str
    model: Optional[str]
    language: str
    seed: int
    candidates_per_round: int
    status: str
    rounds_done: int
    rounds_planned: int
    candidates: int
    correct: int
    best_candidate_id: Optional[int]
    best_speedup_eager: Optional[float]
    best_speedup_compile: Optional[float]
    tokens_in: int
    tokens_out: int
    started_at: dt.datetime
    finished_at: Optional[dt.datetime]
    # for a `running` run: False when its process on this machine is gone (SIGKILLed; resume it),
    # None when this machine cannot tell (another host, or not running)
    process_alive: Optional[bool] = None
    cost: Optional[ledger.RunCost] = None  # its cost ledger (kgen.store.ledger)
    evaluated: Optional[int] = None  # its candidates with an evaluation (None: not counted)

    @property
    def process_gone(self) -> bool:
        return self.status == "running" and self.process_alive is False

    @property
    def status_text(self) -> str:
        if self.process_gone:
            return "running, process gone"
        if self.status == "finished" and self.rounds_done < self.rounds_planned:
            # a run ends before its last round only when its proposer has nothing more to propose
            return "finished early: proposer ran out"
        return self.status

    @property
    def correct_text(self) -> str:
        """Correct of evaluated, and those not evaluated yet apart: an interrupted run's 7 unevaluated
        candidates are not 7 failures."""
        evaluated = self.candidates if self.evaluated is None else self.evaluated
        pending = self.candidates - evaluated
        return f"{self.correct}/{evaluated}" + (f" ({pending} not evaluated yet)" if pending else "")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["started_at"] = self.started_at.isoformat(timespec="seconds")
        d["finished_at"] = self.finished_at.isoformat(timespec="seconds") if self.finished_at else None
        d["cost"] = {k: v for k, v in self.cost.to_dict().items() if k != "run_id"} if self.cost else None  # the row's
        return d


def run_rows(db: Database, *, problem: Optional[str] = None, prices: Optional[ledger.Prices] = None) -> list[RunRow]:
    """Every run, oldest first, with its progress, its best correct candidate and the tokens it spent, and
    its cost ledger (`prices`: from flags, over the run's own and the environment's)."""
    with db.reader() as s:
        q = select(Run).order_by(Run.id)
        if problem is not None:
            q = q.where(Run.problem == problem)
        runs = list(s.scalars(q))
        counts = dict(s.execute(select(Candidate.run_id, func.count()).group_by(Candidate.run_id)).all())
        evaluated = dict(s.execute(select(Candidate.run_id, func.count(func.distinct(Evaluation.candidate_id)))
                                   .join(Evaluation, Evaluation.candidate_id == Candidate.id)
                                   .group_by(Candidate.run_id)).all())
        tokens = {rid: (int(ti), int(to)) for rid, ti, to in s.execute(
            select(LLMCall.run_id, func.coalesce(func.sum(LLMCall.tokens_in), 0),
                   func.coalesce(func.sum(LLMCall.tokens_out), 0)).group_by(LLMCall.run_id))}
        out = []
        for run in runs:
            board = leaderboard(db, run_id=run.id, include_all=True)
            best = board[0] if board else None
            tin, tout = tokens.get(run.id, (0, 0))
            out.append(RunRow(
                run_id=run.id, problem=run.problem, size=run.size, device=run.device, proposer=run.proposer,
                model=run.model, language=run.language, seed=run.seed, candidates_per_round=run.candidates_per_round,
                status=run.status, rounds_done=run.rounds_done, rounds_planned=run.rounds_planned,
                candidates=counts.get(run.id, 0), evaluated=evaluated.get(run.id, 0),
                correct=len({r.candidate_id for r in board}),
                best_candidate_id=best.candidate_id if best else None,
                # the promoted best's (kgen.store.promotion), not the highest: a faster tie is not a better kernel
                best_speedup_eager=best.speedup_eager if best else None,
                best_speedup_compile=best.speedup_compile if best else None,
                tokens_in=tin, tokens_out=tout, started_at=run.created_at, finished_at=run.finished_at,
                process_alive=process_alive(run.settings) if run.status == "running" else None))
    costs = ledger.run_costs(db, [r.run_id for r in out], prices)
    for row in out:
        row.cost = costs.get(row.run_id)
    return out


RUN_COLUMNS = (
    Column("run", numeric=True, key=True), Column("problem", key=True), Column("settings", default=False),
    Column("device", default=False), Column("status"), Column("rounds", numeric=True),
    Column("candidates", numeric=True, default=False), Column("correct", numeric=True),
    Column("best id", numeric=True), Column("vs eager", numeric=True), Column("vs compile", numeric=True),
    Column("tokens in/out", default=False), Column("started"), *ledger.RUN_COST_COLUMNS,
)


def run_cells(r: RunRow) -> list[str]:
    settings = (f"{fmt.proposer(r.proposer, r.model)}, {r.size}, {r.candidates_per_round}/round, {r.language}, "
                f"seed {r.seed}")
    return [str(r.run_id), r.problem, settings, r.device or fmt.MISSING, r.status_text,
            f"{r.rounds_done}/{r.rounds_planned}", str(r.candidates), r.correct_text,
            fmt.MISSING if r.best_candidate_id is None else str(r.best_candidate_id),
            fmt.speedup(r.best_speedup_eager), fmt.speedup(r.best_speedup_compile),
            f"{fmt.si(r.tokens_in)} / {fmt.si(r.tokens_out)}", fmt.when(r.started_at), *ledger.run_cost_cells(r.cost)]


def print_runs(rows: list[RunRow], console, *, wide: bool = False, db: Optional[str] = None) -> None:
    """`kgen runs` as a table (see fmt.print_table; `wide` shows every column), and for each run whose
    process is gone, the command that resumes it."""
    fmt.print_table(console, RUN_COLUMNS, [run_cells(r) for r in rows], title="kgen runs", wide=wide)
    for r in rows:
        if r.process_gone:
            resume = fmt.command("search", "--resume", r.run_id, db=db)
            console.print(f"run {r.run_id}'s process is gone; resume it: {resume}", highlight=False, markup=False,
                          soft_wrap=True)


def render_detail(detail: CandidateDetail, console) -> None:
    """`kgen show`: the candidate's header and idea, its evaluations, its lineage, its source."""
    from rich.markup import escape
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.table import Table
    from rich.tree import Tree

    c = detail.candidate
    run = c.run_id if c.run_id is not None else "-"
    head = [f"[bold]candidate {c.id}[/bold]  {escape(c.problem)} · {c.language} · run {run}"
            f" · round {c.round if c.round is not None else '-'} · {escape(fmt.proposer(c.proposer, c.model))}"
            f" · {fmt.when(c.created_at)}"]
    if c.origin:
        head.append(f"origin: {escape(c.origin)}")
    head.append(f"idea: {escape(c.idea or '(none recorded)')}")
    console.print(Panel("\n".join(head), expand=False), highlight=False)

    # one column per evaluation, one row per field: readable on a narrow terminal too
    table = Table(title="evaluations")
    table.add_column("")
    for e in detail.evaluations:
        table.add_column(f"eval {e.id}", overflow="fold")
    fields = [
        ("device", lambda e: f"{e.device} ({e.size} size)"),
        ("outcome", lambda e: verdict_label(e.outcome, e.device)),
        ("runtime", lambda e: f"{fmt.ms(e.runtime_ms)} ms" if e.runtime_ms is not None else "not timed"),
        ("eager", lambda e: f"{fmt.ms(e.eager_ms)} ms ({fmt.speedup(e.speedup_eager)})"
         if e.eager_ms is not None else fmt.MISSING),
        ("torch.compile", lambda e: f"{fmt.ms(e.compile_ms)} ms ({fmt.speedup(e.speedup_compile)})"
         if e.compile_ms is not None else "-"),
        ("roofline", lambda e: fmt.pct(e.roofline_pct)),
        ("max abs err", lambda e: "-" if e.max_abs_err is None else f"{e.max_abs_err:.2e}"),
        ("tolerance", lambda e: f"rtol {fmt.tol(e.rtol)}, atol {fmt.tol(e.atol)}"),
        ("torch itself", lambda e: fmt.torch_itself(e.details)),
        ("torch ops", lambda e: ", ".join(e.torch_ops or []) or "-"),
        ("build", lambda e: fmt.build_notes(e.details)),
        ("versions", lambda e: ", ".join(f"{k} {v}" for k, v in (("torch", e.torch_version),
                                                                 ("triton", e.triton_version),
                                                                 ("CUDA", e.cuda_version)) if v) or "-"),
        ("when", lambda e: fmt.when(e.created_at)),
    ]
    for name, value in fields:
        table.add_row(name, *(escape(value(e)) for e in detail.evaluations))
    console.print(table if detail.evaluations else "not evaluated yet")
    for e in detail.evaluations:
        if e.message and e.outcome != "correct":
            console.print(f"[bold]eval {e.id} ({e.outcome}):[/bold]", highlight=False)
            console.print(e.message.strip(), highlight=False, markup=False)
    for line in profile_lines(detail.evaluations):
        console.print(line, highlight=False, markup=False)
    if detail.cost is not None:
        for n, line in enumerate(ledger.candidate_cost_lines(detail.cost)):
            console.print(("cost: " if n == 0 else "      ") + line, highlight=False, markup=False, soft_wrap=True)

    tree = Tree(f"lineage of {c.id}" + ("" if detail.lineage else ": a first proposal (no parents)"))
    nodes = {0: tree}
    for a in detail.lineage:
        if a.missing:
            label = f"{a.candidate_id}: not in this DB"
        else:
            label = (f"{a.candidate_id}: round {a.round if a.round is not None else '-'} · {a.language} · "
                     f"{a.proposer} · {a.outcome or 'not evaluated'}"
                     + (f" · {fmt.speedup(a.speedup_eager)} vs eager" if a.speedup_eager is not None else "")
                     + (" (listed above)" if a.seen else "")
                     + (f"\n   origin: {a.origin}" if a.origin and not a.seen else "")
                     + (f"\n   idea: {a.idea}" if a.idea and not a.seen else ""))
        nodes[a.depth] = nodes[a.depth - 1].add(escape(label), highlight=False)
    console.print(tree)
    if not console.is_terminal:  # piped or in a file: the source as stored, to copy or diff (no gutter, no wrap)
        console.file.write(f"source of candidate {c.id}:\n{c.source.rstrip()}\n")
        console.file.flush()
        return
    console.print(Syntax(c.source, "python", line_numbers=True, word_wrap=True))


def profile_lines(evaluations) -> list[str]:
    """`kgen show`'s kernel profile and GPU telemetry of each timed evaluation (kgen.judge.kernel_profile,
    kgen.judge.telemetry), one line each."""
    from kgen.judge import kernel_profile, ncu_profile, telemetry

    lines = []
    for e in evaluations:
        details = e.details if isinstance(e.details, dict) else {}
        text = kernel_profile.summary(details.get("kernel_profile"))
        if text:
            lines.append(f"eval {e.id} kernel profile (CUPTI): {text}")
        ncu = details.get("ncu") if isinstance(details.get("ncu"), dict) else None
        text = ncu_profile.summary(ncu)
        if text:
            took = f" [{ncu['s']:.1f} s]" if isinstance(ncu.get("s"), (int, float)) else ""
            lines.append(f"eval {e.id} {text}{took}")
        if "telemetry" in details:
            lines.append(f"eval {e.id} GPU during timing: {telemetry.summary(details.get('telemetry'))}")
        phases = details.get("phases") if isinstance(details.get("phases"), dict) else {}
        if phases.get("profile_s") is not None:
            lines.append(f"eval {e.id} profiling took {phases['profile_s']:.2f} s")
    return lines
