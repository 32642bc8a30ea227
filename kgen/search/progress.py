"""What a running search shows: a rich live panel on a terminal, or one plain line per event (with
`--quiet`, or when stdout is not a terminal: logs, CI, pipes).

Both take the same events from the search loop and keep the same counts (`SearchCounts`).
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kgen.core import fmt
from kgen.core.records import CPU_CORRECT, EvalResult, verdict_label
from kgen.store.promotion import RuntimeSpread, promoted_best, samples_of, spread_of


@dataclass
class SearchCounts:
    """Counts over this search (the current round's stage counts, the run's totals)."""

    rounds_total: int = 0
    rounds_done: int = 0
    round_index: Optional[int] = None  # 0-based, the round running now
    rounds_proposed: int = 0  # rounds whose candidates are known (proposed, or stored before a restart)
    last_round_size: Optional[int] = None  # candidates in the latest round proposed: what a later round expects
    proposed: int = 0
    compiling: int = 0
    timing: int = 0
    done: int = 0
    outcomes: Counter = field(default_factory=Counter)
    best_speedup_eager: Optional[float] = None
    best_speedup_compile: Optional[float] = None
    best_candidate_id: Optional[int] = None
    # every correct candidate so far: id -> (its runtime's spread, its speedup vs eager)
    correct_seen: dict[int, tuple[RuntimeSpread, Optional[float]]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    first_round_started: Optional[float] = None

    @property
    def failed(self) -> int:
        return sum(n for outcome, n in self.outcomes.items() if outcome != "correct")

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def eta_s(self) -> Optional[float]:
        """Candidates left times the time per finished candidate so far. Candidates left: those
        proposed and not finished, and for each round not proposed yet as many as the latest round
        had (a proposer may run short). The time per candidate is measured from the first round's
        start, so the cluster's start-up is left out and proposing, compiling and evaluating are in,
        however they overlap."""
        if not self.done or self.first_round_started is None:
            return None
        per_candidate_s = (time.monotonic() - self.first_round_started) / self.done
        rounds_left = max(0, self.rounds_total - self.rounds_proposed)
        left = max(0, self.proposed - self.done) + rounds_left * (self.last_round_size or 0)
        return left * per_candidate_s

    def record(self, candidate_id: int, result: EvalResult) -> bool:
        """Count a finished evaluation; True when it is the best so far."""
        self.done += 1
        self.outcomes[result.outcome] += 1
        if result.outcome != "correct":
            return False
        spread = spread_of(result.runtime_ms, samples_of(result.details)) if result.runtime_ms is not None else None
        return self.consider_best(candidate_id, result.speedup_eager, result.speedup_compile, spread)

    def consider_best(self, candidate_id: int, speedup_eager: Optional[float],
                      speedup_compile: Optional[float], spread: Optional[RuntimeSpread] = None) -> bool:
        """Take a correct candidate into the best-so-far; True when it leads now. The lead is
        kgen.store.promotion's: the first found (lowest id) unless a later one beats it beyond the timing
        noise, as the search's summary and the leaderboard decide it. Untimed (no GPU): the first
        correct one leads. Without a runtime the speedup vs eager stands in for it (same baseline)."""
        if speedup_compile is not None and (self.best_speedup_compile is None
                                            or speedup_compile > self.best_speedup_compile):
            self.best_speedup_compile = speedup_compile
        if spread is None or not spread.timed:
            spread = RuntimeSpread(1 / speedup_eager if speedup_eager else None)
        self.correct_seen[candidate_id] = (spread, speedup_eager)
        best = promoted_best(sorted(self.correct_seen), lambda cid: self.correct_seen[cid][0])
        self.best_candidate_id, self.best_speedup_eager = best, self.correct_seen[best][1]
        return best == candidate_id


class SearchProgress:
    """Plain progress: one line per event, with the time since the search started."""

    def __init__(self, console: Optional[Console] = None):
        self.console = console or Console(highlight=False)
        self.counts = SearchCounts()
        # each round's own outcomes (rounds overlap, so the run's totals cannot tell them apart)
        self._round_of: dict[int, int] = {}
        self._round_outcomes: dict[int, Counter] = {}

    def _line(self, text: str) -> None:
        self.console.print(f"[{fmt.duration(self.counts.elapsed_s)}] {text}", markup=False, highlight=False,
                           soft_wrap=True)

    def note(self, text: str) -> None:
        self._line(text)

    def start(self, *, run_id: int, problem: str, size: str, device: str, proposer: str, rounds_total: int,
              rounds_done: int, evaluators: int, resumed: bool) -> None:
        self.counts.rounds_total = rounds_total
        self.counts.rounds_done = self.counts.rounds_proposed = rounds_done
        verb = "resuming" if resumed else "starting"
        self._line(f"{verb} run {run_id}: {problem} ({size} size) on {device}, proposer {proposer}, "
                   f"rounds {rounds_done}/{rounds_total} done, {evaluators} evaluation worker(s)")

    def round_started(self, round_index: int) -> None:
        c = self.counts
        c.round_index = round_index
        if c.first_round_started is None:
            c.first_round_started = time.monotonic()
        behind = c.rounds_done < round_index  # rounds overlap: this one is proposed while earlier ones run
        self._line(f"round {round_index + 1}/{c.rounds_total}" +
                   (f" (proposed while round {c.rounds_done + 1} is still evaluated)" if behind else ""))

    def proposed(self, count: int, no_code: int) -> None:
        self._round_known(count)
        self.counts.proposed += count
        if no_code:
            self.counts.outcomes["no_code"] += no_code
            self.counts.done += no_code
            self._round_outcomes.setdefault(self._current_round(), Counter())["no_code"] += no_code
        self._line(f"  proposed {count}" + (f" ({no_code} without code)" if no_code else ""))

    def resumed_round(self, stored: int, pending: int) -> None:
        self._round_known(stored)
        self.counts.proposed += pending
        self._line(f"  this round's {stored} candidate(s) were proposed before the restart; "
                   f"{pending} not yet evaluated")

    def _round_known(self, size: int) -> None:
        c = self.counts
        c.rounds_proposed = max(c.rounds_proposed, (c.round_index if c.round_index is not None else 0) + 1)
        c.last_round_size = size

    def _current_round(self) -> int:
        return self.counts.round_index if self.counts.round_index is not None else self.counts.rounds_done

    def compiling(self, candidate_id: int) -> None:
        self.counts.compiling += 1
        self._round_of[candidate_id] = self._current_round()  # submitted right after its round was proposed

    def timing(self, candidate_id: int) -> None:
        self.counts.compiling = max(0, self.counts.compiling - 1)
        self.counts.timing += 1

    def requeued(self, candidate_id: int, note: str, was_timing: bool) -> None:
        """Back to the compile stage or the evaluator queue: counted as compiling until it is timed again."""
        if was_timing:
            self.counts.timing = max(0, self.counts.timing - 1)
            self.counts.compiling += 1
        self._line(f"  candidate {candidate_id}: {note}")

    def evaluated(self, candidate_id: int, result: EvalResult, was_timing: bool) -> None:
        c = self.counts
        if was_timing:
            c.timing = max(0, c.timing - 1)
        else:
            c.compiling = max(0, c.compiling - 1)
        best = c.record(candidate_id, result)
        if candidate_id in self._round_of:
            self._round_outcomes.setdefault(self._round_of.pop(candidate_id), Counter())[result.outcome] += 1
        self._line(f"  candidate {candidate_id}: {describe(result)}" + ("  (best so far)" if best else ""))

    def round_finished(self, round_index: int) -> None:
        c = self.counts
        c.rounds_done = round_index + 1
        if c.round_index == round_index:
            c.round_index = None
        mine = self._round_outcomes.pop(round_index, Counter())
        if c.best_candidate_id is not None and c.best_speedup_eager is None:  # no GPU: nothing timed, no speedups
            best = f"best candidate {c.best_candidate_id} (untimed)"
        else:
            best = (f"best {fmt.speedup(c.best_speedup_eager)} vs eager, "
                    f"{fmt.speedup(c.best_speedup_compile)} vs torch.compile")
        self._line(f"round {round_index + 1}/{c.rounds_total} done: {sum(mine.values())} evaluated, "
                   f"{mine['correct']} correct; run so far: {c.done} evaluated, {c.outcomes['correct']} correct, "
                   f"{best}; ETA {fmt.duration(c.eta_s())}")

    def close(self) -> None:
        pass


class LiveProgress(SearchProgress):
    """A rich live panel, redrawn four times a second; event lines scroll above it."""

    def __init__(self, console: Optional[Console] = None):
        super().__init__(console)
        self._live = Live(get_renderable=self._render, console=self.console, refresh_per_second=4, transient=False)

    def start(self, **kwargs) -> None:
        self._live.start()
        super().start(**kwargs)

    def _line(self, text: str) -> None:
        self._live.console.print(Text(f"[{fmt.duration(self.counts.elapsed_s)}] ", style="dim") + Text(text))

    def _render(self):
        c = self.counts
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        current = c.round_index + 1 if c.round_index is not None else c.rounds_done
        table.add_row("round", f"{current} of {c.rounds_total}")
        table.add_row("candidates", f"{c.proposed} proposed · {c.compiling} compiling · {c.timing} timing · "
                                    f"{c.done} done")
        failed = ", ".join(f"{k} {v}" for k, v in sorted(c.outcomes.items()) if k != "correct") or "none"
        table.add_row("outcomes", f"[green]{c.outcomes['correct']} correct[/green] · failed: {failed}")
        if c.best_candidate_id is not None and c.best_speedup_eager is None:
            table.add_row("best", f"candidate {c.best_candidate_id}: {CPU_CORRECT}; untimed: no GPU")
        else:
            table.add_row("best", f"{fmt.speedup(c.best_speedup_eager)} vs eager · "
                                  f"{fmt.speedup(c.best_speedup_compile)} vs torch.compile"
                          + (f" · candidate {c.best_candidate_id}" if c.best_candidate_id is not None else ""))
        table.add_row("time", f"{fmt.duration(c.elapsed_s)} elapsed · ETA {fmt.duration(c.eta_s())}")
        return Group(Text("kgen search", style="bold cyan"), table)

    def close(self) -> None:
        self._live.stop()


FIRST_CAUSE_MAX_CHARS = 500
_COMPILER_ERROR = re.compile(r"\berror\b", re.I)
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b")


def first_cause(message: Optional[str]) -> str:
    """The first cause in an evaluation's message, in one line. A message that opens with a heading
    ("Triton kernel failed to compile (launch):") gets the first compiler error or exception line
    below it; otherwise its first line."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    if not lines:
        return ""
    head, rest = lines[0], lines[1:]
    if head.endswith(":") and rest:
        cause = (next((line for line in rest if _EXCEPTION.match(line)), None)
                 or next((line for line in rest if _COMPILER_ERROR.search(line)), None) or rest[0])
        head = f"{head} {cause}"
    return head if len(head) <= FIRST_CAUSE_MAX_CHARS else head[:FIRST_CAUSE_MAX_CHARS - 1] + "…"


