"""tokensleuth bisect: the first commit (or release) that made it slower."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tokensleuth.commands.common import (
    SAY,
    ClusterOpt,
    CmakeOpt,
    DbOpt,
    NoProbeOpt,
    OnOpt,
    command_line,
    engine_flags,
    guard_writes,
    models_read,
    print_result,
    seconds_option,
)
from tokensleuth.core.limits import MAX_TIMEOUT_S
from tokensleuth.core.writes import file_path
from tokensleuth.engines.base import DEFAULT_KIND


def bisect(
    ctx: typer.Context,
    good: Annotated[str, typer.Option(help="Last good revision (or version / first --bin folder).")] = "",
    bad: Annotated[str, typer.Option(help="First known bad revision (or version).")] = "",
    repo: Annotated[Optional[Path], typer.Option(help="llama.cpp git checkout to bisect, or a git bundle from `history pack`.")] = None,
    source: Annotated[Optional[str], typer.Option(help="Release bisect: pypi:NAME (versions between --good and --bad).")] = None,
    bin_dir: Annotated[list[str], typer.Option("--bin", help="Release bisect over prebuilt folders, in order (repeatable).")] = [],  # noqa: B006
    model: Annotated[list[Path], typer.Option("--model", "-m", help="Model that shows the regression (repeatable).")] = [],  # noqa: B006
    control_model: Annotated[list[Path], typer.Option("--control-model", help="Control model, e.g. a dense one (repeatable).")] = [],  # noqa: B006
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="pp512, tg128, … (repeatable).")] = [],  # noqa: B006
    band: Annotated[str, typer.Option(help="Endpoints must differ by more than this.")] = "2%",
    max_pairs: Annotated[int, typer.Option(min=5, max=5000, help="Most pairs per comparison (unresolved ones get twice that).")] = 20,
    cmake: CmakeOpt = [],  # noqa: B006
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed (a hang is a crash).")] = 600,
    json_out: Annotated[Optional[Path], typer.Option("--json", parser=file_path("--json"), help="Write the bisect result as JSON here.")] = None,
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
    from tokensleuth.drivers.hunts.bisect import ANSWERED, run
    from tokensleuth.drivers.requests import BisectRequest
    from tokensleuth.studies.profile import summary

    flags = engine_flags(ctx)
    guard_writes([("--json", json_out)], reads=[*models_read(model, control_model), ("the bundle", repo)], db=db)
    request = BisectRequest(
        good=good, bad=bad, repo=repo, source=source, bins=bin_dir, models=[str(m) for m in model],
        control_models=[str(m) for m in control_model], workloads=workload, band=band, max_pairs=max_pairs,
        cmake=cmake, flags=flags, timeout_s=timeout, json_out=json_out, resume=resume, pin_params=pin_params,
        check_outputs=check_outputs, kind=kind, cluster=cluster, on=on, probe=not no_probe,
        profile=not no_profile, db=db, argv=command_line(ctx))
    result = run(request, SAY, summary)
    print_result("bisect", result, json_out)
    if result["status"] not in ANSWERED:  # unresolved or an endpoint crashed: no answer
        raise typer.Exit(1)
