"""tokensleuth bisect: the first commit (or release) that made it slower."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import (
    ClusterOpt,
    CmakeOpt,
    DbOpt,
    NoProbeOpt,
    OnOpt,
    build_compare_spec_check,
    diagnoser,
    doctor_line,
    engine_flags,
    err,
    fleet_paths,
    json_target,
    open_fleet,
    out,
    profiler,
    refuse_on_fleet,
    save_json,
    seconds_option,
    set_kind,
)
from tokensleuth.core.errors import UserError
from tokensleuth.core.limits import MAX_TIMEOUT_S
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.sources import parse_source
from tokensleuth.sources.build import BuildCache


def bisect(
    ctx: typer.Context,
    good: Annotated[str, typer.Option(help="Last good revision (or version / first --bin folder).")] = "",
    bad: Annotated[str, typer.Option(help="First known bad revision (or version).")] = "",
    repo: Annotated[Optional[Path], typer.Option(help="llama.cpp git checkout to bisect.")] = None,
    source: Annotated[Optional[str], typer.Option(help="Release bisect: pypi:NAME (versions between --good and --bad).")] = None,
    bin_dir: Annotated[list[str], typer.Option("--bin", help="Release bisect over prebuilt folders, in order (repeatable).")] = [],  # noqa: B006
    model: Annotated[list[Path], typer.Option("--model", "-m", help="Model that shows the regression (repeatable).")] = [],  # noqa: B006
    control_model: Annotated[list[Path], typer.Option("--control-model", help="Control model, e.g. a dense one (repeatable).")] = [],  # noqa: B006
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="pp512, tg128, … (repeatable).")] = [],  # noqa: B006
    band: Annotated[str, typer.Option(help="Endpoints must differ by more than this.")] = "2%",
    max_pairs: Annotated[int, typer.Option(min=2, max=5000, help="Most pairs per comparison (unresolved ones get twice that).")] = 20,
    cmake: CmakeOpt = [],  # noqa: B006
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed (a hang is a crash).")] = 600,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the bisect result as JSON here.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last unfinished run of this same bisect.")] = False,
    pin_params: Annotated[bool, typer.Option("--pin-params", help="Give every candidate the good side's llama-bench settings (defaults that changed between versions) explicitly.")] = False,
    check_outputs: Annotated[bool, typer.Option("--check-outputs", help="Also find the first commit whose outputs differ from good's (llama-perplexity KL divergence).")] = False,
    kind: Annotated[str, typer.Option("--kind", help="Engine kind that measures each commit: llama-bench or llama-server.")] = DEFAULT_KIND,
    cluster: ClusterOpt = None,
    on: OnOpt = [],  # noqa: B006
    no_probe: NoProbeOpt = False,
    no_profile: Annotated[bool, typer.Option("--no-profile", help="Do not profile the culprit against its parent (which op got slower).")] = False,
    db: DbOpt = None,
) -> None:
    """Find the first commit (or release) that made it slower, and verify it against its parent.

    With --cluster and k machines (--on a label they share), k candidates are judged a round."""
    from tokensleuth.drivers import bisect as bis
    from tokensleuth.sources import history
    from tokensleuth.studies import driver_kind
    from tokensleuth.trials.spec import model_paths, parse_percent

    flags = engine_flags(ctx)
    json_target(json_out)
    if repo is not None:
        if not good or not bad:
            raise UserError("bisect needs --good REV and --bad REV — name the last good and first bad revisions")
        parse_source(f"git:{repo}@{good}")
        cands = history.git_candidates(str(repo), good, bad)
    elif source is not None:
        prefix, _, name = source.partition(":")  # not `kind`: that is the --kind option's
        if prefix != "pypi" or not name or "==" in name:
            raise UserError(f"--source {source!r}: write pypi:NAME (versions come from --good/--bad)")
        cands = history.pypi_candidates(name, good, bad)
    elif bin_dir:
        for d in bin_dir:
            b = BuildCache().get(f"bin:{d}")  # each folder's llama-bench can run, before any trial
            if check_outputs:
                b.binary("llama-perplexity")
        cands = history.bin_candidates([str(Path(d).resolve()) for d in bin_dir])
    else:
        raise UserError("nothing to bisect — pass --repo PATH, --source pypi:NAME or --bin DIR (twice or more)")
    spec = {"models": model_paths(model), "control_models": model_paths(control_model) if control_model else [],
            "workloads": workload or ["pp512"], "band": parse_percent(band), "max_pairs": max_pairs,
            "cmake": list(cmake), "flags": flags, "timeout_s": timeout}
    if pin_params:  # only when asked: older bisects keep their identity
        spec["pin_params"] = True
    if check_outputs:
        from tokensleuth.engines.perplexity import perplexity_flags

        perplexity_flags(flags)  # a flag llama-perplexity cannot take is refused before any build
        spec["check_outputs"] = True
    set_kind(spec, kind)
    build_compare_spec_check(spec)
    fleet = open_fleet(cluster, on)
    refuse_on_fleet(fleet, pin_params=pin_params, check_outputs=check_outputs)
    if fleet is not None:
        fleet.check_files(fleet_paths(model_paths(model) + (model_paths(control_model) if control_model else []),
                                      [c.source for c in cands]))
    doctor_line()
    with common.open_store(db) as store:
        result = bis.run_bisect(store, cands, spec, resume=resume, log=lambda line: err.print(line, markup=False),
                                fleet=fleet, diagnose=diagnoser(store, ctx, probe=not no_probe and fleet is None),
                                profile=None if no_profile or fleet is not None or kind != DEFAULT_KIND else
                                profiler(store, list(cmake), flags, timeout))
    kind_ = driver_kind("bisect")
    out.print(kind_.render(result))
    if json_out:
        save_json(json_out, kind_.to_json(result), str(result.get("study", "ID")))
    if result["status"] not in bis.ANSWERED:  # unresolved or an endpoint crashed: no answer
        raise typer.Exit(1)
