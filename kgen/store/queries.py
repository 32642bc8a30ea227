"""Reads and writes of the results DB that more than one stage needs: each write is its own
transaction, committed at once, so a killed search loses only what was still in flight."""

from __future__ import annotations

import hashlib
import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Any, Optional

from sqlalchemy import func, select

from kgen import __version__
from kgen.core.records import FAILURE_OUTCOMES, NO_CODE, EvalResult, Proposal
from kgen.judge.evaluator_facts import EvaluatorFacts
from kgen.store.db import Candidate, Database, Evaluation, LLMCall, Run, utcnow
from kgen.store.promotion import samples_of


def normalized_source_hash(source: str) -> str:
    """Hash of a source with Python comments, blank lines and trailing spaces dropped: the same kernel
    re-proposed with other comments is the same candidate. Comments are found with `tokenize`, so a
    `#define` inside a CUDA source string is code, not a comment."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.COMMENT]
        text = tokenize.untokenize(tokens)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        text = source  # not Python: hash it as written, less blank lines
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def create_run(db: Database, *, problem: str, problem_path: str, problem_hash: str, size: str, proposer: str,
               model: Optional[str], language: str, seed: int, rounds: int, candidates_per_round: int,
               settings: dict, device: str) -> int:
    with db.session() as s:
        run = Run(problem=problem, problem_path=problem_path, problem_hash=problem_hash, size=size,
                  proposer=proposer, model=model, language=language, seed=seed, rounds_planned=rounds,
                  candidates_per_round=candidates_per_round, settings=settings, device=device,
                  kgen_version=__version__, status="running")
        s.add(run)
        s.flush()
        return run.id


def set_run_status(db: Database, run_id: int, status: str, rounds_done: Optional[int] = None) -> None:
    with db.session() as s:
        run = s.get(Run, run_id)
        run.status = status
        if rounds_done is not None:
            run.rounds_done = rounds_done
        if status in ("finished", "interrupted", "failed"):
            run.finished_at = utcnow()


def set_run_startup(db: Database, run_id: int, startup: dict) -> None:
    """Record where a search's own seconds went (kgen.search.loop.Search.startup), in its settings."""
    with db.session() as s:
        run = s.get(Run, run_id)
        run.settings = dict(run.settings or {}, startup=startup)


def set_run_evaluator(db: Database, run_id: int, facts: EvaluatorFacts) -> None:
    """Record the machine that evaluates the run's candidates (kgen.judge.evaluator_facts), in its settings:
    the run's prompts state it, whoever renders them. A resumed run records the machine of its new start."""
    with db.session() as s:
        run = s.get(Run, run_id)
        run.settings = dict(run.settings or {}, evaluator=facts.to_json())


def _run_setting(db: Database, run_id: int, key: str) -> Any:
    """One key of run `run_id`'s stored settings, or None (no such run, or a run from before kgen stored it)."""
    with db.reader() as s:
        run = s.get(Run, run_id)
        return (run.settings or {}).get(key) if run is not None else None


def run_evaluator(db: Database, run_id: int) -> Optional[EvaluatorFacts]:
    """The evaluating machine stored with run `run_id`, or None (a run from before kgen stored it)."""
    data = _run_setting(db, run_id, "evaluator")
    return EvaluatorFacts.from_json(data) if data is not None else None


def run_time_limit(db: Database, run_id: int) -> Optional[float]:
    """The judge's per-candidate time limit run `run_id` evaluates with (`--timeout`), or None."""
    value = _run_setting(db, run_id, "timeout_s")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def set_run_process(db: Database, run_id: int) -> None:
    """Record which process runs the search (host and pid, in its settings), so readers can tell a
    run whose process was SIGKILLed (its status stays `running`) from one still going."""
    import os
    import socket

    with db.session() as s:
        run = s.get(Run, run_id)
        run.settings = dict(run.settings or {}, process={"host": socket.gethostname(), "pid": os.getpid()})


