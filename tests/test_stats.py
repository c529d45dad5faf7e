"""Statistics on synthetic data with known truth: coverage, band edges, schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokensleuth.analysis import stats
from tokensleuth.core.plan import pair_order, pair_round


def _pairs(rng: np.random.Generator, n: int, ratio: float, cv: float) -> tuple[list[float], list[float]]:
    base = 100 * np.exp(rng.normal(0, cv, n))
    cand = 100 * ratio * np.exp(rng.normal(0, cv, n))
    return list(base), list(cand)


def test_interval_coverage_is_near_nominal() -> None:
    rng = np.random.default_rng(1)
    hits = 0
    n_studies = 2000
    for _ in range(n_studies):
        b, c = _pairs(rng, 8, 0.97, 0.02)
        e = stats.ratio_interval(b, c, 0.99)
        hits += e.lo <= 0.97 <= e.hi
    assert 0.98 <= hits / n_studies <= 0.997  # nominal 99%


def test_ratio_is_geometric_mean() -> None:
    e = stats.ratio_interval([100, 200], [110, 220])
    assert e.ratio == pytest.approx(1.1)
    assert e.lo == pytest.approx(1.1) and e.hi == pytest.approx(1.1)  # no spread, no width


def test_verdict_band_edges() -> None:
    def mk(lo: float, hi: float) -> stats.RatioEstimate:
        return stats.RatioEstimate(5, math.sqrt(lo * hi), lo, hi, 0.99)

    assert stats.verdict(mk(0.95, 0.985), 0.01) == "slower"
    assert stats.verdict(mk(0.95, 0.995), 0.01) == "unresolved"  # overlaps the band
    assert stats.verdict(mk(1.011, 1.05), 0.01) == "faster"
    assert stats.verdict(mk(0.992, 1.008), 0.01) == "same"
    assert stats.verdict(mk(0.98, 1.02), 0.01) == "unresolved"  # wider than the band
    assert stats.verdict(mk(0.99, 1.01), 0.01) == "same"  # band edges are inside
    assert stats.verdict(None, 0.01) == "unresolved"


def test_interval_needs_two_pairs() -> None:
    with pytest.raises(ValueError):
        stats.ratio_interval([100.0], [99.0])
    with pytest.raises(ValueError):
        stats.ratio_interval([100.0, 0.0], [99.0, 98.0])


def test_doubling_schedule() -> None:
    seq, n = [], 0
    while (n := stats.next_pair_target(n, 5, 40)) is not None:  # type: ignore[assignment]
        seq.append(n)
    assert seq == [5, 10, 20, 40]
    assert stats.next_pair_target(10, 5, 12) == 12
    assert stats.next_pair_target(12, 5, 12) is None


def _sequential(b: list[float], c: list[float]) -> str:
    """The driver's schedule on pre-drawn pairs: look at 5, 10, 20, 40 pairs, stop at a verdict."""
    v = "unresolved"
    for n in (5, 10, 20, 40):
        v = stats.verdict(stats.ratio_interval(b[:n], c[:n]), 0.01)
        if v != "unresolved":
            break
    return v


def test_aa_false_alarms_rare_under_sequential_looks() -> None:
    """A/A with process noise: the sequential procedure almost never says faster/slower."""
    rng = np.random.default_rng(7)
    alarms = sum(_sequential(*_pairs(rng, 40, 1.0, 0.03)) in ("faster", "slower") for _ in range(1000))
    assert alarms / 1000 <= 0.02


def test_three_percent_slowdown_detected() -> None:
    rng = np.random.default_rng(3)
    found = sum(_sequential(*_pairs(rng, 40, 0.97, 0.01)) == "slower" for _ in range(500))
    assert found / 500 >= 0.95


def test_pair_order_is_balanced() -> None:
    assert [pair_order(["A", "B"], p) for p in range(4)] == [["A", "B"], ["B", "A"]] * 2
    firsts = [pair_order(["A", "B", "C"], p)[0] for p in range(6)]
    assert sorted(firsts) == ["A", "A", "B", "B", "C", "C"]
    trials = pair_round(["A", "B"], "m", "tg16", ("-n", "16"), 0, 3)
    assert [(t.arm, t.pair) for t in trials] == [("A", 0), ("B", 0), ("B", 1), ("A", 1), ("A", 2), ("B", 2)]


