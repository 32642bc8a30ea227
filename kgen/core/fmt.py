"""How kgen writes numbers, times and tables for people: one rule each, used by the CLI, the
progress display, the report, the export docstrings and the prompts.

A missing value is always "-". Tables go to a terminal as a rich table, and anywhere else (a pipe,
a file, CI logs) as plain aligned lines that are never cut to a width.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

MISSING = "-"


def ms(value: Optional[float]) -> str:
    """A time in milliseconds, to about four significant digits: 0.0123, 1.620, 250.5."""
    if value is None:
        return MISSING
    return f"{value:.4f}" if value < 0.1 else f"{value:.3f}" if value < 100 else f"{value:.1f}"


def ms_spread(value: Optional[float], spread: Optional[float]) -> str:
    """A time and its spread at the time's precision: 0.963 ±0.004; the time alone without a spread."""
    if value is None or spread is None:
        return ms(value)
    digits = 4 if value < 0.1 else 3 if value < 100 else 1
    return f"{ms(value)} ±{spread:.{digits}f}"


def speedup(value: Optional[float]) -> str:
    """A speedup: 1.62x."""
    return MISSING if value is None else f"{value:.2f}x"


def pct(value: Optional[float]) -> str:
    """A percentage (of the roofline): 45.6%."""
    return MISSING if value is None else f"{value:.1f}%"


def tol(value: Optional[float]) -> str:
    """A tolerance: 1e-05."""
    return MISSING if value is None else f"{value:.3g}"


def when(value: Optional[dt.datetime]) -> str:
    """A moment, to the minute: 2026-11-22 21:55."""
    return MISSING if value is None else value.strftime("%Y-%m-%d %H:%M")


def si(value: Optional[float], unit: str = "") -> str:
    """A count with an SI prefix: 2.15 GB, 137.44 GFLOP, 512 B."""
    if value is None:
        return MISSING
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}".strip()


def duration(seconds: Optional[float]) -> str:
    """Elapsed time: 02:05, or 1:02:05 past an hour."""
    if seconds is None:
        return MISSING
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def proposer(name: str, model: Optional[str]) -> str:
    """The proposer and its model: openai/gpt-4.1, offline."""
    return f"{name}/{model}" if model else name


def torch_itself(details: Optional[dict]) -> str:
    """torch's own error in the problem's dtype against float64, worst over an evaluation's trials (the
    judge's details, kgen.judge.verify): the bar a candidate is held to is never below it."""
    own = (details or {}).get("torch_own_error")
    if not isinstance(own, dict) or not isinstance(own.get("norm_rel_err"), (int, float)):
        return MISSING
    trials = own.get("trials") if isinstance(own.get("trials"), list) else []
    text = (f"torch {own.get('dtype', 'float32')} itself: normwise {own['norm_rel_err']:.2g}, elementwise "
            f"{float(own.get('elem_err') or 0.0):.2g} (worst of {len(trials)} trials)")
    overflows = [t for t in trials if isinstance(t, dict) and t.get("overflow")]
    if overflows:
        text += f"; Inf/NaN where float64 is finite on {len(overflows)} trial(s), those elements not compared"
    return text


def build_notes(details: Optional[dict]) -> str:
    """What kgen changed in an evaluation's CUDA builds (architecture flags it replaced), from its
    details: the compile stage's builds and the evaluation's own, each note once."""
    details = details or {}
    stage = details.get("compile_stage") if isinstance(details.get("compile_stage"), dict) else {}
    notes: list[str] = []
    for build in [*(stage.get("builds") or []), *(details.get("cuda_builds") or [])]:
        note = build.get("note") if isinstance(build, dict) else None
        if isinstance(note, str) and note not in notes:
            notes.append(note)
    return "; ".join(notes) or MISSING


def default_module_file(problem: str) -> str:
    """A file name `-o` accepts for a problem's kernel: softmax -> softmax_kernel.py, 19_ReLU -> kernel_19_relu.py."""
    slug = re.sub(r"\W+", "_", problem).strip("_").lower() or "problem"
    return f"kernel_{slug}.py" if slug[0].isdigit() else f"{slug}_kernel.py"


def program() -> str:
    """How to call this kgen in a hint: `kgen` when that name finds this kgen on PATH, else the path it
    was started by (`.venv/bin/kgen` before the venv is activated: a bare `kgen` would not be found).
    Started as `python -m kgen`, kgen cannot tell how it was called, and says `kgen`."""
    import os
    import shutil
    import sys

    started_as = sys.argv[0] if sys.argv else ""
    if Path(started_as).name != "kgen" or os.sep not in started_as:
        return "kgen"
    found = shutil.which("kgen")
    if found and Path(found).resolve() == Path(started_as).resolve():
        return "kgen"
    return started_as


