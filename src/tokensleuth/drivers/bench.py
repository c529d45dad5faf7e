"""The bench driver: one engine, some models, llama-bench flags; store and summarize."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tokensleuth.core.records import PlannedTrial, StudyHandle
from tokensleuth.core.workloads import cell_of
from tokensleuth.engines import engine_for
from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.executors import Executor, execute
from tokensleuth.monitor.sources import Source
from tokensleuth.sources.build import EngineBuild
from tokensleuth.store import Store
from tokensleuth.trials.runner import TrialCallback, arm_runtime
from tokensleuth.trials.spec import spec_hash

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
