"""`kgen eval`: one candidate file through the judge (evaluate_file, eval_lines), or a whole collection of
generated kernels as one resumable run (kgen.search.collection)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional

import typer

from kgen.cli.app import DbOption, NoSandboxOption, _choice, _positive, console
from kgen.core import fmt
from kgen.core.errors import KgenError
from kgen.core.process import process_age_s
from kgen.core.records import SIZES, verdict_label


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


def evaluate_file(problem: str, candidate: str, *, device: Optional[str] = None, size: Optional[str] = None,
                  timeout_s: float = 300.0, rtol: Optional[float] = None, db: Optional[str] = None,
                  baselines: bool = True, sandbox: bool = True):
    """`kgen eval` as a function: evaluate the candidate file against `problem`; on a GPU, with the
    eager and torch.compile baselines (timed once, then taken from the results DB) unless `baselines`
    is False; in bubblewrap unless `sandbox` is False. Returns (problem, EvalResult)."""
    from pathlib import Path

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
    # the sandboxes this evaluation takes start now (and, as root, the sandbox's probe first), beside torch's
    # import and the problem's load: on the H100 box the runner's start came 3.1 s after the reference was done
    from kgen.judge.spares import start_early

    spares = start_early(verdict.language, device, "bwrap" if sandbox else "none") \
        if verdict.rejection is None and _problem_file_exists(problem) else None  # else an error line soon
    try:
        return _evaluate_loaded(problem, source, spares, device=device, size=size, timeout_s=timeout_s, rtol=rtol,
                                db=db, baselines=baselines, sandbox=sandbox, startup_s=startup_s, started=started)
    except BaseException:
        if spares is not None:  # evaluate_one closes them once it has them
            spares.close()
        raise


WARM_JUDGE_S = 120.0  # the judge waits no longer for _warm_judge (its own reference then does the same work)


def _warm_judge(device: str) -> None:
    """The judge's one-time GPU work, done while the problem loads and the baselines are looked up instead of in the
    judge's reference phase (on the H100 box 4.8-7.2 s of `kgen eval`'s 13-16 s): this process's CUDA context, the
    operator trace's first use (its imports), cuBLAS, and kgen's fused output checks (their Triton kernels compiled
    or loaded). Nothing of the candidate's; any failure shows again, and is reported, where the judge meets it."""
    with contextlib.suppress(Exception):
        import torch

        from kgen.harness.trace import OpTrace
        from kgen.judge import fused_compare

        x = torch.ones(64, 64, device=device)
        with OpTrace():
            x.matmul(x).add(1)
        fused_compare.warm(torch.device(device))
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def _judge_warmed_beside(device: str):
    """_warm_judge in a thread (on a GPU) while the block loads the problem; the block waits for it before its judge
    starts, and leaves no thread inside torch as the process exits (a bad problem name fails at once)."""
    warming = threading.Thread(target=_warm_judge, args=(device,), daemon=True, name="kgen-warm-judge")
    if device.startswith("cuda"):
        warming.start()
    try:
        yield warming
    finally:
        if warming.is_alive():
            warming.join(WARM_JUDGE_S)


def _evaluate_loaded(problem: str, source: str, spares, *, device, size, timeout_s, rtol, db, baselines, sandbox,
                     startup_s, started):
    """evaluate_file once the candidate passed its static checks and its sandboxes are starting."""
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_one
    from kgen.judge.gate_clock import judge_clock
    from kgen.problems.problem import load_problem

    try:
        judge_clock(None)  # KGEN_JUDGE_CLOCK, checked before anything is loaded
    except ValueError as e:
        raise KgenError(str(e)) from None

    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    with _judge_warmed_beside(device) as warming:
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
        print(f"kgen: judging the candidate against {loaded.name} ({size}) on {device}, a line per step:",
              file=sys.stderr, flush=True)
        # the judge starts once its one-time GPU work is done (beside it, both would do the same work slower), the
        # baselines before that
        result = evaluate_one(loaded, source, settings, baselines=from_db, on_phase=_say_phase, spares=spares,
                              before_judge=(lambda: warming.join(WARM_JUDGE_S)) if warming.is_alive() else None)
        result.details["breakdown"] = {"startup_s": startup_s, "load_s": load_s, **result.details.get("breakdown", {})}
        return loaded, result


# the judge's phases as `kgen eval` says them while it waits (kgen.judge.judge.Judge.run marks them)
PHASE_WORDS = {"reference_s": "the reference's outputs (float64) and the inputs", "compile_s": "the compile step",
               "runner_start_s": "the sandboxed runner started", "calibration_s": "the clock calibrated",
               "ablation_s": "the ablated copy run (kernels disabled)", "import_s": "the candidate imported",
               "verify_s": "its outputs checked on every trial", "timing_s": "timed",
               "profile_s": "its kernels profiled (CUPTI)", "baselines_s": "the baselines (eager, torch.compile)"}


def _say_phase(name: str, seconds: float) -> None:
    """One line on stderr per phase as it ends, so a long evaluation is never silent."""
    print(f"kgen:   {PHASE_WORDS.get(name, name)}: {seconds:.1f} s", file=sys.stderr, flush=True)


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
