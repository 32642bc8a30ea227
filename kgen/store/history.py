"""The search history a proposer sees, read from the results DB: the best correct candidates (a
diverse few, not only the top one), recent failures with trimmed messages, the ideas that worked,
every source already tried, and what the problem's times are measured against."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from sqlalchemy import select

from kgen.judge import kernel_profile, ncu_profile
from kgen.judge.evaluator_facts import EvaluatorFacts
from kgen.problems.problem import Problem
from kgen.problems.roofline import Roofline, compute_roofline
from kgen.store.db import Baseline, Candidate, Database, Evaluation
from kgen.store.promotion import candidate_spread, promotion_order, within_noise
from kgen.store.queries import (
    ScoredCandidate,
    correct_candidates,
    normalized_source_hash,
    out_of_resource_sources,
    recent_failures,
    run_evaluator,
    run_time_limit,
    tried_hashes,
)

MESSAGE_HEAD_LINES = 20
MESSAGE_TAIL_LINES = 12
MESSAGE_MAX_CHARS = 2500
MAX_PER_BUCKET = 2  # parents from any one bucket (language, kernel) while other buckets have some


@dataclass
class History:
    """What a proposer knows before a round. Times are None where nothing was timed (no GPU)."""

    best: list[ScoredCandidate] = field(default_factory=list)  # the promoted best, then fastest first; diverse
    ties: dict[int, int] = field(default_factory=dict)  # id in best -> best[0]'s id, where within timing noise
    failures: list[ScoredCandidate] = field(default_factory=list)  # newest first, messages trimmed, all with source
    ideas_that_worked: list[str] = field(default_factory=list)
    tried_hashes: set[str] = field(default_factory=set)  # queries.normalized_source_hash of every proposed source
    parent_ids: set[int] = field(default_factory=set)  # candidates that already have a child (a failure: repaired)
    out_of_resources: list[str] = field(default_factory=list)  # sources that failed for lack of shared memory etc.
    correct_count: int = 0
    baseline_eager_ms: Optional[float] = None
    baseline_compile_ms: Optional[float] = None
    baseline_settings: dict = field(default_factory=dict)  # torch's flags the baselines ran with (TF32 etc.)
    floor_ms: Optional[float] = None
    roofline: Optional[Roofline] = None
    # the machine that evaluates the candidates, as stored with the run; None: none named (a test's history,
    # a template check), and the prompt states a CPU run here (kgen.proposers.prompts.evaluating_machine)
    evaluator: Optional[EvaluatorFacts] = None
    timeout_s: Optional[float] = None  # the run's per-candidate time limit (`--timeout`); None: the judge's default
    profiles: dict[int, str] = field(default_factory=dict)  # candidate id -> kernel_profile.summary
    profiles_note: str = ""  # what the profiles are, or why there are none, said once

    def is_tried(self, source: str) -> bool:
        return normalized_source_hash(source) in self.tried_hashes


def trim_message(message: Optional[str], head: int = MESSAGE_HEAD_LINES, tail: int = MESSAGE_TAIL_LINES,
                 max_chars: int = MESSAGE_MAX_CHARS) -> str:
    """The start (where compilers put the first error) and the end (where Python puts the exception)
    of an error message, within a prompt-sized budget."""
    lines = (message or "").strip().splitlines()
    if len(lines) > head + tail:
        lines = lines[:head] + [f"... ({len(lines) - head - tail} lines cut) ..."] + lines[-tail:]
    text = "\n".join(lines)
    if len(text) > max_chars:
        half = max_chars // 2
        text = text[:half] + "\n... (cut) ...\n" + text[-half:]
    return text


def kernel_shape(source: str) -> str:
    """A key equal for two sources that differ only in their numbers: the same kernel, other tunings."""
    return normalized_source_hash(re.sub(r"\b\d+\b", "0", source))


def parent_bucket(c: ScoredCandidate) -> tuple[str, str]:
    """The idea a candidate belongs to, for spreading parents: its language and its kernel numbers
    aside (kernel_shape), so every retuning of one kernel shares a bucket."""
    return c.language, kernel_shape(c.source)


def pick_diverse(ranked: list[ScoredCandidate], k: int) -> list[ScoredCandidate]:
    """Up to k of `ranked` (best first) as the next round's parents. Candidates are bucketed by
    parent_bucket; the buckets take turns in the order of their best candidate, each giving its
    next best, until every bucket has given MAX_PER_BUCKET or run out. Only then are the slots left
    filled from the best of the rest, whatever their bucket. Returned best first."""
    buckets: dict[tuple[str, str], list[ScoredCandidate]] = {}
    for c in ranked:
        buckets.setdefault(parent_bucket(c), []).append(c)
    picked: list[ScoredCandidate] = []
    for depth in range(MAX_PER_BUCKET):
        picked += [members[depth] for members in buckets.values() if len(members) > depth]
    picked = picked[:k]
    taken = {c.id for c in picked}
    picked += [c for c in ranked if c.id not in taken][:k - len(picked)]
    order = {c.id: i for i, c in enumerate(ranked)}
    return sorted(picked, key=lambda c: order[c.id])


def ties_with_best(best: list[ScoredCandidate]) -> dict[int, int]:
    """Candidate id -> the id of best[0], for each other candidate within timing noise of it."""
    if not best:
        return {}
    lead = candidate_spread(best[0])
    return {c.id: best[0].id for c in best[1:] if within_noise(candidate_spread(c), lead)}


def _parent_ids(db: Database, problem: Problem) -> set[int]:
    with db.reader() as s:
        rows = s.scalars(select(Candidate.parent_ids).where(Candidate.problem_hash == problem.source_hash))
        return {int(p) for parents in rows for p in (parents or [])}


def _baseline(db: Database, problem: Problem, device: Optional[str]) -> Optional[Baseline]:
    with db.reader() as s:
        q = select(Baseline).where(Baseline.problem_hash == problem.source_hash, Baseline.size == problem.size)
        if device is not None:
            q = q.where(Baseline.device == device)
        return s.scalars(q.order_by(Baseline.id.desc())).first()


def profiles_note(gpu: bool) -> str:
    """The one line that says what the candidates' profiles are, or that there are none here."""
    if not gpu:
        return ("Kernel profiles are off on this machine (no GPU): candidates are checked for correctness only, "
                "so there are no timings, occupancy or bandwidth figures to learn from.")
    return (f"Profiles: {kernel_profile.SOURCE}; achieved bandwidth and FLOP rate assume the minimum traffic, so "
            f"a kernel that re-reads its inputs moves more than shown; {kernel_profile.STALLS_NOTE}.")


