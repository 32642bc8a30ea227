"""What a running search shows: a rich live panel on a terminal, or one plain line per event (with
`--quiet`, or when stdout is not a terminal: logs, CI, pipes).

Both take the same events from the search loop and keep the same counts (`SearchCounts`).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from kgen.records import EvalResult


def fmt_duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def fmt_speedup(x: Optional[float]) -> str:
    return f"{x:.2f}x" if x is not None else "-"


@dataclass
class SearchCounts:
    """Counts over this search (the current round's stage counts, the run's totals)."""

    rounds_total: int = 0
    rounds_done: int = 0
    round_index: Optional[int] = None  # 0-based, the round running now
    proposed: int = 0
    compiling: int = 0
    timing: int = 0
    done: int = 0
    outcomes: Counter = field(default_factory=Counter)
    best_speedup_eager: Optional[float] = None
    best_speedup_compile: Optional[float] = None
    best_candidate_id: Optional[int] = None
    started: float = field(default_factory=time.monotonic)
    round_seconds: list[float] = field(default_factory=list)
    round_started: Optional[float] = None

    @property
    def failed(self) -> int:
        return sum(n for outcome, n in self.outcomes.items() if outcome != "correct")

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def eta_s(self) -> Optional[float]:
        """Rounds left times the time per finished round so far (rounds overlap, so this is the time
        between round ends, not the length of one round)."""
        if not self.round_seconds:
            return None
        per_round = self.elapsed_s / len(self.round_seconds)
        return max(0.0, (self.rounds_total - self.rounds_done) * per_round)

    def record(self, candidate_id: int, result: EvalResult) -> bool:
        """Count a finished evaluation; True when it is the best so far."""
        self.done += 1
        self.outcomes[result.outcome] += 1
        if result.outcome != "correct":
            return False
        return self.consider_best(candidate_id, result.speedup_eager, result.speedup_compile)

    def consider_best(self, candidate_id: int, speedup_eager: Optional[float],
                      speedup_compile: Optional[float]) -> bool:
        """Take a correct candidate into the best-so-far; True when it leads now. Untimed (no GPU):
        the first correct one leads."""
        if speedup_compile is not None and (self.best_speedup_compile is None
                                            or speedup_compile > self.best_speedup_compile):
            self.best_speedup_compile = speedup_compile
        if speedup_eager is None:
            if self.best_candidate_id is None:
                self.best_candidate_id = candidate_id
                return True
            return False
        if self.best_speedup_eager is None or speedup_eager > self.best_speedup_eager:
            self.best_speedup_eager = speedup_eager
            self.best_candidate_id = candidate_id
            return True
        return False


class SearchProgress:
    """Plain progress: one line per event, with the time since the search started."""

    def __init__(self, console: Optional[Console] = None):
        self.console = console or Console(highlight=False)
        self.counts = SearchCounts()

    def _line(self, text: str) -> None:
        self.console.print(f"[{fmt_duration(self.counts.elapsed_s)}] {text}", markup=False, highlight=False,
                           soft_wrap=True)

    def note(self, text: str) -> None:
        self._line(text)

    def start(self, *, run_id: int, problem: str, size: str, device: str, proposer: str, rounds_total: int,
              rounds_done: int, evaluators: int, resumed: bool) -> None:
        self.counts.rounds_total = rounds_total
        self.counts.rounds_done = rounds_done
        verb = "resuming" if resumed else "starting"
        self._line(f"{verb} run {run_id}: {problem} ({size} size) on {device}, proposer {proposer}, "
                   f"rounds {rounds_done}/{rounds_total} done, {evaluators} evaluation worker(s)")

    def round_started(self, round_index: int) -> None:
        c = self.counts
        c.round_index, c.round_started = round_index, time.monotonic()
        self._line(f"round {round_index + 1}/{c.rounds_total}")

    def proposed(self, count: int, no_code: int) -> None:
        self.counts.proposed += count
        if no_code:
            self.counts.outcomes["no_code"] += no_code
            self.counts.done += no_code
        self._line(f"  proposed {count}" + (f" ({no_code} without code)" if no_code else ""))

    def resumed_round(self, stored: int, pending: int) -> None:
        self.counts.proposed += pending
        self._line(f"  this round's {stored} candidate(s) were proposed before the restart; "
                   f"{pending} not yet evaluated")

    def compiling(self, candidate_id: int) -> None:
        self.counts.compiling += 1

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
        self._line(f"  candidate {candidate_id}: {describe(result)}" + ("  (best so far)" if best else ""))

    def round_finished(self, round_index: int) -> None:
        c = self.counts
        if c.round_started is not None:
            c.round_seconds.append(time.monotonic() - c.round_started)
        c.rounds_done = round_index + 1
        if c.round_index == round_index:
            c.round_index = None
        self._line(f"round {round_index + 1}/{c.rounds_total} done: {c.done} evaluated, {c.outcomes['correct']} "
                   f"correct, best {fmt_speedup(c.best_speedup_eager)} vs eager, "
                   f"{fmt_speedup(c.best_speedup_compile)} vs torch.compile; ETA {fmt_duration(c.eta_s())}")

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
        self._live.console.print(Text(f"[{fmt_duration(self.counts.elapsed_s)}] ", style="dim") + Text(text))

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
            table.add_row("best", f"candidate {c.best_candidate_id} (correct; untimed: no GPU)")
        else:
            table.add_row("best", f"{fmt_speedup(c.best_speedup_eager)} vs eager · "
                                  f"{fmt_speedup(c.best_speedup_compile)} vs torch.compile"
                          + (f" · candidate {c.best_candidate_id}" if c.best_candidate_id is not None else ""))
        table.add_row("time", f"{fmt_duration(c.elapsed_s)} elapsed · ETA {fmt_duration(c.eta_s())}")
        return Group(Text("kgen search", style="bold cyan"), table)

    def close(self) -> None:
        self._live.stop()


def describe(result: EvalResult) -> str:
    """One line for a finished evaluation: its outcome and the numbers or reason that go with it."""
    if result.outcome == "correct":
        if result.runtime_ms is None:
            return "correct (untimed: no GPU)"
        parts = [f"{result.runtime_ms:.4g} ms", f"{fmt_speedup(result.speedup_eager)} vs eager",
                 f"{fmt_speedup(result.speedup_compile)} vs torch.compile"]
        if result.roofline_pct is not None:
            parts.append(f"{result.roofline_pct:.0f}% of roofline")
        return "correct: " + ", ".join(parts)
    reason = (result.message or "").strip().splitlines()
    return f"{result.outcome}" + (f": {reason[0][:160]}" if reason else "")


def summary_lines(summary) -> list[str]:
    """The end of a search in a few lines: the run, its best candidate, tokens, how to export it."""
    lines = [f"run {summary.run_id} {summary.status}: {summary.problem}, {summary.rounds_done}/"
             f"{summary.rounds_planned} rounds, {summary.candidates} candidates, {summary.correct} correct, "
             f"{fmt_duration(summary.wall_s)}"]
    if summary.best_id is None:
        lines.append("best: no correct candidate yet")
    elif summary.best_runtime_ms is None:
        lines.append(f"best: candidate {summary.best_id} (correct; untimed: no GPU, so no speedups or roofline %)")
    else:
        roofline = f", {summary.best_roofline_pct:.0f}% of roofline" if summary.best_roofline_pct is not None else ""
        lines.append(f"best: candidate {summary.best_id}: {summary.best_runtime_ms:.4g} ms, "
                     f"{fmt_speedup(summary.best_speedup_eager)} vs eager, "
                     f"{fmt_speedup(summary.best_speedup_compile)} vs torch.compile{roofline} on {summary.device}")
    lines.append(f"tokens: {summary.tokens_in} in, {summary.tokens_out} out")
    if summary.export_command:
        lines.append(f"export: {summary.export_command}")
    return lines


def make_progress(quiet: bool, console: Optional[Console] = None) -> SearchProgress:
    """Live on a terminal; plain lines with --quiet or when stdout is not a terminal."""
    if quiet or not sys.stdout.isatty():
        return SearchProgress(console)
    return LiveProgress(console)
