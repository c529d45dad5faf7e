"""The bench driver: one engine, some models, llama-bench flags; store and summarize."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tokensleuth.engines.base import DEFAULT_KIND
from tokensleuth.monitor.sources import Source
from tokensleuth.executors import Executor, execute
from tokensleuth.runner import TrialCallback, arm_runtime
from tokensleuth.sources.build import EngineBuild
from tokensleuth.spec import spec_hash
from tokensleuth.store import Store
from tokensleuth.records import PlannedTrial, StudyHandle
from tokensleuth.workloads import planned_argv

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
    plan = [PlannedTrial(ARM, m, w, tuple(planned_argv(w)) if w else ())
            for _ in range(trials) for m in models for w in (workloads or [""])]
    handle = store.begin_study("bench", spec, spec_hash(spec), resume=resume,
                               arms=[(ARM, build.source, dict(build.to_json(), engine_kind=kind), (), env)],
                               plan=plan)
    if on_study:
        on_study(handle)
    if handle.finished:
        return handle.id
    arm = arm_runtime(ARM, build, flags, env, kind, api_key_env)
    with store.lease(handle.id):
        execute(store, handle.id, {ARM: arm}, timeout_s=timeout_s, on_trial=on_trial, sources=sources,
                interval_s=interval_s, executor=executor)
        statuses = [t["status"] for t in store.trials(handle.id)]
        store.finish_study(handle.id, "done" if "done" in statuses else "failed")
    return handle.id
