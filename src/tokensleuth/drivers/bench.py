"""The bench driver: one engine, some models, llama-bench flags; store and summarize. Its request
run (`run`): the engine's kind and workloads settled, its flags checked, built here (its load guarded
against memory) or on the one machine a fleet names, then measured."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.core.records import PlannedTrial, StudyHandle
from tokensleuth.core.workloads import canonical, cell_of
from tokensleuth.drivers import shared
from tokensleuth.drivers.requests import BenchRequest, Say
from tokensleuth.engines import engine_for, kind_for, served
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.engines.checks import check_arm
from tokensleuth.executors import Executor, execute
from tokensleuth.monitor.sources import Source
from tokensleuth.sources import parse_source
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store
from tokensleuth.trials.runner import TrialCallback, arm_runtime
from tokensleuth.trials.spec import WORKLOAD_FLAGS, model_paths, spec_hash

ARM = "engine"


def bench_spec(build: EngineBuild, models: Sequence[str], flags: Sequence[str], trials: int,
               env: dict[str, str], kind: str = DEFAULT_KIND, workloads: Sequence[str] = ()) -> dict[str, Any]:
    spec = {"engine": build.source, "build_key": build.key, "models": list(models),
            "flags": list(flags), "trials": trials, "env": env}
    # only when not llama-bench's own tests: an older bench keeps its identity (--resume finds it)
    if kind != DEFAULT_KIND:
        spec["kind"] = kind
    if workloads:
        spec["workloads"] = list(workloads)
    return spec


def run_bench(
    store: Store,
    build: EngineBuild,
    models: Sequence[str],
    flags: Sequence[str],
    *,
    trials: int = 1,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
    resume: bool = False,
    on_trial: TrialCallback | None = None,
    sources: Sequence[Source] | None = None,
    interval_s: float = 0.2,
    on_study: Callable[[StudyHandle], None] | None = None,
    kind: str = DEFAULT_KIND,
    workloads: Sequence[str] = (),
    api_key_env: str | None = None,
    executor: Executor | None = None,
    identity: dict[str, Any] | None = None,
) -> str:
    """Run (or resume) a bench study and return its id (``sources``: the monitor's, default probed).

    ``resume``: the latest study of this exact command goes on; when it already
    finished, nothing runs and its id is returned (its results are stored); when there
    is none, one starts. ``on_study`` is told which (:class:`StudyHandle`) before
    anything runs.
    """
    env = env or {}
    spec = dict(bench_spec(build, models, flags, trials, env, kind, workloads), **(identity or {}))
    # Trial-major order: each model (and workload) once per round, so drift hits all alike.
    # Without workloads, llama-bench runs the tests its own flags name, in one process.
    cells = [(m, w) for m in models for w in (workloads or [""])]
    # Here, rounds are planned one at a time: the cold leading repetitions found in the rounds
    # before (cold.cold_leading, as compare) are added to the next round's -r, so each process
    # keeps the repetitions asked for. A fleet gets every round at once, to run them side by side:
    # its cold repetitions are found and left out the same, not added to -r.
    rounds = 1 if executor is None else trials
    handle = store.writes.begin_study("bench", spec, spec_hash(spec), resume=resume,
                               arms=[(ARM, build.source, dict(build.to_json(), engine_kind=kind), (), env)],
                               plan=_round(cells, flags, {}, kind) * rounds)
    if on_study:
        on_study(handle)
    if handle.finished:
        return handle.id
    arm = arm_runtime(ARM, build, flags, env, kind, api_key_env)
    with store.leases.hold(handle.id):
        while True:
            execute(store, handle.id, {ARM: arm}, timeout_s=timeout_s, on_trial=on_trial, sources=sources,
                    interval_s=interval_s, executor=executor)
            if len(store.reads.trials(handle.id)) >= trials * len(cells):
                break
            store.writes.add_trials(handle.id, _round(cells, flags, cold_reps(store, handle.id), kind))
        statuses = [t["status"] for t in store.reads.trials(handle.id)]
        store.writes.finish_study(handle.id, "done" if "done" in statuses else "failed")
    return handle.id


def asked_reps(flags: Sequence[str], kind: str = DEFAULT_KIND) -> int:
    """The repetitions per process a bench's flags ask for (the engine's own where they name none)."""
    engine = engine_for(kind)
    reps = engine.repetitions(flags)
    return reps if reps is not None else engine.default_repetitions or 1


def cold_reps(store: Store, study_id: str) -> dict[tuple[str, str], int]:
    """Cold leading repetitions per (model, workload) over the stored trials (the most of any test
    a process runs: one -r serves them all)."""
    from tokensleuth.analysis.results import cold_by_test

    rows = list(store.reads.results(study_id))
    found = cold_by_test(rows, {int(r["id"]): list(store.reads.samples(int(r["id"]))) for r in rows})
    out: dict[tuple[str, str], int] = {}
    for r in rows:
        idx = cell_of(r["workload"], r["test"], int(r["test_idx"]))[1]
        c = found.get((r["model"], r["test"], idx))
        key = (str(r["model"]), str(r["workload"]))
        out[key] = max(out.get(key, 0), c.count if c is not None else 0)
    return out


def _round(cells: Sequence[tuple[str, str]], flags: Sequence[str], cold: dict[tuple[str, str], int],
           kind: str) -> list[PlannedTrial]:
    out = []
    engine = engine_for(kind)
    for m, w in cells:
        ws = [w] if w else []
        n = cold.get((m, w), 0) if engine.reps_per_process else 0
        # the cold leading repetitions are added to the ones asked for: the measured ones stay as many
        reps = asked_reps([*flags, *(engine.argv_for(ws) or ())], kind) + n if n else None
        out.append(PlannedTrial(ARM, m, w, tuple(engine.argv_for(ws, reps) or ())))
    return out


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
        return run_bench(store, b, models, flags, trials=request.trials, env=env, timeout_s=request.timeout_s,
                         resume=request.resume, on_trial=shared.trial_printer(say),
                         interval_s=request.sample_interval_s, kind=kind, workloads=workloads, api_key_env=key,
                         executor=shared.executor_for(fleet), identity=identity)
