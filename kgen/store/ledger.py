"""The cost ledger: what each candidate and each run spent, read back from the results DB (read-only).

Per candidate (CandidateCost), summed over every evaluation of it (each one was spent):
- LLM tokens in and out, the model and the proposal's latency, from the LLM call that produced it. A call
  that produced several candidates is split evenly among them, tokens and seconds, so that a run's
  candidates add up to its calls.
- compile seconds: the CPU compile stage's (Evaluation.compile_s: CUDA builds, static checks) plus the
  judge's compile step on the evaluating machine (its `compile_s` phase: Triton's JIT, loading the builds).
- GPU seconds, for verification and timing: on a GPU, every phase of the judge (kgen.judge.judge `phase()`)
  but compiling and profiling: reference_s (the reference's outputs and profile), calibration_s, import_s,
  ablation_s, verify_s and timing_s, all of them work on the GPU the evaluation holds. An evaluation that
  recorded no phases counts its eval_s. On the CPU: 0, nothing there holds a GPU.
- profiling seconds: the `profile_s` phase, where the profiler ran (0 otherwise).

Per run (RunCost): the tokens and seconds of all its LLM calls, the sums of its candidates' costs, the
cost per correct candidate, and the money spent on tokens when prices are known.

Tokens a server did not report (a reply without `usage`) are unknown, never 0: such a call's
candidates have tokens and dollars of None, and a run sums the calls that reported, counting the others
in `calls_without_tokens` (all of them: its tokens and dollars are None). Money counts LLM
tokens only: GPU time is reported in seconds (and GPU-hours on the leaderboard), never priced.

Prices are USD per million tokens, in (prompt) and out (completion), both or neither: `--price-in` and
`--price-out` of `kgen runs` and `kgen leaderboard` first, then the ones `kgen search --price-in
--price-out` stored in the run's settings, then KGEN_PRICE_IN and KGEN_PRICE_OUT.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any, Optional

from sqlalchemy import func, select

from kgen.core import fmt
from kgen.core.errors import KgenError
from kgen.core.fmt import Column
from kgen.store.db import Candidate, Database, Evaluation, LLMCall, Run

PRICE_ENV = ("KGEN_PRICE_IN", "KGEN_PRICE_OUT")
# The judge's phases that are not GPU work for verification and timing (see the module docstring).
COMPILE_PHASE, PROFILE_PHASE = "compile_s", "profile_s"
SORTS = ("runtime", "per-dollar", "per-gpu-hour")


# -- prices ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prices:
    """USD per million LLM tokens, and where they came from (flags, run, environment)."""

    in_usd_per_m: float
    out_usd_per_m: float
    source: str = "flags"

    def usd(self, tokens_in: float, tokens_out: float) -> float:
        return (tokens_in * self.in_usd_per_m + tokens_out * self.out_usd_per_m) / 1e6


def check_price(value: Any, name: str) -> float:
    """A price as a float, or a one-line KgenError: it must be a finite number, 0 or more."""
    try:
        price = float(value)
    except (TypeError, ValueError):
        raise KgenError(f"{name} must be a number of USD per million tokens (got '{value}')") from None
    if not math.isfinite(price) or price < 0:
        raise KgenError(f"{name} must be a non-negative number of USD per million tokens (got '{value}')")
    return price


def _pair(price_in: Any, price_out: Any, names: tuple[str, str], source: str) -> Optional[Prices]:
    if price_in is None and price_out is None:
        return None
    if price_in is None or price_out is None:
        given, missing = (names[0], names[1]) if price_in is not None else (names[1], names[0])
        raise KgenError(f"{given} needs {missing} too (prices of tokens in and out, USD per million)")
    return Prices(check_price(price_in, names[0]), check_price(price_out, names[1]), source)


def flag_prices(price_in: Optional[float], price_out: Optional[float]) -> Optional[Prices]:
    """The prices given on the command line, or None; one without the other is a KgenError."""
    return _pair(price_in, price_out, ("--price-in", "--price-out"), "flags")


def env_prices() -> Optional[Prices]:
    """KGEN_PRICE_IN and KGEN_PRICE_OUT, or None where neither is set (an empty value is unset)."""
    values = [os.environ.get(name) or None for name in PRICE_ENV]
    return _pair(values[0], values[1], PRICE_ENV, "environment")


def stored_prices(settings: Optional[dict]) -> Optional[Prices]:
    """The prices `kgen search --price-in --price-out` stored in a run's settings, or None."""
    settings = settings or {}
    return _pair(settings.get("price_in"), settings.get("price_out"), ("price_in", "price_out"), "run")


