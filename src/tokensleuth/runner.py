"""Execute planned trials: one engine process each, persisted as it ends."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokensleuth.engines import llamabench
from tokensleuth.hostenv import host_environment
from tokensleuth.store import Store, TrialOutcome


@dataclass(frozen=True, slots=True)
class ArmRuntime:
    """What the runner needs to start an arm's engine."""

    name: str
    bench_bin: Path
    flags: tuple[str, ...]
    env: Mapping[str, str]


TrialCallback = Callable[[int, int, str, TrialOutcome], None]


def execute(
    store: Store,
    study_id: str,
    arms: Mapping[str, ArmRuntime],
    *,
    timeout_s: float | None = None,
    on_trial: TrialCallback | None = None,
    limit: int | None = None,
) -> list[TrialOutcome]:
    """Run the study's planned trials in plan order; each is committed as it ends.

    Engine faults (crash, garbage, hang) become the trial's status and the study
    goes on. ``limit`` stops after that many trials (for sequential drivers).
    """
    store.recover(study_id)
    planned = store.planned(study_id)
    if limit is not None:
        planned = planned[:limit]
    outcomes: list[TrialOutcome] = []
    for i, t in enumerate(planned):
        arm = arms[t["arm"]]
        argv: Sequence[str] = json.loads(t["argv_json"])
        store.mark_running(int(t["id"]))
        out = llamabench.run_trial(
            arm.bench_bin,
            t["model"],
            [*arm.flags, *argv],
            env=arm.env,
            timeout_s=timeout_s,
            host_env=host_environment(),
        )
        store.finish_trial(int(t["id"]), out)
        outcomes.append(out)
        if on_trial:
            on_trial(i + 1, len(planned), t["arm"], out)
    return outcomes
