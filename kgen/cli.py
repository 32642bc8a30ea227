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
NoSandboxOption = typer.Option(False, "--no-sandbox", help="run candidates without bubblewrap (each still runs in a process of its own, "
                               "apart from the judge, with an allow-listed environment); every result records it")
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
                      f"{ceilings.fp32_flops_per_s / 1e12:.1f} fp32 TFLOP/s, {ceilings.tf32_flops_per_s / 1e12:.0f} TF32, "
                      f"{ceilings.half_flops_per_s / 1e12:.0f} fp16/bf16 (measured); fp32 floors allow 3xTF32 "
                      "(TF32 / 3), the fastest fp32-accurate tensor-core arithmetic")


@app.command("eval")
def eval_cmd(
    problem: str = typer.Argument(..., help="a bundled problem name or a KernelBench-format file"),
    candidate: str = typer.Argument(..., help="the candidate: a Python file defining ModelNew"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON object (the evaluation's fields)"),
    device: Optional[str] = typer.Option(None, "--device", help="cuda | cpu (default: cuda if available, else cpu)"),
    size: Optional[str] = typer.Option(None, "--size", help="full | small (default: full on cuda, small on cpu)"),
    timeout: float = typer.Option(300.0, "--timeout", help="seconds the evaluation may take"),
    rtol: Optional[float] = typer.Option(None, "--rtol", help="relative tolerance (default 1e-5 fp32, 1e-2 fp16/bf16)"),
    db: Optional[str] = typer.Option(None, "--db", help="a results DB to take (or store) the eager and torch.compile "
                                                        "baselines from; without it they are not timed"),
    no_sandbox: bool = NoSandboxOption,
) -> None:
    """Evaluate one candidate: static checks, compile, verify against the reference and (on a GPU) time it."""
    import json
    from pathlib import Path

    from kgen.evaluate import evaluate_candidate
    from kgen.problems import load_problem
    from kgen.records import EvalSettings

    path = Path(candidate)
    if not path.is_file():
        raise KgenError(f"candidate file not found: {candidate}")
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise KgenError(f"cannot read candidate file {candidate}: {e}") from e
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if timeout <= 0:
        raise KgenError("--timeout must be positive")
    if rtol is not None and not 0 < rtol < 1:
        raise KgenError("--rtol must be between 0 and 1")
    size = size or ("small" if device == "cpu" else "full")
    loaded = load_problem(problem, size)
    settings = EvalSettings(device=device, size=size, timeout_s=timeout, rtol=rtol,
                            sandbox="none" if no_sandbox else "bwrap")
    from kgen.sandbox import SandboxMode, check_sandbox

    check_sandbox(SandboxMode(settings.sandbox))
    if db is not None and device != "cpu":
        from kgen.baselines import get_baselines
        from kgen.db import open_db

        baselines = get_baselines(open_db(db), loaded, device)
        if baselines is not None:
            settings.baseline_eager_ms, settings.baseline_compile_ms = baselines[0], baselines[1]
    result = evaluate_candidate(loaded, source, settings)
    if json_out:
        print(json.dumps(result.to_dict(), default=str))
        return
    style = {"correct": "bold green", "suspicious": "bold yellow"}.get(result.outcome, "bold red")
    console.print(f"[{style}]{result.outcome}[/] {loaded.name} ({loaded.size}) on {result.device}: "
                  f"{result.language or 'unknown language'}", highlight=False)
    if result.message:
        console.print(result.message, highlight=False, markup=False, soft_wrap=True)
    if result.norm_rel_err is not None:
        console.print(f"error: normwise {result.norm_rel_err:.3g}, max abs {result.max_abs_err:.3g}, "
                      f"max rel {result.max_rel_err:.3g} (rtol {result.rtol:g}, atol {result.atol:.3g})", highlight=False)
    if result.torch_ops:
        console.print(f"torch operators still called: {', '.join(result.torch_ops)}", highlight=False)
    if result.runtime_ms is not None:
        parts = [f"runtime {result.runtime_ms:.4g} ms"]
        if result.eager_ms:
            parts.append(f"eager {result.eager_ms:.4g} ms ({result.speedup_eager:.2f}x)")
        if result.compile_ms:
            parts.append(f"torch.compile {result.compile_ms:.4g} ms ({result.speedup_compile:.2f}x)")
        if result.roofline_pct is not None:
            parts.append(f"{result.roofline_pct:.0f}% of roofline")
        console.print(", ".join(parts), highlight=False)
    elif result.outcome == "correct":
        console.print("untimed: no GPU, so no runtime, speedups or roofline %", highlight=False)


@app.command("search")
def search_cmd(
    problem: Optional[str] = typer.Option(None, "--problem", "-p", help="a bundled problem name or a KernelBench-format file"),
    rounds: int = typer.Option(10, "--rounds", help="rounds of propose → evaluate"),
    candidates: int = typer.Option(8, "--candidates", "-n", help="candidates proposed per round"),
    proposer: Optional[str] = typer.Option(None, "--proposer", help="openai | offline | replay (default: openai when an endpoint is configured, else offline)"),
    language: str = typer.Option("any", "--language", help="triton | cuda | any"),
    size: Optional[str] = typer.Option(None, "--size", help="full | small (default: full with a GPU, small without)"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="join a Ray cluster (auto, HOST:PORT, ray://HOST:PORT; "
                                              "with RAY_AUTH_MODE=token and its token: README, Running on a Ray cluster); "
                                              "default: start a local one"),
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
    overlap: bool = typer.Option(True, "--overlap/--no-overlap", help="propose round k+1 once round k has compiled, "
                                 "so compiles overlap timing (default); --no-overlap: each round sees all of the last"),
    no_sandbox: bool = NoSandboxOption,
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
        replay_run=replay_run, overlap=overlap, sandbox="none" if no_sandbox else "bwrap")
    from kgen.sandbox import SandboxMode, check_sandbox

    if config is not None:
        check_sandbox(SandboxMode(config.sandbox))
    from kgen.search import STOP_REQUESTED, request_stop

    STOP_REQUESTED.clear()
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)  # `kill` stops as cleanly as Ctrl-C
    try:
        summary = run_search(db, config, resume_run_id=resume, ray_address=ray_address,
                             progress=make_progress(quiet, console))
    except KeyboardInterrupt:  # typer returns, not raises, 130 under standalone_mode=False: exit here
        print("kgen: interrupted", file=sys.stderr)
        sys.exit(130)
    for line in summary_lines(summary):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command("leaderboard")
def leaderboard_cmd(
    problem: Optional[str] = typer.Option(None, "--problem", "-p", help="only this problem"),
    device: Optional[str] = typer.Option(None, "--device", help="only devices whose name contains this (e.g. H100, cpu)"),
    include_all: bool = typer.Option(False, "--all", help="every correct candidate, not only the best per problem and device"),
    fmt: str = typer.Option("table", "--format", "-f", help="table | json | csv | markdown"),
    db: Optional[str] = DbOption,
) -> None:
    """The best correct candidate per (problem, device), fastest first; every correct one with --all."""
    from kgen import leaderboard as lb
    from kgen.db import open_db

    if fmt not in lb.FORMATS:
        raise KgenError(f"unknown format '{fmt}' (choose {', '.join(lb.FORMATS)})")
    database = open_db(db, read_only=True)
    try:
        rows = lb.leaderboard(database, problem=problem, device=device, include_all=include_all)
    finally:
        database.close()
    if fmt == "json":
        print(lb.to_json(rows))
    elif fmt == "csv":
        print(lb.to_csv(rows), end="")
    elif fmt == "markdown":
        print(lb.to_markdown(rows), end="")
    elif not rows:
        console.print("no correct candidates yet" + (f" for {problem}" if problem else ""), highlight=False)
    else:
        console.print(lb.rich_table(rows, "kgen leaderboard" + (" (all correct candidates)" if include_all else "")))
        if any(r.runtime_ms is None for r in rows):
            console.print("untimed rows were evaluated without a GPU: ranked by correctness only, oldest first",
                          highlight=False)


@app.command("show")
def show_cmd(candidate_id: int = typer.Argument(..., help="the candidate id (see kgen leaderboard)"),
             db: Optional[str] = DbOption) -> None:
    """One candidate: its idea, evaluations, lineage back to its first ancestor, and its source."""
    from kgen import leaderboard as lb
    from kgen.db import open_db

    database = open_db(db, read_only=True)
    try:
        detail = lb.candidate_detail(database, candidate_id)
    finally:
        database.close()
    lb.render_detail(detail, console)


@app.command("runs")
def runs_cmd(problem: Optional[str] = typer.Option(None, "--problem", "-p", help="only this problem"),
             as_json: bool = typer.Option(False, "--json", help="JSON instead of a table"),
             db: Optional[str] = DbOption) -> None:
    """The searches: problem, settings, status, rounds done, best speedups and tokens spent."""
    import json

    from rich.markup import escape

    from kgen import leaderboard as lb
    from kgen.db import open_db

    database = open_db(db, read_only=True)
    try:
        rows = lb.run_rows(database, problem=problem)
    finally:
        database.close()
    if as_json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    if not rows:
        console.print("no runs yet", highlight=False)
        return
    table = Table(title="kgen runs")
    for col in ("run", "problem", "settings", "device", "status", "rounds", "candidates", "correct", "best",
                "vs eager", "vs compile", "tokens in/out", "started"):
        table.add_column(col, overflow="fold", justify="right" if col in ("run", "candidates", "correct", "best") else "left")
    for r in rows:
        settings = (f"{lb.fmt_proposer(r.proposer, r.model)}, {r.size}, {r.candidates_per_round}/round, "
                    f"{r.language}, seed {r.seed}")
        table.add_row(str(r.run_id), escape(r.problem), escape(settings), escape(r.device or "-"), r.status_text,
                      f"{r.rounds_done}/{r.rounds_planned}", str(r.candidates), str(r.correct),
                      "-" if r.best_candidate_id is None else str(r.best_candidate_id),
                      lb.fmt_x(r.best_speedup_eager), lb.fmt_x(r.best_speedup_compile),
                      f"{_fmt_count(r.tokens_in)} / {_fmt_count(r.tokens_out)}", lb.fmt_when(r.started_at))
    console.print(table)


@app.command("export")
def export_cmd(
    target: str = typer.Argument(..., help="a candidate id, or a problem name (its winner on this device)"),
    out: str = typer.Option(..., "--out", "-o", help="the module to write, e.g. softmax_kernel.py"),
    with_test: bool = typer.Option(False, "--with-test", help="also write test_<module>.py beside it"),
    db: Optional[str] = DbOption,
) -> None:
    """Write a candidate as a standalone module (torch + triton or a CUDA toolchain; no kgen)."""
    from kgen.db import open_db
    from kgen.export import export_candidate

    database = open_db(db, read_only=True)
    try:
        written = export_candidate(database, target, out, with_test=with_test)
    finally:
        database.close()
    for line in written.summary_lines():
        console.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command("report")
def report_cmd(
    out: str = typer.Option("report.html", "--out", "-o", help="the HTML file to write"),
    problem: Optional[str] = typer.Option(None, "--problem", "-p", help="only this problem's runs"),
    run: Optional[int] = typer.Option(None, "--run", help="only this run"),
    db: Optional[str] = DbOption,
) -> None:
    """One self-contained HTML page: the leaderboard and plots of how the searches went."""
    from kgen.db import open_db
    from kgen.report import write_report

    database = open_db(db, read_only=True)
    try:
        path = write_report(database, out, problem=problem, run_id=run)
    finally:
        database.close()
    console.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)


