"""Estimators, intervals and sequential verdicts. Pure functions, no I/O.

The comparison unit is a *pair*: one engine process of each arm, run back to back
in alternating order (AB, BA, ...). Between-process variation (thread placement,
page cache, clocks) is usually larger than within-process variation, so each
process contributes one number, its mean tokens/s over the repetitions that did
not stall (:func:`trial_tokens_per_s`), and repetitions inside a process only
sharpen that number. The paired statistic is

    d_j = log(tps_candidate_j / tps_baseline_j)

whose mean is the log of the geometric-mean ratio. Its 99% interval is the
Student-t interval on the d_j (the log removes the skew of ratios; pairing
removes slow drift of the machine, which hits both members of a pair alike).

Verdicts use a practical-equivalence band ±b around a ratio of 1 (the
"region of practical equivalence" of Kruschke, 2018, *Rejecting or Accepting
Parameter Values in Bayesian Estimation*; frequentist form: two one-sided
tests, Schuirmann 1987):

* ``faster``/``slower`` when the whole interval lies beyond 1±b,
* ``same`` when the whole interval lies inside [1-b, 1+b],
* otherwise the data cannot decide yet; the driver adds pairs (doubling) and at
  its budget says ``unresolved``, never a guess. It also stops early when no
  ratio inside the interval could give a verdict by the pair cap at the spread
  seen so far (futility), and says how many pairs ±band would take.

Looking at the data several times (5, 10, 20, 40 pairs) would inflate the
false-alarm rate of a plain significance test; here a false alarm additionally
needs the interval to clear the band, and each look uses a 99% interval with
at most ``log2(max_pairs/5)+1`` looks, which keeps the A/A false-alarm rate
well under 2% (measured by bench/verdict_quality.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

# A verdict is one of these four; a misspelt "slower" is a type error (mypy --strict).
Verdict = Literal["faster", "slower", "same", "unresolved"]


# The distributions' quantiles, from the special functions scipy.stats itself calls (t.ppf is
# stdtrit, t.cdf stdtr, norm.ppf ndtri: the same floats). scipy.special is imported where first
# asked and scipy.stats not at all: that import (0.65 s) was half of every command's start, an
# error's one line and `--help` included.
def t_quantile(q: float, df: float) -> float:
    """Student's t quantile: ``scipy.stats.t.ppf(q, df)``."""
    from scipy import special

    return -math.inf if q == 0 else float(special.stdtrit(df, q))


def t_cdf(x: float, df: float) -> float:
    """Student's t distribution function: ``scipy.stats.t.cdf(x, df)``."""
    from scipy import special

    return float(special.stdtr(df, x))


def normal_quantile(q: float) -> float:
    """The standard normal quantile: ``scipy.stats.norm.ppf(q)``."""
    from scipy import special

    return float(special.ndtri(q))


def line_fit(x: npt.ArrayLike, y: npt.ArrayLike) -> tuple[float, float, float]:
    """(slope, r, two-sided p of no slope) of the least-squares line through (x, y):
    ``scipy.stats.linregress``'s own arithmetic, step for step (its floats), without importing
    scipy.stats. At least three points, x not all equal."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(xs)
    if n < 3 or float(np.amax(xs)) == float(np.amin(xs)):
        raise ValueError("a line needs three points or more and two x values")
    ssxm, ssxym, _, ssym = np.cov(xs, ys, bias=True).flat
    if ssxm == 0.0 or ssym == 0.0:
        r = math.nan if ssxym == 0 else 0.0
    else:
        r = min(1.0, max(-1.0, float(ssxym / np.sqrt(ssxm * ssym))))
    df = n - 2
    tiny = 1.0e-20
    t = r * np.sqrt(df / ((1.0 - r + tiny) * (1.0 + r + tiny)))
    return float(ssxym / ssxm), r, 2 * t_cdf(-abs(float(t)), df)


@dataclass(frozen=True, slots=True)
class Summary:
    n: int
    mean: float
    sd: float


def summarize(values: Sequence[float]) -> Summary:
    """Mean and sample standard deviation (sd = 0 for a single value)."""
    if not values:
        raise ValueError("no values to summarize")
    arr = np.asarray(values, dtype=float)
    sd = float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
    return Summary(len(arr), float(arr.mean()), sd)


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation (sd / mean)."""
    s = summarize(values)
    return s.sd / s.mean if s.mean else math.nan


