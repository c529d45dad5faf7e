"""The scan's JSON object from its stored state: steps explained, settings changes, undecided
intervals, the fit and the resolution."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokensleuth.core.errors import UserError
from tokensleuth.drivers.hunts.scan.levels import step_fit
from tokensleuth.drivers.hunts.scan.resolve import pairs_to_decide
from tokensleuth.drivers.hunts.scan.settings import cause
from tokensleuth.drivers.hunts.scan.state import (
    BISECTS,
    CANDIDATES,
    INTERVALS,
    LEVELS,
    NOISE,
    PROGRESS,
    SKIPPED,
    Scan,
    interval_key,
)
from tokensleuth.drivers.hunts.scan.steps import smallest_seen
from tokensleuth.sources.history import Candidate

if TYPE_CHECKING:
    from tokensleuth.store import Store


def partial(store: Store, sid: str) -> dict[str, Any]:
    """A scan under way (or killed), from its stored state alone: what it has found so far and
    what is left (`report ID` while it runs). Measures nothing."""
    cands = [Candidate(**c) for c in store.state.get(sid, CANDIDATES, [])]
    if not cands:
        raise UserError(f"scan {sid} has not sampled its range yet — wait for it, or resume it with --resume")
    spec = store.reads.study(sid).spec
    got = finish(Scan(store, sid, cands, spec, lambda s: None, None), measure=False)
    got["status"] = "running"
    got["builds"] = got["builds_all"]  # (this reading made none: the cost is every run's so far)
    got["live"] = [v for _, v in sorted(store.state.get(sid, PROGRESS, {}).items())]
    return got


def finish(scan: Scan, measure: bool = True) -> dict[str, Any]:
    """The scan's JSON object from its stored state (``measure=False``: a step's pinned
    settings check not made yet is left pending)."""
    cands, spec = scan.cands, scan.spec
    noise = scan.get(NOISE, None)
    band = float(noise["band"]) if noise else float(spec["band"])  # the band the verdicts used
    pts = scan.points()
    intervals = scan.get(INTERVALS, {})
    bisects = scan.get(BISECTS, {})
    steps: list[dict[str, Any]] = []
    undecided: list[dict[str, Any]] = []
    same: list[tuple[int, int, dict[str, Any]]] = []
    for p, q in zip(pts, pts[1:], strict=False):
        key = interval_key(cands[p], cands[q])
        got = intervals.get(key, {"verdict": "undecided", "cells": [], "note": "not judged"})
        if got["verdict"] == "same":
            same.append((p, q, got))
        elif got["verdict"] == "step" and q - p == 1:
            steps.append(_explain(scan, p, q, got, bisects, measure))
        else:
            b = bisects.get(key)
            why = got.get("note") or (f"a step whose bisect ended {b['status']}: {b.get('reason') or ''}".rstrip(": ")
                                      if got["verdict"] == "step" and b else "a step not bisected yet"
                                      if got["verdict"] == "step" else _open_why(got["cells"]))
            undecided.append({"from": cands[p].label, "to": cands[q].label, "commits": q - p, "reason": why,
                              "cells": got["cells"], "study": got.get("study"),
                              "pairs_needed": _pairs_needed(got["cells"], band)})
    halfwidths = [(math.log(c["ci"][1]) - math.log(c["ci"][0])) / 2 for _, _, g in same for c in g["cells"]
                  if c.get("ci") and c["ci"][0] > 0]
    gaps = [q - p - 1 for p, q, _ in same]
    levels = scan.get(LEVELS, [])
    blocks = scan.blocks()
    sampled = []
    for i in pts:
        c = cands[i]
        node = next(n for lo, hi, n in blocks if lo <= i <= hi)  # each point from its block's machine
        cells = {}
        for m in spec["models"]:
            for w in spec["workloads"]:
                ts = [x["ts"] for x in levels if x["label"] == c.label and x["model"] == m and x["workload"] == w
                      and x["ts"] and x.get("node") == node]
                cells[f"{Path(m).stem} {w}"] = sum(ts) / len(ts) if ts else None
        sampled.append({"label": c.label, "index": i, "subject": c.subject, "ts": cells,
                        **({"node": node} if node is not None else {})})
    fit = [{"model": m, "workload": w, "after": cands[pts[s.after]].label, "before": cands[pts[s.after + 1]].label,
            "ratio": s.ratio, "ci": list(s.ci), "p": s.p} for (m, w), ss in step_fit(scan).items() for s in ss]
    seen = smallest_seen(halfwidths, band)
    status = "done" if not undecided else "budget" if scan.exhausted else "undecided"
    settings_changes = []
    # a default change where no step was found (the same, or undecided): said, never dropped (a step
    # says its own); one longer than a commit was not located (on a fleet, nothing between builds,
    # or undecided: it is split like any undecided interval)
    for p, q in zip(pts, pts[1:], strict=False):
        got = intervals.get(interval_key(cands[p], cands[q]), {})
        if not got.get("param_diffs") or got["verdict"] not in ("same", "undecided"):
            continue
        one = q - p == 1  # located to its commit
        settings_changes.append({
            "verdict": got["verdict"], "first_changed": cands[q].label if one else None,
            "parent": cands[p].label if one else None, "subject": cands[q].subject if one else None,
            "from": cands[p].label, "to": cands[q].label, "commits": q - p, "param_diffs": got["param_diffs"],
            "cells": [{k: c[k] for k in ("model", "workload", "ratio", "ci", "verdict")} for c in got["cells"]]})
    label = {c.source: c.label for c in cands}
    pinned = {label[src]: list(flags) for src, flags in scan.judge.arm_flags.items() if flags and src in label}
    return {"study": scan.sid, "status": status, "first": cands[0].label, "last": cands[-1].label,
            "pinned": pinned if spec.get("pin_params") else None,
            "candidates": len(cands), "models": spec["models"], "workloads": spec["workloads"], "band": band,
            "resolvable_band": noise.get("resolvable_band") if noise else None, "noise": noise,
            "steps": steps, "settings_changes": settings_changes, "output_changes": [], "sampled": sampled,
            "skipped": scan.get(SKIPPED, {}),
            "undecided": undecided, "fit": fit,
            "same": [{"from": cands[p].label, "to": cands[q].label, "commits": q - p} for p, q, _ in same],
            "resolution": {"smallest_step_seen": seen, "longest_unsampled": max(gaps) if gaps else None,
                           "max_gap": spec["max_gap"]},
            "builds": scan.builds_made(), "builds_all": scan.builds_all(), "wall_s": scan.wall_s(),
            "engine_s": scan.engine_s(),
            "progress": {"points": len(pts), "intervals": len(pts) - 1, "same": len(same), "steps": len(steps),
                         "open": len(undecided)}}


def _open_why(cells: list[dict[str, Any]]) -> str:
    """Why an interval judged neither the same nor a step is open: the confounders that held its
    open cells (a busy neighbour or a stall beside one trial of a pair: comparisons.guard), or noise."""
    held = [c["confounded"] for c in cells if c.get("steered") and c["verdict"] == "unresolved"]
    if held:
        return "pairs a confounder touched on one side held it open (" + "; ".join(held) + ")"
    return "the pairs measured could not decide"


def _pairs_needed(cells: list[dict[str, Any]], band: float) -> int | None:
    """The pairs at which every cell of an undecided interval would be settled against ±band at the
    spread it showed (the most of the cells; None when a cell cannot say: resolve.pairs_to_decide)."""
    need = [pairs_to_decide(c, band) for c in cells]
    return None if not need or None in need else max(n for n in need if n is not None)


def _explain(scan: Scan, p: int, q: int, got: dict[str, Any], bisects: dict[str, Any],
             measure: bool = True) -> dict[str, Any]:
    """A step of one commit: its cells, direction, cause, files and profile (from the bisect
    that found it, when one did)."""
    cands = scan.cands
    parent, culprit = cands[p], cands[q]
    found = next((b for b in bisects.values() if b.get("first_bad") == culprit.label), None)
    moved = [c for c in got["cells"] if c["verdict"] in ("slower", "faster")]
    worst = max(moved, key=lambda c: abs(math.log(c["ratio"]))) if moved else None
    diffs = (found or {}).get("culprit_param_diffs") or got.get("param_diffs") or []
    step: dict[str, Any] = {
        "first_bad": culprit.label, "parent": parent.label, "subject": culprit.subject,
        "direction": "slower" if worst and worst["ratio"] < 1 else "faster",
        "cells": [{k: c[k] for k in ("model", "workload", "ratio", "ci", "verdict")} for c in got["cells"]],
        "param_diffs": diffs,
        **cause(scan, parent, culprit, diffs, [(c["model"], c["workload"]) for c in moved], measure),
        "files": [f for f in ((found or {}).get("changes") or {}).get("files", []) if f.get("group") == "compiled"],
        "bisect": (found or {}).get("study"), "verified": (found or {}).get("verified"),
        "verification": [{k: c.get(k) for k in ("model", "workload", "ratio", "ci", "verdict", "pairs")}
                         for c in (found or {}).get("verification") or []],
        "study": got.get("study"),
    }
    for k in ("profile", "controls", "specific_to_model"):
        if found and k in found:
            step[k] = found[k]
    return step
