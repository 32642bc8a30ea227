"""The `replay` proposer: re-issues the proposals logged in another results DB, in order (by round,
then id), n per call, so a search can be reproduced without the LLM. Each keeps its source, idea,
model, language, prompt and response (not the original call's tokens and latency: a replay spends
none), with proposer 'replay' and origin 'replay of candidate #N from DB'. A parent is mapped to the
candidate in this search's history with the same source, where there is one.

A source already in the results DB (the history's tried hashes) is skipped, so a resumed replay
goes on where it stopped; when the log is used up, `propose` returns [].
"""

from __future__ import annotations

from typing import Optional

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from kgen.core.errors import KgenError
from kgen.core.records import NO_CODE, Proposal
from kgen.problems.problem import Problem
from kgen.store.db import Candidate, Run, latest_evaluation, mask_url, open_db
from kgen.store.history import History
from kgen.store.queries import normalized_source_hash


class ReplayProposer:
    name = "replay"

    def __init__(self, db: str, *, run_id: Optional[int] = None, problem: Problem):
        source_db = open_db(db, read_only=True)
        shown = mask_url(db)  # as it appears in messages and in each replayed candidate's origin
        try:
            with source_db.reader() as s:
                if run_id is not None:
                    run = s.get(Run, run_id)
                    if run is None:
                        raise KgenError(f"{shown} has no run {run_id}")
                    if run.problem != problem.name:
                        raise KgenError(f"run {run_id} in {shown} searched {run.problem}, not {problem.name}")
                q = (select(Candidate).where(Candidate.problem == problem.name)
                     .options(selectinload(Candidate.llm_call), selectinload(Candidate.evaluations))
                     .order_by(Candidate.round.is_(None).desc(), Candidate.round, Candidate.id))
                if run_id is not None:
                    q = q.where(Candidate.run_id == run_id)
                logged = list(s.scalars(q))
                self._hash_by_id = {c.id: c.source_hash for c in s.scalars(select(Candidate).where(
                    Candidate.problem == problem.name))}
                # (the proposal, its parents' ids in the replayed DB)
                self._queue = [(self._proposal(c, shown), list(c.parent_ids or [])) for c in logged]
        finally:
            source_db.close()
        if not self._queue:
            where = f"run {run_id} of {shown}" if run_id is not None else shown
            raise KgenError(f"{where} holds no proposals for problem {problem.name}; nothing to replay")
        models = {p.model for p, _ in self._queue if p.model}
        self.model: Optional[str] = models.pop() if len(models) == 1 else None

    @staticmethod
    def _proposal(c: Candidate, db: str) -> Proposal:
        call = c.llm_call
        error = None
        if not c.source:
            ev = latest_evaluation(c)
            error = (call.error if call and call.error else None) or (ev.message if ev else None) or NO_CODE
        return Proposal(source=c.source or None, proposer="replay", language=c.language, model=c.model,
                        idea=c.idea, origin=f"replay of candidate #{c.id} from {db}",
                        prompt=call.prompt if call else None, response=call.response if call else None,
                        template=call.template if call else None, base_url=call.base_url if call else None,
                        error=error)

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def propose(self, problem: Problem, history: History, n: int, round_index: int) -> list[Proposal]:
        known = {normalized_source_hash(c.source): c.id for c in history.best + history.failures if c.source}
        out: list[Proposal] = []
        while self._queue and len(out) < n:
            proposal, originals = self._queue.pop(0)
            if proposal.source and normalized_source_hash(proposal.source) in history.tried_hashes:
                continue
            proposal.parent_ids = [known[self._hash_by_id[p]] for p in originals
                                   if self._hash_by_id.get(p) in known]
            out.append(proposal)
        return out
