"""The `kgen` command line: a thin shell over the library. Every command is callable from Python too.

Bad input raises KgenError anywhere below; `main` prints it in one line and exits 2
(`KGEN_DEBUG=1` shows the traceback). Help and bad flags are answered before torch, Ray or
SQLAlchemy is imported: each command imports what it needs when it runs.

Help texts: each option says what it does, names its value (`--rounds R`), and gives its default
once, as `[default: ...]` (in words where it depends on the machine).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Optional

import typer
from rich.console import Console
from typer.core import TyperCommand

from kgen import __version__
from kgen.core import fmt
from kgen.core.errors import KgenError
from kgen.core.records import LANGUAGE_CHOICES, PROPOSER_KINDS, SIZES, verdict_label


class KgenCommand(TyperCommand):
    """Help as kgen writes it: arguments and options named by what they hold (`--rounds R`), never
    by their type, and each default said once, as `[default: ...]` (`show_default` holds the words
    for a default that depends on the machine)."""

    def get_short_help_str(self, limit: int = 45) -> str:
        """The summary `kgen --help` lists: the docstring's first paragraph in full, never cut with "..."
        (click cuts it to the terminal's width; the help formatter wraps it instead)."""
        text = self.short_help or (self.help or "").split("\n\n")[0]
        return " ".join(text.split())

    def collect_usage_pieces(self, ctx) -> list[str]:
        return [self.options_metavar, *(_value_name(p) for p in self.get_params(ctx)
                                        if p.param_type_name == "argument")]

    def format_options(self, ctx, formatter) -> None:
        arguments, options = [], []
        for p in self.get_params(ctx):
            if getattr(p, "hidden", False):
                continue
            if p.param_type_name == "argument":
                arguments.append((_value_name(p), p.help or ""))
                continue
            names = ", ".join(sorted(p.opts, key=len)) + "".join(f" / {o}" for o in p.secondary_opts)
            if not p.is_flag:
                names += f" {_value_name(p)}"
            default = _default_text(p)
            options.append((names, (p.help or "") + (f"  [default: {default}]" if default is not None else "")))
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _value_name(param) -> str:
    return param.metavar or param.name.upper()


def _default_text(param) -> Optional[str]:
    if isinstance(param.show_default, str):
        return param.show_default
    if param.is_flag and param.secondary_opts:
        return (param.opts[-1] if param.default else param.secondary_opts[0]).lstrip("-")
    if param.is_flag or param.required or param.default is None or param.show_default is False:
        return None
    return f"{param.default:g}" if isinstance(param.default, float) else str(param.default)


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Search for GPU kernels (Triton, CUDA C++) faster than PyTorch.")
console = Console()

DB_DEFAULT = "KGEN_DB, else ./results.db"
DbOption = typer.Option(None, "--db", metavar="URL|PATH", show_default=DB_DEFAULT,
                        help="The results DB: a SQLite file or an SQLAlchemy URL.")
WideOption = typer.Option(False, "--wide", help="Show every column, however wide.")
NoSandboxOption = typer.Option(False, "--no-sandbox", help="Run candidates without bubblewrap (each still runs in a "
                               "process of its own, apart from the judge, with an allow-listed environment); every "
                               "result records it.")
# Options that take a list: `--problems a b` and `--problems a,b` both work (see expand_list_options).
LIST_OPTIONS = {"bench": ("--problems",)}


def _choice(*choices: str):
    """A callback that refuses any value but `choices` in one line, before anything heavy is imported."""
    def check(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> Optional[str]:
        if value is not None and value not in choices:
            name = param.opts[0].lstrip("-")
            raise KgenError(f"unknown {name} '{value}' (choose {', '.join(choices)})")
        return value
    return check


def _at_least_1(ctx: typer.Context, param: typer.CallbackParam, value: Optional[int]) -> Optional[int]:
    if value is not None and value < 1:
        raise KgenError(f"{param.opts[0]} must be at least 1 (got {value})")
    return value


def _positive(ctx: typer.Context, param: typer.CallbackParam, value: Optional[float]) -> Optional[float]:
    if value is not None and value <= 0:
        raise KgenError(f"{param.opts[0]} must be positive (got {value:g})")
    return value


def _price(ctx: typer.Context, param: typer.CallbackParam, value: Optional[float]) -> Optional[float]:
    """A token price (USD per million) as kgen.store.ledger.check_price takes it, checked without importing it."""
    if value is not None and not 0 <= value < float("inf"):
        raise KgenError(f"{param.opts[0]} must be a non-negative number of USD per million tokens (got '{value:g}')")
    return value


PriceInOption = typer.Option(None, "--price-in", metavar="USD", callback=_price,
                             show_default="KGEN_PRICE_IN", help="The LLM's price of a million input tokens, "
                                                                "for the cost ledger.")
PriceOutOption = typer.Option(None, "--price-out", metavar="USD", callback=_price,
                              show_default="KGEN_PRICE_OUT", help="The LLM's price of a million output tokens, "
                                                                  "for the cost ledger.")


def _version(value: bool) -> None:
    if value:
        console.print(f"kgen {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Show the version and exit.")) -> None:
    pass


@app.command(cls=KgenCommand, name="problems")
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
                      "(TF32 / 3), the fastest fp32-accurate tensor-core arithmetic", highlight=False, soft_wrap=True)
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