def process_alive(settings: Optional[dict]) -> Optional[bool]:
    """Whether the process recorded by set_run_process still runs kgen: None where this machine
    cannot tell (no record, or another host)."""
    import socket

    proc = (settings or {}).get("process") or {}
    if proc.get("host") != socket.gethostname() or not isinstance(proc.get("pid"), int):
        return None
    try:
        with open(f"/proc/{proc['pid']}/cmdline", "rb") as f:
            return b"kgen" in f.read()  # the pid may have been reused by something else
    except FileNotFoundError:
        return False
    except OSError:
        return None


def round_number(round_index: Optional[int]) -> Optional[int]:
    """The round as the DB stores it and kgen shows it, counted from 1, for the search's (and proposers')
    0-based index of it."""
    return None if round_index is None else round_index + 1


def add_proposal(db: Database, proposal: Proposal, *, run_id: Optional[int], round_index: Optional[int],
                 problem: str, problem_hash: Optional[str]) -> int:
    """Store a proposal (and its LLM call, if it came from one) before it is evaluated; returns the
    candidate id. A proposal without code gets its `no_code` evaluation at once. `round_index` counts
    from 0; the DB stores round_number(round_index)."""
    with db.session() as s:
        call = None
        if proposal.prompt is not None or proposal.response is not None:
            call = LLMCall(run_id=run_id, round=round_number(round_index), proposer=proposal.proposer,
                           model=proposal.model, base_url=proposal.base_url,
                           template=proposal.template, prompt=proposal.prompt, response=proposal.response,
                           outcome="ok" if proposal.source else NO_CODE, error=proposal.error,
                           tokens_in=proposal.tokens_in, tokens_out=proposal.tokens_out,
                           latency_s=proposal.latency_s, attempts=proposal.attempts)
            s.add(call)
            s.flush()
        source = proposal.source or ""
        cand = Candidate(run_id=run_id, round=round_number(round_index), problem=problem, problem_hash=problem_hash,
                         source=source, source_hash=normalized_source_hash(source) if source else "",
                         language=proposal.language, parent_ids=list(proposal.parent_ids),
                         proposer=proposal.proposer, model=proposal.model, idea=proposal.idea,
                         origin=proposal.origin, llm_call_id=call.id if call else None)
        s.add(cand)
        s.flush()
        if not proposal.source:
            s.add(Evaluation(candidate_id=cand.id, outcome=NO_CODE, device="-", size="-",
                             message=proposal.error or "the response held no code block defining ModelNew"))
        return cand.id


def _sandbox_kind(details: Optional[dict]) -> Optional[str]:
    """The kind of sandbox the evaluation reports it ran the candidate in (details["sandbox"]["kind"])."""
    sandbox = (details or {}).get("sandbox")
    kind = sandbox.get("kind") if isinstance(sandbox, dict) else None
    return str(kind) if kind is not None else None


def add_evaluation(db: Database, candidate_id: int, result: EvalResult) -> int:
    with db.session() as s:
        ev = Evaluation(candidate_id=candidate_id, outcome=result.outcome, message=result.message,
                        language=result.language, device=result.device, size=result.size,
                        max_abs_err=result.max_abs_err, max_rel_err=result.max_rel_err,
                        norm_rel_err=result.norm_rel_err, atol=result.atol, rtol=result.rtol,
                        runtime_ms=result.runtime_ms, eager_ms=result.eager_ms, compile_ms=result.compile_ms,
                        speedup_eager=result.speedup_eager, speedup_compile=result.speedup_compile,
                        roofline_pct=result.roofline_pct, torch_ops=list(result.torch_ops),
                        compile_s=result.compile_s, eval_s=result.eval_s, torch_version=result.torch_version,
                        triton_version=result.triton_version, cuda_version=result.cuda_version,
                        details=result.details, sandbox=_sandbox_kind(result.details))
        s.add(ev)
        s.flush()
        return ev.id


def set_baselines(db: Database, evaluation_ids: list[int], eager_ms: Optional[float],
                  compile_ms: Optional[float]) -> None:
    """Fill in the baselines, and the speedups of the correct ones, of evaluations stored before the
    baselines were timed (a search's second GPU starts on candidates while its first times them)."""
    with db.session() as s:
        for ev in s.scalars(select(Evaluation).where(Evaluation.id.in_(list(evaluation_ids)))):
            result = EvalResult(outcome=ev.outcome, runtime_ms=ev.runtime_ms)
            result.set_baselines(eager_ms, compile_ms)
            ev.eager_ms, ev.compile_ms = result.eager_ms, result.compile_ms
            ev.speedup_eager, ev.speedup_compile = result.speedup_eager, result.speedup_compile


