"""The bench driver: one engine, some models, llama-bench flags; store and summarize."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tokensleuth.monitor.sources import Source
from tokensleuth.runner import ArmRuntime, TrialCallback, execute
from tokensleuth.sources.build import EngineBuild
from tokensleuth.spec import spec_hash
from tokensleuth.store import PlannedTrial, Store, StudyHandle

ARM = "engine"


def bench_spec(build: EngineBuild, models: Sequence[str], flags: Sequence[str], trials: int,
               env: dict[str, str]) -> dict[str, Any]:
    return {"engine": build.source, "build_key": build.key, "models": list(models),
            "flags": list(flags), "trials": trials, "env": env}


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
) -> str:
    """Run (or resume) a bench study and return its id (``sources``: the monitor's, default probed).

    ``resume``: the latest study of this exact command goes on; when it already
    finished, nothing runs and its id is returned (its results are stored); when there
    is none, one starts. ``on_study`` is told which (:class:`StudyHandle`) before
    anything runs.
    """
    env = env or {}
    spec = bench_spec(build, models, flags, trials, env)
    # Trial-major order: each model once per round, so drift hits all models alike.
    plan = [PlannedTrial(ARM, m, "", ()) for _ in range(trials) for m in models]
    handle = store.begin_study("bench", spec, spec_hash(spec), resume=resume,
                               arms=[(ARM, build.source, build.to_json(), (), env)], plan=plan)
    if on_study:
        on_study(handle)
    if handle.finished:
        return handle.id
    arm = ArmRuntime(ARM, Path(build.bin_dir), tuple(flags), env)
    with store.lease(handle.id):
        execute(store, handle.id, {ARM: arm}, timeout_s=timeout_s, on_trial=on_trial, sources=sources,
                interval_s=interval_s)
        statuses = [t["status"] for t in store.trials(handle.id)]
        store.finish_study(handle.id, "done" if "done" in statuses else "failed")
    return handle.id
