"""The Ray executor: units of trials to the fleet's machines, one unit per machine at a time.

Behind :class:`tokensleuth.executors.Executor`, like the local one. A unit (a pair) runs
on one machine; a machine takes the next unit as soon as it hands one back. A machine
that dies, or whose worker stops answering, loses only the unit it held: that unit is
delivered :class:`~tokensleuth.executors.Lost` (the driver puts its trials back and
records the node and time) and goes to the front of the queue for another machine.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.engines.base import ArmRuntime
from tokensleuth.executors.base import Delivery, Done, Handout, Lost, Unit
from tokensleuth.trials.runner import failed_outcome

if TYPE_CHECKING:
    from tokensleuth.fleet import Fleet, Node


class NodesLost(EngineError):
    """Every machine this executor may use was lost; what they measured before is stored."""


class RayExecutor:
    """Runs units on ``nodes`` of ``fleet``; see the module docstring."""

    def __init__(self, fleet: Fleet, nodes: Sequence[Node]) -> None:
        self.fleet = fleet
        self.nodes = list(nodes)

    def run(self, units: Sequence[Unit], arms: Mapping[str, ArmRuntime], *, timeout_s: float | None,
            interval_s: float, handout: Handout, live: Callable[[int], Any] | None) -> Iterator[Delivery]:
        """Each unit as a Ray task on a worker whose label fits its arm, delivered as it ends; a
        unit whose worker was lost comes back as Lost (its trials run again, nothing stored)."""
        ray = self.fleet.ray
        from tokensleuth.fleet import lost_errors as gone

        lost_errors = gone(ray)
        # each arm with how a machine makes its own build of it (None: run as given, e.g. bin:)
        payload = {name: (arm, self.fleet.recipes.get(str(arm.bin_dir)) if arm.bin_dir else None)
                   for name, arm in arms.items()}
        payload_ref = ray.put(payload)
        queue: deque[Unit] = deque(units)
        free = self.fleet.usable(self.nodes)
        inflight: dict[Any, tuple[Unit, Node]] = {}
        while queue or inflight:
            while queue and free:
                node = free.pop(0)
                unit = queue.popleft()
                # its builds first (a machine's first unit: it builds, git sources shipped to it)
                try:
                    self.fleet.ensure(node, [r for j in unit if (r := payload[j.arm][1]) is not None])
                except lost_errors:
                    self.fleet.forget(node)  # lost while building: nothing was handed out
                    queue.appendleft(unit)
                    continue
                except (EngineError, UserError) as exc:  # does not build there: the unit's trials fail
                    handout(unit, node.label)
                    msg = f"build failed on {node.label}: " + (str(exc).splitlines() or [""])[0][:200]
                    yield Done(unit, tuple(failed_outcome(msg, {"node": node.label}) for _ in unit))
                    free.append(node)
                    continue
                handout(unit, node.label)
                ref = self.fleet.worker(node).run_unit.remote(unit, payload_ref, timeout_s, interval_s)
                inflight[ref] = (unit, node)
            if not inflight:
                raise NodesLost("every machine of the fleet was lost ("
                                  + ", ".join(n.label for n in self.nodes) + ") — rerun with --resume once "
                                  "one is back; nothing measured so far is lost")
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                unit, node = inflight.pop(ref)
                try:
                    outs = ray.get(ref)
                except lost_errors as exc:
                    self.fleet.forget(node)
                    why = f"{type(exc).__name__}: " + (str(exc).splitlines() or [""])[0][:120]
                    yield Lost(unit, node.label, time.time(), why)
                    queue.appendleft(unit)
                    continue
                free.append(node)
                yield Done(unit, tuple(outs))


def on_fleet(fleet: Fleet, nodes: Sequence[Node] | None = None) -> RayExecutor:
    """The executor that runs units on ``nodes`` of ``fleet`` (default: all of them)."""
    return RayExecutor(fleet, list(nodes) if nodes is not None else fleet.nodes)
