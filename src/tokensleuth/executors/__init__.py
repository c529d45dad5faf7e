"""Where trials run, behind one interface; the driver that hands them out is the only writer.

An :class:`Executor` runs units of trials (a pair: both arms back to back on one
machine, or one trial) and delivers each :class:`Done` or :class:`Lost`.
:mod:`~tokensleuth.executors.local` runs them in this process, one at a time (the
default); :mod:`~tokensleuth.executors.ray` on the machines of a fleet. :func:`execute`
marks what it hands out, writes what comes back, and puts lost units back.

Floor 6: imports fleet, trials and below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tokensleuth.core.records import NODE_LOST, TrialOutcome
from tokensleuth.engines.base import ArmRuntime
from tokensleuth.executors.base import Delivery, Done, Executor, Handout, Lost, Unit, units_of
from tokensleuth.executors.local import LocalExecutor
from tokensleuth.monitor.sources import Source
from tokensleuth.store import Store
from tokensleuth.trials.runner import TrialCallback, TrialJob

FLOOR = 6  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)

__all__ = ["Delivery", "Done", "Executor", "Handout", "LocalExecutor", "Lost", "Unit", "execute", "units_of"]


def execute(
    store: Store,
    study_id: str,
    arms: Mapping[str, ArmRuntime],
    *,
    timeout_s: float | None = None,
    on_trial: TrialCallback | None = None,
    limit: int | None = None,
    sources: Sequence[Source] | None = None,
    interval_s: float = 0.2,
    executor: Executor | None = None,
) -> list[TrialOutcome]:
    """Run the study's planned trials (in plan order, here); each unit is committed as it ends.

    The driver is the store's only writer: executors return outcomes, it writes them. A
    unit whose worker was lost goes back to planned with a ``node-lost`` warning and runs
    again; nothing of it was stored. ``limit`` stops after that many trials. The caller holds
    the study's lease (Leases.hold), which put back what a killed run left ``running``.
    """
    planned = store.reads.planned(study_id)
    if limit is not None:
        planned = planned[:limit]
    if not planned:
        return []
    jobs = [TrialJob.of(t) for t in planned]
    if executor is None:
        executor = LocalExecutor(sources)

    def handout(unit: Unit, node: str | None) -> None:
        store.writes.mark_running_many([j.trial_id for j in unit], node)

    outcomes: list[TrialOutcome] = []
    for d in executor.run(units_of(jobs), arms, timeout_s=timeout_s, interval_s=interval_s, handout=handout,
                    live=store.writes.live_timeline):
        if isinstance(d, Lost):
            # the node-lost warnings are the record (machine, time, trials): one transaction
            store.writes.hand_back([j.trial_id for j in d.jobs], NODE_LOST, d.detail())
            continue
        store.writes.finish_trials([(j.trial_id, o) for j, o in zip(d.jobs, d.outcomes, strict=True)])
        for j, o in zip(d.jobs, d.outcomes, strict=True):
            outcomes.append(o)
            if on_trial:
                on_trial(len(outcomes), len(jobs), j.arm, o)
    return outcomes