def python_program() -> str:
    """How to call the Python kgen runs in, in a hint: `python` when that name finds it on PATH (an
    activated venv), else its path (a bare `python` would lack torch, or not exist)."""
    import shutil
    import sys

    found = shutil.which("python")
    if found and Path(found).parent.absolute() == Path(sys.executable).parent.absolute():
        return "python"
    return sys.executable


def command(*words: object, db: Optional[str] = None) -> str:
    """A kgen command line a user can paste: words quoted for the shell, with `--db` when the results
    DB is not the default one, and kgen as it can be called here (see `program`)."""
    line = [program(), *(str(w) for w in words)]
    if db is not None:
        line += ["--db", db]
    return shlex.join(line)


# -- tables -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Column:
    """A table column: its header, whether it is a number (right-aligned), whether the default view
    shows it, and whether it must never be cut or folded (the ids users type next)."""

    header: str
    numeric: bool = False
    default: bool = True
    key: bool = False


def visible_columns(columns: Sequence[Column], rows: Sequence[Sequence[str]], wide: bool) -> list[int]:
    """Indexes of the columns to show: every one with `wide`; else the default ones, less those
    with no value in any row (a machine without a GPU has no times to show)."""
    if wide:
        return list(range(len(columns)))
    return [i for i, c in enumerate(columns)
            if c.default and (c.key or any(row[i] != MISSING for row in rows))]


def _holds_data(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    return [i for i, c in enumerate(columns) if c.key or any(row[i] != MISSING for row in rows)]


def left_out_note(columns: Sequence[Column], rows: Sequence[Sequence[str]], shown: Sequence[int]) -> Optional[str]:
    """One line naming the columns a view left out, so nothing goes missing unsaid: those that hold
    data, then those empty in every row; None when every column is shown."""
    hidden = [i for i in range(len(columns)) if i not in shown]
    if not hidden:
        return None
    full = [columns[i].header for i in hidden if any(row[i] != MISSING for row in rows)]
    empty = [columns[i].header for i in hidden if all(row[i] == MISSING for row in rows)]
    parts = ([f"not shown: {', '.join(full)}"] if full else []) + ([f"empty here: {', '.join(empty)}"] if empty else [])
    return "; ".join(parts) + " (--wide shows every column)"


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    return [max(len(r[i]) for r in [[c.header for c in columns], *rows]) for i in range(len(columns))]


def _lines(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = _widths(columns, rows)
    return ["  ".join(cell.rjust(w) if c.numeric else cell.ljust(w)
                      for cell, c, w in zip(r, columns, widths)).rstrip()
            for r in [[c.header for c in columns], *rows]]


def plain_table(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> str:
    """Aligned lines, two spaces between columns, as wide as the cells need."""
    return "\n".join(_lines(columns, rows)) + "\n"


def fit_columns(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Indexes of the columns that fit in `width`: the key columns always, then the others in order
    while they fit (a column is never folded or cut)."""
    widths = _widths(columns, rows)
    keep = [i for i, c in enumerate(columns) if c.key]
    used = sum(widths[i] for i in keep) + 2 * (len(keep) - 1)
    for i, c in enumerate(columns):
        if not c.key and used + 2 + widths[i] <= width:
            keep.append(i)
            used += 2 + widths[i]
    return sorted(keep)


def print_table(console, columns: Sequence[Column], rows: Sequence[Sequence[str]], *, title: Optional[str] = None,
                wide: bool = False, styles: Optional[Sequence[Optional[str]]] = None) -> None:
    """A table on `console` as aligned lines, then a line naming the columns left out (if any). In a
    pipe or a file every column that holds data is printed in full, however wide. On a terminal the
    default view shows the default columns that hold data, then the others while they fit the width
    (a column is never cut); `wide` shows every column, letting the terminal wrap."""
    from rich.text import Text

    if wide:
        shown = list(range(len(columns)))
    elif not console.is_terminal:
        shown = _holds_data(columns, rows)
    else:
        # the default columns first, then the rest that hold data, as many as fit: a wide terminal shows all
        first = visible_columns(columns, rows, wide=False)
        order = first + [i for i in _holds_data(columns, rows) if i not in first]
        ordered = [columns[i] for i in order]
        fitted = fit_columns(ordered, [[r[i] for i in order] for r in rows], console.width)
        shown = sorted(order[i] for i in fitted)
    note = left_out_note(columns, rows, shown)
    lines = _lines([columns[i] for i in shown], [[r[i] for i in shown] for r in rows])
    if not console.is_terminal:
        console.file.write((f"{title}\n" if title else "") + "\n".join(lines) + "\n" + (f"{note}\n" if note else ""))
        console.file.flush()
        return
    if title:
        console.print(Text(title, style="italic"), soft_wrap=True)
    console.print(Text(lines[0], style="bold underline"), soft_wrap=True)
    for n, line in enumerate(lines[1:]):
        console.print(Text(line, style=(styles[n] if styles else None) or ""), soft_wrap=True)
    if note:  # words, not cells: wrapped to the terminal like any sentence
        console.print(Text(note, style="dim"))