@dataclass
class ScoredCandidate:
    """A candidate with its latest evaluation, as history and leaderboards see it."""

    id: int
    run_id: Optional[int]
    round: Optional[int]
    source: str
    language: str
    idea: Optional[str]
    proposer: str
    parent_ids: list[int]
    outcome: str
    message: Optional[str]
    runtime_ms: Optional[float]
    speedup_eager: Optional[float]
    speedup_compile: Optional[float]
    roofline_pct: Optional[float]
    device: str
    torch_ops: list[str]
    samples_ms: list[float] = field(default_factory=list)  # the timed runs behind runtime_ms (kgen.store.promotion)


def _latest_evaluations(problem_hash: Optional[str], run_id: Optional[int], problem: Optional[str] = None):
    latest = select(func.max(Evaluation.id)).group_by(Evaluation.candidate_id).scalar_subquery()
    q = select(Candidate, Evaluation).join(Evaluation, Evaluation.candidate_id == Candidate.id).where(
        Evaluation.id.in_(latest))
    if run_id is not None:
        q = q.where(Candidate.run_id == run_id)
    if problem_hash is not None:
        q = q.where(Candidate.problem_hash == problem_hash)
    if problem is not None:
        q = q.where(Candidate.problem == problem)
    return q


def _scored(c: Candidate, e: Evaluation) -> ScoredCandidate:
    return ScoredCandidate(id=c.id, run_id=c.run_id, round=c.round, source=c.source, language=c.language,
                           idea=c.idea, proposer=c.proposer, parent_ids=list(c.parent_ids or []), outcome=e.outcome,
                           message=e.message, runtime_ms=e.runtime_ms, speedup_eager=e.speedup_eager,
                           speedup_compile=e.speedup_compile, roofline_pct=e.roofline_pct, device=e.device,
                           torch_ops=list(e.torch_ops or []), samples_ms=samples_of(e.details))


def correct_candidates(db: Database, *, problem_hash: Optional[str] = None, run_id: Optional[int] = None,
                       problem: Optional[str] = None) -> list[ScoredCandidate]:
    """Correct candidates, fastest first (untimed ones, on a machine without a GPU, after timed ones,
    oldest first)."""
    with db.reader() as s:
        rows = s.execute(_latest_evaluations(problem_hash, run_id, problem).where(Evaluation.outcome == "correct"))
        scored = [_scored(c, e) for c, e in rows]
    return sorted(scored, key=lambda c: (c.runtime_ms is None, c.runtime_ms or 0.0, c.id))


def recent_failures(db: Database, *, problem_hash: Optional[str] = None, run_id: Optional[int] = None,
                    limit: int = 5) -> list[ScoredCandidate]:
    with db.reader() as s:
        rows = s.execute(_latest_evaluations(problem_hash, run_id).where(Evaluation.outcome.in_(FAILURE_OUTCOMES))
                         .order_by(Evaluation.id.desc()).limit(limit))
        return [_scored(c, e) for c, e in rows]


# how a launch that needs more on-chip memory or registers than the GPU has fails (Triton; the CUDA runtime)
OUT_OF_RESOURCES = re.compile(r"out of resource|too many resources requested|uses too much shared data|"
                              r"exceeds? (the )?(maximum|max)\w* (dynamic )?shared memory", re.I)


def out_of_resource_sources(db: Database, *, problem_hash: Optional[str] = None, limit: int = 200) -> list[str]:
    """Sources of this problem's newest candidates that failed for lack of on-chip resources (any run):
    the offline proposer does not retune into a configuration at least as large as one of them."""
    with db.reader() as s:
        rows = s.execute(_latest_evaluations(problem_hash, None)
                         .where(Evaluation.outcome.in_(("runtime_error", "compile_error")))
                         .order_by(Evaluation.id.desc()).limit(limit * 5))
        return [c.source for c, e in rows if c.source and OUT_OF_RESOURCES.search(e.message or "")][:limit]