@dataclass(frozen=True, slots=True)
class RatioEstimate:
    """Geometric-mean ratio candidate/baseline with its confidence interval."""

    pairs: int
    ratio: float
    lo: float
    hi: float
    confidence: float
    method: str = "student-t on paired log ratios"

    def __post_init__(self) -> None:
        if not (self.lo <= self.ratio <= self.hi):
            raise ValueError("ratio outside its own interval")


# A repetition that took this many times the trial's fastest one stalled (see below).
STALL_FACTOR = 5.0


def stalled_reps(durations_ns: Sequence[int], factor: float = STALL_FACTOR) -> list[int]:
    """Indices of the repetitions that took more than ``factor`` x the trial's fastest.

    A stall is not noise: with as many engine threads as cores, one preempted thread
    holds every other thread at ggml's spin barrier for whole scheduler slices, and
    60 ms repetitions became 1.5-7.8 s ones on a 2-core machine with one other busy
    process (issue 8). Ordinary spread is a few percent, so a factor of 5 separates
    the two with room to spare. The reference is the fastest repetition, not the
    median: interference only ever adds time, so the fastest is the closest to the
    undisturbed duration (the argument of the ``timeit`` docs for taking the
    minimum), and unlike a median it still tells a stall from a normal repetition
    at ``-r 2`` and when most repetitions of a trial stalled. The fastest repetition
    itself is never a stall, so a trial always keeps at least one.
    """
    if len(durations_ns) < 2:
        return []
    fastest = min(durations_ns)
    if fastest <= 0:
        return []
    return [i for i, d in enumerate(durations_ns) if d > factor * fastest]


@dataclass(frozen=True, slots=True)
class TrialRate:
    """One engine process's tokens/s, the unit of the paired statistic."""

    tokens_per_s: float
    kept: int  # repetitions that count
    stalled: tuple[int, ...]  # repetition indices left out
    cold: int = 0  # leading repetitions left out (cold.cold_leading)


def trial_tokens_per_s(tokens_per_s: Sequence[float], durations_ns: Sequence[int],
                       factor: float = STALL_FACTOR, cold: int = 0) -> TrialRate:
    """The trial's mean tokens/s over its repetitions that did not stall.

    Why this and not a median or total tokens / total time: on a trial without a
    stall it is exactly llama-bench's own ``avg_ts`` (the mean of per-repetition
    t/s), so tokensleuth's per-trial figure matches what llama-bench prints and
    what studies stored before this change were compared on; total time would
    weight each repetition by its duration, which is what lets one 7.8 s
    repetition drag a trial of 60 ms ones to a tenth of its speed. A median would
    shrug off one stall in three, but not one in two (the median of two is their
    mean), and it throws away the precision of the other repetitions on every
    clean trial. A stall is a different mechanism from the spread of normal
    repetitions (tens of times slower, not percent), so it is detected and left
    out explicitly (:func:`stalled_reps`) and reported as a ``stall`` confounder.
    """
    if not tokens_per_s or len(tokens_per_s) != len(durations_ns):
        raise ValueError("need one duration per repetition")
    cold = min(cold, len(tokens_per_s) - 1)  # ``cold`` leading repetitions (cold.cold_leading) are left out
    stalled = [cold + i for i in stalled_reps(durations_ns[cold:], factor)]
    kept = [v for i, v in enumerate(tokens_per_s) if i >= cold and i not in stalled]
    return TrialRate(float(np.mean(kept)), len(kept), tuple(stalled), cold)


def paired_log_ratios(baseline: Sequence[float], candidate: Sequence[float]) -> np.ndarray:
    if len(baseline) != len(candidate):
        raise ValueError("paired samples need equal length")
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    if np.any(b <= 0) or np.any(c <= 0):
        raise ValueError("throughputs must be positive")
    d: np.ndarray = np.log(c / b)
    return d


