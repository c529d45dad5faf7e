"""The step fit: PELT on the sampled points' levels, each step checked by Welch's t-test, and the
smallest step the verdicts could have seen."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tokensleuth.analysis.stats import normal_quantile, t_quantile

CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class FitStep:
    after: int  # the step lies between sampled point ``after`` and the next (indices into the sample)
    ratio: float  # the level after over the level before
    ci: tuple[float, float]
    p: float  # Welch's t-test between the two segments


def fit_steps(levels: Sequence[Sequence[float]], band: float, alpha: float = 0.001) -> list[FitStep]:
    """Steps in a sequence of sampled points, each a list of its rounds' t/s (in order).

    PELT on the mean log t/s of each point, penalised by ``2 log n`` times the variance of a
    point's mean (pooled between its rounds), every segment at least two points long (one odd
    point is not a step: that is left to the paired verdicts); a step is kept when Welch's
    t-test between the segments on either side rejects equality at ``alpha`` and its size is
    beyond ``band``. On 30 flat points at 1% noise and 2 rounds it calls a false step in 0.25%
    of sequences and finds 90% of 3% steps (tests/test_scan.py)."""
    import ruptures as rpt
    from scipy import stats as sps  # (scipy.stats where a scan fits its steps, not at every start)

    logs = [np.log(np.asarray(x, dtype=float)) for x in levels]
    if len(logs) < 2 or any(len(x) == 0 for x in logs):
        return []
    means = np.array([x.mean() for x in logs])
    dev = [x - x.mean() for x in logs if len(x) > 1]
    dof = sum(len(x) - 1 for x in logs if len(x) > 1)
    var = float(sum((d ** 2).sum() for d in dev) / dof) if dof else float(np.var(np.diff(means)) / 2 or 1e-12)
    reps = float(np.mean([len(x) for x in logs]))
    pen = 2 * math.log(len(means)) * max(var / reps, 1e-12)
    ends = rpt.Pelt(model="l2", min_size=2, jump=1).fit(means.reshape(-1, 1)).predict(pen=pen)
    cuts = [0, *ends]
    out = []
    for i in range(1, len(cuts) - 1):
        lo, at, hi = cuts[i - 1], cuts[i], cuts[i + 1]
        a = np.concatenate(logs[lo:at])
        b = np.concatenate(logs[at:hi])
        d = float(b.mean() - a.mean())
        if len(a) < 2 or len(b) < 2:
            continue
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)) or 1e-12
        t = t_quantile(0.5 + CONFIDENCE / 2, min(len(a), len(b)) - 1)
        p = float(sps.ttest_ind(b, a, equal_var=False).pvalue) if se > 1e-12 else 0.0
        if p < alpha and abs(math.exp(d) - 1) > band:
            out.append(FitStep(at - 1, math.exp(d), (math.exp(d - t * se), math.exp(d + t * se)), p))
    return out


def smallest_seen(halfwidths: Sequence[float], band: float) -> float | None:
    """The smallest slowdown (a fraction) that a paired verdict of this noise calls ``slower``
    with 95% probability. A verdict says slower when its whole 99% interval (half-width h, in
    log) lies beyond the band, so the step must pass the band by h plus 1.645 standard errors
    (h is 2.576 of them); the noisiest interval judged the same sets it."""
    if not halfwidths:
        return None
    z = normal_quantile(0.95) / normal_quantile(0.995)
    return 1 - (1 - band) * math.exp(-max(halfwidths) * (1 + z))
