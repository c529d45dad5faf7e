"""Cross-hardware compare: the same arms on every selected machine of a fleet, one table.

The maintainer's table from the field reports (a row per machine, to see where a
regression shows), with intervals. Each machine gets a compare study of its own (its
own builds, its pairs run only there: the paired statistic assumes one machine), all
of them written by this process; a ``crosshost`` study ties them together and holds
each machine's hardware.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.hostenv import hardware
from tokensleuth.drivers.verdicts.pairs import run_compare, spec_dump
from tokensleuth.executors.ray import on_fleet
from tokensleuth.store import Store
from tokensleuth.trials.spec import ArmSpec, CompareSpec, spec_hash

if TYPE_CHECKING:
    from tokensleuth.fleet import Fleet, Node
    from tokensleuth.trials.runner import TrialCallback

HOSTS_STATE = "hosts"  # [{node, study, hardware, backends} or {node, error, lost_at}]
Log = Callable[[str], None]


def run_per_host(db: Path, fleet: Fleet, spec: CompareSpec, targets: Callable[[ArmSpec], Sequence[str]], *,
                 resume: bool = False, log: Log | None = None,
                 on_trial: Callable[[str], TrialCallback] | None = None) -> str:
    """Run ``spec`` on every machine of ``fleet`` at once; return the crosshost study's id.

    A machine that fails (lost, or its build fails) gives its row an error and the others
    go on; ``--resume`` continues its study where it stopped.
    """
    log = log or (lambda s: None)
    nodes = list(fleet.nodes)
    parent = {"compare": spec_dump(spec), "hosts": sorted(n.label for n in nodes)}
    with Store(db) as store:
        handle = store.writes.begin_study("crosshost", parent, spec_hash(parent), resume=resume)
        sid = handle.id
        with store.leases.hold(sid):
            rows: dict[str, dict[str, Any]] = {}
            lock = threading.Lock()

            bugs: list[BaseException] = []

            def one(node: Node) -> None:
                try:
                    entry = _run_host(db, fleet, node, spec, targets, log,
                                      on_trial(node.label) if on_trial else None, resume)
                except BaseException as exc:  # noqa: BLE001 - not a machine's failure: raised below
                    bugs.append(exc)
                    return
                with lock:
                    rows[node.label] = entry

            threads = [threading.Thread(target=one, args=(n,), name=f"host-{n.label}", daemon=True) for n in nodes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if bugs:
                raise bugs[0]
            store.state.put(sid, HOSTS_STATE, [rows[n.label] for n in nodes])
            store.writes.finish_study(sid, "done" if all("study" in r for r in rows.values()) else "failed")
    return sid


def _run_host(db: Path, fleet: Fleet, node: Node, spec: CompareSpec, targets: Callable[[ArmSpec], Sequence[str]],
              log: Log, on_trial: TrialCallback | None, resume: bool) -> dict[str, Any]:
    # each machine's study through a connection of its own; this process is the only writer
    with Store(db) as st:
        try:
            hw = hardware(fleet.host(node))
            by_source: dict[tuple[str, tuple[str, ...]], Any] = {}
            builds = {}
            for a in spec.arms:
                key = (a.source, tuple(a.cmake))
                if key not in by_source:
                    log(f"{node.label}: building {a.source}")
                    by_source[key] = fleet.build(node, a.source, a.cmake, tuple(targets(a)))
                builds[a.name] = by_source[key]
                fleet.check_arm(node, builds[a.name], a.name, a.kind, spec.flags_of(a), a.env,
                                spec.workloads, a.source)
            child, comps = run_compare(st, spec, builds, resume=resume, executor=on_fleet(fleet, [node]),
                                       identity={"host": node.label}, on_trial=on_trial)
            backends = sorted({x for b in builds.values() for x in b.backends})
            log(f"{node.label}: done ({child})")
            return {"node": node.label, "study": child, "hardware": hw, "backends": backends}
        except (EngineError, UserError) as exc:
            lost_at = fleet.lost.get(node.id)
            log(f"{node.label}: {str(exc).splitlines()[0][:200]}")
            return {"node": node.label, "error": str(exc).splitlines()[0][:300], "lost_at": lost_at}
