"""The scan's budget and the live line's estimates of the time left."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence

from tokensleuth.core.errors import UserError

_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(h|m|s|builds?)\s*$")


def build_pace(took: Sequence[float]) -> float:
    """Seconds per build to plan with: the lower median of those made, so that a first build that
    filled the compiler cache and the build folder (minutes, where the next commits take seconds)
    does not set the pace."""
    return statistics.median_low(took)


def builds_left(took: Sequence[float], left: int) -> str:
    """The live line's estimate of the builds left, from the seconds of those made so far (the
    first alone only as a bound: the next ones reuse its cache)."""
    def span(s: float) -> str:
        return f"~{s:.0f} s" if s < 120 else f"~{s / 60:.0f} min"

    if not took or left <= 0:
        return ""
    if len(took) == 1:
        return f"; at most {span(left * took[0])} of builds left (the next ones reuse this one's cache)"
    return f"; {span(left * build_pace(took))} of builds left"


def eta_text(left: Mapping[str, int], verdict_s: Sequence[float], build_s: Sequence[float]) -> str:
    """The time left (:func:`remaining`) at this run's mean seconds per verdict and its builds'
    pace (:func:`build_pace`; a build reused from the cache counts what it took when it was made)."""
    if not verdict_s or not (left["verdicts"] or left["builds"]):
        return ""
    per = sum(verdict_s) / len(verdict_s)
    build = build_pace(build_s) if build_s else None
    total = left["verdicts"] * per + left["builds"] * (build or 0.0)
    builds = f" and ~{left['builds']} builds at {build:.0f} s" if build is not None and left["builds"] else ""
    return f" — about {total / 60:.0f} min left: ~{left['verdicts']} verdicts at {per:.0f} s{builds}"


def parse_budget(text: str | None) -> dict[str, float]:
    """``--budget 4h``, ``90m``, ``40builds``, or both: ``4h,40builds`` → {"wall_s", "builds"}."""
    out: dict[str, float] = {}
    if text is None:
        return out
    how = "write a time (4h, 90m, 600s) and/or builds (40builds), comma-separated"
    for part in text.split(","):
        m = _BUDGET.match(part.strip().lower())
        if not m:
            raise UserError(f"--budget {text!r}: {how}")
        n, unit = float(m.group(1)), m.group(2)
        if not math.isfinite(n) or n <= 0:
            raise UserError(f"--budget {text!r}: a budget of {m.group(1)}{unit} lets the scan do nothing — {how}, "
                            "each above 0 (leave --budget out for none)")
        if unit.startswith("build") and n != int(n):
            raise UserError(f"--budget {text!r}: builds are counted whole — {how}")
        if unit.startswith("build"):
            out["builds"] = n
        else:
            out["wall_s"] = n * {"h": 3600, "m": 60, "s": 1}[unit]
    return out