@app.command("migrate")
def migrate_cmd(db: Optional[str] = DbOption) -> None:
    """Upgrade a results DB written by an older kgen to this kgen's schema (commands that write do it on
    their own; commands that only read never change the DB)."""
    from kgen.db import SCHEMA_VERSION, open_db

    database = open_db(db, create=False)
    database.close()
    console.print(f"{database.url}: schema version {SCHEMA_VERSION}, this kgen's", highlight=False, markup=False,
                  soft_wrap=True)


@app.command("bench")
def bench_cmd(
    problems: Optional[list[str]] = typer.Option(None, "--problems", help="problems to search (repeat the option; default: the five)"),
    rounds: int = typer.Option(2, "--rounds"),
    candidates: int = typer.Option(2, "--candidates", "-n"),
    seed: int = typer.Option(0, "--seed"),
    language: str = typer.Option("triton", "--language",
                                 help="triton | cuda | any (default triton: the default budget then ends in under 300 s "
                                      "on an H100 for the five problems, fresh DB; CUDA builds take 30-90 s each)"),
    max_autotune: bool = typer.Option(False, "--max-autotune", help="also time torch.compile(mode='max-autotune') "
                                      "(minutes per problem on a fresh DB; cached in the DB afterwards)"),
    gpus: Optional[list[int]] = typer.Option(None, "--gpus", help="run the problems on a local cluster using this many "
                                             "GPUs; repeat (--gpus 1 --gpus 2) for a scaling table, one pass and DB each"),
    out: str = typer.Option("bench-out", "--out", help="folder for bench.md, bench.json and bench.db"),
    db: Optional[str] = typer.Option(None, "--db", help="results DB (default: OUT/bench.db)"),
    timeout: float = typer.Option(300.0, "--timeout", help="seconds one candidate's evaluation may take"),
) -> None:
    """Benchmark: offline searches on a fixed seed and budget; kernel quality vs torch, torch.compile and
    the roofline, and search throughput (markdown + JSON under --out, rewritten as each problem ends)."""
    from pathlib import Path

    from kgen.bench import DEFAULT_PROBLEMS, QUALITY_HEADER, problem_summary, quality_line, run_bench

    if rounds < 1 or candidates < 1:
        raise KgenError("--rounds and --candidates must be at least 1")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def show(quality, throughput) -> None:  # each problem's row as soon as its search ends
        console.print(f"{QUALITY_HEADER}\n{quality_line(quality)}\n{problem_summary(throughput)}", markup=False,
                      highlight=False, soft_wrap=True)

    path, text = run_bench(list(problems or DEFAULT_PROBLEMS), rounds=rounds, candidates=candidates, seed=seed,
                           out_dir=out_dir, db=db, language=language, timeout_s=timeout, max_autotune=max_autotune,
                           gpu_counts=list(gpus) if gpus else [None], on_problem=show)
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    console.print(f"written: {path} and {path.with_suffix('.json')}")


def main() -> None:
    try:
        code = app(standalone_mode=False)  # returns (not raises) typer.Exit's code in this mode
        if isinstance(code, int) and code:
            sys.exit(code)
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