def ratio_interval(
    baseline: Sequence[float], candidate: Sequence[float], confidence: float = 0.99
) -> RatioEstimate:
    """Geometric-mean ratio and Student-t interval from paired throughputs.

    Needs at least 2 pairs: with one pair there is no estimate of spread, and a
    verdict from it would be a guess.
    """
    d = paired_log_ratios(baseline, candidate)
    n = len(d)
    if n < 2:
        raise ValueError("need at least 2 pairs for an interval")
    mean = float(d.mean())
    se = float(d.std(ddof=1)) / math.sqrt(n)
    t = t_quantile(0.5 + confidence / 2, n - 1)
    return RatioEstimate(n, math.exp(mean), math.exp(mean - t * se), math.exp(mean + t * se), confidence)


def verdict(est: RatioEstimate | None, band: float) -> Verdict:
    """faster/slower/same when the interval settles it against ±band, else unresolved."""
    if est is None or not (0 < band < 1):
        return "unresolved"
    lo_band, hi_band = 1.0 - band, 1.0 + band
    if est.lo > hi_band:
        return "faster"
    if est.hi < lo_band:
        return "slower"
    if lo_band <= est.lo and est.hi <= hi_band:
        return "same"
    return "unresolved"


Agreement = Literal["agrees", "disagrees", "unresolved"]


def agreement(original: str, here: str) -> Agreement:
    """Whether a re-run's verdict on a cell agrees with the original's (``tokensleuth rerun``).

    ``unresolved`` where either side is: an interval that straddles the band says nothing either
    way, so it neither confirms nor refutes the other side's answer (an unresolved cell is never read
    as ``same``, and two unresolved sides are not an agreement). Otherwise the verdicts agree when
    they are the same word: ``same`` against ``faster`` is a disagreement, as is ``faster`` against
    ``slower``. A word that is not a verdict (a damaged or hand-edited bundle) is unresolved too.
    """
    words = ("faster", "slower", "same")
    if original not in words or here not in words:
        return "unresolved"
    return "agrees" if original == here else "disagrees"


def next_pair_target(current: int, first: int, max_pairs: int) -> int | None:
    """Sequential schedule: first round of ``first`` pairs, then double, capped.

    Returns the total number of pairs to have after the next round, or None when
    the budget is spent (5 -> 10 -> 20 -> 40 for first=5, max=40).
    """
    if current >= max_pairs:
        return None
    if current < first:
        return min(first, max_pairs)
    return min(current * 2, max_pairs)


def _log_halfwidth(est: RatioEstimate) -> float:
    return (math.log(est.hi) - math.log(est.lo)) / 2


def _halfwidth_at(est: RatioEstimate, n: int) -> float:
    """The interval's half-width (log scale) at ``n`` pairs if the spread stays as seen."""
    t_now = t_quantile(0.5 + est.confidence / 2, est.pairs - 1)
    sd = _log_halfwidth(est) * math.sqrt(est.pairs) / t_now
    return t_quantile(0.5 + est.confidence / 2, n - 1) * sd / math.sqrt(n)


def can_still_decide(est: RatioEstimate | None, band: float, max_pairs: int) -> bool:
    """Whether more pairs, up to ``max_pairs``, could still turn ``unresolved`` into a verdict.

    Futility check for the sequential driver. At the cap the interval will be
    about ``h`` wide on each side (the spread seen so far, more pairs). ``same``
    needs ``2h`` to fit in the band; ``faster``/``slower`` need the estimate to
    land more than ``h`` beyond a band edge. When ``same`` cannot fit and no
    ratio inside today's interval is far enough out, the cell stops: more pairs
    would be spent on an answer the noise cannot give.
    """
    if est is None or est.pairs < 2 or est.pairs >= max_pairs:
        return est is None and max_pairs >= 2
    lo_b, hi_b = math.log(1 - band), math.log(1 + band)
    h = _halfwidth_at(est, max_pairs)
    if 2 * h <= hi_b - lo_b:
        return True
    return math.log(est.lo) < lo_b - h or math.log(est.hi) > hi_b + h


def side(est: RatioEstimate | None, edge: float) -> Literal["below", "above"] | None:
    """Which side of ``edge`` the interval lies wholly on, if it does: a one-sided question
    (a bisect step: like the good endpoint, or like the bad one?)."""
    if est is None:
        return None
    if est.hi < edge:
        return "below"
    if est.lo > edge:
        return "above"
    return None


