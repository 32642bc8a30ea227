"""`kgen report`: one self-contained HTML page (CSS inline, matplotlib PNGs base64-embedded) with the
runs, the leaderboard and three plots: the best speedup after each round, the outcomes of each round,
and runtime against % of roofline for every correct candidate. Runs evaluated without a GPU have no
timings; the page says so where a plot would need them, rather than drawing empty axes.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from sqlalchemy import func, select

from kgen import __version__
from kgen.core.errors import KgenError
from kgen.core.fmt import Column
from kgen.store.db import Candidate, Database, Evaluation
from kgen.store.leaderboard import (
    COLUMNS,
    RUN_COLUMNS,
    LeaderboardRow,
    RunRow,
    cpu_note,
    leaderboard,
    row_cells,
    run_cells,
    run_rows,
)
from kgen.store.ledger import COST_COLUMNS, cost_cells
from kgen.store.promotion import promoted_best, samples_of, spread_of

# Stacking order, bottom up, and colours (colour-blind-safe where it matters: correct vs the rest).
OUTCOME_COLORS = {
    "correct": "#1b9e77",
    "suspicious": "#e7298a",
    "incorrect": "#d95f02",
    "runtime_error": "#7570b3",
    "timeout": "#666666",
    "compile_error": "#e6ab02",
    "static_reject": "#a6761d",
    "not_run": "#66a61e",
    "no_code": "#bbbbbb",
}
NO_TIMINGS = ("No timings: {what} evaluated without a GPU (under Triton's interpreter), so there are no "
              "runtimes or speedups to plot; candidates are ranked by correctness only.")


@dataclass
class RoundStats:
    round: int
    outcomes: dict[str, int]
    best_speedup_eager: Optional[float]  # the best so far, after this round
    best_speedup_compile: Optional[float]


@dataclass
class RunHistory:
    run: RunRow
    rounds: list[RoundStats] = field(default_factory=list)

    @property
    def label(self) -> str:
        device = self.run.device or "?"
        return f"run {self.run.run_id}: {self.run.problem} on {device}"

    @property
    def timed(self) -> bool:
        return any(r.best_speedup_eager is not None for r in self.rounds)


@dataclass
class ReportData:
    title: str
    runs: list[RunHistory]
    board: list[LeaderboardRow]  # best per (problem, device, size)
    correct: list[LeaderboardRow]  # every correct candidate
    profiles: dict[int, list[str]] = field(default_factory=dict)  # board candidate id -> profile and telemetry lines


def run_history(db: Database, run: RunRow) -> RunHistory:
    """Per round of a run: how many candidates ended in each outcome, and the best speedups so far."""
    latest = select(func.max(Evaluation.id)).group_by(Evaluation.candidate_id).scalar_subquery()
    with db.reader() as s:
        rows = list(s.execute(
            select(Candidate.round, Evaluation.outcome, Evaluation.speedup_eager, Evaluation.speedup_compile,
                   Candidate.id, Evaluation.runtime_ms, Evaluation.details)
            .join(Evaluation, Evaluation.candidate_id == Candidate.id)
            .where(Candidate.run_id == run.run_id, Evaluation.id.in_(latest))))
    history = RunHistory(run=run)
    rounds = sorted({r for r, *_ in rows if r is not None})
    found: list[tuple] = []  # the correct ones so far, in the order they were found (candidate id)
    for k in rounds:
        counts: dict[str, int] = {}
        for row in rows:
            if row[0] != k:
                continue
            counts[row[1]] = counts.get(row[1], 0) + 1
            if row[1] == "correct":
                found.append(row)
        # the best after this round as the search promoted it (kgen.store.promotion), not the highest speedup:
        # a faster candidate within the timing noise is a tie
        best = promoted_best(sorted(found, key=lambda r: r[4]), lambda r: spread_of(r[5], samples_of(r[6])))
        history.rounds.append(RoundStats(k, counts, best[2] if best else None, best[3] if best else None))
    return history


def report_data(db: Database, *, problem: Optional[str] = None, run_id: Optional[int] = None) -> ReportData:
    runs = run_rows(db, problem=problem)
    if run_id is not None:
        runs = [r for r in runs if r.run_id == run_id]
        if not runs:
            raise KgenError(f"no run {run_id}" + (f" for problem {problem}" if problem else "") + f" in {db.url}")
    if problem is not None and not runs and not leaderboard(db, problem=problem):
        raise KgenError(f"nothing for problem '{problem}' in {db.url}")
    if run_id is not None:
        board = leaderboard(db, run_id=run_id)
        correct = leaderboard(db, run_id=run_id, include_all=True)
        title = f"run {run_id} ({runs[0].problem})"
    else:
        board = leaderboard(db, problem=problem)
        correct = leaderboard(db, problem=problem, include_all=True)
        title = problem or "all problems"
    return ReportData(title=title, runs=[run_history(db, r) for r in runs], board=board, correct=correct,
                      profiles=board_profiles(db, board))


def board_profiles(db: Database, board: list[LeaderboardRow]) -> dict[int, list[str]]:
    """Each leaderboard winner's kernel profile and GPU telemetry (as `kgen show` prints them)."""
    from kgen.store.leaderboard import profile_lines

    ids = [r.evaluation_id for r in board]
    if not ids:
        return {}
    with db.reader() as s:
        evaluations = list(s.scalars(select(Evaluation).where(Evaluation.id.in_(ids))))
        return {e.candidate_id: lines for e in evaluations if (lines := profile_lines([e]))}


