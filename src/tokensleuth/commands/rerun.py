"""tokensleuth rerun: a bundle's compare measured again on this machine, with each cell's verdict
beside the original's: agrees, disagrees or unresolved."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import SAY, DbOpt, NoProbeOpt, guard_writes, out, save_json
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.writes import check_readable_file, file_path


def pairs(option: str, given: list[str], bare: bool = False) -> dict[str, str]:
    """NAME=VALUE options as a mapping; with ``bare``, one VALUE alone stands for the only NAME ("")."""
    got: dict[str, str] = {}
    for g in given:
        name, sep, value = g.partition("=")
        if not sep and bare and len(given) == 1:
            name, value = "", g
        elif not sep or not name or not value:
            raise UserError(f"cannot read {option} {g!r} — write NAME=" + ("PATH" if bare else "SOURCE"))
        if name in got:
            raise UserError(f"{option} {name} given twice — give each once")
        got[name] = value
    return got


def rerun(
    bundle: Annotated[Path, typer.Argument(help="A bundle that `tokensleuth report ID --bundle FILE` wrote.")],
    arm: Annotated[list[str], typer.Option("--arm", help="NAME=SOURCE: build the bundle's arm NAME from this source here (its own git: or bin: path is another machine's); repeatable.")] = [],  # noqa: B006
    model: Annotated[list[str], typer.Option("--model", "-m", help="NAME=PATH: the bundle's model NAME (its file name) is PATH here; a bundle of one model takes PATH alone. Default: the bundle's path, ~ being this machine's home.")] = [],  # noqa: B006
    json_out: Annotated[Optional[Path], typer.Option("--json", parser=file_path("--json"), help="Write the re-run's comparisons and each cell's agreement as JSON here.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last unfinished re-run of this bundle.")] = False,
    no_probe: NoProbeOpt = False,
    db: DbOpt = None,
) -> None:
    """Measure a bundle's compare again here and say, per cell, whether this machine's verdict agrees
    with the original's (agrees, disagrees, or unresolved where either side is)."""
    from tokensleuth.drivers.requests import RerunRequest
    from tokensleuth.drivers.verdicts.rerun import run
    from tokensleuth.importers.bundle import checked
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies import kind_of
    from tokensleuth.studies.profile import summary

    sources, models = pairs("--arm", arm), pairs("--model", model, bare=True)
    guard_writes([("--json", json_out)], reads=[("the bundle", bundle), *(("a model", m) for m in models.values())],
                 db=db)
    check_readable_file("a bundle", bundle)
    content = checked(bundle)  # read back as `import` and `report` would, in a scratch store: nothing stored yet
    kind = content["study"]["kind"]
    if not kind_of(kind).reruns:
        raise UserError(f"bundle {bundle} holds a study of kind {kind} — rerun measures compare studies again; "
                        f"`tokensleuth import {bundle}` stores it")
    outcome = run(RerunRequest(bundle=bundle, content=content, sources=sources, model_paths=models, resume=resume,
                               db=db, probe=not no_probe), SAY, summary)
    with common.open_store(db) as store:
        md, obj = kind_of(outcome.kind).render_stored(store, outcome.study)  # what `report` prints, later too
    rx = outcome.diagnosis
    out.print(md + (f"\n\n{rx.text()}" if rx else "") + render_warnings(outcome.warnings), markup=False)
    if json_out:
        save_json(json_out, dict(obj, diagnosis=rx.to_json()) if rx else obj, outcome.study)
    if outcome.failure:
        raise EngineError(outcome.failure)