def tried_hashes(db: Database, *, problem_hash: Optional[str] = None) -> set[str]:
    """Normalized source hashes already proposed for this problem (any run)."""
    with db.reader() as s:
        q = select(Candidate.source_hash)
        if problem_hash is not None:
            q = q.where(Candidate.problem_hash == problem_hash)
        return {h for h in s.scalars(q) if h}


def evaluated_candidate_ids(db: Database, run_id: int) -> set[int]:
    with db.reader() as s:
        q = select(Evaluation.candidate_id).join(Candidate).where(Candidate.run_id == run_id)
        return set(s.scalars(q))


def get_run(db: Database, run_id: int) -> Optional[Run]:
    """The run's row as it is now, detached from any session; None if there is no such run."""
    with db.reader() as s:
        run = s.get(Run, run_id)
        if run is not None:
            s.expunge(run)
        return run


def round_candidates(db: Database, run_id: int, round_index: int) -> list[tuple[int, str]]:
    """(id, source) of the candidates a run stored for a round (0-based index), in the order stored."""
    with db.reader() as s:
        rows = s.execute(select(Candidate.id, Candidate.source).where(
            Candidate.run_id == run_id, Candidate.round == round_number(round_index)).order_by(Candidate.id))
        return [(cid, source) for cid, source in rows]


def candidate_count(db: Database, run_id: int) -> int:
    with db.reader() as s:
        return s.scalar(select(func.count()).select_from(Candidate).where(Candidate.run_id == run_id)) or 0


def run_tokens(db: Database, run_id: int) -> tuple[int, int, int]:
    """The LLM tokens a run has spent: (in, out, replies whose server reported no usage, which the sums
    leave out)."""
    unreported = (LLMCall.response.is_not(None)
                  & (LLMCall.tokens_in.is_(None) | LLMCall.tokens_out.is_(None)))
    with db.reader() as s:
        tokens_in, tokens_out, unknown = s.execute(select(func.coalesce(func.sum(LLMCall.tokens_in), 0),
                                                          func.coalesce(func.sum(LLMCall.tokens_out), 0),
                                                          func.count().filter(unreported))
                                                   .where(LLMCall.run_id == run_id)).one()
    return int(tokens_in), int(tokens_out), int(unknown)


def ncu_targets(db: Database, run_id: int, round_index: int, top: int,
                first: tuple[int, ...] = ()) -> list[tuple[int, str]]:
    """What to profile with Nsight Compute after a round: the candidates in `first` (those the next
    prompt shows), then the round's `top` fastest correct candidates, each followed by its first
    parent, leaving out any whose latest evaluation is not correct or already has a profile.
    (candidate id, source), in that order."""
    with db.reader() as s:
        rows = s.execute(_latest_evaluations(None, run_id).where(
            Evaluation.outcome == "correct", Candidate.round == round_number(round_index),
            Evaluation.runtime_ms.is_not(None)))
        best = sorted(rows, key=lambda ce: (ce[1].runtime_ms, ce[0].id))[:top]
        picked: list[tuple[int, str]] = []
        seen: set[int] = set()
        for candidate_id in [*first, *(i for c, _ in best for i in [c.id, *list(c.parent_ids or [])[:1]])]:
            if candidate_id in seen:
                continue
            seen.add(candidate_id)
            cand = s.get(Candidate, candidate_id)
            latest = cand.evaluations[-1] if cand is not None and cand.evaluations else None
            if latest is None or latest.outcome != "correct" or (latest.details or {}).get("ncu"):
                continue
            picked.append((cand.id, cand.source))
    return picked


def set_ncu_profile(db: Database, candidate_id: int, profile: dict) -> bool:
    """Attach a Nsight Compute profile to the candidate's latest evaluation (details["ncu"])."""
    with db.session() as s:
        ev = s.execute(select(Evaluation).where(Evaluation.candidate_id == candidate_id)
                       .order_by(Evaluation.id.desc()).limit(1)).scalar_one_or_none()
        if ev is None:
            return False
        ev.details = dict(ev.details or {}, ncu=profile)  # a new dict: the JSON column sees the change
    return True