# -- plots -----------------------------------------------------------------------------------------

def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "legend.fontsize": 9})
    return plt


def plot_speedups(runs: list[RunHistory]) -> Optional[str]:
    """Best speedup after each round, vs eager (solid) and vs torch.compile (dashed), one colour per run."""
    timed = [h for h in runs if h.timed]
    if not timed:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, h in enumerate(timed):
        color = colors[i % len(colors)]
        xs = [r.round for r in h.rounds]
        ax.plot(xs, [r.best_speedup_eager if r.best_speedup_eager is not None else float("nan") for r in h.rounds],
                marker="o", color=color, label=f"{h.label} — vs eager")
        ax.plot(xs, [r.best_speedup_compile if r.best_speedup_compile is not None else float("nan")
                     for r in h.rounds], marker="s", linestyle="--", color=color,
                label=f"{h.label} — vs torch.compile")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.annotate("as fast as PyTorch", xy=(0, 1.0), xycoords=("axes fraction", "data"), xytext=(4, 4),
                textcoords="offset points", fontsize=9)
    ax.set_xlabel("round")
    ax.set_ylabel("best speedup so far (×, higher is better)")
    ax.set_title("Best correct candidate after each round")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _png(fig)


def plot_outcomes(runs: list[RunHistory]) -> Optional[str]:
    """Outcomes per round, stacked, one panel per run."""
    shown = [h for h in runs if h.rounds]
    if not shown:
        return None
    plt = _pyplot()
    cols = min(2, len(shown))
    rows = (len(shown) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols, 3.6 * rows), squeeze=False)
    present = [o for o in OUTCOME_COLORS if any(o in r.outcomes for h in shown for r in h.rounds)]
    present += sorted({o for h in shown for r in h.rounds for o in r.outcomes} - set(OUTCOME_COLORS))
    for ax, h in zip(axes.flat, shown):
        xs = [r.round for r in h.rounds]
        bottom = [0] * len(xs)
        for outcome in present:
            heights = [r.outcomes.get(outcome, 0) for r in h.rounds]
            ax.bar(xs, heights, bottom=bottom, color=OUTCOME_COLORS.get(outcome, "#333333"),
                   label=outcome.replace("_", " "), width=0.7)
            bottom = [b + v for b, v in zip(bottom, heights)]
        ax.set_title(h.label, fontsize=10)
        ax.set_xlabel("round")
        ax.set_ylabel("candidates")
        ax.set_xticks(xs)
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 8), bbox_to_anchor=(0.5, 1.0),
               frameon=False)
    fig.suptitle("Outcomes of each round's candidates", y=1.07)
    fig.tight_layout()
    return _png(fig)


def plot_roofline(correct: list[LeaderboardRow]) -> Optional[str]:
    """Runtime against % of roofline for every timed correct candidate; one panel per (problem, device)."""
    timed = [r for r in correct if r.runtime_ms is not None and r.roofline_pct is not None]
    if not timed:
        return None
    plt = _pyplot()
    groups: dict[tuple[str, str], list[LeaderboardRow]] = {}
    for r in timed:
        groups.setdefault((r.problem, r.device), []).append(r)
    cols = min(2, len(groups))
    nrows = (len(groups) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.6 * cols, 4.0 * nrows), squeeze=False)
    markers = {"triton": ("o", "#1f77b4"), "cuda": ("^", "#d62728")}
    for ax, ((problem, device), rows) in zip(axes.flat, sorted(groups.items())):
        for language in sorted({r.language for r in rows}):
            pts = [r for r in rows if r.language == language]
            marker, color = markers.get(language, ("s", "#555555"))
            ax.scatter([r.runtime_ms for r in pts], [r.roofline_pct for r in pts], marker=marker, color=color,
                       label=language, s=36, alpha=0.85, edgecolors="black", linewidths=0.4)
        best = min(rows, key=lambda r: r.runtime_ms)
        ax.annotate(f"#{best.candidate_id} (best)", (best.runtime_ms, best.roofline_pct), xytext=(-8, 10),
                    textcoords="offset points", ha="right", fontsize=9,
                    arrowprops={"arrowstyle": "-", "color": "#444444", "linewidth": 0.6})
        ax.set_title(f"{problem} on {device}", fontsize=10)
        ax.set_xlabel("runtime (ms, lower is better)")
        ax.set_ylabel("% of roofline (higher is better)")
        top = max(r.roofline_pct for r in rows)
        ax.set_ylim(0, max(100.0, top * 1.1))
        ax.set_xlim(0, max(r.runtime_ms for r in rows) * 1.15)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", title="language")
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.suptitle("Every correct candidate: runtime against % of roofline", y=1.02)
    fig.tight_layout()
    return _png(fig)


