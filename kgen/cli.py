"""The `kgen` command line: a thin shell over the library. Every command is callable from Python too.

Bad input raises KgenError anywhere below; `main` prints it in one line and exits 2
(`KGEN_DEBUG=1` shows the traceback).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from kgen import __version__
from kgen.errors import KgenError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Search for GPU kernels (Triton, CUDA C++) faster than PyTorch.")
console = Console()

DbOption = typer.Option(None, "--db", help="SQLAlchemy URL or SQLite path (default: KGEN_DB or ./results.db)")
SizeOption = typer.Option("full", "--size", help="full (the published sizes) or small (for machines without a GPU)")


def _version(value: bool) -> None:
    if value:
        console.print(f"kgen {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Show the version and exit.")) -> None:
    pass


def _fmt_count(n: float | None, unit: str = "") -> str:
    if n is None:
        return "-"
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {suffix}{unit}"
    return f"{n:.0f} {unit}".strip()


@app.command("problems")
def problems_cmd(size: str = SizeOption) -> None:
    """List the bundled problems: input shapes, dtype, FLOPs, bytes and floor time on this device."""
    from kgen.problems import load_problem, problem_names
    from kgen.roofline import compute_roofline, device_ceilings

    ceilings = device_ceilings()
    table = Table(title=f"kgen problems ({size} size)")
    for col in ("problem", "inputs", "output", "dtype", "FLOPs", "bytes", "floor"):
        table.add_column(col, justify="right" if col in ("FLOPs", "bytes", "floor") else "left")
    for name in problem_names():
        problem = load_problem(name, size)
        roof = compute_roofline(problem)
        floor = roof.floor_ms(ceilings)
        floor_text = f"{floor:.3f} ms ({roof.bound(ceilings)})" if floor is not None else "no GPU"
        table.add_row(name, ", ".join(str(s) for s in problem.input_specs()),
                      ", ".join(str(s) for s in problem.output_specs()), problem.dtype,
                      _fmt_count(roof.flops), _fmt_count(roof.bytes_moved, "B"), floor_text)
    console.print(table)
    if ceilings is not None:
        console.print(f"{ceilings.device}: {ceilings.bandwidth_bytes_per_s / 1e12:.2f} TB/s, "
                      f"{ceilings.fp32_flops_per_s / 1e12:.1f} fp32 TFLOP/s (measured)")


def main() -> None:
    try:
        app(standalone_mode=False)
    except KgenError as e:
        if os.environ.get("KGEN_DEBUG"):
            traceback.print_exc()
        print(f"kgen: error: {e}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        print("kgen: aborted", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print("kgen: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # click's usage errors and anything unexpected: one line, exit 2
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):  # click's (typer's) usage errors
            if os.environ.get("KGEN_DEBUG"):
                traceback.print_exc()
            print(f"kgen: error: {e.format_message()}", file=sys.stderr)
            sys.exit(2)
        if os.environ.get("KGEN_DEBUG"):
            raise
        print(f"kgen: internal error: {type(e).__name__}: {e} (KGEN_DEBUG=1 shows the traceback)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
