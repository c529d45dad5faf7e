"""tokensleuth engine build | list: the build cache."""

from __future__ import annotations

from typing import Annotated

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import CmakeOpt, out
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import DEFAULT_TARGETS, BuildCache


def engine_build(
    source: Annotated[str, typer.Argument(help="pypi:NAME==VER, git:PATH@REV or bin:DIR.")] = DEFAULT_ENGINE,
    cmake: CmakeOpt = [],  # noqa: B006
    target: Annotated[list[str], typer.Option("--target", help="Build target (repeatable; default llama-bench, llama-quantize).")] = [],  # noqa: B006
) -> None:
    """Build an engine (or find it in the cache) and print where its binaries are."""
    from tokensleuth.core.errors import UserError
    from tokensleuth.sources import parse_source

    if parse_source(source).kind in ("url", "cmd"):
        raise UserError(f"{source} is a server, not something to build — engine build takes pypi:, git: or bin:")
    b = common.get_build(source, cmake, tuple(target) or DEFAULT_TARGETS)
    out.print(b.bin_dir)


def engine_list() -> None:
    """List cached engine builds."""
    from tokensleuth.report.markdown import table

    rows = [[b.key, b.source, (b.commit or "unknown")[:9], str(b.build_number or "?"),
             ",".join(b.backends), " ".join(f for f in b.cmake_flags) or "-",
             f"{b.build_s:.0f}" if b.build_s else "-", b.bin_dir] for b in BuildCache().list()]
    out.print(table(["key", "source", "commit", "build", "backends", "cmake flags", "build s", "bin"],
                    rows, [False, False, False, True, False, False, True, False]))