# -- the page --------------------------------------------------------------------------------------

CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 24px 32px; color: #222;
       max-width: 1320px; }
h1 { font-size: 24px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
.meta { color: #666; font-size: 13px; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: left; white-space: nowrap; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
img { max-width: 100%; height: auto; display: block; margin: 8px 0; }
.note { background: #fff8e1; border-left: 4px solid #f0b400; padding: 10px 14px; margin: 10px 0; font-size: 14px; }
"""


def _table(columns: tuple[Column, ...], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c.header)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f'<td class="num">{html.escape(cell)}</td>' if c.numeric
                                    else f"<td>{html.escape(cell)}</td>" for c, cell in zip(columns, row)) + "</tr>"
                   for row in rows)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _note(text: str) -> str:
    return f'<div class="note">{html.escape(text)}</div>'


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def render_html(data: ReportData, db_url: str) -> str:
    parts = [f"<h1>kgen report: {html.escape(data.title)}</h1>",
             f'<p class="meta">{html.escape(db_url)} · generated {dt.datetime.now():%Y-%m-%d %H:%M} '
             f"by kgen {__version__}</p>"]

    parts.append("<h2>Leaderboard</h2>")
    if data.board:
        parts.append("<p>The best correct, non-suspicious candidate per problem, device and size.</p>")
        parts.append(_table(COLUMNS, [row_cells(r) for r in data.board]))
        note = cpu_note(data.board)
        if note:
            parts.append(_note(note))
    else:
        parts.append(_note("No correct candidates yet."))

    if data.profiles:
        parts.append("<h2>Kernel profiles</h2>")
        parts.append("<p>What each winner's kernels did on the GPU (CUPTI through torch.profiler, one forward after "
                     "verification) and the GPU's clocks, temperature, power and throttling while it was timed "
                     "(NVML). For the best new candidates of each round, Nsight Compute's hardware counters add "
                     "measured DRAM traffic, achieved occupancy, spills and the top warp stall reasons (warp cycles "
                     "per issued instruction).</p>")
        for candidate_id, lines in data.profiles.items():
            items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
            parts.append(f"<h3>candidate {candidate_id}</h3><ul>{items}</ul>")

    parts.append("<h2>Runs</h2>")
    if data.runs:
        parts.append(_table(RUN_COLUMNS, [run_cells(h.run) for h in data.runs]))
    else:
        parts.append(_note("No runs (the candidates here were evaluated outside a search)."))
    costs = [h.run.cost for h in data.runs if h.run.cost is not None]
    if costs:
        parts.append("<h2>Cost</h2>")
        parts.append("<p>What each run spent: LLM tokens and seconds, compile seconds, GPU seconds verifying and "
                     "timing, profiling seconds, and per correct candidate; dollars for tokens where prices are known "
                     "(kgen search --price-in/--price-out, or KGEN_PRICE_IN/KGEN_PRICE_OUT).</p>")
        parts.append(_table(COST_COLUMNS, [cost_cells(c) for c in costs]))

    untimed = [h for h in data.runs if not h.timed]
    untimed_names = ", ".join(f"run {h.run.run_id}" for h in untimed)

    parts.append("<h2>Best speedup after each round</h2>")
    speedups = plot_speedups(data.runs)
    if speedups is None:
        what = "this run was" if len(data.runs) == 1 else "these runs were" if data.runs else "nothing was"
        parts.append(_note(NO_TIMINGS.format(what=what)))
    else:
        parts.append(_img(speedups, "best speedup vs eager and torch.compile after each round"))
        if untimed:
            parts.append(_note(f"Not shown: {untimed_names}, evaluated without a GPU (no timings)."))

    parts.append("<h2>Outcomes per round</h2>")
    outcomes = plot_outcomes(data.runs)
    parts.append(_img(outcomes, "candidates per outcome in each round") if outcomes
                 else _note("No runs with evaluated candidates."))

    parts.append("<h2>Runtime against % of roofline</h2>")
    roofline = plot_roofline(data.correct)
    if roofline is None:
        parts.append(_note(NO_TIMINGS.format(what="the correct candidates here were") if data.correct
                           else "No correct candidates to plot."))
    else:
        parts.append(_img(roofline, "runtime against percent of roofline for every correct candidate"))
        if any(r.runtime_ms is None for r in data.correct):
            parts.append(_note("Correct candidates evaluated without a GPU have no runtime and are not plotted."))

    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>kgen report: {html.escape(data.title)}</title><style>{CSS}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def write_report(db: Database, out: str | Path, *, problem: Optional[str] = None,
                 run_id: Optional[int] = None) -> Path:
    path = Path(out).expanduser()
    if not path.parent.is_dir():
        raise KgenError(f"cannot write {path}: folder {path.parent} does not exist")
    data = report_data(db, problem=problem, run_id=run_id)
    path.write_text(render_html(data, db.url))
    return path
