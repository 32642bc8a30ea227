"""`kgen search`: rounds of propose, compile, verify, time and store (kgen.search.loop), with their
progress on the terminal and the summary at the end."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from kgen.cli.app import (
    DbOption,
    NoSandboxOption,
    PriceInOption,
    PriceOutOption,
    _at_least_1,
    _choice,
    _positive,
    console,
)
from kgen.core.errors import KgenError
from kgen.core.records import LANGUAGE_CHOICES, PROPOSER_KINDS, SIZES


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
    ncu_budget: Optional[float] = typer.Option(None, "--ncu-budget", metavar="S", min=0,
                                               show_default="60 with --proposer openai, else 0",
                                               help="Seconds per round for Nsight Compute profiles (stall reasons, "
                                                    "DRAM traffic, occupancy) of the parents the next prompt shows, "
                                                    "then the round's best new candidates, at most 15% of the "
                                                    "search's time; 0: none. Only a model's prompts show them, so "
                                                    "the offline and replay proposers take none unless asked. GPU "
                                                    "and ncu only."),
) -> None:
    """Search for kernels faster than PyTorch.

    Rounds of propose → compile → verify → time on Ray, every result stored in the results DB.
    """
    import contextlib

    from kgen.search import driver_lane

    with contextlib.ExitStack() as stack:
        # the driver lane's sandboxes import torch beside this process's own import of it (kgen.search.loop's);
        # run_search closes them once they are its, this closes them where it never gets that far
        spares = driver_lane.early_sandboxes("none" if no_sandbox else "bwrap", proposer) \
            if resume is None and problem is not None and not ray_address else None
        if spares is not None:
            stack.callback(spares.close)

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
                                 progress=make_progress(quiet, console), lane_spares=spares)
        except KeyboardInterrupt:  # typer returns, not raises, 130 under standalone_mode=False: exit here
            print("kgen: interrupted", file=sys.stderr)
            sys.exit(130)
        from kgen.store.db import db_option, db_url

        for line in summary_lines(summary, db=db_option(db_url(db))):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
