"""`kgen problems`: the problems before a search: shapes, FLOPs, bytes moved and floor time, at both sizes."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from kgen.cli.app import console
from kgen.core import fmt
from kgen.core.errors import KgenError
from kgen.core.records import SIZES


def problems_cmd(
    problems: Optional[list[str]] = typer.Argument(None, metavar="[PROBLEM|FILE]...",
                                                   show_default="every bundled problem",
                                                   help="Bundled problem names or KernelBench-format files."),
    size: Optional[str] = typer.Option(None, "--size", metavar="full|small", show_default="both",
                                       help="Show one size only."),
) -> None:
    """Show problems before a search: input and output shapes, FLOPs, bytes moved and floor time on this
    GPU, at the full and small sizes, and which constants the small size sets."""
    from kgen.problems.problem import load_problem, problem_names
    from kgen.problems.roofline import device_ceilings, problem_figures

    if size is not None and size not in SIZES:
        raise KgenError(f"unknown size '{size}' (choose {' or '.join(SIZES)})")
    ceilings = device_ceilings()
    figures, failures = [], []
    for problem in problems or problem_names():
        try:
            figures += [problem_figures(load_problem(problem, s), ceilings) for s in ([size] if size else SIZES)]
        except KgenError as e:
            failures.append(str(e))
    for line in _problems_lines(figures, console.width if console.is_terminal else None):
        print(line)
    if ceilings is not None and figures:
        console.print(f"{ceilings.device}: {ceilings.bandwidth_bytes_per_s / 1e12:.2f} TB/s, "
                      f"{ceilings.fp32_flops_per_s / 1e12:.1f} fp32 TFLOP/s, {ceilings.tf32_flops_per_s / 1e12:.0f} "
                      f"TF32, {ceilings.half_flops_per_s / 1e12:.0f} fp16/bf16 (measured); fp32 floors allow 3xTF32 "
                      "and 3xFP16 (TF32 / 3, fp16 / 3), the fastest fp32-accurate tensor-core arithmetic",
                      highlight=False, soft_wrap=True)
    for message in failures:
        print(f"kgen: error: {message}", file=sys.stderr)
    if failures:
        raise typer.Exit(2)


def _shapes_text(figures) -> str:
    return f"{', '.join(figures.inputs)} → {', '.join(figures.outputs)}"


def _floor_text(figures) -> str:
    return "no GPU" if figures.floor_ms is None else f"{figures.floor_ms:.3f} ms ({figures.bound})"


def _problems_lines(figures: list, width: int | None) -> list[str]:
    """`kgen problems` as text. Piped (width None): one line per problem and size, nothing wrapped or
    cut, for grep. In a terminal: each problem's name on a line of its own (whole, however long), then
    a line per size in aligned columns, the shapes wrapped to the width."""
    import textwrap

    if width is None:  # piped: one aligned table with a header, a row per problem and size, nothing cut
        columns = [fmt.Column("problem"), fmt.Column("size"), fmt.Column("dtype"), fmt.Column("inputs → outputs"),
                   fmt.Column("FLOPs", numeric=True), fmt.Column("bytes", numeric=True), fmt.Column("floor"),
                   fmt.Column("sized by")]
        rows = [[f.name, f.size, f.dtype, _shapes_text(f), fmt.si(f.flops), fmt.si(f.bytes_moved, "B"),
                 _floor_text(f), f"{f.sized_by}: {', '.join(f.changes)}" if f.changes else fmt.MISSING]
                for f in figures]
        return fmt.plain_table(columns, rows).splitlines() if rows else []
    cells = [(f.size, f.dtype, fmt.si(f.flops), fmt.si(f.bytes_moved, "B"), _floor_text(f)) for f in figures]
    header = ("size", "dtype", "FLOPs", "bytes", "floor")
    widths = [max(len(row[i]) for row in [*cells, header]) for i in range(len(header))]
    lead = 2 + widths[0] + 2 + widths[1] + 2  # where the shapes start
    tail = 2 + widths[2] + 2 + widths[3] + 2 + widths[4]
    shapes_width = max(20, width - lead - tail)

    def row(size, dtype, shapes, flops, nbytes, floor) -> str:
        return (f"  {size:<{widths[0]}}  {dtype:<{widths[1]}}  {shapes:<{shapes_width}}  {flops:>{widths[2]}}  "
                f"{nbytes:>{widths[3]}}  {floor:>{widths[4]}}").rstrip()

    lines = [row("size", "dtype", "inputs → outputs", "FLOPs", "bytes", "floor")]
    for i, (f, (size, dtype, flops, nbytes, floor)) in enumerate(zip(figures, cells)):
        if i == 0 or figures[i - 1].path != f.path:
            lines.append(f.name)
        shapes = textwrap.wrap(_shapes_text(f), shapes_width, break_on_hyphens=False) or [""]
        lines.append(row(size, dtype, shapes[0], flops, nbytes, floor))
        lines += [" " * lead + more for more in shapes[1:]]
        if f.changes:
            lines += textwrap.wrap(f"{f.sized_by}: {', '.join(f.changes)}", max(lead + 20, width),
                                   initial_indent=" " * lead, subsequent_indent=" " * (lead + 2))
    return lines
