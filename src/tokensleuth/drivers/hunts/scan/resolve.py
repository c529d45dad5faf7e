"""What the scan can resolve at the noise its level rounds measured: the band, the pairs a band
would take, and whether an undecided interval leaves room for a step (split) or not (listed).

The level rounds run every sampled build once per round, each in a process of its own, so the
spread of one build's log t/s between rounds is the between-process spread ``s`` (the
repetitions inside a process included: a level is a process's mean). A pair of the interval
verdicts is two such processes, one of each build, so its log ratio has an SD of about
``sqrt(2)·s`` (pairing removes the machine's drift between rounds, which ``s`` keeps in: the
figure errs on the noisy side).

At ``N`` pairs (the most an interval gets: ``--max-pairs``, doubled when undecided) the 99%
interval of a neutral interval is ``est ± h``, ``h = t(0.995, N−1)·sd/√N``, and its estimate
scatters around 0 with a standard error ``se = sd/√N``. ``same`` needs the whole interval inside
±band, i.e. ``|est| + h ≤ log(1 + band)``; it holds with 95% probability when

    log(1 + band) = h + 1.96·se = (t(0.995, N−1) + 1.96) · sd / √N

the **resolvable band**. (The same argument as :func:`~tokensleuth.drivers.hunts.scan.steps.smallest_seen`,
two-sided here: a neutral estimate may fall either way.) Below it, most neutral intervals end
undecided however often they are split: splitting them is what turned a 27-commit scan into a
walk over every commit (issue 43).

An undecided interval is split only when its paired estimate leaves room for a step beyond the
band the noise can resolve: some cell's 99% interval reaches past ±(max(band, resolvable) + h).
With the interval at the resolvable band, a neutral interval's estimate would have to fall
4.7 standard errors out to be split (never, in practice), while a step beyond the band whose
interval straddles the band edge is split as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tokensleuth.analysis.stats import normal_quantile, t_quantile

CONFIDENCE = 0.99  # the interval verdicts' (analysis/stats.py)
Z_SAME_Q = 0.975  # a neutral estimate inside ±(band − h) 95% of the time (its normal quantile)


def level_spread(levels: Sequence[Sequence[float]]) -> tuple[float, int] | None:
    """The SD of a level's log t/s between rounds (pooled over builds) and its degrees of freedom,
    from one cell's levels: a list of rounds' t/s per sampled build. None without a build measured
    twice."""
    ss, dof = 0.0, 0
    for xs in levels:
        v = np.log(np.asarray([x for x in xs if x and x > 0], dtype=float))
        if len(v) >= 2:
            ss += float(((v - v.mean()) ** 2).sum())
            dof += len(v) - 1
    return (math.sqrt(ss / dof), dof) if dof else None


def halfwidth(pair_sd: float, pairs: int) -> float:
    """The 99% interval's half-width (log) of ``pairs`` pairs at this SD of a pair's log ratio."""
    return t_quantile(0.5 + CONFIDENCE / 2, max(pairs, 2) - 1) * pair_sd / math.sqrt(max(pairs, 2))


def resolvable_band(pair_sd: float, pairs: int) -> float:
    """The narrowest band a neutral interval is judged ``same`` in, 95% of the time, in ``pairs``
    pairs at this SD of a pair's log ratio (module docstring)."""
    return math.expm1(halfwidth(pair_sd, pairs) + normal_quantile(Z_SAME_Q) * pair_sd / math.sqrt(max(pairs, 2)))


