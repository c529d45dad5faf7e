"""The interface executors implement: units of trials, what comes back, and the protocol.

(Apart from :func:`tokensleuth.executors.execute`, so that an executor's module imports only
this, never the package that picks one.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tokensleuth.core.records import TrialOutcome
from tokensleuth.engines.base import ArmRuntime
from tokensleuth.trials.runner import TrialJob

__all__ = ["Delivery", "Done", "Executor", "Handout", "Lost", "Unit", "units_of"]


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
