"""A scan on a fleet: the range's blocks on the machines at once, one lane (thread and store
connection) each."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from tokensleuth.core.errors import EngineError
from tokensleuth.drivers.hunts.scan.plan import blocks_of
from tokensleuth.drivers.hunts.scan.refine import run_block
from tokensleuth.drivers.hunts.scan.state import BLOCKS, Scan

if TYPE_CHECKING:
    from tokensleuth.fleet import Fleet, Node


def run_lanes(main: Scan, fleet: Fleet) -> None:
    """Build, measure and refine the blocks of the range on the fleet's machines at once, one
    block per machine at a time, each in a thread with a store connection of its own.

    A block keeps its machine across runs when that machine is there (its levels were measured
    there); a block whose machine is lost goes to another, which measures its levels again (a
    level is only ever compared with levels of its own machine). Pairs never leave a machine."""
    from tokensleuth.executors.ray import NodesLost
    from tokensleuth.fleet import lost_errors as gone
    from tokensleuth.store import Store

    lost_errors: tuple[type[BaseException], ...] = (NodesLost, *gone(fleet.ray))
    stored = main.get(BLOCKS, None)
    if stored and len(main.blocks()) == len(stored):  # an earlier run's (an extension's new end joins the last)
        blocks = [(lo, hi) for lo, hi, _ in main.blocks()]
        owner = [b.get("node") for b in stored]
    else:
        blocks = blocks_of(main.points(), len(fleet.usable(fleet.nodes)))
        owner = [None] * len(blocks)
    main.update(BLOCKS, None, lambda _: [{"from": main.cands[lo].label, "to": main.cands[hi].label, "node": n}
                                         for (lo, hi), n in zip(blocks, owner, strict=True)])
    queue = list(range(len(blocks)))
    errors: list[BaseException] = []
    lanes: list[Scan] = []

    def lane(node: Node) -> None:
        while True:
            with main.lock:
                if not queue or errors:
                    return
                j = next((x for x in queue if owner[x] == node.label), queue[0])
                queue.remove(j)
                owner[j] = node.label
            try:
                with Store(main.store.path) as st:  # (a store connection is its thread's own)
                    scan = Scan(st, main.sid, main.cands, main.spec, lambda line: main.said(f"[{node.label}] {line}"),
                                None, fleet=fleet, node=node, lock=main.lock, judges=main.judges)
                    scan.started, scan.spent0 = main.started, main.spent0  # one clock: the scan's wall time
                    scan.engine0, scan.engine_mark, scan.builds0 = main.engine0, main.engine_mark, main.builds0
                    lanes.append(scan)
                    scan.update(BLOCKS, [], lambda bs: [{**b, "node": node.label} if k == j else b
                                                         for k, b in enumerate(bs)])
                    run_block(scan, *blocks[j])
            except lost_errors as exc:
                fleet.forget(node)
                main.said(f"machine {node.label} was lost ({type(exc).__name__}) — its block "
                         f"{main.cands[blocks[j][0]].label}..{main.cands[blocks[j][1]].label} goes to another")
                with main.lock:
                    queue.insert(0, j)
                return
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                with main.lock:
                    errors.append(exc)
                return

    while queue and not errors:
        nodes = fleet.usable(fleet.nodes)
        if not nodes:
            raise EngineError("every machine of the fleet was lost — rerun with --resume once one is back; "
                              "nothing measured so far is lost")
        main.log(f"scan: {len(queue)} block(s) on {len(nodes)} machine(s): "
                 + ", ".join(f"{main.cands[blocks[j][0]].label}..{main.cands[blocks[j][1]].label}" for j in queue))
        # daemon: an interrupted driver exits; what was out is measured again on --resume
        threads = [threading.Thread(target=lane, args=(n,), name=f"scan-{n.label}", daemon=True) for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    main.exhausted = main.exhausted or any(s.exhausted for s in lanes)
    if errors:
        raise errors[0]
