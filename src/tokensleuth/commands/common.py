"""What every command shares: the consoles (and the driver's ``SAY`` on them), the common options,
building an engine with progress, the store, which options the user gave, --json paths. Commands
call ``common.open_store`` and ``common.get_build`` through the module (the CLI's tests replace
them there). Nothing below the commands calls back into here."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tokensleuth.core.errors import UserError
from tokensleuth.core.paths import default_db
from tokensleuth.core.writes import check_writes, file_path
from tokensleuth.sources.configure import DEFAULT_TARGETS

if TYPE_CHECKING:
    from tokensleuth.sources.build import EngineBuild
    from tokensleuth.store import Store

# The drivers, the store and the build cache are imported where they are used, not here: every
# command imports this module, and each should load only what it uses.

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)

DbOpt = Annotated[Optional[Path], typer.Option("--db", parser=file_path("--db"), help="Study store (default: TOKENSLEUTH_DB or the user data dir).")]
CmakeOpt = Annotated[list[str], typer.Option("--cmake", help="Extra CMake flag for the engine build, e.g. --cmake -DGGML_CUDA=ON (repeatable).")]


def seconds_option(most: float) -> Any:
    """A typer callback: seconds that are finite, above 0 and at most ``most`` (click's
    FloatRange lets nan through, and `inf` would kill the watchdog's timer thread)."""
    def check(value: float) -> float:
        if not math.isfinite(value) or not 0 < value <= most:
            raise typer.BadParameter(f"{value:g} is out of range — give seconds above 0 and at most {most:g}")
        return value
    return check


SampleIntervalOpt = Annotated[float, typer.Option(min=0.02, max=60, callback=seconds_option(60),
                                                  help="Seconds between power/clock/busy samples (timelines).")]
# The measuring commands take the engine's flags after `--` (click keeps them in ctx.args);
# an unknown option before it is click's NoSuchOption, a stray word is refused by engine_flags.
ENGINE_FLAGS = {"allow_extra_args": True}
ClusterOpt = Annotated[Optional[str], typer.Option("--cluster", help="Run on a Ray cluster: auto, HOST:PORT or ray://HOST:PORT (pip install 'tokensleuth[fleet]').")]
OnOpt = Annotated[list[str], typer.Option("--on", help="With --cluster: the machines, by label, e.g. host=strix1 or gpu=H200,backend=rocm (repeatable: any of them).")]


def engine_flags(ctx: typer.Context) -> list[str]:
    """The engine's flags: what came after `--`. A word before it that no option took is
    refused (one line), before anything is built, measured or stored."""
    from tokensleuth.core.cliargs import EngineArgs, stray_message

    given = ctx.obj if isinstance(ctx.obj, EngineArgs) else EngineArgs()
    tail = list(given.engine)
    extra = list(ctx.args)
    stray = extra[: len(extra) - len(tail)] if extra[len(extra) - len(tail):] == tail else extra
    if stray:
        raise UserError(stray_message(stray, given.own, ctx.info_name or "?"))
    return tail


def command_line(ctx: typer.Context) -> list[str] | None:
    """The words this command was run with (for the command to run next), when known."""
    from tokensleuth.core.cliargs import EngineArgs

    if not isinstance(ctx.obj, EngineArgs) or not ctx.obj.own:
        return None
    return [*ctx.obj.own, *(["--", *ctx.obj.engine] if ctx.obj.engine else [])]


NoProbeOpt = Annotated[bool, typer.Option("--no-probe", help="When a verdict stays unresolved, do not run the short "
                                          "threads probe that measures the fix (the diagnosis still prints).")]


def open_store(db: Path | None) -> Store:
    from tokensleuth.store import Store

    return Store(db or default_db())


def targets_for(kinds: Sequence[str], base: tuple[str, ...] = DEFAULT_TARGETS) -> tuple[str, ...]:
    """Build targets for arms of these engine kinds on one source (drivers.shared.targets_for; tests
    and bench scripts import it here)."""
    from tokensleuth.drivers.shared import targets_for as for_kinds

    return for_kinds(kinds, base)


class ConsoleSay:
    """What a driver says, on stderr: a line, and a build's progress (a bar on a terminal, a line
    at each quarter in a log file)."""

    def line(self, text: str) -> None:
        err.print(text, markup=False)

    @contextmanager
    def building(self, source: str) -> Iterator[Callable[[str], None]]:
        if not err.is_terminal:
            from tokensleuth.drivers.shared import quarter_lines

            yield quarter_lines(source, self.line)
            return
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[step]}"),
                      TimeElapsedColumn(), console=err, transient=True) as prog:
            task = prog.add_task(f"engine {source}", total=None, step="")

            def log(line: str) -> None:
                m = re.match(r"\[(\d+)/(\d+)\]", line)
                if m:
                    prog.update(task, completed=int(m.group(1)), total=int(m.group(2)),
                                step=f"{m.group(1)}/{m.group(2)}")
                elif line.startswith("downloading"):
                    prog.update(task, step=line)

            yield log


