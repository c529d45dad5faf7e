"""tokensleuth bench: one engine, its samples stored, a llama-bench table printed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import (
    SAY,
    ClusterOpt,
    CmakeOpt,
    DbOpt,
    OnOpt,
    SampleIntervalOpt,
    command_line,
    engine_flags,
    guard_writes,
    models_read,
    out,
    parse_env,
    save_json,
    seconds_option,
)
from tokensleuth.core.errors import EngineError
from tokensleuth.core.limits import MAX_TIMEOUT_S, MAX_TRIALS
from tokensleuth.core.writes import file_path
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.sources import DEFAULT_ENGINE


def bench(
    ctx: typer.Context,
    model: Annotated[list[Path], typer.Option("--model", "-m", help="GGUF model (repeatable).")],
    engine: Annotated[str, typer.Option(help="Engine source: pypi:NAME==VER, git:PATH@REV or bin:DIR.")] = DEFAULT_ENGINE,
    cmake: CmakeOpt = [],  # noqa: B006 - typer reads the default
    trials: Annotated[int, typer.Option(min=1, max=MAX_TRIALS, help="Engine processes per model.")] = 1,
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a trial is killed.")] = 1800,
    env: Annotated[list[str], typer.Option("--env", help="VAR=VALUE for the engine (repeatable).")] = [],  # noqa: B006
    json_out: Annotated[Optional[Path], typer.Option("--json", parser=file_path("--json"), help="Write results as JSON here.")] = None,
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
    from tokensleuth.drivers.bench import run
    from tokensleuth.drivers.requests import BenchRequest
    from tokensleuth.report.markdown import render_warnings
    from tokensleuth.studies.bench import bench_json, render_bench

    flags = engine_flags(ctx)
    guard_writes([("--json", json_out)], reads=models_read(model), db=db)
    request = BenchRequest(engine=engine, models=[str(m) for m in model], workloads=workload, flags=flags,
                           cmake=cmake, trials=trials, timeout_s=timeout, env=parse_env(env), resume=resume,
                           json_out=json_out, kind=kind, api_key_env=api_key_env, sample_interval_s=sample_interval,
                           cluster=cluster, on=on, db=db, argv=command_line(ctx))
    study = run(request, SAY)
    with common.open_store(db) as store:
        cells = load_cells(store, study)
        engine_json = store.reads.arms(study)[0].engine
        warn = render_warnings(store.reads.warnings(study))
    if not cells:
        raise EngineError(f"no trial of study {study} produced results (see the messages above)")
    out.print(render_bench(cells, study, engine_json, resources=resources) + warn)
    if json_out:
        save_json(json_out, bench_json(cells, study, engine_json), study)
