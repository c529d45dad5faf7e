"""tokensleuth bench: one engine, its samples stored, a llama-bench table printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import (
    ClusterOpt,
    CmakeOpt,
    DbOpt,
    OnOpt,
    SampleIntervalOpt,
    engine_flags,
    err,
    fleet_paths,
    json_target,
    open_fleet,
    out,
    parse_env,
    save_json,
    seconds_option,
    targets_for,
    trial_printer,
)
from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.limits import MAX_TIMEOUT_S, MAX_TRIALS
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.engines.checks import check_arm
from tokensleuth.sources import DEFAULT_ENGINE, parse_source


def bench(
    ctx: typer.Context,
    model: Annotated[list[Path], typer.Option("--model", "-m", help="GGUF model (repeatable).")],
    engine: Annotated[str, typer.Option(help="Engine source: pypi:NAME==VER, git:PATH@REV or bin:DIR.")] = DEFAULT_ENGINE,
    cmake: CmakeOpt = [],  # noqa: B006 - typer reads the default
    trials: Annotated[int, typer.Option(min=1, max=MAX_TRIALS, help="Engine processes per model.")] = 1,
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
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
    from tokensleuth.analysis.results import load_cells
    from tokensleuth.drivers.bench import run_bench
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies.bench import bench_json, render_bench
    from tokensleuth.trials.spec import model_paths

    flags = engine_flags(ctx)
    json_target(json_out)
    models = model_paths(model)
    env_map = parse_env(env)
    from tokensleuth.core.workloads import canonical
    from tokensleuth.engines import engine_for, kind_for, served
    from tokensleuth.trials.spec import WORKLOAD_FLAGS

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
        b = common.get_build(engine, cmake, targets_for([kind]))
        check_arm(b, "engine", kind, flags, env_map, workloads, api_key_env=api_key_env, source=engine)
        if engine_for(kind).bench_flags:  # a load that cannot fit is refused before it starts
            from tokensleuth.trials.memory import guard

            guard(models, flags, workloads, b.backends, warn=lambda line: err.print(line, markup=False))
    with common.open_store(db) as store:
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
