"""The work that moves a scan on: build a block, judge intervals, split, bisect steps, locate
settings changes."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from tokensleuth.drivers.hunts.bisect import ANSWERED, run_bisect
from tokensleuth.drivers.hunts.scan.levels import measure_levels, measured_points, settle_band, step_fit
from tokensleuth.drivers.hunts.scan.plan import next_work, remaining
from tokensleuth.drivers.hunts.scan.progress import builds_left
from tokensleuth.drivers.hunts.scan.resolve import room_for_step, split_limit
from tokensleuth.drivers.hunts.scan.settings import locate, settings_moved
from tokensleuth.drivers.hunts.scan.state import BISECTS, INTERVALS, SKIPPED, Scan, interval_key


def run_block(scan: Scan, lo: int, hi: int) -> None:
    """Build, measure and refine the points from ``lo`` to ``hi`` (the whole range alone)."""
    scan.block = (lo, hi)
    pts = scan.block_points()
    took: list[float] = []
    measured = measured_points(scan, int(scan.spec["rounds"]))
    for n, i in enumerate(pts, 1):
        if scan.over_budget():
            continue
        if i in measured:  # (a resumed scan on a fresh machine: built when a comparison needs it)
            scan.log(f"  build{scan.on()} {n}/{len(pts)}: {scan.cands[i].label} measured before, not built now")
            continue
        t0 = time.monotonic()
        b = scan.build(i)
        if b is not None and not b.cache_hit:
            took.append(time.monotonic() - t0)
        how = ("does not build" if b is None else "from the cache" if b.cache_hit
               else f"built in {took[-1]:.0f} s")
        left = builds_left(took, sum(1 for j in pts[n:] if j not in measured))
        scan.log(f"  build{scan.on()} {n}/{len(pts)}: {scan.cands[i].label} {how}{left}")
    measure_levels(scan, int(scan.spec["rounds"]))
    noise = settle_band(scan)
    refine(scan, split_limit(noise))


def judge_interval(scan: Scan, p: int, q: int) -> dict[str, Any]:
    a, b = scan.cands[p], scan.cands[q]
    t0 = time.monotonic()
    for most in (scan.spec["max_pairs"], 2 * scan.spec["max_pairs"]):  # undecided: the same pairs go on
        j = scan.judge.compare(a.source, b.source, scan.spec["models"], scan.spec["band"], most)
        if "unresolved" not in j.verdicts() or j.failures or j.verdicts() & {"slower", "faster"}:
            break  # (a step is a step: the cells it left unresolved are reported so)
    scan.compare_s.append(time.monotonic() - t0)
    cells = [{"model": c.model, "workload": c.workload, "ratio": c.estimate.ratio if c.estimate else None,
              "ci": [c.estimate.lo, c.estimate.hi] if c.estimate else None, "pairs": c.pairs,
              "verdict": c.verdict,
              **({"confounded": c.confounder_note(), "steered": c.steered} if c.confounded else {})}
             for c in j.comparisons]
    verdicts = {c["verdict"] for c in cells}
    if (f := j.failed("B")) is not None or (f := j.failed("A")) is not None:
        return {"verdict": "crash", "cells": cells, "study": j.study, "note": f"{f.status}: {f.message}"[:200],
                "failed": b.label if j.failed("B") else a.label}
    verdict = ("step" if verdicts & {"slower", "faster"} else "same" if verdicts == {"same"} else "undecided")
    return {"verdict": verdict, "cells": cells, "study": j.study,
            "param_diffs": [d.to_json() for d in j.param_diffs]}


def bisect_step(scan: Scan, p: int, q: int, got: dict[str, Any]) -> None:
    """Bisect the step inside (p, q) and add its parent and culprit to the points."""
    key = interval_key(scan.cands[p], scan.cands[q])
    spec = {k: scan.spec[k] for k in ("models", "control_models", "workloads", "band", "max_pairs", "cmake",
                                      "flags", "timeout_s")}
    for k in ("pin_params", "kind"):
        if k in scan.spec:
            spec[k] = scan.spec[k]
    # judged on the cell that moved most: a bisect judges every candidate at half its
    # endpoints' change, which a cell that moved less would fail; the scan judges the other
    # cells on either side of the culprit afterwards. (Every model is measured, so that the
    # bisect's endpoints and verification are the scan's own pairs.)
    moved = [c for c in got["cells"] if c["verdict"] in ("slower", "faster") and c["ratio"]]
    worst = max(moved, key=lambda c: abs(math.log(c["ratio"])))
    spec["cells"] = [[worst["model"], worst["workload"]]]
    scan.log(f"step in {key}: bisecting its {q - p} commit(s) on {Path(worst['model']).stem} {worst['workload']}")
    result = run_bisect(scan.store, scan.cands[p:q + 1], spec, resume=True, log=scan.log, profile=scan.profile,
                        judge=scan.judge, search_outputs=False)
    scan.set_item(BISECTS, key, result)
    if result["status"] == "found":
        f = scan.index[result["first_bad"]]
        # its verification
        scan.set_item(BISECTS, interval_key(scan.cands[f - 1], scan.cands[f]), result)
        scan.add_points([f - 1, f])
    elif result.get("culprit_range"):
        inner = [scan.index[x] for x in result["culprit_range"] if x in scan.index]
        if inner:
            scan.add_points([min(inner) - 1, max(inner)])


def refine(scan: Scan, limit: float | None = None) -> None:
    """Judge, split and bisect intervals (:func:`next_work`) until none is left to do.

    ``limit``: an interval undecided after its pairs is split only when some cell's interval
    reaches beyond ±limit (:func:`~tokensleuth.drivers.hunts.scan.resolve.room_for_step`); one that
    does not is ``narrow``: listed undecided, not split (None: every one is split)."""
    fitted, all_pts = step_fit(scan), scan.points()
    after = {all_pts[s.after] for steps in fitted.values() for s in steps}  # where the fit sees a step
    closed: set[tuple[int, int]] = set()  # nothing more this run can do for these
    spent: set[tuple[int, int]] = set()  # undecided after this run's pairs
    failed: set[tuple[int, int]] = set()  # a step whose bisect in this run named no culprit
    narrow: set[tuple[int, int]] = set()  # undecided after this run's pairs, with no room for a step
    cap = 2 * int(scan.spec["max_pairs"])
    while True:
        pts = scan.block_points()
        stored = scan.get(INTERVALS, {})
        verdicts = {(p, q): stored[interval_key(scan.cands[p], scan.cands[q])]["verdict"]
                    for p, q in zip(pts, pts[1:], strict=False)
                    if interval_key(scan.cands[p], scan.cands[q]) in stored}
        bisects = scan.get(BISECTS, {})
        bisected = {(p, q) for p, q in verdicts if bisects.get(interval_key(scan.cands[p], scan.cands[q]),
                                                                {}).get("status") in ANSWERED}
        likely = {k for k, p in enumerate(pts) if p in after}
        moved = settings_moved(scan, verdicts, stored)
        work = next_work(pts, verdicts, bisected, int(scan.spec["max_gap"]), closed, likely, spent, failed,
                         moved, narrow)
        if work is None:
            return
        action, p, q = work
        key = interval_key(scan.cands[p], scan.cands[q])
        scan.progress(verdicts, remaining(pts, verdicts, bisected, int(scan.spec["max_gap"]), moved))
        if scan.over_budget():
            closed.add((p, q))
            if action == "judge":
                scan.set_item(INTERVALS, key, {"verdict": "undecided", "cells": [],
                                               "note": "budget spent before it was judged"})
            continue
        if action == "judge":
            got = judge_interval(scan, p, q)
            if got["verdict"] == "crash":
                scan.drop_point(scan.index[got["failed"]], f"crashed beside its neighbour ({got['note']})")
                continue
            if got["verdict"] == "undecided":
                spent.add((p, q))  # its pairs doubled already: split (one commit: --resume adds pairs)
                if limit is not None and q - p > 1 and not room_for_step(got["cells"], limit, cap):
                    narrow.add((p, q))  # a step beyond what the noise resolves is not inside: listed
                    got["note"] = (f"undecided, and no cell's interval reaches beyond ±{limit:.1%}: no step the "
                                   f"noise could resolve is inside, so it is not split")
            scan.set_item(INTERVALS, key, got)
            scan.log(f"  {key}: {got['verdict']} (" + ", ".join(
                f"{Path(c['model']).stem} {c['workload']} {c['ratio']:.4f}" if c["ratio"] else
                f"{c['workload']} —" for c in got["cells"]) + ")")
        elif action == "locate":
            locate(scan, p, q, stored[key].get("param_diffs") or [])
        elif action == "split":
            why = {"same": "the same", "undecided": "undecided"}.get(verdicts.get((p, q), ""),
                                                                     "a step whose bisect named no culprit")
            if not split(scan, p, q, why):
                closed.add((p, q))
        else:
            bisect_step(scan, p, q, stored[key])
            if scan.get(BISECTS, {})[key]["status"] not in ANSWERED:
                failed.add((p, q))  # split (one commit long: undecided, and --resume adds pairs)


def split(scan: Scan, p: int, q: int, why: str) -> bool:
    """Sample the buildable point nearest the middle of (p, q); False when none builds."""
    mid = (p + q) // 2
    for i in sorted(range(p + 1, q), key=lambda k: (abs(k - mid), k)):
        if scan.cands[i].label in scan.get(SKIPPED, {}):
            continue
        scan.add_points([i])
        if scan.build(i):
            scan.log(f"  {scan.cands[p].label}..{scan.cands[q].label} is {why} and {q - p} long: "
                     f"sampling {scan.cands[i].label}")
            measure_levels(scan, int(scan.spec["rounds"]))
            return True
    key = interval_key(scan.cands[p], scan.cands[q])  # nothing between builds: it stays as it is (said)
    scan.update(INTERVALS, {}, lambda d: {**d, key: {**d[key], "note": "nothing between builds"}})
    return False