def test_futility_stops_aa_cells_that_cannot_reach_the_band() -> None:
    """A/A on a noisy machine: ±1% is out of reach by 40 pairs; the futility stop ends cells early
    without adding false alarms, and every stopped cell reports that ±1% needs more than 40 pairs."""
    rng = np.random.default_rng(11)
    early = alarms = 0
    for _ in range(300):
        b, c = _pairs(rng, 40, 1.0, 0.02)
        for n in (5, 10, 20, 40):
            est = stats.ratio_interval(b[:n], c[:n])
            v = stats.verdict(est, 0.01)
            if v != "unresolved" or not stats.can_still_decide(est, 0.01, 40):
                break
        alarms += v in ("faster", "slower")
        if n < 40 and v == "unresolved":
            early += 1
            need = stats.pairs_for_same(est, 0.01)
            assert need is None or need > 40
    assert early >= 100
    assert alarms / 300 <= 0.02


def test_futility_keeps_cells_that_can_still_decide() -> None:
    rng = np.random.default_rng(5)
    # quiet machine: same is reachable
    b, c = _pairs(rng, 40, 1.0, 0.003)
    assert stats.can_still_decide(stats.ratio_interval(b[:5], c[:5]), 0.01, 40)
    # noisy, but the interval reaches far enough below the band for slower to be possible
    b, c = _pairs(rng, 40, 0.96, 0.03)
    est = stats.ratio_interval(b[:5], c[:5])
    assert stats.verdict(est, 0.01) == "unresolved" and est.lo < 0.95  # (seeded: open, reaching 0.91)
    assert stats.can_still_decide(est, 0.01, 40)
    # at or over the cap nothing more is possible; with no estimate yet, pairs are still needed
    assert not stats.can_still_decide(stats.ratio_interval(b[:40], c[:40]), 0.01, 40)
    assert stats.can_still_decide(None, 0.01, 40)


def test_futility_rarely_costs_detection() -> None:
    """The 3% slowdown at the verdict_quality noise is found as often with the futility stop as without."""
    rng = np.random.default_rng(9)
    with_stop = without = 0
    for _ in range(300):
        b, c = _pairs(rng, 40, 0.97, 0.02)
        without += _sequential(b, c) == "slower"
        for n in (5, 10, 20, 40):
            est = stats.ratio_interval(b[:n], c[:n])
            v = stats.verdict(est, 0.01)
            if v != "unresolved" or not stats.can_still_decide(est, 0.01, 40):
                break
        with_stop += v == "slower"
    assert with_stop >= without - 3


def test_unresolved_summary_says_how_many_pairs_the_band_needs() -> None:
    from tokensleuth.drivers.verdicts.comparisons import Comparison
    from tokensleuth.drivers.verdicts.sentences import summary_sentence

    rng = np.random.default_rng(2)
    b, c = _pairs(rng, 20, 1.0, 0.02)
    est = stats.ratio_interval(b, c)
    need = stats.pairs_for_same(est, 0.01)
    assert need is not None and need > 20
    text = summary_sentence([Comparison("m.gguf", "tg32", "a", "b", 20, b, c, est, "unresolved")], 0.01)
    assert "unresolved after 20 pairs" in text and f"takes about {need} pairs" in text
    # a decided cell carries no such hint
    wide = summary_sentence([Comparison("m.gguf", "tg32", "a", "b", 20, b, c, est, "same")], 0.01)
    assert "takes about" not in wide


# -- the per-trial statistic under stalls (issue 8) --------------------------------------


def _trial(durations_ms: list[float], tokens: int = 64) -> tuple[list[float], list[int]]:
    ns = [int(d * 1e6) for d in durations_ms]
    return [tokens * 1e9 / d for d in ns], ns


def test_a_repetition_far_beyond_the_fastest_is_a_stall() -> None:
    # the field case: 60 ms repetitions, one preempted into 7.8 s
    assert stats.stalled_reps([int(60e6)] * 9 + [int(7.8e9)]) == [9]
    # at -r 2 (where a median is the mean of the two and cannot tell them apart)
    assert stats.stalled_reps([int(1.5e9), int(60e6)]) == [0]
    # most of a trial stalled: the fastest repetition is the reference, still flagged
    assert stats.stalled_reps([int(60e6), int(1.5e9), int(7.8e9)]) == [1, 2]
    # ordinary spread, even 4x, is not a stall; one repetition has nothing to compare with
    assert stats.stalled_reps([int(60e6), int(66e6), int(240e6)]) == []
    assert stats.stalled_reps([int(7.8e9)]) == []


