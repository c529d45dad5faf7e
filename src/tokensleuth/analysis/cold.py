"""Cold repetitions: the leading repetitions of a cell's processes that ran slower than the rest
(caches, clocks and allocations still settling), found by a one-sided test and left out of every
trial of the cell alike. Pure functions, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tokensleuth.analysis.stats import STALL_FACTOR, t_cdf

COLD_ALPHA = 0.001  # a leading repetition is cold when it is slower than the rest at this significance
COLD_MIN_EFFECT = 0.01  # ... and by at least 1% (a real but negligible effect is left in)
# In one process (or a few), a leading block of k repetitions is cold at this one-sided level, each
# block size being one look (at most n - 3 of them). On scatter alone it calls a block cold in
# 0.9-1.4% of processes of 5-10 repetitions (tests/test_cold.py holds it to the level per look).
COLD_ALPHA_WITHIN = 0.01
COLD_UNDECIDED_P = 0.05  # a first repetition below every later one, beyond 1%, at p < this: said, not decided


@dataclass(frozen=True, slots=True)
class Cold:
    """Leading repetitions every trial of a cell leaves out: how many and how slow they ran."""

    count: int
    ratio: float | None  # mean t/s of the left-out repetitions / the rest (< 1), None when none
    processes: int  # the processes the effect was estimated from
    # none left out, yet the first repetition ran this much slower (ratio) than every later one in
    # ``doubtful`` of the processes, which the rule cannot tell from scatter: said beside the figure
    undecided: float | None = None
    doubtful: int = 0


def cold_leading(logs: Sequence[Sequence[float]], alpha: float = COLD_ALPHA,
                 min_effect: float = COLD_MIN_EFFECT) -> Cold:
    """The leading repetitions that are slower than the rest in a cell's processes.

    A repetition-index effect estimated across processes, not a fixed count: for j = 0, 1, …
    each process gives d_j = log t/s of repetition j − the mean of its later ones, and
    repetition j is cold when the d_j are negative beyond chance (one-sided t-test at
    ``alpha``, at least 4 processes) and by more than ``min_effect``. The first repetition
    that is not cold ends the run of them, and every process keeps at least two. On a
    30B-class model on a GPU the first timed repetition ran 8–15% slow after llama-bench's
    own warm-up in every process, which counted in each trial's t/s and in the
    within-process variance.

    With fewer than 4 processes (a bench of one process) the rule is read within each one
    (``_cold_within``): a leading block of repetitions is cold when each of them is slower
    than every later one, their mean is below the later ones' by more than ``min_effect``, and
    outside the later ones' one-sided prediction interval for a mean of that many at
    ``COLD_ALPHA_WITHIN``. The 30B shape's pp2048 in one process (11,535, then 13,238, 13,302,
    13,257, 12,685 t/s) has its first cold; its tg32 (243, 245, then 259, 258, 258) its first two.
    """
    procs = [list(x) for x in logs if len(x) >= 3]
    if len(procs) < 4:
        return _cold_within(procs, COLD_ALPHA_WITHIN, min_effect)
    count, effects = 0, []
    while True:
        d = [p[count] - float(np.mean(p[count + 1:])) for p in procs if len(p) - count - 1 >= 2]
        if len(d) < 4:
            break
        mean = float(np.mean(d))
        sd = float(np.std(d, ddof=1))
        if mean >= -min_effect:
            break
        p_value = 0.0 if sd == 0 else t_cdf(mean / (sd / math.sqrt(len(d))), len(d) - 1)
        if p_value >= alpha:
            break
        effects.append(mean)
        count += 1
    return Cold(count, math.exp(float(np.mean(effects))) if effects else None, len(procs))


def _leading_block(p: Sequence[float], k: int, min_effect: float) -> tuple[float, float] | None:
    """(mean log deficit, largest one-sided p) of one process's first ``k`` repetitions, each
    against the repetitions after them (a stalled one left out, as stalled_reps): None unless each
    is slower than every later one and below their mean by more than ``min_effect``, with 3 or
    more later ones left. Each p is of the later ones' one-sided prediction interval."""
    later = np.asarray(p[k:], dtype=float)
    later = later[later > max(p) - math.log(STALL_FACTOR)]
    if len(later) < 3:
        return None
    mean, sd = float(later.mean()), float(later.std(ddof=1))
    scale = sd * math.sqrt(1 + 1 / len(later))
    diffs, ps = [], []
    for x in p[:k]:
        diff = x - mean
        if x >= later.min() or diff >= -min_effect:
            return None
        diffs.append(diff)
        ps.append(0.0 if scale == 0 else t_cdf(diff / scale, len(later) - 1))
    return float(np.mean(diffs)), max(ps)


def _cold_within(procs: Sequence[Sequence[float]], alpha: float, min_effect: float) -> Cold:
    """cold_leading's rule inside each of a few processes (its docstring): each process's cold
    block is the longest leading one that holds, and the cell leaves out the fewest any process
    shows (every process must show it)."""
    counts: list[int] = []
    doubts: list[float] = []
    for p in procs:
        found = 0
        for k in range(1, len(p) - 2):
            block = _leading_block(p, k, min_effect)
            if block is not None and block[1] < alpha:
                found = k
        counts.append(found)
        first = _leading_block(p, 1, min_effect)
        if not found and first is not None and first[1] < COLD_UNDECIDED_P:
            doubts.append(first[0])
    count = min(counts, default=0)
    if count:
        per = [float(np.mean(p[:count]) - np.mean(p[count:])) for p in procs]
        return Cold(count, math.exp(float(np.mean(per))), len(procs))
    if doubts:
        return Cold(0, None, len(procs), undecided=math.exp(float(np.mean(doubts))), doubtful=len(doubts))
    return Cold(0, None, len(procs))
