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


@app.command("search")
def search_cmd(
    problem: Optional[str] = typer.Option(None, "--problem", "-p", help="a bundled problem name or a KernelBench-format file"),
    rounds: int = typer.Option(10, "--rounds", help="rounds of propose → evaluate"),
    candidates: int = typer.Option(8, "--candidates", "-n", help="candidates proposed per round"),
    proposer: Optional[str] = typer.Option(None, "--proposer", help="openai | offline | replay (default: openai when an endpoint is configured, else offline)"),
    language: str = typer.Option("any", "--language", help="triton | cuda | any"),
    size: Optional[str] = typer.Option(None, "--size", help="full | small (default: full with a GPU, small without)"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="join a Ray cluster (auto, HOST:PORT, ray://HOST:PORT); default: start a local one"),
    db: Optional[str] = DbOption,
    seed: int = typer.Option(0, "--seed"),
    resume: Optional[int] = typer.Option(None, "--resume", help="continue run RUN_ID with its own settings"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="plain line-per-event logging instead of the live display"),
    timeout: float = typer.Option(300.0, "--timeout", help="seconds one candidate's evaluation may take"),
    model: Optional[str] = typer.Option(None, "--model", help="the LLM (openai proposer; default KGEN_MODEL)"),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint (default OPENAI_BASE_URL)"),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="the environment variable holding the API key"),
    prompts: Optional[str] = typer.Option(None, "--prompts", help="a folder of prompt templates to use instead of prompts/"),
    replay_db: Optional[str] = typer.Option(None, "--from", help="replay proposer: the results DB to replay"),
    replay_run: Optional[int] = typer.Option(None, "--run", help="replay proposer: the run in it to replay"),
) -> None:
    """Search for kernels faster than PyTorch: rounds of propose, compile, verify and time, on Ray."""
    import signal
    from pathlib import Path

    from kgen.progress import make_progress, summary_lines
    from kgen.search import SearchConfig, run_search

    if resume is None and problem is None:
        raise KgenError("give --problem (or --resume RUN_ID)")
    config = None if resume is not None else SearchConfig(
        problem=problem, rounds=rounds, candidates=candidates, proposer=proposer, language=language, size=size,
        seed=seed, timeout_s=timeout, model=model, base_url=base_url, api_key_env=api_key_env,
        prompts_dir=str(Path(prompts).absolute()) if prompts else None,  # absolute: a resume may start elsewhere
        replay_db=str(Path(replay_db).absolute()) if replay_db and "://" not in replay_db else replay_db,
        replay_run=replay_run)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops as cleanly as Ctrl-C
    try:
        summary = run_search(db, config, resume_run_id=resume, ray_address=ray_address,
                             progress=make_progress(quiet, console))
    except KeyboardInterrupt:  # typer returns, not raises, 130 under standalone_mode=False: exit here
        print("kgen: interrupted", file=sys.stderr)
        sys.exit(130)
    for line in summary_lines(summary):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


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
