"""tokensleuth report | site: stored studies rendered again (Markdown, JSON, HTML, issue, a site)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import DbOpt, err, guard_writes, out, save_json, save_text
from tokensleuth.core.errors import UserError
from tokensleuth.core.writes import file_path


def report(
    study: Annotated[str, typer.Argument(help="Study id (a unique prefix is enough).")],
    json_out: Annotated[Optional[Path], typer.Option("--json", parser=file_path("--json"), help="Write JSON here.")] = None,
    html_out: Annotated[Optional[Path], typer.Option(
        "--html", parser=file_path("--html"), help="Write a self-contained HTML page (plots as inline SVG) here.")] = None,
    issue: Annotated[bool, typer.Option(
        "--issue", help="Print Markdown in the shape of llama.cpp's bug-report form.")] = False,
    step: Annotated[Optional[int], typer.Option(
        "--step", min=1, help="A scan's step N: render the bisect that found it (with --issue: its issue).")] = None,
    bundle_out: Annotated[Optional[Path], typer.Option(
        "--bundle", parser=file_path("--bundle"), help="Write the study as one self-contained file (its spec, arms, "
        "machine, every sample and warning, its verdicts; no home paths or secrets; gzip where it ends in .gz) "
        "that `tokensleuth import` stores and `tokensleuth rerun` measures again elsewhere.")] = None,
    db: DbOpt = None,
) -> None:
    """Re-render a stored study (Markdown; --json, --html, --issue, --bundle). No engine runs."""
    from tokensleuth.pages.bundle import bundle_of
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies import kind_of

    guard_writes([("--json", json_out), ("--html", html_out), ("--bundle", bundle_out)], db=db)
    with common.open_store(db) as store:
        row = store.reads.study(study)
        sid = row["id"]
        from tokensleuth.pages.explain import explain, markdown

        text, obj = kind_of(row["kind"]).render_stored(store, sid)
        if step is not None:
            sid = kind_of(row["kind"]).step_study(obj, step)
            text, obj = kind_of(store.reads.study(sid)["kind"]).render_stored(store, sid)
        explained = explain(store, sid, obj)
        why = markdown(explained)
        md = text + render_warnings(store.reads.warnings(sid)) + (f"\n\n{why}" if why else "")
        if issue:
            from tokensleuth.pages.issue import render_issue

            md = render_issue(store, sid, (text, obj), why, [sec for sec, _ in explained],
                              str(html_out) if html_out else None)
        page = None
        if html_out:
            from tokensleuth.pages.html import render_html

            page = render_html(store, sid, sections=[sec for sec, _ in explained], rendered=(text, obj))
        packed = bundle_of(store, sid, (text, obj)) if bundle_out else None
    out.print(md, markup=False, highlight=False)
    if json_out:
        save_json(json_out, obj, sid)
    if html_out and page is not None:
        save_text(html_out, page)
        err.print(f"wrote {html_out}", markup=False)
    if bundle_out and packed is not None:
        save_bundle(bundle_out, packed)


def save_bundle(path: Path, bundle: dict[str, Any]) -> None:
    """Write a bundle whole or not at all, and say what it left out."""
    from tokensleuth.store.bundle import write_bundle

    try:
        write_bundle(path, bundle)
    except OSError as exc:
        raise UserError(f"cannot write --bundle {path}: {exc.strerror or exc} — choose another path") from None
    left = bundle["redacted"]
    n = len(bundle["trials"])
    err.print(f"wrote {path}: study {bundle['study']['id']}, {n} trial{'s' if n != 1 else ''} ({left['home_paths']} "
              f"home path(s) written as ~, {left['secrets']} secret(s) left out)", markup=False)


def site(
    dest: Annotated[Path, typer.Argument(help="Folder to write the site into (created; updated in place).")],
    db: DbOpt = None,
) -> None:
    """Write a static site of every study: an index, a page per study, t/s history per model and test."""
    from tokensleuth.pages.site import build_site

    if dest.exists() and not dest.is_dir():
        raise UserError(f"{dest} is a file — give a folder for the site")
    with common.open_store(db) as store:
        try:
            got = build_site(store, dest)
        except OSError as exc:
            raise UserError(f"cannot write the site into {dest}: {exc.strerror or exc} — choose another folder") from None
    out.print(f"{dest}/index.html: {got.studies} studies, {got.histories} histories; {got.written} page(s) written",
              markup=False)
