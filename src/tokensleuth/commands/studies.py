"""tokensleuth import | studies: put llama-bench, AIPerf or llama-benchy results in the store; list what it holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import DbOpt, out


def import_cmd(
    file: Annotated[Path, typer.Argument(help="llama-bench output (-o json, jsonl or sql), an AIPerf run "
                                              "(its artifact folder or profile_export_aiperf.json) or "
                                              "llama-benchy --format json output.")],
    db: DbOpt = None,
) -> None:
    """Import an existing llama-bench, AIPerf or llama-benchy result into the store."""
    from tokensleuth.core.writes import check_readable_file
    from tokensleuth.engines import importer_for, peers
    from tokensleuth.engines.base import DEFAULT_KIND

    tool = peers.tool_of(file) if file.is_dir() else None  # an AIPerf artifact folder is a folder
    if tool is None:
        check_readable_file("a result file", file)  # a FIFO or /dev/zero would never end
        tool = peers.tool_of(file)
    with common.open_store(db) as store:
        if tool is not None:
            study, n = peers.import_file(store, file)
            out.print(f"imported {n} {tool} result{'s' if n != 1 else ''} as study {study} (under {tool}'s "
                      "definitions: report shows them)")
            return
        study, n = importer_for(DEFAULT_KIND)(store, file)  # llama-bench's -o json|jsonl|sql
    out.print(f"imported {n} results as study {study}")


def studies(db: DbOpt = None) -> None:
    """List stored studies."""
    import datetime as dt

    from tokensleuth.report.markdown import table
    from tokensleuth.studies import kind_of

    with common.open_store(db) as store:
        rows = []
        for s in store.reads.studies():
            when = dt.datetime.fromtimestamp(s["created_at"]).strftime("%Y-%m-%d %H:%M")
            what = kind_of(s["kind"]).describe(s.spec)
            rows.append([s["id"], s["kind"], s["status"], when, f"{s['n_done']}/{s['n_trials']}", str(what)])
    out.print(table(["study", "kind", "status", "created", "trials done", "what"], rows,
                    [False, False, False, False, True, False]))
