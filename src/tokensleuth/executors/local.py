"""The default executor: every trial in this process, in plan order, each delivered as it ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tokensleuth.engines.base import ArmRuntime
from tokensleuth.executors import Delivery, Done, Handout, Unit
from tokensleuth.monitor.sources import Source, probe_sources
from tokensleuth.runner import run_trial


class LocalExecutor:
    """One trial at a time, here; a kill between the two of a pair loses neither."""

    def __init__(self, sources: Sequence[Source] | None = None) -> None:
        self.sources = sources

    def run(self, units: Sequence[Unit], arms: Mapping[str, ArmRuntime], *, timeout_s: float | None,
            interval_s: float, handout: Handout, live: Callable[[int], Any] | None) -> Iterator[Delivery]:
        srcs = list(self.sources) if self.sources is not None else probe_sources()
        for unit in units:
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