def run_prices(settings: Optional[dict], override: Optional[Prices] = None) -> Optional[Prices]:
    """A run's prices: the override (flags), else those it stored, else the environment's."""
    return override or stored_prices(settings) or env_prices()


# -- the ledger ------------------------------------------------------------------------------------

@dataclass
class CandidateCost:
    candidate_id: int
    run_id: Optional[int]
    model: Optional[str]
    tokens_in: Optional[float]  # its share of its LLM call's (see calls_shared_by); None: not reported
    tokens_out: Optional[float]
    llm_s: float  # its share of the call's latency
    compile_s: float
    gpu_s: float
    profile_s: float
    correct: bool  # its latest evaluation on some device is correct
    calls_shared_by: int = 1  # candidates its LLM call produced (1: a call of its own; 0: no LLM call)
    usd: Optional[float] = None  # its tokens at the run's prices, when known

    @property
    def has_llm_call(self) -> bool:
        return self.calls_shared_by > 0


@dataclass
class RunCost:
    run_id: int
    model: Optional[str]
    llm_calls: int
    tokens_in: Optional[int]  # None: no call of the run reported its tokens
    tokens_out: Optional[int]
    llm_s: float
    compile_s: float
    gpu_s: float
    profile_s: float
    candidates: int
    correct: int
    price_in: Optional[float] = None  # USD per million tokens, when known
    price_out: Optional[float] = None
    price_source: Optional[str] = None  # flags | run | environment
    usd: Optional[float] = None
    calls_without_tokens: int = 0  # calls whose server reported no usage: the sums leave them out

    @property
    def tokens(self) -> Optional[int]:
        return None if self.tokens_in is None or self.tokens_out is None else self.tokens_in + self.tokens_out

    @property
    def tokens_per_correct(self) -> Optional[float]:
        return self.tokens / self.correct if self.correct and self.tokens is not None else None

    @property
    def gpu_s_per_correct(self) -> Optional[float]:
        return self.gpu_s / self.correct if self.correct else None

    @property
    def usd_per_correct(self) -> Optional[float]:
        return self.usd / self.correct if self.correct and self.usd is not None else None

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return dict(asdict(self), tokens_per_correct=self.tokens_per_correct,
                    gpu_s_per_correct=self.gpu_s_per_correct, usd_per_correct=self.usd_per_correct)


def evaluation_seconds(device: str, compile_s: Optional[float], eval_s: Optional[float],
                       details: Optional[dict]) -> tuple[float, float, float]:
    """(compile, GPU, profiling) seconds of one evaluation; see the module docstring for which is which."""
    phases = (details or {}).get("phases") if isinstance(details, dict) else None
    phases = phases if isinstance(phases, dict) else {}
    seconds = {k: float(v) for k, v in phases.items() if isinstance(v, (int, float))}
    compiling = (compile_s or 0.0) + seconds.get(COMPILE_PHASE, 0.0)
    profiling = seconds.get(PROFILE_PHASE, 0.0)
    if device in ("cpu", "-"):
        return compiling, 0.0, profiling
    on_gpu = [v for k, v in seconds.items() if k not in (COMPILE_PHASE, PROFILE_PHASE)]
    return compiling, sum(on_gpu) if on_gpu else (eval_s or 0.0), profiling


