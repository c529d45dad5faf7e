"""Command line: the app and its error boundary. Each command lives in its own module
(tokensleuth.commands); this file registers them, runs one, and turns what it raised into
one line on stderr and an exit code."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

# typer 0.29 vendors click; its exceptions are the ones standalone_mode=False lets through.
from typer._click import exceptions as click_exc

from tokensleuth import __version__
from tokensleuth.commands import COMMANDS, GROUPS, Command
from tokensleuth.commands.common import err, out
from tokensleuth.core.errors import EngineError, Interrupted, UserError

def _named(args: list[str]) -> tuple[Command, ...]:
    """The commands a command line needs registered: the one it names (``compare``, ``engine
    build``), or every command of a group or of the app where it names none (help, a typo: its
    suggestions)."""
    words = [a for a in args if not a.startswith("-")][:2]
    if words and words[0] in GROUPS:
        group = tuple(c for c in COMMANDS if c.group == words[0])
        return tuple(c for c in group if words[1:] == [c.name]) or group
    return tuple(c for c in COMMANDS if not c.group and words[:1] == [c.name]) or COMMANDS


def build_app(commands: tuple[Command, ...] = COMMANDS) -> typer.Typer:
    """The app with ``commands`` registered (each imports its module: only those run need it)."""
    app = typer.Typer(
        help="Find out where an LLM inference engine's speed went, and prove it.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    groups = {"": app}
    for name, help_ in GROUPS.items():
        groups[name] = typer.Typer(help=help_, no_args_is_help=True)
        app.add_typer(groups[name], name=name)
    for c in commands:
        groups[c.group].command(c.name, context_settings={"allow_extra_args": True} if c.engine_flags else None)(c.run)
    return app


def _version(value: bool) -> None:
    if value:
        out.print(f"tokensleuth {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Find out where an LLM inference engine's speed went, and prove it."""


# -- entry point ---------------------------------------------------------------------

RESUMABLE = tuple(c.name for c in COMMANDS if c.resumable)  # they take --resume


def one_line(text: str) -> str:
    """A message as one terminal line: control characters (a newline in a path or a TOML
    key) are escaped, so an error is always exactly one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def interrupted_line(signum: int, argv: list[str]) -> str:
    name = signal.Signals(signum).name
    command = next((a for a in argv if not a.startswith("-")), "")
    if command in RESUMABLE:
        return f"interrupted ({name}) — rerun the same command with --resume to continue where it stopped"
    return f"interrupted ({name}) — nothing was half-stored; run the command again"


@contextmanager
def signals_raise_interrupted() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` in the main thread while the CLI runs.

    Not KeyboardInterrupt: typer turns that into a silent exit code. Interrupted unwinds
    through the runner (which kills the engine's process tree) and the store (which marks
    the study ``interrupted``). A second signal while unwinding is ignored, so the clean-up
    (kill the engine, one rollback or status update) is not cut short half-way.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if fired:
            return
        fired.append(signum)
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def debug_trace(exc: BaseException) -> None:
    """TOKENSLEUTH_DEBUG=1: the traceback behind a one-line error (for reporting a bug)."""
    if __import__("os").environ.get("TOKENSLEUTH_DEBUG") == "1":
        import traceback

        traceback.print_exception(exc)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; errors become one line on stderr and their exit code (2 input, 1 engine)."""
    from tokensleuth.core.cliargs import EngineArgs, expand_list_options, split_engine_args

    args = list(argv if argv is not None else sys.argv[1:])
    own, tail = split_engine_args(args)
    own = expand_list_options(own)
    command = typer.main.get_command(build_app(_named(own)))
    try:
        with signals_raise_interrupted():
            rv = command.main(args=[*own, *(["--", *tail] if "--" in args else [])], prog_name="tokensleuth",
                              standalone_mode=False, obj=EngineArgs(tuple(own), tuple(tail)))
    except Interrupted as exc:
        err.print(interrupted_line(exc.signum, args), markup=False)
        return exc.exit_code
    except KeyboardInterrupt:  # raised by code, not by a signal (the handler raises Interrupted)
        err.print(interrupted_line(signal.SIGINT, args), markup=False)
        return Interrupted(signal.SIGINT).exit_code
    except UserError as exc:
        debug_trace(exc)
        err.print(f"error: {one_line(str(exc))}", markup=False)
        return exc.exit_code
    except click_exc.NoArgsIsHelpError as exc:
        err.print(exc.ctx.get_help() if exc.ctx else str(exc), markup=False)
        return 2
    except click_exc.NoSuchOption as exc:
        from tokensleuth.core.cliargs import no_such_option_message

        takes = bool(exc.ctx and exc.ctx.allow_extra_args)  # a measuring command: engine flags after --
        # the command as typed after `tokensleuth` ("model synth"); None before any command
        name = exc.ctx.command_path.partition(" ")[2] or None if exc.ctx else None
        err.print("error: " + no_such_option_message(exc.option_name, exc.possibilities or [], name, takes),
                  markup=False)
        return 2
    except click_exc.UsageError as exc:
        hint = f" — see `{exc.ctx.command_path} --help`" if exc.ctx else ""
        err.print(f"error: {one_line(exc.format_message())}{hint}", markup=False)
        return 2
    except EngineError as exc:
        debug_trace(exc)
        err.print(f"error: {exc}", markup=False)
        return exc.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        err.print("aborted", markup=False)
        return 130
    # standalone_mode=False returns a typer.Exit's code (a command's `raise typer.Exit(1)`)
    # instead of raising it; a command that returns normally gives None.
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
