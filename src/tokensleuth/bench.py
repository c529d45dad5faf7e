"""The bench driver: one engine, some models, llama-bench flags; store and summarize."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokensleuth.errors import UserError
from tokensleuth.monitor.sources import Source
from tokensleuth.runner import ArmRuntime, TrialCallback, execute
from tokensleuth.sources.build import EngineBuild
from tokensleuth.spec import spec_hash
from tokensleuth.store import PlannedTrial, Store

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
) -> str:
    """Run (or resume) a bench study and return its id (``sources``: the monitor's, default probed)."""
    env = env or {}
    spec = bench_spec(build, models, flags, trials, env)
    h = spec_hash(spec)
    study_id = store.find_resumable("bench", h) if resume else None
    if resume and study_id is None:
        raise UserError("no unfinished bench study matches this command — run it without --resume")
    if study_id is None:
        # Trial-major order: each model once per round, so drift hits all models alike.
        plan = [PlannedTrial(ARM, m, "", ()) for _ in range(trials) for m in models]
        study_id = store.create_study(
            "bench", spec, h, [(ARM, build.source, build.to_json(), (), env)], plan
        )
    arm = ArmRuntime(ARM, Path(build.bin_dir) / "llama-bench", tuple(flags), env)
    execute(store, study_id, {ARM: arm}, timeout_s=timeout_s, on_trial=on_trial, sources=sources,
            interval_s=interval_s)
    statuses = [t["status"] for t in store.trials(study_id)]
    store.finish_study(study_id, "done" if "done" in statuses else "failed")
    return study_id
