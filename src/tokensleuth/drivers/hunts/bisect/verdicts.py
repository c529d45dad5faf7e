"""The rules that turn verdicts into a bisect's answers: the edge and band that tell a
candidate "like good" from "like bad" (half the endpoints' regression), whether the endpoints
end the bisect (no regression only from ``same`` everywhere, a crash, undecided), whether the
regression is specific to the measured model (the controls), and which answers exit 0."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tokensleuth.analysis import stats
from tokensleuth.drivers.verdicts.judge import Judgement


def regression_edge(endpoint_ratio: float, band: float) -> float:
    """The ratio that separates "like good" from "like bad": halfway from good to the endpoints'
    ratio on the log scale (a 4x slowdown: 0.5; a 15% one: 0.922), never inside the user's band.
    (Halfway on the log scale, not capped: a candidate of a large step need not be within 25% of
    good to be told from bad, which on a noisy machine left neutral ones unresolved.)"""
    mid = math.sqrt(endpoint_ratio)
    return min(mid, 1 - band) if endpoint_ratio < 1 else max(mid, 1 + band)


def half_regression_band(endpoint_ratio: float, band: float) -> float:
    """The band that separates "like good" from "like bad": half the endpoint regression
    (at most 25%, at least the user's band)."""
    return max(min(abs(1 - endpoint_ratio) / 2, 0.25), band)


def specific_to_model(endpoint_ratio: float, control_verdicts: Sequence[str]) -> bool | None:
    """Whether a regression is specific to the measured model, from the control verdicts at the
    culprit (judged within half the regression): True when every control stayed the same, False
    when one moved the way the regression did, None when the controls stayed undecided."""
    moved = "slower" if endpoint_ratio < 1 else "faster"
    if control_verdicts and all(v == "same" for v in control_verdicts):
        return True
    return False if moved in control_verdicts else None


# A bisect's answer: found (first_bad), range (skipped commits border the culprit),
# no-regression (endpoints the same), unresolved (endpoints or the search undecided),
# crash (an endpoint crashed, hung or printed garbage). Only the first three exit 0.
ANSWERED = ("found", "range", "no-regression")


def endpoint_answer(ends: Judgement, band: float, good: str, bad: str) -> tuple[str, str] | None:
    """(status, reason) when the endpoints end the bisect; None when a regression is established.

    "No regression" may only be concluded from ``same`` in every cell: an unresolved cell
    is not evidence of sameness, and a crashed endpoint is a crash.
    """
    for arm, label in (("A", good), ("B", bad)):
        if (f := ends.failed(arm)) is not None:
            what = {"timeout": "hung (watchdog)", "crashed": "crashed", "garbage": "printed garbage"}.get(
                f.status, "failed")
            return "crash", f"endpoint {label} {what}: {f.message}"
    verdicts = ends.verdicts()
    if verdicts & {"slower", "faster"}:
        return None
    if verdicts == {"same"}:
        return "no-regression", "no regression between endpoints"
    parts = []
    for c in ends.comparisons:
        if c.verdict != "unresolved":
            continue
        e = c.estimate
        if e is None:
            parts.append(f"{c.workload}: no complete pair")
            continue
        need = stats.pairs_for_same(e, band)
        hint = (f"; at this noise ±{band:.1%} takes about {need} pairs" if need and need > c.pairs else
                f"; at this noise ±{band:.1%} takes more than 10,000 pairs" if need is None else "")
        parts.append(f"{c.workload}: {e.ratio:.4f} [{e.lo:.4f}, {e.hi:.4f}] after {c.pairs} pairs{hint}")
    return "unresolved", ("endpoints unresolved, so neither a regression nor its absence is shown ("
                          + "; ".join(parts) + ") — rerun with --resume to add pairs, or on a quieter machine")
