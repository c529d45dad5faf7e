"""tokensleuth import | studies: put llama-bench, AIPerf or llama-benchy results, or a tokensleuth bundle, in the
store (through the importers' registry); list what it holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import DbOpt, out


def import_cmd(
    file: Annotated[Path, typer.Argument(help="llama-bench output (-o json, jsonl or sql), an AIPerf run "
                                              "(its artifact folder or profile_export_aiperf.json), "
                                              "llama-benchy --format json output, or a tokensleuth bundle "
                                              "(report ID --bundle FILE).")],
    db: DbOpt = None,
) -> None:
    """Import an existing llama-bench, AIPerf or llama-benchy result, or a tokensleuth bundle, into the store."""
    from tokensleuth.importers import importer_of

    importer = importer_of(file)  # (asks each format's sniff; a file none knows is read as llama-bench's)
    with common.open_store(db) as store:
        study, n = importer.read(store, file)
    out.print(importer.said(study, n))


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
