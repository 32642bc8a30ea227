"""The results DB read back: `kgen leaderboard`, `show`, `runs`, `export` and `report`; and `kgen migrate`,
which upgrades a DB written by an older kgen."""

from __future__ import annotations

from typing import Optional

import typer

from kgen.cli.app import DbOption, NoSandboxOption, PriceInOption, PriceOutOption, WideOption, _choice, console

LEADERBOARD_FORMATS = ("table", "json", "csv", "markdown")
# kgen.store.ledger.SORTS (not imported: help stays light)
LEADERBOARD_SORTS = ("runtime", "per-dollar", "per-gpu-hour")


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


def migrate_cmd(db: Optional[str] = DbOption) -> None:
    """Upgrade a results DB written by an older kgen to this kgen's schema.

    Commands that write do it on their own; commands that only read never change the DB.
    """
    from kgen.store.db import SCHEMA_VERSION, open_db

    database = open_db(db, create=False)
    database.close()
    console.print(f"{database.url}: schema version {SCHEMA_VERSION}, this kgen's", highlight=False, markup=False,
                  soft_wrap=True)