def candidate_costs(db: Database, *, run_ids: Optional[list[int]] = None,
                    candidate_ids: Optional[list[int]] = None) -> dict[int, CandidateCost]:
    """The cost of each candidate of `run_ids` (or each of `candidate_ids`), by candidate id."""
    where = Candidate.run_id.in_(run_ids) if run_ids is not None else Candidate.id.in_(candidate_ids or [])
    latest = (select(func.max(Evaluation.id)).where(Evaluation.device != "-")
              .group_by(Evaluation.candidate_id, Evaluation.device).scalar_subquery())
    with db.reader() as s:
        cands = list(s.execute(select(Candidate.id, Candidate.run_id, Candidate.model, Candidate.llm_call_id)
                               .where(where)))
        call_ids = {c.llm_call_id for c in cands if c.llm_call_id is not None}
        calls = {c.id: c for c in s.execute(select(LLMCall.id, LLMCall.model, LLMCall.tokens_in, LLMCall.tokens_out,
                                                   LLMCall.latency_s).where(LLMCall.id.in_(call_ids)))}
        # every candidate a call produced, also those outside the selection: a share is of the whole call
        shared = dict(s.execute(select(Candidate.llm_call_id, func.count()).where(Candidate.llm_call_id.in_(call_ids))
                                .group_by(Candidate.llm_call_id)).all())
        evaluations = list(s.execute(
            select(Evaluation.id, Evaluation.candidate_id, Evaluation.device, Evaluation.outcome, Evaluation.compile_s,
                   Evaluation.eval_s, Evaluation.details, Evaluation.id.in_(latest).label("latest"))
            .join(Candidate, Candidate.id == Evaluation.candidate_id).where(where)))
    out: dict[int, CandidateCost] = {}
    for c in cands:
        call = calls.get(c.llm_call_id)
        n = max(shared.get(c.llm_call_id, 1), 1) if call is not None else 0
        out[c.id] = CandidateCost(
            candidate_id=c.id, run_id=c.run_id, model=(call.model if call is not None else None) or c.model,
            tokens_in=_share(call.tokens_in, n) if n else 0.0, tokens_out=_share(call.tokens_out, n) if n else 0.0,
            llm_s=(call.latency_s or 0.0) / n if n else 0.0, compile_s=0.0, gpu_s=0.0, profile_s=0.0,
            correct=False, calls_shared_by=n)
    for e in evaluations:
        cost = out[e.candidate_id]
        compiling, gpu, profiling = evaluation_seconds(e.device, e.compile_s, e.eval_s, e.details)
        cost.compile_s += compiling
        cost.gpu_s += gpu
        cost.profile_s += profiling
        cost.correct = cost.correct or bool(e.latest and e.outcome == "correct")
    return out


def _share(tokens: Optional[int], n: int) -> Optional[float]:
    return None if tokens is None else tokens / n