def test_trial_statistic_leaves_a_planted_stall_out() -> None:
    ts, ns = _trial([60.0, 61.0, 59.0, 60.5, 7800.0])
    rate = stats.trial_tokens_per_s(ts, ns)
    clean = sum(ts[:4]) / 4
    assert rate.stalled == (4,) and rate.kept == 4
    assert rate.tokens_per_s == pytest.approx(clean)
    # the plain mean (what the statistic was) is 20% low; total tokens / total time 90% low
    assert sum(ts) / 5 == pytest.approx(0.8 * clean, rel=0.01)
    assert 5 * 64e9 / sum(ns) < 0.04 * clean
    # a clean trial: exactly llama-bench's avg_ts (the mean of per-repetition t/s)
    ts2, ns2 = _trial([60.0, 63.0, 58.0])
    clean2 = stats.trial_tokens_per_s(ts2, ns2)
    assert clean2.stalled == () and clean2.tokens_per_s == pytest.approx(sum(ts2) / 3)
    with pytest.raises(ValueError):
        stats.trial_tokens_per_s(ts2, ns2[:2])


def test_one_stalled_trial_no_longer_moves_the_paired_verdict() -> None:
    """A/A pairs at 1% noise, one baseline trial with a stall: the verdict stays `same`."""
    rng = np.random.default_rng(8)
    base, cand = [], []
    stalled_base_means = []
    for j in range(10):
        b_ms = list(60 * np.exp(rng.normal(0, 0.002, 5)) * math.exp(rng.normal(0, 0.001)))
        c_ms = list(60 * np.exp(rng.normal(0, 0.002, 5)) * math.exp(rng.normal(0, 0.001)))
        if j == 3:
            b_ms[2] = 4000.0  # one repetition of one trial preempted into 4 s
        bts, bns = _trial(b_ms)
        cts, cns = _trial(c_ms)
        base.append(stats.trial_tokens_per_s(bts, bns).tokens_per_s)
        cand.append(stats.trial_tokens_per_s(cts, cns).tokens_per_s)
        stalled_base_means.append(sum(bts) / len(bts))
    robust = stats.ratio_interval(base, cand)
    naive = stats.ratio_interval(stalled_base_means, cand)
    assert stats.verdict(robust, 0.01) == "same"
    # with the plain mean that one trial is 20% slow: the interval balloons past the band
    assert stats.verdict(naive, 0.01) == "unresolved"
    assert naive.hi - naive.lo > 10 * (robust.hi - robust.lo)


def test_the_quantiles_are_scipy_stats_own_floats() -> None:
    """t_quantile, t_cdf and normal_quantile call the special functions scipy.stats calls, so
    every interval is the same float it was with scipy.stats (the edges included)."""
    from scipy import stats as sps

    for df in (1, 1.5, 2, 4, 9, 19, 34, 99, 1e6, math.inf):
        for q in (0.0, 1e-9, 0.005, 0.025, 0.5, 0.95, 0.975, 0.995, 0.9995, 1.0):
            assert stats.t_quantile(q, df) == float(sps.t.ppf(q, df)), (q, df)
            x = 6 * q - 3
            assert stats.t_cdf(x, df) == float(sps.t.cdf(x, df)), (x, df)
    for q in (0.0, 0.005, 0.5, 0.95, 0.975, 0.995, 1.0):
        assert stats.normal_quantile(q) == float(sps.norm.ppf(q)), q


def test_no_module_imports_scipy_stats_when_loaded() -> None:
    """scipy.stats's import (0.65 s) was half of every command's start: an error's one line,
    `--help`, a report. No module of the package imports it when loaded; the few functions that
    need more than its quantiles (a drift's fit, a scan's t-test) import it where they run."""
    import subprocess
    import sys

    code = ("import importlib, pkgutil, sys, tokensleuth\n"
            "for m in pkgutil.walk_packages(tokensleuth.__path__, 'tokensleuth.'):\n"
            "    importlib.import_module(m.name)\n"
            "print(sorted(m for m in sys.modules if m == 'scipy.stats' or m.startswith('scipy.stats.')))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert p.stdout.strip() == "[]", p.stdout


def test_the_line_fit_is_linregress_own() -> None:
    """line_fit (the drift check's) gives scipy.stats.linregress's slope, r and p: the same floats,
    on noise, on a real trend, on a perfect line and on a flat one."""
    from scipy import stats as sps

    rng = np.random.default_rng(7)
    cases = [(np.arange(n, dtype=float), rng.normal(0, 1, n)) for n in (3, 6, 20, 200)]
    cases += [(np.sort(rng.uniform(0, 50, 40)), 0.01 * np.arange(40) + rng.normal(0, 0.02, 40)),
              (np.arange(8.0), 2 * np.arange(8.0) + 1), (np.arange(8.0), -np.arange(8.0)), (np.arange(8.0), np.ones(8))]
    for x, y in cases:
        want = sps.linregress(x, y)
        slope, r, p = stats.line_fit(x, y)
        # (bit for bit; nan where linregress gives nan: a flat y)
        np.testing.assert_array_equal([slope, r, p], [float(want.slope), float(want.rvalue), float(want.pvalue)])
    with pytest.raises(ValueError):
        stats.line_fit([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])
