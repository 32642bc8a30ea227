"""`kgen` and `python -m kgen`: the commands registered on the app, list options expanded (`--problems a b`),
and every error in one line with exit code 2 (`KGEN_DEBUG=1` shows the traceback)."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import Optional

import typer

from kgen.cli import bench, evaluate, problems, results, search
from kgen.cli.app import KgenCommand, _value_name, app
from kgen.core.bytecode import keep_bytecode
from kgen.core.errors import KgenError

# Every command, in the order `kgen --help` lists them: a function of kgen/cli/<its group>.py
COMMANDS = (("problems", problems.problems_cmd), ("eval", evaluate.eval_cmd), ("search", search.search_cmd),
            ("leaderboard", results.leaderboard_cmd), ("show", results.show_cmd), ("runs", results.runs_cmd),
            ("export", results.export_cmd), ("report", results.report_cmd), ("migrate", results.migrate_cmd),
            ("bench", bench.bench_cmd))


def _register() -> None:
    for name, command in COMMANDS:
        app.command(cls=KgenCommand, name=name)(command)


_register()

# Options that take a list: `--problems a b` and `--problems a,b` both work (see expand_list_options).
LIST_OPTIONS = {"bench": ("--problems",)}


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


# Commands whose process ends, once they are done, without the interpreter's teardown (quick_exit)
QUICK_EXIT = ("eval", "search")


def quick_exit(code: int) -> None:
    """End the process now: the atexit handlers run and stdout and stderr are flushed, but not the
    interpreter's teardown of every module (torch, triton, Ray, CUDA's context): 0.8-1.2 s of `kgen eval`'s
    wall on the CPU box (the JSON out, then nothing but teardown), counted in its 15 s target. Only once
    nothing else runs: with a non-daemon thread left, the normal exit waits for it."""
    import atexit
    import threading

    if any(not t.daemon and t is not threading.main_thread() for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(argv: Optional[list[str]] = None) -> None:
    from_command_line = argv is None  # not a caller's main([...]) in its own process
    if from_command_line:  # before torch's import: where the install keeps no bytecode, kgen's cache does
        keep_bytecode()
    argv = expand_list_options(list(sys.argv[1:] if argv is None else argv))
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        code = app(args=argv, prog_name="kgen", standalone_mode=False)  # returns typer.Exit's code in this mode
        code = code if isinstance(code, int) else 0
        if command in QUICK_EXIT and from_command_line:
            quick_exit(code)
        if code:
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