def run_costs(db: Database, run_ids: Optional[list[int]] = None,
              override: Optional[Prices] = None) -> dict[int, RunCost]:
    """Each run's totals (every run when `run_ids` is None), by run id; `override`: prices from flags."""
    with db.reader() as s:
        q = select(Run.id, Run.model, Run.settings)
        runs = list(s.execute(q if run_ids is None else q.where(Run.id.in_(run_ids))))
        ids = [r.id for r in runs]
        # SUM skips NULLs; COUNT(column) counts the calls that reported tokens
        calls = {rid: (n, int(ti), int(to), float(lat), n - int(known)) for rid, n, ti, to, lat, known in s.execute(
            select(LLMCall.run_id, func.count(), func.coalesce(func.sum(LLMCall.tokens_in), 0),
                   func.coalesce(func.sum(LLMCall.tokens_out), 0), func.coalesce(func.sum(LLMCall.latency_s), 0.0),
                   func.count(LLMCall.tokens_in + LLMCall.tokens_out))
            .where(LLMCall.run_id.in_(ids)).group_by(LLMCall.run_id))}
    per_candidate = candidate_costs(db, run_ids=ids)
    out: dict[int, RunCost] = {}
    for run in runs:
        mine = [c for c in per_candidate.values() if c.run_id == run.id]
        n_calls, tokens_in, tokens_out, llm_s, unknown = calls.get(run.id, (0, 0, 0, 0.0, 0))
        known = not n_calls or unknown < n_calls
        models = sorted({c.model for c in mine if c.model and c.has_llm_call})
        cost = RunCost(run_id=run.id, model=", ".join(models) or run.model, llm_calls=n_calls,
                       tokens_in=tokens_in if known else None, tokens_out=tokens_out if known else None,
                       llm_s=llm_s, compile_s=sum(c.compile_s for c in mine),
                       gpu_s=sum(c.gpu_s for c in mine), profile_s=sum(c.profile_s for c in mine),
                       candidates=len(mine), correct=sum(c.correct for c in mine), calls_without_tokens=unknown)
        prices = run_prices(run.settings, override)
        if prices is not None:
            cost.price_in, cost.price_out, cost.price_source = prices.in_usd_per_m, prices.out_usd_per_m, prices.source
            cost.usd = prices.usd(tokens_in, tokens_out) if known else None
        out[run.id] = cost
    return out


def candidate_cost(db: Database, candidate_id: int, override: Optional[Prices] = None) -> Optional[CandidateCost]:
    """One candidate's cost, with its tokens priced at its run's prices when they are known."""
    cost = candidate_costs(db, candidate_ids=[candidate_id]).get(candidate_id)
    if cost is None:
        return None
    settings = None
    if cost.run_id is not None:
        with db.reader() as s:
            run = s.get(Run, cost.run_id)
            settings = run.settings if run is not None else None
    prices = run_prices(settings, override)
    if prices is None or cost.tokens_in is None or cost.tokens_out is None:
        return cost
    return replace(cost, usd=prices.usd(cost.tokens_in, cost.tokens_out))


# -- how they are shown ----------------------------------------------------------------------------

def usd_text(value: Optional[float]) -> str:
    """Dollars to the cent from a dollar up, else to three significant digits: $12.35, $0.027, $0.00204."""
    if value is None:
        return fmt.MISSING
    return f"${value:,.2f}" if value == 0 or value >= 1 else f"${value:.3g}"


def seconds_text(value: Optional[float]) -> str:
    return fmt.MISSING if value is None else f"{value:,.1f}"


def tokens_text(value: Optional[float]) -> str:
    return fmt.MISSING if value is None else fmt.si(round(value))


def candidate_cost_lines(cost: CandidateCost) -> list[str]:
    """`kgen show`: what the candidate cost, in two lines."""
    if cost.has_llm_call:
        share = "" if cost.calls_shared_by == 1 else f", its 1/{cost.calls_shared_by} share of one call"
        tokens = ("tokens unknown (the server reported no usage)" if cost.tokens_in is None and cost.tokens_out is None
                  else f"{tokens_text(cost.tokens_in)} tokens in, {tokens_text(cost.tokens_out)} out")
        llm = f"LLM: {tokens} ({cost.model or 'model unknown'}, {cost.llm_s:.1f} s to propose{share})"
    else:
        llm = "LLM: no call (0 tokens)"
    llm += f", {usd_text(cost.usd)}" if cost.usd is not None else ""
    return [llm, f"compile {cost.compile_s:.1f} s · GPU {cost.gpu_s:.1f} s (verify and time) · "
                 f"profile {cost.profile_s:.1f} s"]


# `kgen runs` columns (appended to leaderboard.RUN_COLUMNS): GPU seconds and money by default, the rest --wide
RUN_COST_COLUMNS = (Column("GPU s", numeric=True), Column("LLM $", numeric=True),
                    Column("$/correct", numeric=True, default=False))


