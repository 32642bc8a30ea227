"""`kgen bench`: the benchmark, fixed offline searches against torch (kgen.outputs.bench)."""

from __future__ import annotations

from typing import Optional

import typer

from kgen.cli.app import _at_least_1, _choice, _positive, console
from kgen.core.records import LANGUAGE_CHOICES


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
