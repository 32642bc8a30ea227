"""The `kgen` command line: a thin shell over the library. Every command is callable from Python too.

Bad input raises KgenError anywhere below; `main` prints it in one line and exits 2
(`KGEN_DEBUG=1` shows the traceback). Help and bad flags are answered before torch, Ray or
SQLAlchemy is imported: each command imports what it needs when it runs.

Help texts: each option says what it does, names its value (`--rounds R`), and gives its default
once, as `[default: ...]` (in words where it depends on the machine).

Here: what the commands share (the Typer app, how help is written, the common options and their
checks, the console). The commands are functions in the modules beside this one, a group each
(problems, evaluate, search, results, bench); kgen.cli.main registers them on the app, in the order
`kgen --help` lists them, and is the entry point (`kgen`, `python -m kgen`).
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console
from typer.core import TyperCommand

from kgen import __version__
from kgen.core.errors import KgenError


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