def run_cost_cells(cost: Optional[RunCost]) -> list[str]:
    if cost is None:
        return [fmt.MISSING] * len(RUN_COST_COLUMNS)
    return [seconds_text(cost.gpu_s) if cost.gpu_s else fmt.MISSING, usd_text(cost.usd),
            usd_text(cost.usd_per_correct)]


# the report's cost table: one row per run
COST_COLUMNS = (
    Column("run", numeric=True, key=True), Column("model"), Column("LLM calls", numeric=True),
    Column("tokens in", numeric=True), Column("tokens out", numeric=True), Column("LLM s", numeric=True),
    Column("compile s", numeric=True), Column("GPU s", numeric=True), Column("profile s", numeric=True),
    Column("correct", numeric=True), Column("tokens/correct", numeric=True), Column("GPU s/correct", numeric=True),
    Column("prices in/out", numeric=True), Column("LLM $", numeric=True), Column("$/correct", numeric=True),
)


def cost_cells(c: RunCost) -> list[str]:
    prices = fmt.MISSING if c.price_in is None else f"${c.price_in:g} / ${c.price_out:g} per M"
    return [str(c.run_id), c.model or fmt.MISSING, str(c.llm_calls), tokens_text(c.tokens_in),
            tokens_text(c.tokens_out), seconds_text(c.llm_s), seconds_text(c.compile_s), seconds_text(c.gpu_s),
            seconds_text(c.profile_s), f"{c.correct}/{c.candidates}", tokens_text(c.tokens_per_correct),
            seconds_text(c.gpu_s_per_correct), prices, usd_text(c.usd), usd_text(c.usd_per_correct)]


# -- the leaderboard by cost -----------------------------------------------------------------------

def sort_board(db: Database, rows: list, sort: str, override: Optional[Prices] = None) -> list:
    """The leaderboard's rows (kgen.store.leaderboard.LeaderboardRow) by `sort`: runtime keeps their order;
    per-dollar ranks by speedup vs eager per dollar the row's run spent on tokens, per-gpu-hour by speedup
    per GPU-hour the run used, best first, each row's figure filled in. Rows without a speedup (evaluated
    without a GPU) or without a run's cost come last; on per-dollar, rows of a run that cost nothing (the
    offline proposer, or prices of 0) come first, by speedup: their figure is None, shown as "free"."""
    if sort not in SORTS:
        raise KgenError(f"unknown sort '{sort}' (choose {', '.join(SORTS)})")
    if sort == "runtime":
        return rows
    costs = run_costs(db, sorted({r.run_id for r in rows if r.run_id is not None}), override)
    # a run that asked no LLM spent nothing on tokens, whatever their price: no prices needed to rank it free
    unpriced = [c for c in costs.values() if c.llm_calls and c.usd is None]
    if sort == "per-dollar" and unpriced and not any(c.usd is not None for c in costs.values()):
        runs = ", ".join(str(c.run_id) for c in unpriced)
        raise KgenError(f"--sort per-dollar needs token prices for the LLM runs ({runs}): pass --price-in and "
                        "--price-out (USD per million tokens) or set KGEN_PRICE_IN and KGEN_PRICE_OUT")
    keyed = []
    for r in rows:
        cost = costs.get(r.run_id)
        if cost is not None and sort == "per-dollar" and not cost.llm_calls:
            spent = 0.0
        else:
            spent = None if cost is None else cost.usd if sort == "per-dollar" else cost.gpu_s / 3600.0
        if r.speedup_eager is None or spent is None or (spent == 0 and sort == "per-gpu-hour"):
            keyed.append(((2, 0.0), r))
        elif spent == 0:
            r.free = True
            keyed.append(((0, -r.speedup_eager), r))
        else:
            figure = r.speedup_eager / spent
            if sort == "per-dollar":
                r.speedup_per_usd = figure
            else:
                r.speedup_per_gpu_hour = figure
            keyed.append(((1, -figure), r))
    return [r for _, r in sorted(keyed, key=lambda kr: kr[0])]