def profile_summaries(db: Database, candidate_ids: list[int]) -> dict[int, str]:
    """Each candidate's profile summary (kgen.judge.kernel_profile.summary, and the Nsight Compute line of
    kgen.judge.ncu_profile.summary) from its latest evaluation that has one."""
    if not candidate_ids:
        return {}
    out: dict[int, str] = {}
    with db.reader() as s:
        rows = s.execute(select(Evaluation.candidate_id, Evaluation.details)
                         .where(Evaluation.candidate_id.in_(list(candidate_ids))).order_by(Evaluation.id))
        for candidate_id, details in rows:
            if not isinstance(details, dict):
                continue
            ncu = details.get("ncu") if isinstance(details.get("ncu"), dict) else {}
            parts = [kernel_profile.summary(details.get("kernel_profile")),
                     None if ncu.get("error") else ncu_profile.summary(ncu)]  # a failed profile teaches nothing
            text = ". ".join(p for p in parts if p)
            if text:
                out[candidate_id] = text
    return out


def build_history(db: Database, problem: Problem, run_id: Optional[int] = None,
                  evaluator: Optional[EvaluatorFacts] = None, *,
                  max_best: int = 4, max_failures: int = 4, max_ideas: int = 10) -> History:
    """The history of `problem` (this run's when `run_id` is given; every source ever tried for the
    problem counts as tried either way). `evaluator`: the machine that evaluates the candidates, by
    default the one stored with run `run_id`; a GPU brings its baselines, measured ceilings, the roofline
    floor and the parents' profiles."""
    if evaluator is None and run_id is not None:
        evaluator = run_evaluator(db, run_id)
    found = sorted(correct_candidates(db, problem_hash=problem.source_hash, run_id=run_id), key=lambda c: c.id)
    ranked = promotion_order(found, candidate_spread)
    failures = [f for f in recent_failures(db, problem_hash=problem.source_hash, run_id=run_id,
                                           limit=max_failures * 3) if f.source][:max_failures]
    for f in failures:
        f.message = trim_message(f.message)
    ideas: list[str] = []
    for c in ranked:
        worked = c.speedup_eager is None or c.speedup_eager > 1.0
        if c.idea and worked and c.idea not in ideas:
            ideas.append(c.idea)
    roofline = compute_roofline(problem)
    ceilings = evaluator.ceilings if evaluator is not None else None
    base = _baseline(db, problem, evaluator.device if evaluator is not None else None)
    best = pick_diverse(ranked, max_best)
    # the profiles of the parents the prompt shows
    profiles = profile_summaries(db, [c.id for c in best]) if ceilings is not None else {}
    return History(best=best, ties=ties_with_best(best), failures=failures, ideas_that_worked=ideas[:max_ideas],
                   tried_hashes=tried_hashes(db, problem_hash=problem.source_hash), correct_count=len(ranked),
                   parent_ids=_parent_ids(db, problem),
                   out_of_resources=out_of_resource_sources(db, problem_hash=problem.source_hash),
                   baseline_eager_ms=base.eager_ms if base else None,
                   baseline_compile_ms=base.compile_ms if base else None,
                   baseline_settings=dict(base.settings or {}) if base else {},
                   floor_ms=roofline.floor_ms(ceilings), roofline=roofline, evaluator=evaluator,
                   timeout_s=run_time_limit(db, run_id) if run_id is not None else None,
                   profiles=profiles, profiles_note=profiles_note(ceilings is not None))