def describe(result: EvalResult) -> str:
    """One line for a finished evaluation: its outcome and the numbers or first cause that go with it."""
    if result.outcome == "correct":
        if result.runtime_ms is None:  # on the CPU: what was not audited, too (kgen.core.records.CPU_CORRECT)
            return verdict_label(result.outcome, result.device) if result.device == "cpu" else \
                "correct (untimed: no GPU)"
        parts = [f"{fmt.ms(result.runtime_ms)} ms", f"{fmt.speedup(result.speedup_eager)} vs eager",
                 f"{fmt.speedup(result.speedup_compile)} vs torch.compile"]
        if result.roofline_pct is not None:
            parts.append(f"{fmt.pct(result.roofline_pct)} of roofline")
        return "correct: " + ", ".join(parts)
    cause = first_cause(result.message)
    return result.outcome + (f": {cause}" if cause else "")


def summary_lines(summary, db: Optional[str] = None) -> list[str]:
    """The end of a search in a few lines: the run, its best candidate, tokens, and the command that
    exports it (with `--db` when the search wrote to a DB given on its command line)."""
    lines = [f"run {summary.run_id} {summary.status}: {summary.problem}, {summary.rounds_done}/"
             f"{summary.rounds_planned} rounds, {summary.candidates} candidates, {summary.correct} correct, "
             f"{fmt.duration(summary.wall_s)}" + (f" (stopped early: {summary.stop_reason})"
                                                  if getattr(summary, "stop_reason", None) else "")]
    if summary.best_id is None:
        lines.append("best: no correct candidate yet")
    elif summary.best_runtime_ms is None:
        verdict = verdict_label("correct", getattr(summary, "device", None))
        lines.append(f"best: candidate {summary.best_id}: {verdict}; untimed: no GPU, so no speedups or roofline %")
    else:
        roofline = (f", {fmt.pct(summary.best_roofline_pct)} of roofline"
                    if summary.best_roofline_pct is not None else "")
        lines.append(f"best: candidate {summary.best_id}: {fmt.ms(summary.best_runtime_ms)} ms, "
                     f"{fmt.speedup(summary.best_speedup_eager)} vs eager, "
                     f"{fmt.speedup(summary.best_speedup_compile)} vs torch.compile{roofline} on {summary.device}")
    unknown = getattr(summary, "calls_without_tokens", 0)
    lines.append(f"tokens: {summary.tokens_in} in, {summary.tokens_out} out"
                 + (f" (and {unknown} {'reply' if unknown == 1 else 'replies'} whose server reported no usage)"
                    if unknown else ""))
    if summary.best_id is not None:
        lines.append("export: " + fmt.command("export", summary.best_id, "-o",
                                              fmt.default_module_file(summary.problem), db=db))
    return lines


def make_progress(quiet: bool, console: Optional[Console] = None) -> SearchProgress:
    """Live on a terminal; plain lines with --quiet or when stdout is not a terminal."""
    if quiet or not sys.stdout.isatty():
        return SearchProgress(console)
    return LiveProgress(console)
