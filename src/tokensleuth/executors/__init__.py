"""Where trials run, behind one interface; the driver that hands them out is the only writer.

An :class:`Executor` runs units of trials (a pair: both arms back to back on one
machine, or one trial) and delivers each :class:`Done` or :class:`Lost`.
:mod:`~tokensleuth.executors.local` runs them in this process, one at a time (the
default); :mod:`~tokensleuth.executors.ray` on the machines of a fleet. :func:`execute`
marks what it hands out, writes what comes back, and puts lost units back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tokensleuth.engines.base import ArmRuntime
from tokensleuth.monitor.sources import Source
from tokensleuth.runner import TrialCallback, TrialJob
from tokensleuth.store import NODE_LOST, Store, TrialOutcome

__all__ = ["Delivery", "Done", "Executor", "Handout", "Lost", "Unit", "execute", "units_of"]


Unit = tuple[TrialJob, ...]  # what one machine runs back to back: a pair (both arms), or one trial


def units_of(jobs: Sequence[TrialJob]) -> list[Unit]:
    """Group a plan into units: the trials of one pair (same cell, same pair index) go together,
    since the paired statistic assumes both arms ran on one machine; anything else alone."""
    units: dict[tuple[str, str, int] | int, list[TrialJob]] = {}
    for j in jobs:
        key: tuple[str, str, int] | int = (j.model, j.workload, j.pair) if j.pair >= 0 else -j.trial_id - 1
        units.setdefault(key, []).append(j)
    return [tuple(u) for u in units.values()]


@dataclass(frozen=True, slots=True)
class Done:
    """A unit's trials, finished (engine faults included: they are outcomes)."""

    jobs: Unit
    outcomes: tuple[TrialOutcome, ...]


@dataclass(frozen=True, slots=True)
class Lost:
    """A unit whose machine died (or stopped answering) before it came back: nothing of it is kept."""

    jobs: Unit
    node: str
    at: float  # wall clock, epoch seconds
    why: str

    def detail(self) -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.at))
        seqs = ", ".join(str(j.seq) for j in self.jobs)
        return f"worker {self.node} lost at {when} during trial(s) {seqs} ({self.why}); they run again"


Delivery = Done | Lost
Handout = Callable[[Unit, str | None], None]  # (unit, node): told before a unit starts; None = this process


class Executor(Protocol):
    """Runs units of trials somewhere and delivers them as they end.

    ``handout`` is called before a unit starts (the driver marks its trials running, with
    the machine). A :class:`Lost` unit is run again by the executor on another machine (or
    later), after the driver has put it back: every unit is delivered Done exactly once.
    """

    def run(self, units: Sequence[Unit], arms: Mapping[str, ArmRuntime], *, timeout_s: float | None,
            interval_s: float, handout: Handout, live: Callable[[int], Any] | None) -> Iterator[Delivery]: ...


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
    again; nothing of it was stored. ``limit`` stops after that many trials.
    """
    store.recover(study_id)
    planned = store.planned(study_id)
    if limit is not None:
        planned = planned[:limit]
    if not planned:
        return []
    jobs = [TrialJob.of(t) for t in planned]
    if executor is None:
        from tokensleuth.executors.local import LocalExecutor

        executor = LocalExecutor(sources)

    def handout(unit: Unit, node: str | None) -> None:
        store.mark_running_many([j.trial_id for j in unit], node)

    outcomes: list[TrialOutcome] = []
    for d in executor.run(units_of(jobs), arms, timeout_s=timeout_s, interval_s=interval_s, handout=handout,
                    live=store.live_timeline):
        if isinstance(d, Lost):
            # the node-lost warnings are the record (machine, time, trials): one transaction
            store.hand_back([j.trial_id for j in d.jobs], NODE_LOST, d.detail())
            continue
        store.finish_trials([(j.trial_id, o) for j, o in zip(d.jobs, d.outcomes, strict=True)])
        for j, o in zip(d.jobs, d.outcomes, strict=True):
            outcomes.append(o)
            if on_trial:
                on_trial(len(outcomes), len(jobs), j.arm, o)
    return outcomes
