"""tokensleuth profile: which op costs the time, and (with two engines) which op got slower."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from tokensleuth.commands import common
from tokensleuth.commands.common import (
    CmakeOpt,
    DbOpt,
    engine_flags,
    guard_writes,
    models_read,
    out,
    save_json,
    seconds_option,
)
from tokensleuth.core.limits import MAX_TIMEOUT_S
from tokensleuth.core.writes import file_path
from tokensleuth.sources import DEFAULT_ENGINE


class By(str, Enum):
    auto = "auto"
    kernels = "kernels"
    ops = "ops"


def profile(
    ctx: typer.Context,
    engine: Annotated[list[str], typer.Option("--engine", help="Engine source, or NAME=SOURCE (repeatable: the first is the baseline of the diff).")] = [],  # noqa: B006
    env: Annotated[list[str], typer.Option("--env", help="NAME:VAR=VALUE environment for the engine named NAME (repeatable).")] = [],  # noqa: B006
    model: Annotated[list[Path], typer.Option("--model", "-m", help="GGUF model (repeatable).")] = [],  # noqa: B006
    workload: Annotated[list[str], typer.Option("--workload", "-w", help="tgN or ppN (repeatable; default tg32).")] = [],  # noqa: B006
    cmake: CmakeOpt = [],  # noqa: B006
    processes: Annotated[int, typer.Option(min=1, max=50, help="Profile processes per engine, model and workload (the intervals are over processes).")] = 4,
    reps: Annotated[int, typer.Option("--reps", min=2, max=100, help="Timed repetitions per process.")] = 3,
    band: Annotated[str, typer.Option(help="An op's change counts beyond its interval and beyond this share of the total ms/token.")] = "2%",
    groups: Annotated[bool, typer.Option("--groups", help="Time each chain of dependent ops as one piece (A+B), so a GPU backend can still fuse it.")] = False,
    by: Annotated[By, typer.Option("--by", help="kernels: trace the GPU's kernels (a GPU build); ops: time the graph's ops through the eval callback (on a GPU it synchronises every node); auto: kernels on a GPU build, ops on a CPU one.")] = By.auto,
    timeout: Annotated[float, typer.Option(callback=seconds_option(MAX_TIMEOUT_S),
                                           help="Watchdog: seconds before a profile process is killed.")] = 600,
    json_out: Annotated[Optional[Path], typer.Option("--json", parser=file_path("--json"), help="Write the profile as JSON here.")] = None,
    trace_mode: Annotated[Optional[str], typer.Option("--trace-mode", help="How a CUDA build's kernels are recorded: kernels (the default: every kernel; its instrumentation slows a CUDA-graph run, which the report measures and says) or sample:N (the kernels of one CUDA-graph launch in N, a token each at tg).")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last unfinished run of this same profile.")] = False,
    db: DbOpt = None,
) -> None:
    """Where the time of a token goes: on a GPU build, every kernel llama-bench ran (traced:
    CUPTI, rocprofv3 or the Vulkan perf logger; every llama-bench flag as measured); on a CPU
    build (or --by ops), every op of the real model graph (llama.cpp's eval callback, in a profiler
    built with each engine). With two engines, the kernels or ops whose time per token changed.

    Example: tokensleuth profile --engine git:~/llama.cpp@b6900 --engine git:~/llama.cpp@b6901
    --model m.gguf -w tg32 -- -t 4

    One build two ways: --engine fused=SOURCE --engine split=SOURCE
    --env split:GGML_CUDA_DISABLE_FUSION=1 --groups
    """
    from tokensleuth.core.errors import EngineError
    from tokensleuth.core.workloads import canonical
    from tokensleuth.drivers.slower.ops import engine_names
    from tokensleuth.drivers.slower.profile import ProfileRequest, run
    from tokensleuth.studies import kind_of
    from tokensleuth.trials.spec import model_paths, parse_percent

    guard_writes([("--json", json_out)], reads=models_read(model), db=db)
    engines, envs = engine_names(list(engine) or [DEFAULT_ENGINE], env)
    request = ProfileRequest(engines, envs, model_paths(model),
                             list(dict.fromkeys(canonical(w) for w in workload)) or ["tg32"], engine_flags(ctx),
                             list(cmake), processes, reps, parse_percent(band), groups, by.value, timeout, resume, db,
                             trace_mode)
    kind, sid = run(request, common.SAY)
    with common.open_store(db) as store:
        md, obj = kind_of(kind).render_stored(store, sid)
    out.print(md, markup=False)
    if json_out:
        save_json(json_out, obj, sid)
    if not obj.get("ops", obj.get("cells")):
        raise EngineError(f"{kind} {sid} measured nothing (see the messages above)")