@dataclass(frozen=True)
class NamedProblem:
    """A problem as a static reject names it: found, never loaded (loading imports torch)."""

    name: str
    size: str


def _problem_file_exists(problem: str) -> bool:
    """Whether `problem` names a bundled problem or a file, as kgen.problems.problem.resolve_problem_path finds
    them (which says what is wrong when it does not), without importing torch."""
    from pathlib import Path

    from kgen.core.resources import problems_dir

    if problem.endswith(".py") or os.sep in problem or "/" in problem:
        return Path(problem).expanduser().is_file()
    return (problems_dir() / f"{problem}.py").is_file()


def process_age_s() -> Optional[float]:
    """Seconds since this process started (Linux: /proc): what kgen's own start and imports cost
    before the evaluation began; None where it cannot tell."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
        return round(uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError):
        return None


def evaluate_file(problem: str, candidate: str, *, device: Optional[str] = None, size: Optional[str] = None,
                  timeout_s: float = 300.0, rtol: Optional[float] = None, db: Optional[str] = None,
                  baselines: bool = True, sandbox: bool = True):
    """`kgen eval` as a function: evaluate the candidate file against `problem`; on a GPU, with the
    eager and torch.compile baselines (timed once, then taken from the results DB) unless `baselines`
    is False; in bubblewrap unless `sandbox` is False. Returns (problem, EvalResult)."""
    from pathlib import Path

    from kgen.core.records import EvalSettings
    from kgen.judge.static_checks import check_source

    path = Path(candidate)
    if not path.is_file():
        raise KgenError(f"candidate file not found: {candidate}")
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise KgenError(f"cannot read candidate file {candidate}: {e}") from e
    if rtol is not None and not 0 < rtol < 1:
        raise KgenError("--rtol must be between 0 and 1")
    startup_s, started = process_age_s(), time.monotonic()
    verdict = check_source(source)
    if verdict.rejection is not None and _problem_file_exists(problem):
        # rejected without running: nothing is started or loaded (not even torch), so it takes a moment
        from kgen.core.records import EvalResult, Outcome

        result = EvalResult(outcome=Outcome.STATIC_REJECT.value, message=verdict.rejection, device=device or "-",
                            size=size or "-", language=verdict.language if verdict.language != "unknown" else None,
                            eval_s=time.monotonic() - started)
        result.details["breakdown"] = {"startup_s": startup_s, "static_s": round(result.eval_s, 3)}
        return NamedProblem(Path(problem).stem, size or "-"), result
    from kgen.judge.evaluate import evaluate_one
    from kgen.problems.problem import load_problem

    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    size = size or ("small" if device == "cpu" else "full")
    loaded = load_problem(problem, size)
    settings = EvalSettings(device=device, size=size, timeout_s=timeout_s, rtol=rtol,
                            sandbox="bwrap" if sandbox else "none")
    from kgen.judge.sandbox import SandboxMode, check_sandbox

    check_sandbox(SandboxMode(settings.sandbox))
    from_db = None  # where the baselines come from: the results DB, timed into it the first time
    if baselines and device != "cpu":
        from functools import partial

        from kgen.store.baselines import get_baselines_at
        from kgen.store.db import db_url, mask_url

        from_db = partial(get_baselines_at, db)
        print(f"kgen: eager and torch.compile baselines: from {mask_url(db_url(db))}, or timed now (once) and kept "
              "there (--no-baselines skips them)", file=sys.stderr)
    if device == "cpu" and size == "full":
        from kgen.search.loop import FULL_SIZE_ON_CPU_NOTE

        print(f"kgen: {FULL_SIZE_ON_CPU_NOTE}", file=sys.stderr, flush=True)
    note = _cuda_without_gpu_note(source, device)
    if note:
        print(f"kgen: {note}", file=sys.stderr, flush=True)
    load_s = round(time.monotonic() - started, 3)  # torch's import, the problem loaded, the sandbox checked
    result = evaluate_one(loaded, source, settings, baselines=from_db)
    result.details["breakdown"] = {"startup_s": startup_s, "load_s": load_s, **result.details.get("breakdown", {})}
    return loaded, result


def _cuda_without_gpu_note(source: str, device: str) -> Optional[str]:
    """What `kgen eval` waits for with a CUDA C++ candidate and no GPU, said before the wait. The build
    is kept rather than skipped although the verdict can only be not_run: it is the one check this
    machine can make (a compile error shows here, not first on the GPU machine), and the built
    extension is cached for the next evaluation of the same source."""
    if device != "cpu":
        return None
    from kgen.harness.cuda_build import nvcc_path
    from kgen.judge.evaluate import detect_language

    if detect_language(source) != "cuda":
        return None
    if nvcc_path() is None:
        return "a CUDA C++ candidate, and no GPU or nvcc here: it cannot be compiled or run (outcome not_run)"
    return ("a CUDA C++ candidate and no GPU here: compiling it with nvcc to catch compile errors (minutes on a "
            "small machine; the build is cached); it will not be run, verified or timed here, so the outcome is "
            "not_run unless it fails to compile")


def eval_lines(problem, result) -> list[str]:
    """What `kgen eval` prints about a result (after its outcome line)."""
    lines = [result.message] if result.message else []
    if result.norm_rel_err is not None:
        lines.append(f"error: normwise {result.norm_rel_err:.3g}, max abs {result.max_abs_err:.3g}, "
                     f"max rel {result.max_rel_err:.3g} (rtol {fmt.tol(result.rtol)}, atol {fmt.tol(result.atol)})")
    if result.details.get("torch_own_error"):
        lines.append(fmt.torch_itself(result.details))
    if result.torch_ops:
        lines.append(f"torch operators still called: {', '.join(result.torch_ops)}")
    if result.runtime_ms is not None:
        parts = [f"runtime {fmt.ms(result.runtime_ms)} ms"]
        if result.eager_ms:
            parts.append(f"eager {fmt.ms(result.eager_ms)} ms ({fmt.speedup(result.speedup_eager)})")
        if result.compile_ms:
            parts.append(f"torch.compile {fmt.ms(result.compile_ms)} ms ({fmt.speedup(result.speedup_compile)})")
        if result.roofline_pct is not None:
            parts.append(f"{fmt.pct(result.roofline_pct)} of roofline")
        lines.append(", ".join(parts))
    elif result.outcome == "correct":
        lines.append("untimed: no GPU, so no runtime, speedups or roofline %")
    return lines


COLLECTION_FORMATS = ("table", "json", "csv", "markdown")


@app.command(cls=KgenCommand, name="eval")
def eval_cmd(
    problem: Optional[str] = typer.Argument(None, metavar="PROBLEM|COLLECTION",
                                            help="A bundled problem name or a KernelBench-format file; alone, a "
                                                 "collection: a folder (KernelBench generations, or NAME.py + "
                                                 "NAME_ref.py pairs) or a .jsonl file."),
    candidate: Optional[str] = typer.Argument(None, metavar="[CANDIDATE.py]",
                                              help="The candidate: a Python file defining ModelNew."),
    json_out: bool = typer.Option(False, "--json", help="Print the evaluation as one JSON object."),
    check: bool = typer.Option(False, "--check", help="Exit 1 unless the candidate is correct (for CI gates; a "
                                                      "collection: unless every entry is)."),
    device: Optional[str] = typer.Option(None, "--device", metavar="cuda|cpu", callback=_choice("cuda", "cpu"),
                                         show_default="cuda with a GPU, else cpu", help="Where to run it."),
    size: Optional[str] = typer.Option(None, "--size", metavar="full|small", callback=_choice(*SIZES),
                                       show_default="full on cuda, small on cpu", help="The problem size."),
    timeout: float = typer.Option(300.0, "--timeout", metavar="S", callback=_positive,
                                  help="Seconds the evaluation may take."),
    rtol: Optional[float] = typer.Option(None, "--rtol", metavar="X", show_default="1e-5 for fp32, 1e-2 for fp16/bf16",
                                         help="Relative tolerance of the correctness check."),
    baselines: bool = typer.Option(True, "--baselines/--no-baselines",
                                   help="On a GPU, time eager and torch.compile (once; the results DB keeps them) "
                                        "and print the speedups."),
    db: Optional[str] = DbOption,
    no_sandbox: bool = NoSandboxOption,
    kernelbench: Optional[str] = typer.Option(None, "--kernelbench", metavar="DIR",
                                              help="A KernelBench checkout: where a collection's level/problem "
                                                   "references are found."),
    form: str = typer.Option("table", "--format", metavar="|".join(COLLECTION_FORMATS),
                             callback=_choice(*COLLECTION_FORMATS), help="A collection's summary format."),
    resume: Optional[int] = typer.Option(None, "--resume", metavar="RUN_ID",
                                         help="Continue an unfinished collection run (or print a finished one's "
                                              "summary)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR", show_default="start a local one",
                                              help="A collection: join this Ray cluster (as kgen search does)."),
) -> None:
    """Evaluate one candidate file, or a whole collection, with the search's harness.

    Static checks, compile, verify against the reference and, on a GPU, time it. Exit 0 once the
    candidate is evaluated, whatever its outcome (with --check: 0 only when it is correct, else 1);
    2 for bad input. With one argument, a collection: every entry evaluated on Ray as one run, then a
    summary (outcomes, KernelBench's fast_p, claimed vs measured speedups).
    """
    import json

    if candidate is None:
        return _eval_collection(problem, kernelbench=kernelbench, form="json" if json_out else form, check=check,
                                size=size, timeout=timeout, db=db, sandbox=not no_sandbox, resume=resume,
                                ray_address=ray_address, single_only={"--device": device, "--rtol": rtol,
                                                                      "--no-baselines": not baselines or None})
    if resume is not None or kernelbench is not None or ray_address is not None:
        raise KgenError("--resume, --kernelbench and --ray-address are for a collection (kgen eval COLLECTION)")
    loaded, result = evaluate_file(problem, candidate, device=device, size=size, timeout_s=timeout, rtol=rtol,
                                   db=db, baselines=baselines, sandbox=not no_sandbox)
    if json_out:
        print(json.dumps(result.to_dict(), default=str))
    else:
        style = {"correct": "bold green", "suspicious": "bold yellow"}.get(result.outcome, "bold red")
        where = f"({loaded.size}) on {result.device}" if result.device != "-" else "(static checks only: nothing ran)"
        console.print(f"[{style}]{verdict_label(result.outcome, result.device)}[/] {loaded.name} {where}: "
                      f"{result.language or 'unknown language'}", highlight=False, soft_wrap=True)
        for line in eval_lines(loaded, result):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    if check and result.outcome != "correct":
        raise typer.Exit(1)


def _eval_collection(collection: Optional[str], *, kernelbench, form, check, size, timeout, db, sandbox, resume,
                     ray_address, single_only: dict) -> None:
    """`kgen eval COLLECTION` (kgen.search.collection): progress on stderr, the summary on stdout."""
    import signal
    from pathlib import Path

    given = [name for name, value in single_only.items() if value is not None]
    if given:
        raise KgenError(f"{', '.join(given)}: for one candidate (kgen eval PROBLEM CANDIDATE.py), not a collection")
    if collection is None and resume is None:
        raise KgenError("give PROBLEM CANDIDATE.py, a collection (a folder or a .jsonl file), or --resume RUN_ID")
    if collection is not None and resume is not None:
        raise KgenError("--resume continues a stored run: give no collection with it")
    if collection is not None and not (Path(collection).is_dir() or collection.endswith(".jsonl")):
        raise KgenError(f"'{collection}' is not a collection (a folder or a .jsonl file); to evaluate one "
                        "candidate: kgen eval PROBLEM CANDIDATE.py")
    from kgen.search.collection import CollectionConfig, entry_results, run_collection
    from kgen.search.collection_summary import render, summarize
    from kgen.search.loop import STOP_REQUESTED, request_stop

    config = None if collection is None else CollectionConfig(
        collection=str(Path(collection).absolute()), size=size, timeout_s=timeout,
        sandbox="bwrap" if sandbox else "none", kernelbench=str(Path(kernelbench).absolute()) if kernelbench else None)
    STOP_REQUESTED.clear()
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        run_id = run_collection(db, config, resume_run_id=resume, ray_address=ray_address)
    except KeyboardInterrupt:
        print("kgen: interrupted", file=sys.stderr)
        sys.exit(130)
    from kgen.store.db import open_db

    database = open_db(db, read_only=True)
    try:
        results, timed = entry_results(database, run_id)
    finally:
        database.close()
    summary = summarize(results, timed=timed)
    if form == "table":
        print(f"collection run {run_id} ({database.url})")
    sys.stdout.write(render(summary, results, form))
    if check and any(r.outcome != "correct" for r in results):
        raise typer.Exit(1)


@app.command(cls=KgenCommand, name="search")
def search_cmd(
    problem: Optional[str] = typer.Option(None, "--problem", "-p", metavar="NAME|FILE",
                                          help="The problem: a bundled name (see kgen problems) or a "
                                               "KernelBench-format file."),
    rounds: int = typer.Option(10, "--rounds", metavar="R", callback=_at_least_1, help="Rounds of propose → evaluate."),
    candidates: Optional[int] = typer.Option(None, "--candidates", "-n", metavar="N", callback=_at_least_1,
                                             show_default="8 with a GPU, 4 without",
                                             help="Candidates proposed per round."),
    proposer: Optional[str] = typer.Option(None, "--proposer", metavar="|".join(PROPOSER_KINDS),
                                           callback=_choice(*PROPOSER_KINDS),
                                           show_default="openai when OPENAI_API_KEY or OPENAI_BASE_URL is set, "
                                                        "else offline",
                                           help="Who writes the candidates: an LLM endpoint, the offline retuner, "
                                                "or a replay of a logged search."),
    language: Optional[str] = typer.Option(None, "--language", metavar="|".join(LANGUAGE_CHOICES),
                                           callback=_choice(*LANGUAGE_CHOICES),
                                           show_default="any with a GPU; triton without (CUDA would only compile)",
                                           help="The kernel language to propose."),
    size: Optional[str] = typer.Option(None, "--size", metavar="full|small", callback=_choice(*SIZES),
                                       show_default="full with a GPU, small without", help="The problem size."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR", show_default="start a local one",
                                              help="Join a Ray cluster: auto, HOST:PORT or ray://HOST:PORT (with "
                                                   "RAY_AUTH_MODE=token and its token: see the README, Running on "
                                                   "a Ray cluster)."),
    db: Optional[str] = DbOption,
    seed: int = typer.Option(0, "--seed", metavar="S", help="Seed of the proposer's choices (the offline "
                                                            "proposer's retunings vary with it)."),
    resume: Optional[int] = typer.Option(None, "--resume", metavar="RUN_ID",
                                         help="Continue an unfinished run with its stored settings."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="One plain line per event instead of the live display "
                                                            "(always so when output is not a terminal)."),
    timeout: float = typer.Option(300.0, "--timeout", metavar="S", callback=_positive,
                                  help="Seconds one candidate's evaluation may take."),
    model: Optional[str] = typer.Option(None, "--model", metavar="NAME", show_default="KGEN_MODEL, else the server's "
                                                                                      "only model",
                                        help="The LLM to ask (openai proposer)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", metavar="URL", show_default="OPENAI_BASE_URL, else "
                                                                                           "OpenAI's",
                                           help="An OpenAI-compatible endpoint (openai proposer)."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", metavar="VAR", show_default="OPENAI_API_KEY",
                                              help="The environment variable that holds the API key."),
    prompts: Optional[str] = typer.Option(None, "--prompts", metavar="DIR", show_default="the bundled prompts/",
                                          help="A folder of prompt templates (system.j2, propose.j2, repair.j2) "
                                               "that replace the bundled ones by name."),
    replay_db: Optional[str] = typer.Option(None, "--from", metavar="URL|PATH",
                                            help="The results DB whose proposals the replay proposer replays."),
    replay_run: Optional[int] = typer.Option(None, "--run", metavar="RUN_ID", show_default="every run in it",
                                             help="The run in --from to replay."),
    overlap: bool = typer.Option(True, "--overlap/--no-overlap",
                                 help="Propose round k+1 once round k has compiled, so compiles overlap timing; "
                                      "--no-overlap lets each round see all of the last one's results."),
    starters: Optional[str] = typer.Option(None, "--starters", metavar="DIR",
                                           show_default="starters/<problem>/ beside the problem",
                                           help="A folder of starter kernels (files defining ModelNew) for the "
                                                "offline proposer."),
    no_sandbox: bool = NoSandboxOption,
    price_in: Optional[float] = PriceInOption,
    price_out: Optional[float] = PriceOutOption,
    ncu_budget: float = typer.Option(60.0, "--ncu-budget", metavar="S", min=0,
                                     help="Seconds per round for Nsight Compute profiles (stall reasons, DRAM "
                                          "traffic, occupancy) of the parents the next prompt shows, then the "
                                          "round's best new candidates, at most 15% of the search's time; 0: none. "
                                          "GPU and ncu only."),
) -> None:
    """Search for kernels faster than PyTorch.

    Rounds of propose → compile → verify → time on Ray, every result stored in the results DB.
    """
    import signal
    from pathlib import Path

    from kgen.search.loop import SearchConfig, run_search
    from kgen.search.progress import make_progress, summary_lines

    if resume is None and problem is None:
        raise KgenError("give --problem (or --resume RUN_ID)")
    from kgen.store.ledger import flag_prices

    flag_prices(price_in, price_out)  # both or neither; the run stores them for kgen runs, show and report
    config = None if resume is not None else SearchConfig(
        problem=problem, rounds=rounds, candidates=candidates, proposer=proposer, language=language, size=size,
        seed=seed, timeout_s=timeout, model=model, base_url=base_url, api_key_env=api_key_env,
        prompts_dir=str(Path(prompts).absolute()) if prompts else None,  # absolute: a resume may start elsewhere
        replay_db=str(Path(replay_db).absolute()) if replay_db and "://" not in replay_db else replay_db,
        replay_run=replay_run, overlap=overlap, sandbox="none" if no_sandbox else "bwrap",
        starters_dir=str(Path(starters).absolute()) if starters else None,  # absolute: a resume may start elsewhere
        price_in=price_in, price_out=price_out, ncu_budget_s=ncu_budget)
    from kgen.judge.sandbox import SandboxMode, check_sandbox

    if config is not None:
        check_sandbox(SandboxMode(config.sandbox))
    from kgen.search.loop import STOP_REQUESTED, request_stop

    STOP_REQUESTED.clear()
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)  # `kill` stops as cleanly as Ctrl-C
    try:
        summary = run_search(db, config, resume_run_id=resume, ray_address=ray_address,
                             progress=make_progress(quiet, console))
    except KeyboardInterrupt:  # typer returns, not raises, 130 under standalone_mode=False: exit here
        print("kgen: interrupted", file=sys.stderr)
        sys.exit(130)
    from kgen.store.db import db_option, db_url

    for line in summary_lines(summary, db=db_option(db_url(db))):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


LEADERBOARD_FORMATS = ("table", "json", "csv", "markdown")
# kgen.store.ledger.SORTS (not imported: help stays light)
LEADERBOARD_SORTS = ("runtime", "per-dollar", "per-gpu-hour")


@app.command(cls=KgenCommand, name="leaderboard")
def leaderboard_cmd(
    problem: Optional[str] = typer.Option(None, "--problem", "-p", metavar="NAME", help="Only this problem."),
    device: Optional[str] = typer.Option(None, "--device", metavar="TEXT",
                                         help="Only devices whose name contains TEXT (e.g. H100, cpu)."),
    include_all: bool = typer.Option(False, "--all", help="Every correct candidate, not only the best per problem, "
                                                          "device and size."),
    fmt_name: str = typer.Option("table", "--format", "-f", metavar="|".join(LEADERBOARD_FORMATS),
                                 callback=_choice(*LEADERBOARD_FORMATS), help="The output format."),
    sort: str = typer.Option("runtime", "--sort", metavar="|".join(LEADERBOARD_SORTS),
                             callback=_choice(*LEADERBOARD_SORTS),
                             help="Order: fastest first, or most speedup vs eager per dollar of LLM tokens, or per "
                                  "GPU-hour, that its run spent (kgen.store.ledger)."),
    price_in: Optional[float] = PriceInOption,
    price_out: Optional[float] = PriceOutOption,
    wide: bool = WideOption,
    db: Optional[str] = DbOption,
) -> None:
    """The best correct candidates, fastest first.

    The best per problem, device and size (every correct one with --all).
    """
    from kgen.store import leaderboard as lb
    from kgen.store import ledger
    from kgen.store.db import open_db

    database = open_db(db, read_only=True)
    try:
        lb.check_problem(database, problem)
        rows = lb.leaderboard(database, problem=problem, device=device, include_all=include_all)
        rows = ledger.sort_board(database, rows, sort, ledger.flag_prices(price_in, price_out))
    finally:
        database.close()
    if fmt_name == "json":
        print(lb.to_json(rows))
    elif fmt_name == "csv":
        print(lb.to_csv(rows), end="")
    elif fmt_name == "markdown":
        print(lb.to_markdown(rows), end="")
    elif not rows:
        console.print("no correct candidates yet" + (f" for {problem}" if problem else ""), highlight=False)
    elif sort != "runtime":
        per = sort.replace("-", " ").replace("gpu", "GPU")  # per dollar, per GPU hour
        lb.print_cost_board(rows, console, sort=sort, wide=wide, title=f"kgen leaderboard by speedup {per}"
                            + (" (all correct candidates)" if include_all else ""))
    else:
        lb.print_board(rows, console, title="kgen leaderboard" + (" (all correct candidates)" if include_all else ""),
                       wide=wide)
        if any(r.runtime_ms is None for r in rows):
            console.print("untimed rows: evaluated without a GPU, ranked by correctness only (oldest first)",
                          highlight=False, soft_wrap=True)


@app.command(cls=KgenCommand, name="show")
def show_cmd(candidate_id: int = typer.Argument(..., metavar="ID", help="The candidate's id (see kgen leaderboard)."),
             prompt: bool = typer.Option(False, "--prompt", help="Print the LLM prompt and response that produced "
                                                                 "the candidate instead."),
             db: Optional[str] = DbOption) -> None:
    """One candidate: idea, evaluations, lineage, source."""
    from kgen.store import leaderboard as lb
    from kgen.store.db import open_db

    database = open_db(db, read_only=True)
    try:
        if prompt:
            exchange = lb.candidate_prompt(database, candidate_id)
        else:
            detail = lb.candidate_detail(database, candidate_id)
    finally:
        database.close()
    if prompt:
        console.file.write(exchange.text())
    else:
        lb.render_detail(detail, console)


RUNS_FORMATS = ("table", "json")


@app.command(cls=KgenCommand, name="runs")
def runs_cmd(problem: Optional[str] = typer.Option(None, "--problem", "-p", metavar="NAME", help="Only this problem."),
             fmt_name: str = typer.Option("table", "--format", "-f", metavar="|".join(RUNS_FORMATS),
                                          callback=_choice(*RUNS_FORMATS), help="The output format."),
             as_json: bool = typer.Option(False, "--json", hidden=True),  # kept for scripts: --format json
             price_in: Optional[float] = PriceInOption,
             price_out: Optional[float] = PriceOutOption,
             wide: bool = WideOption,
             db: Optional[str] = DbOption) -> None:
    """The searches: status, rounds, best speedups, tokens, GPU seconds and cost."""
    import json

    from kgen.store import leaderboard as lb
    from kgen.store.db import db_option, open_db

    database = open_db(db, read_only=True)
    try:
        from kgen.store.ledger import flag_prices

        lb.check_problem(database, problem)
        rows = lb.run_rows(database, problem=problem, prices=flag_prices(price_in, price_out))
    finally:
        database.close()
    if as_json or fmt_name == "json":
        print(json.dumps([r.to_dict() for r in rows], indent=2))
    elif not rows:
        console.print("no runs yet", highlight=False)
    else:
        lb.print_runs(rows, console, wide=wide, db=db_option(database.url))


@app.command(cls=KgenCommand, name="export")
def export_cmd(
    target: str = typer.Argument(..., metavar="ID|PROBLEM",
                                 help="A candidate id, or a problem name (its winner on this device)."),
    out: str = typer.Option(..., "--out", "-o", metavar="FILE.py", help="The module to write, e.g. softmax_kernel.py."),
    with_test: bool = typer.Option(False, "--with-test", help="Also write test_<module>.py, a pytest file that "
                                                              "checks it against the reference."),
    no_verify: bool = typer.Option(False, "--no-verify", help="On a GPU, skip re-running it through the judge "
                                                              "first (the module's docstring says so)."),
    aot: bool = typer.Option(False, "--aot", help="Carry the kernels compiled for this GPU: the judge re-verifies "
                                                   "the module's own text here and the module embeds what it compiled, "
                                                   "so importing it on this GPU and versions compiles nothing (needs "
                                                   "a GPU)."),
    no_sandbox: bool = NoSandboxOption,
    db: Optional[str] = DbOption,
) -> None:
    """Write a candidate as a module that needs no kgen (on a GPU, once the judge finds it still correct there)."""
    from kgen.outputs.export import export_candidate
    from kgen.store.db import open_db
    from kgen.store.leaderboard import check_problem

    database = open_db(db, read_only=True)
    try:
        if not target.isdigit():
            check_problem(database, target)
        written = export_candidate(database, target, out, with_test=with_test, verify=not no_verify, aot=aot,
                                   sandbox="none" if no_sandbox else "bwrap")
    finally:
        database.close()
    for line in written.summary_lines():
        console.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command(cls=KgenCommand, name="report")
def report_cmd(
    out: str = typer.Option("report.html", "--out", "-o", metavar="FILE.html", help="The HTML file to write."),
    problem: Optional[str] = typer.Option(None, "--problem", "-p", metavar="NAME", help="Only this problem's runs."),
    run: Optional[int] = typer.Option(None, "--run", metavar="RUN_ID", help="Only this run."),
    db: Optional[str] = DbOption,
) -> None:
    """One HTML page with the leaderboard and plots."""
    from kgen.outputs.report import write_report
    from kgen.store.db import open_db

    database = open_db(db, read_only=True)
    try:
        from kgen.store.leaderboard import check_problem

        check_problem(database, problem)
        path = write_report(database, out, problem=problem, run_id=run)
    finally:
        database.close()
    console.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)


@app.command(cls=KgenCommand, name="migrate")
def migrate_cmd(db: Optional[str] = DbOption) -> None:
    """Upgrade a results DB written by an older kgen to this kgen's schema.

    Commands that write do it on their own; commands that only read never change the DB.
    """
    from kgen.store.db import SCHEMA_VERSION, open_db

    database = open_db(db, create=False)
    database.close()
    console.print(f"{database.url}: schema version {SCHEMA_VERSION}, this kgen's", highlight=False, markup=False,
                  soft_wrap=True)


@app.command(cls=KgenCommand, name="bench")
def bench_cmd(
    problems: Optional[list[str]] = typer.Option(None, "--problems", metavar="P ...",
                                                 show_default="softmax layernorm matmul conv2d conv_relu_maxpool",
                                                 help="The problems to search: names or files, space- or "
                                                      "comma-separated."),
    rounds: int = typer.Option(2, "--rounds", metavar="R", callback=_at_least_1, help="Rounds per search."),
    candidates: int = typer.Option(2, "--candidates", "-n", metavar="N", callback=_at_least_1,
                                   help="Candidates per round."),
    seed: int = typer.Option(0, "--seed", metavar="S", help="The offline proposer's seed."),
    language: str = typer.Option("triton", "--language", metavar="|".join(LANGUAGE_CHOICES),
                                 callback=_choice(*LANGUAGE_CHOICES),
                                 help="The kernel language (CUDA candidates' builds take seconds to minutes each)."),
    max_autotune: bool = typer.Option(False, "--max-autotune", help="Also time torch.compile(mode='max-autotune') "
                                      "(minutes per problem on a fresh DB; the DB keeps it)."),
    gpus: Optional[list[int]] = typer.Option(None, "--gpus", metavar="N", show_default="every GPU, one pass",
                                             help="Run the problems on a local cluster using N GPUs; repeat "
                                                  "(--gpus 1 --gpus 2) for a scaling table, one pass and DB each."),
    out: str = typer.Option("bench-out", "--out", metavar="DIR", help="The folder for bench.md, bench.json and "
                                                                       "bench.db."),
    db: Optional[str] = typer.Option(None, "--db", metavar="URL|PATH", show_default="OUT/bench.db",
                                     help="The results DB: a SQLite file or an SQLAlchemy URL."),
    timeout: float = typer.Option(300.0, "--timeout", metavar="S", callback=_positive,
                                  help="Seconds one candidate's evaluation may take."),
) -> None:
    """The benchmark: fixed offline searches vs torch.

    One offline search per problem on a fixed seed and budget; kernel quality against torch, torch.compile
    and the roofline, and search throughput, as markdown and JSON under --out, rewritten as each problem
    ends (each problem's row is printed then too).
    """
    from pathlib import Path

    from kgen.outputs.bench import QUALITY_HEADER, parse_problems, problem_summary, quality_line, run_bench
    from kgen.problems.problem import resolve_problem_path

    names = parse_problems(problems)
    for name in names:  # an unknown name stops the bench before its first search, not after
        resolve_problem_path(name)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def show(quality, throughput) -> None:  # each problem's row as soon as its search ends
        console.print(f"{QUALITY_HEADER}\n{quality_line(quality)}\n{problem_summary(throughput)}", markup=False,
                      highlight=False, soft_wrap=True)

    path, text = run_bench(names, rounds=rounds, candidates=candidates, seed=seed, out_dir=out_dir, db=db,
                           language=language, timeout_s=timeout, max_autotune=max_autotune,
                           gpu_counts=list(gpus) if gpus else [None], on_problem=show)
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    console.print(f"written: {path} and {path.with_suffix('.json')}", highlight=False, soft_wrap=True)


def expand_list_options(argv: list[str]) -> list[str]:
    """`kgen bench --problems a b,c --rounds 1` -> `... --problems a --problems b,c --rounds 1`: the
    values after a list option (LIST_OPTIONS), up to the next option, each become one use of it
    (click takes one value per use)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    names = LIST_OPTIONS.get(command, ())
    out: list[str] = []
    taking: Optional[str] = None
    for arg in argv:
        if arg.startswith("-"):
            taking = arg if arg in names else None
            out.append(arg)
        elif taking is not None and out[-1] != taking:
            out += [taking, arg]
        else:
            out.append(arg)
    return out


def _bad_number_message(e: Exception) -> Optional[str]:
    """A value that is not a number, in kgen's words ("ID must be a whole number (got 'abc')"), rather
    than the validation library's that typer passes on; None for any other usage error."""
    param, errors = getattr(e, "param", None), getattr(e.__cause__, "errors", None)
    if param is None or not callable(errors):
        return None
    try:
        first = errors()[0]
    except (IndexError, TypeError, ValueError):
        return None
    what = {"int_parsing": "a whole number", "int_from_float": "a whole number",
            "float_parsing": "a number"}.get(first.get("type"))
    if what is None:
        return None
    name = param.opts[0] if param.param_type_name == "option" else _value_name(param)
    hint = " (kgen leaderboard lists candidate ids)" if name == "ID" else ""
    return f"{name} must be {what}, not '{first.get('input')}'{hint}"


def main(argv: Optional[list[str]] = None) -> None:
    argv = expand_list_options(list(sys.argv[1:] if argv is None else argv))
    try:
        code = app(args=argv, prog_name="kgen", standalone_mode=False)  # returns typer.Exit's code in this mode
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
        if type(e).__name__ == "NoArgsIsHelpError":  # a bare `kgen`: the help, as click gives it
            print(e.format_message(), file=sys.stderr)
            sys.exit(2)
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):  # click's (typer's) usage errors
            if os.environ.get("KGEN_DEBUG"):
                traceback.print_exc()
            print(f"kgen: error: {_bad_number_message(e) or e.format_message()}", file=sys.stderr)
            sys.exit(2)
        if os.environ.get("KGEN_DEBUG"):
            raise
        print(f"kgen: internal error: {type(e).__name__}: {e} (KGEN_DEBUG=1 shows the traceback)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
