"""The default executor: every trial in this process, in plan order, each delivered as it ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tokensleuth.engines import shared_unit
from tokensleuth.engines.base import ArmRuntime
from tokensleuth.executors.base import Delivery, Done, Handout, Unit
from tokensleuth.monitor.sources import Source, probe_sources
from tokensleuth.trials.runner import run_shared, run_trial


class LocalExecutor:
    """One trial at a time, here (a kill between the two of a pair loses neither), or a pair whose
    arms share one engine process as that one process."""

    def __init__(self, sources: Sequence[Source] | None = None) -> None:
        self.sources = sources

    def run(self, units: Sequence[Unit], arms: Mapping[str, ArmRuntime], *, timeout_s: float | None,
            interval_s: float, handout: Handout, live: Callable[[int], Any] | None) -> Iterator[Delivery]:
        srcs = list(self.sources) if self.sources is not None else probe_sources()
        for unit in units:
            shared = shared_unit(arms, unit)
            if shared is not None:  # both arms in one engine process (Engine.sharing)
                handout(unit, None)
                sink = live(unit[0].trial_id) if live else None
                try:
                    outs = run_shared(shared, timeout_s=timeout_s, sources=srcs, interval_s=interval_s,
                                      on_sample=sink)
                finally:
                    if sink is not None:
                        sink.close()
                yield Done(unit, outs)
                continue
            for job in unit:  # one at a time: a kill between the two of a pair loses neither
                handout((job,), None)
                sink = live(job.trial_id) if live else None
                try:
                    out = run_trial(arms[job.arm], job, timeout_s=timeout_s, sources=srcs, interval_s=interval_s,
                                    on_sample=sink)
                finally:
                    if sink is not None:
                        sink.close()
                yield Done((job,), (out,))