def pairs_for_same(est: RatioEstimate, band: float, limit: int = 10_000) -> int | None:
    """Pairs at which the interval would be narrow enough to fit in ±band (spread as seen)."""
    width = math.log(1 + band) - math.log(1 - band)
    if _log_halfwidth(est) == 0:
        return est.pairs
    n = max(est.pairs, 2)
    while n <= limit:
        if 2 * _halfwidth_at(est, n) <= width:
            return n
        n = n + max(1, n // 8)
    return None


def pairs_needed(log_ratio_sd: float, bands: Sequence[float] = (0.01, 0.02, 0.05), limit: int = 10_000) -> dict[float, int | None]:
    """Pairs for a 99% interval of an A/A ratio to fit inside ±band, at this SD of a pair's log ratio."""
    out: dict[float, int | None] = {}
    for band in bands:
        half = band  # log(1 ± band) ≈ ±band for small bands
        n = 2
        while n <= limit:
            if t_quantile(0.995, n - 1) * log_ratio_sd / n ** 0.5 < half:
                break
            n += 1 if n < 100 else max(1, n // 20)
        out[band] = n if n <= limit else None
    return out


def welch(a: Sequence[float], b: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """mean(b) - mean(a) and its Welch interval at ``confidence`` (the process is the unit: one
    value per process); (d, nan, nan) where either side has fewer than two."""
    ma, mb = float(np.mean(a)), float(np.mean(b))
    d = mb - ma
    if len(a) < 2 or len(b) < 2:
        return d, math.nan, math.nan
    va = float(np.var(a, ddof=1)) / len(a)
    vb = float(np.var(b, ddof=1)) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d
    df = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0) or 1e-300)
    h = t_quantile(0.5 + confidence / 2, df) * se
    return d, d - h, d + h


def change_verdict(d: float, lo: float, hi: float, practical: float, *, appeared: bool = False,
                   vanished: bool = False) -> str:
    """A row of a profile's diff (an op or a kernel): appeared or vanished, else grew or shrank
    beyond its interval and beyond ``practical``, unresolved without an interval (fewer than two
    processes a side: never read as the same), else the same."""
    if appeared:
        return "appeared"
    if vanished:
        return "vanished"
    if math.isnan(lo):
        return "unresolved"
    if lo > 0 and d > practical:
        return "grew"
    if hi < 0 and -d > practical:
        return "shrank"
    return "same"



def bootstrap_share(num: tuple[Sequence[float], Sequence[float]], den: tuple[Sequence[float], Sequence[float]],
                    draws: int = 2000, seed: int = 0, paired: bool = False) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval (Efron & Tibshirani 1993, ch. 13) of a part's share of a
    difference: (mean num[1] - mean num[0]) / (mean den[1] - mean den[0]), the process the unit.

    The four groups are resampled apart (a trace's processes against untraced ones), unless
    ``paired``: num[i] and den[i] are then figures of the same processes (an op's time and the wall
    time of one profiler process), and one draw of processes serves both, so that a process's part
    stays with its whole."""
    rng = np.random.default_rng(seed)

    def mean_draws(xs: Sequence[float], idx: np.ndarray | None = None) -> np.ndarray:
        x = np.asarray(xs, dtype=float)
        drawn: np.ndarray = x[rng.integers(0, len(x), (draws, len(x))) if idx is None else idx].mean(axis=1)
        return drawn

    if paired:
        if any(len(num[s]) != len(den[s]) for s in (0, 1)):
            raise ValueError("a paired share needs one part and one whole per process")
        idx = [rng.integers(0, len(num[s]), (draws, len(num[s]))) for s in (0, 1)]
        top = mean_draws(num[1], idx[1]) - mean_draws(num[0], idx[0])
        bottom = mean_draws(den[1], idx[1]) - mean_draws(den[0], idx[0])
    else:
        top = mean_draws(num[1]) - mean_draws(num[0])
        bottom = mean_draws(den[1]) - mean_draws(den[0])
    with np.errstate(divide="ignore", invalid="ignore"):  # a draw whose whole did not move has no share
        ratio = top / bottom
    lo, hi = np.nanpercentile(ratio, [2.5, 97.5])
    return float(lo), float(hi)