SAY = ConsoleSay()


def get_build(source: str, cmake: list[str], targets: tuple[str, ...] = DEFAULT_TARGETS) -> EngineBuild:
    """Build (or fetch from cache) showing progress from ninja's [n/m] lines; a cache hit prints nothing."""
    from tokensleuth.drivers import shared

    return shared.build(source, cmake, targets, SAY)


def given(ctx: typer.Context, flags: list[str]) -> Callable[[str], bool]:
    """Whether the user gave an option (by its parameter's name) on the command line; the
    engine's flags (after `--`) count as given when there are any."""
    def was_given(name: str) -> bool:
        if name == "flags":
            return bool(flags)
        src = ctx.get_parameter_source(name)
        return src is not None and src.name != "DEFAULT"

    return was_given


def print_result(kind_name: str, result: dict[str, Any], json_out: Path | None) -> None:
    """A driver's result object, printed and exported through its study kind (as `report` does)."""
    from tokensleuth.studies import driver_kind

    kind = driver_kind(kind_name)
    out.print(kind.render(result))
    if json_out:
        save_json(json_out, kind.to_json(result), str(result.get("study", "ID")))


def guard_writes(writes: list[tuple[str, Path | None]], *, reads: list[tuple[str, Path | str | None]] | None = None,
                 db: Path | None = None, store: bool = True, new: tuple[str, ...] = (),
                 replaces: dict[str, str] | None = None, regular: tuple[str, ...] = ()) -> None:
    """Check every file the command will write before any work (core/writes.py): writable, and
    none of its inputs (``reads``), its store (``--db`` or the default) or another output."""
    check_writes(writes, reads=reads or [], store=(db or default_db()) if store else None, new=new,
                 replaces=replaces, regular=regular)


def models_read(*groups: list[Path]) -> list[tuple[str, Path | str | None]]:
    """Model paths as inputs of ``guard_writes``."""
    return [("a model", m) for g in groups for m in g]


def save_json(path: Path, obj: dict[str, Any], study: str) -> None:
    from tokensleuth.report.jsonout import write_json

    try:
        write_json(path, obj)
    except OSError as exc:  # /dev/full, a disk that filled up while measuring
        raise UserError(f"cannot write --json {path}: {exc.strerror or exc} — the study is stored; "
                        f"`tokensleuth report {study} --json OTHER_PATH` writes it elsewhere") from None


def save_text(path: Path, text: str) -> None:
    """Write a page whole or not at all (paths.write_atomic)."""
    from tokensleuth.core.paths import write_atomic

    try:
        write_atomic(path, text)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc} — choose another path") from None


def parse_env(items: list[str]) -> dict[str, str]:
    outd = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise UserError(f"cannot read --env {item!r} — write VAR=VALUE")
        outd[k] = v
    return outd
