"""tokensleuth import | studies: put llama-bench output in the store; list what it holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import DbOpt, out


def import_cmd(
    file: Annotated[Path, typer.Argument(help="llama-bench output: -o json, -o jsonl or -o sql.")],
    db: DbOpt = None,
) -> None:
    """Import an existing llama-bench output into the store."""
    from tokensleuth.engines import importer_for
    from tokensleuth.engines.base import DEFAULT_KIND

    from tokensleuth.core.writes import check_readable_file

    check_readable_file("a llama-bench output file", file)  # a FIFO or /dev/zero would never end
    with common.open_store(db) as store:
        study, n = importer_for(DEFAULT_KIND)(store, file)  # llama-bench's -o json|jsonl|sql
    out.print(f"imported {n} results as study {study}")


def studies(db: DbOpt = None) -> None:
    """List stored studies."""
    import datetime as dt

    from tokensleuth.report.markdown import table
    from tokensleuth.studies import kind_of

    with common.open_store(db) as store:
        rows = []
        for s in store.studies():
            when = dt.datetime.fromtimestamp(s["created_at"]).strftime("%Y-%m-%d %H:%M")
            what = kind_of(s["kind"]).describe(s.spec)
            rows.append([s["id"], s["kind"], s["status"], when, f"{s['n_done']}/{s['n_trials']}", str(what)])
    out.print(table(["study", "kind", "status", "created", "trials done", "what"], rows,
                    [False, False, False, False, True, False]))
