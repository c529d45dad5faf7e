"""A re-run's cells beside the original's: each answered agrees, disagrees or unresolved
(stats.agreement: unresolved when either side is), and the machine each ran on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokensleuth.analysis import stats
from tokensleuth.core.hostenv import hardware
from tokensleuth.drivers.verdicts.comparisons import Comparison
from tokensleuth.store import Store, stored_json

# a re-run's link to the study it measures again (drivers/verdicts/rerun.py): {original (its id here),
# bundle: {file, digest, study, written_at, tokensleuth, machine}, models: [[bundle's, here]],
# cells: original_cells of the bundle's verdicts}
RERUN_STATE = "rerun"


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def original_cells(verdicts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cells of a bundle's verdicts (its compare JSON) as a re-run holds them beside its own.
    A field that is missing or of another type reads as none (its verdict: unresolved)."""
    out = []
    for c in verdicts.get("comparisons") or []:
        if not isinstance(c, Mapping):
            continue
        ci = c.get("ci")
        out.append({"model": str(c.get("model")), "workload": str(c.get("workload")),
                    "baseline": str(c.get("baseline")), "candidate": str(c.get("candidate")),
                    "verdict": str(c.get("verdict") or "unresolved"), "ratio": _number(c.get("ratio")),
                    "ci": [_number(x) for x in ci] if isinstance(ci, list) and len(ci) == 2 else None,
                    "pairs": c.get("pairs") if isinstance(c.get("pairs"), int) else None})
    return out


def rerun_cells(state: Mapping[str, Any], comps: Sequence[Comparison]) -> list[dict[str, Any]]:
    """Per cell of the original: its verdict and interval, this machine's, and whether they agree
    (stats.agreement: an unresolved side is never an agreement). A cell that one side lacks is
    unresolved on that side."""
    here_of = {str(o): str(h) for o, h in state.get("models") or []}
    mine = {(c.model, c.workload, c.baseline, c.candidate): c for c in comps}
    out = []
    for o in state.get("cells") or []:
        model = here_of.get(o["model"], o["model"])
        c = mine.pop((model, o["workload"], o["baseline"], o["candidate"]), None)
        original = {k: o.get(k) for k in ("verdict", "ratio", "ci", "pairs")}
        out.append(_rerun_cell(model, o["model"], o["workload"], o["baseline"], o["candidate"], original, c))
    back = {h: o for o, h in here_of.items()}
    for c in mine.values():
        out.append(_rerun_cell(c.model, back.get(c.model, c.model), c.workload, c.baseline, c.candidate,
                               {"verdict": "unresolved", "ratio": None, "ci": None, "pairs": None}, c))
    return out


def _rerun_cell(model: str, original_model: str, workload: str, baseline: str, candidate: str,
                original: dict[str, Any], c: Comparison | None) -> dict[str, Any]:
    e = c.estimate if c is not None else None
    verdict = c.verdict if c is not None else "unresolved"
    here = {"verdict": verdict, "ratio": e.ratio if e else None, "ci": [e.lo, e.hi] if e else None,
            "pairs": c.pairs if c is not None else 0}
    return {"model": model, "original_model": original_model, "workload": workload, "baseline": baseline,
            "candidate": candidate, "original": original, "here": here,
            "agreement": stats.agreement(str(original.get("verdict")), verdict)}


def machine_of(store: Store, study_id: str) -> dict[str, Any] | None:
    """The machine the study's first finished trial ran on (core.hostenv.hardware)."""
    for t in store.reads.trials(study_id):
        if t["status"] == "done" and t["env_json"]:
            return hardware(stored_json(t, "env_json"))
    return None
