"""What every command shares: the consoles, the common options, building an engine with
progress, the store, the fleet, --json paths. Commands call ``common.open_store`` and
``common.get_build`` through the module (the CLI's tests replace them there)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tokensleuth.core.errors import UserError
from tokensleuth.core.paths import default_db
from tokensleuth.core.records import TrialOutcome
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.sources import DEFAULT_ENGINE, parse_source
from tokensleuth.sources.build import DEFAULT_TARGETS, BuildCache, EngineBuild
from tokensleuth.store import Store

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)

DbOpt = Annotated[Optional[Path], typer.Option("--db", help="Study store (default: TOKENSLEUTH_DB or the user data dir).")]
CmakeOpt = Annotated[list[str], typer.Option("--cmake", help="Extra CMake flag for the engine build, e.g. --cmake -DGGML_CUDA=ON (repeatable).")]


def seconds_option(most: float) -> Any:
    """A typer callback: seconds that are finite, above 0 and at most ``most`` (click's
    FloatRange lets nan through, and `inf` would kill the watchdog's timer thread)."""
    def check(value: float) -> float:
        if not math.isfinite(value) or not 0 < value <= most:
            raise typer.BadParameter(f"{value:g} is out of range — give seconds above 0 and at most {most:g}")
        return value
    return check


SampleIntervalOpt = Annotated[float, typer.Option(min=0.02, max=60, callback=seconds_option(60),
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

    fleet = Fleet(cluster, on, log=lambda line: err.print(line, markup=False))
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
    from tokensleuth.core.cliargs import EngineArgs, stray_message

    given = ctx.obj if isinstance(ctx.obj, EngineArgs) else EngineArgs()
    tail = list(given.engine)
    extra = list(ctx.args)
    stray = extra[: len(extra) - len(tail)] if extra[len(extra) - len(tail):] == tail else extra
    if stray:
        raise UserError(stray_message(stray, given.own, ctx.info_name or "?"))
    return tail


def command_line(ctx: typer.Context) -> list[str] | None:
    """The words this command was run with (for the command to run next), when known."""
    from tokensleuth.core.cliargs import EngineArgs

    if not isinstance(ctx.obj, EngineArgs) or not ctx.obj.own:
        return None
    return [*ctx.obj.own, *(["--", *ctx.obj.engine] if ctx.obj.engine else [])]


NoProbeOpt = Annotated[bool, typer.Option("--no-probe", help="When a verdict stays unresolved, do not run the short "
                                          "threads probe that measures the fix (the diagnosis still prints).")]


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
    from tokensleuth.drivers import doctor

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
    from tokensleuth.core.paths import write_atomic

    try:
        write_atomic(path, text)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc} — choose another path") from None


def parse_env(items: list[str]) -> dict[str, str]:
    outd = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise UserError(f"cannot read --env {item!r} — write VAR=VALUE")
        outd[k] = v
    return outd


def diagnoser(store: Any, ctx: typer.Context, probe: bool) -> Any:
    """A driver's diagnose callback (diagnose.Diagnoser): why a comparison stayed open, with the
    threads probe where ``probe`` (it runs here: not when a fleet's machines measured)."""
    def why(study_id: str, builds: Mapping[str, EngineBuild]) -> dict[str, Any] | None:
        from tokensleuth.drivers.diagnose import diagnose

        rx = diagnose(store, study_id, builds, probe=probe, argv=command_line(ctx),
                      log=lambda line: err.print(line, markup=False))
        return rx.to_json() if rx else None

    return why


def profiler(store: Any, cmake: list[str], flags: list[str], timeout_s: float) -> Any:
    """A driver's profile callback (bisect.Profiler): the per-op diff of two sources, each
    built with the profiler, on one model and workload; stored as a profile study."""
    def run(parent: str, culprit: str, model: str, workload: str) -> dict[str, Any]:
        from tokensleuth.drivers.profile import flags_from, run_profile, workload_args
        from tokensleuth.sources.profiler import TARGET
        from tokensleuth.studies.profile import summary

        workload_args(workload)  # ppN or tgN, before any build
        builds = {s: get_build(s, cmake, (*DEFAULT_TARGETS, TARGET)) for s in (parent, culprit)}
        for b in builds.values():
            b.binary(TARGET)  # a bin: folder has no profiler: said in one line, before a study is made
        sid, obj = run_profile(store, builds, [model], [workload], flags_from(flags), timeout_s=timeout_s,
                               resume=True, log=lambda line: err.print(line, markup=False))
        return summary(sid, obj)

    return run


def set_kind(spec: dict[str, Any], kind: str) -> None:
    """A driver's engine kind, in its spec only when not llama-bench (older studies keep their identity)."""
    from tokensleuth.engines import engine_for

    engine_for(kind)
    if kind != DEFAULT_KIND:
        spec["kind"] = kind


def build_compare_spec_check(spec: dict[str, Any]) -> None:
    """Validate the parts of a bisect that each comparison will use, before any build."""
    from tokensleuth.trials.spec import build_compare_spec

    kind = spec.get("kind", DEFAULT_KIND)
    build_compare_spec({"arms": [{"name": "A", "source": DEFAULT_ENGINE, "kind": kind},
                                 {"name": "B", "source": DEFAULT_ENGINE, "kind": kind}],
                        "models": spec["models"], "workloads": spec["workloads"], "band": spec["band"],
                        "max_pairs": spec["max_pairs"], "common_flags": spec["flags"],
                        "timeout_s": spec["timeout_s"]}, "command line")
