"""bench's request run to its study: the engine's kind and workloads settled, its flags checked,
built here (its load guarded against memory) or on the one machine a fleet names, then measured."""

from __future__ import annotations

from tokensleuth.core.errors import UserError
from tokensleuth.core.workloads import canonical
from tokensleuth.drivers import shared
from tokensleuth.drivers import bench
from tokensleuth.drivers.requests import BenchRequest, Say
from tokensleuth.engines import engine_for, kind_for, served
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.engines.checks import check_arm
from tokensleuth.sources import parse_source
from tokensleuth.trials.spec import WORKLOAD_FLAGS, model_paths


def run(request: BenchRequest, say: Say) -> str:
    """Measure the request's engine on its models; returns the bench study's id."""
    engine, flags, env, key = request.engine, request.flags, request.env, request.api_key_env
    models = model_paths(request.models)
    kind = request.kind
    if served(engine) and kind == DEFAULT_KIND:
        kind = kind_for(engine, None)  # the kind its source's prefix is measured with
    if not engine_for(kind).builds and not served(engine):  # an unknown kind: one line, before any build
        raise UserError(f"--kind {kind} measures a server: give it as --engine url:http://HOST:PORT or cmd:'…'")
    parse_source(engine)
    workloads = list(dict.fromkeys(canonical(w) for w in request.workloads))
    if not workloads:
        workloads = list(engine_for(kind).default_workloads)
    if workloads:
        for f in flags:
            if f.split("=", 1)[0] in WORKLOAD_FLAGS:
                raise UserError(f"flag {f} conflicts with --workload — give the tests with --workload only")
    check_arm(None, "engine", kind, flags, env, workloads, api_key_env=key, source=engine)
    if engine.startswith("url:"):
        engine_for(kind).check_served(engine, models)  # a server that answers with another model: one line
    fleet = shared.open_fleet(request, say)
    identity = None
    if fleet is not None:
        if len(fleet.nodes) != 1:
            raise UserError("bench measures one machine: narrow --on to one of "
                            + ", ".join(n.label for n in fleet.nodes) + " (compare --per-host measures several)")
        fleet.check_files(shared.fleet_paths(models, [engine]))
        b = fleet.build(fleet.nodes[0], engine, request.cmake, shared.targets_for([kind]))
        fleet.check_arm(fleet.nodes[0], b, "engine", kind, flags, env, workloads, engine)
        identity = {"host": fleet.nodes[0].label}
    else:
        b = shared.build(engine, request.cmake, shared.targets_for([kind]), say)
        check_arm(b, "engine", kind, flags, env, workloads, api_key_env=key, source=engine)
        from tokensleuth.trials.memory import guard

        # a load that cannot fit is refused before it starts (where the engine has a load to guard)
        guard(models, flags, workloads, b.backends, warn=say.line, kind=kind)
    with shared.open_store(request.db) as store:
        return bench.run_bench(store, b, models, flags, trials=request.trials, env=env, timeout_s=request.timeout_s,
                         resume=request.resume, on_trial=shared.trial_printer(say),
                         interval_s=request.sample_interval_s, kind=kind, workloads=workloads, api_key_env=key,
                         executor=shared.executor_for(fleet), identity=identity)