def pairs_for_band(pair_sd: float, band: float, limit: int = 100_000) -> int | None:
    """The fewest pairs whose resolvable band is within ``band`` (None past ``limit``)."""
    if pair_sd <= 0:
        return 2
    n = 2
    while n <= limit:
        if resolvable_band(pair_sd, n) <= band:
            return n
        n += max(1, n // 16)
    return None


def pairs_to_decide(cell: Mapping[str, Any], band: float, limit: int = 100_000) -> int | None:
    """The pairs at which one cell's interval, at the spread it showed around its estimate, would
    be narrow enough to settle it against ±band: inside it (``same``) when the estimate is inside,
    beyond it (a step) when it is beyond. None without an estimate, on the band's edge, or past
    ``limit``."""
    ci, ratio, pairs = cell.get("ci"), cell.get("ratio"), int(cell.get("pairs") or 0)
    if not ci or not ratio or ci[0] <= 0 or pairs < 2:
        return None
    mid, h = abs(math.log(ratio)), (math.log(ci[1]) - math.log(ci[0])) / 2
    target = abs(math.log1p(band) - mid)
    sd = h * math.sqrt(pairs) / t_quantile(0.5 + CONFIDENCE / 2, pairs - 1)
    n = 2
    while n <= limit and target > 0:
        if halfwidth(sd, n) <= target:
            return n
        n += max(1, n // 16)
    return None


def room_for_step(cells: Sequence[Mapping[str, Any]], limit: float, cap: int) -> bool:
    """Whether an undecided interval's paired estimate leaves room for a step beyond ±``limit``:
    some cell's 99% interval reaches past it. A cell whose compare stopped before ``cap`` pairs
    (its futility stop: no verdict was in reach) is read at the half-width it would have at
    ``cap`` with the spread it saw, as that stop reads it; a cell with no estimate leaves room."""
    lo_edge, hi_edge = math.log1p(-limit) if limit < 1 else -math.inf, math.log1p(limit)
    for c in cells:
        ci, ratio, pairs = c.get("ci"), c.get("ratio"), int(c.get("pairs") or 0)
        if not ci or not ratio or ci[0] <= 0 or pairs < 2:
            return True
        mid, h = math.log(ratio), (math.log(ci[1]) - math.log(ci[0])) / 2
        if pairs < cap:  # the spread seen, at the cap's pairs
            sd = h * math.sqrt(pairs) / t_quantile(0.5 + CONFIDENCE / 2, pairs - 1)
            h = halfwidth(sd, cap)
        if mid - h < lo_edge or mid + h > hi_edge:
            return True
    return False


def choose_band(band: float, given: bool, resolvable: float | None) -> float:
    """The band the verdicts use: the one asked (given, or the default), never widened to what the
    noise resolves. Widened, a step verdict needs only its interval to clear the wider band, so
    steps the asked band calls are missed: in simulation at a tiny model's noise (pair sd 18.8%)
    the widened band (9-16%) found 3 of 12 planted 10-20% steps, ±2% kept found 8 with no false one
    (bench/results/sim_scan_noise43.txt). What the noise resolves bounds the splits (split_limit)
    and is said with what a tighter band would take."""
    return band


def noise_line(noise: Mapping[str, Any]) -> str:
    """The log line that says what the noise resolves and which band the scan uses."""
    if noise.get("pair_sd") is None:
        return f"noise: no build measured twice yet — band ±{noise['band']:.1%} as asked"
    head = (f"noise: a level's spread between processes {noise['level_sd']:.1%} (worst cell, {noise['dof']} dof), "
            f"a pair's log ratio ~{noise['pair_sd']:.1%}: in {noise['pairs']} pairs (--max-pairs "
            f"{noise['pairs'] // 2}, doubled when undecided) it resolves ±{noise['resolvable_band']:.1%}")
    asked = noise["band_asked"]
    how = "as asked" if noise["band_given"] else "the default"
    if asked >= noise["resolvable_band"]:
        return head + f"; band ±{asked:.1%} {how}"
    need = noise.get("pairs_for_band")
    return head + (f"; band ±{asked:.1%} kept ({how}), tighter than that: intervals it cannot decide are listed "
                   f"undecided, not split — --band {math.ceil(noise['resolvable_band'] * 1000) / 10:g}% resolves, "
                   f"or ±{asked:.1%} would take ~{need} pairs (--max-pairs {math.ceil(need / 2)})"
                   if need else f"; band ±{asked:.1%} kept ({how}), out of reach at this noise")


def noise_of(levels: Mapping[tuple[str, str], Sequence[Sequence[float]]], band: float, given: bool,
             max_pairs: int) -> dict[str, Any]:
    """The scan's noise object (``noise`` in its JSON) from each cell's levels: the spread, the
    resolvable band at the pairs an interval gets (``2·max_pairs``), and the band chosen."""
    pairs = 2 * max_pairs
    spreads = [s for s in (level_spread(v) for v in levels.values()) if s is not None]
    out: dict[str, Any] = {"band_asked": band, "band_given": given, "pairs": pairs, "level_sd": None,
                           "dof": 0, "pair_sd": None, "resolvable_band": None, "margin": None,
                           "pairs_for_band": None, "band": band}
    if not spreads:
        return out
    level_sd, dof = max(spreads)  # the noisiest cell: an interval is same only when every cell is
    pair_sd = math.sqrt(2) * level_sd
    res = resolvable_band(pair_sd, pairs)
    out.update(level_sd=level_sd, dof=dof, pair_sd=pair_sd, resolvable_band=res,
               margin=math.expm1(halfwidth(pair_sd, pairs)), pairs_for_band=pairs_for_band(pair_sd, band),
               band=choose_band(band, given, res))
    return out


def split_limit(noise: Mapping[str, Any]) -> float | None:
    """Beyond which band an undecided interval's estimate must reach to be split:
    max(band, resolvable) widened by the half-width at the cap. None: noise not known (split as
    before)."""
    if noise.get("resolvable_band") is None:
        return None
    return float(math.expm1(math.log1p(max(noise["band"], noise["resolvable_band"])) + math.log1p(noise["margin"])))
