"""The scan's accuracy and cost by simulation, against the two usual history detectors.

Histories of ``--releases`` releases, each scan with ``--steps`` planted steps of 3-10% (either
way, at random releases) or none; every measurement is the true level times log-normal noise of
``--noise`` (the sd of one trial's log t/s: 0.015 is what the tiny models' tg16 show here). The
scan runs its own code on it: :func:`tokensleuth.drivers.hunts.scan.initial_sample` and :func:`next_work`, paired
verdicts by :func:`tokensleuth.analysis.stats.verdict` with compare's schedule (5, 10, 20 pairs, then once
twice that), an interval still undecided, or a step whose bisect named no culprit, split at its
middle as the scan does, each step bisected with :func:`tokensleuth.drivers.hunts.bisect.search` judging candidates at half
the step as the bisect does. The others get one measurement per release (every release built):
asv's penalised step fit (PELT, L1, penalty from the noise) and a Perfherder-style sliding t-test
(12 releases either side, t > 7).

A step is found when the detector names its release exactly; a false step is a release named
where there is none. Prints the table quoted in the closing note.

    .venv/bin/python bench/scan_sim.py [--scans 100] [--releases 300] [--noise 0.015] [--band 0.02]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import ruptures as rpt
from scipy import stats as sps

from tokensleuth.analysis import stats
from tokensleuth.drivers.hunts.bisect import half_regression_band, search
from tokensleuth.drivers.hunts.scan import initial_sample, next_work


class History:
    def __init__(self, rng: np.random.Generator, n: int, steps: int, noise: float) -> None:
        self.rng, self.n, self.noise = rng, n, noise
        at = sorted(rng.choice(np.arange(2, n - 1), size=steps, replace=False)) if steps else []
        sizes = rng.uniform(0.03, 0.10, size=steps) * rng.choice([-1, 1], size=steps)
        self.steps = {int(a): float(math.log1p(s)) for a, s in zip(at, sizes, strict=True)}
        self.level = np.cumsum([self.steps.get(i, 0.0) for i in range(n)])
        self.trials = 0

    def pairs(self, a: int, b: int, k: int) -> np.ndarray:
        """k paired log ratios of b over a (each pair: two trials)."""
        self.trials += 2 * k
        out: np.ndarray = (self.level[b] - self.level[a]) + self.rng.normal(0, self.noise * math.sqrt(2), k)
        return out

    def one(self) -> np.ndarray:
        """One trial per release (what the per-release detectors get)."""
        return self.level + self.rng.normal(0, self.noise, self.n)


def _estimate(d: np.ndarray) -> stats.RatioEstimate:
    n, m = len(d), float(d.mean())
    h = float(sps.t.ppf(0.995, n - 1)) * float(d.std(ddof=1)) / math.sqrt(n)
    return stats.RatioEstimate(n, math.exp(m), math.exp(m - h), math.exp(m + h), 0.99)


def paired(h: History, a: int, b: int, band: float, max_pairs: int = 20, edge: float | None = None) -> str:
    d = np.empty(0)
    for target in (5, 10, 20, 2 * max_pairs):  # compare's schedule; an undecided one once twice that
        d = np.concatenate([d, h.pairs(a, b, target - len(d))])
        e = _estimate(d)
        if edge is not None:
            side = stats.side(e, edge)
            if side is not None:
                return side
        else:
            v = stats.verdict(e, band)
            if v != "unresolved":
                return v
    return "unresolved"


def scan(h: History, band: float, max_gap: int = 32) -> tuple[set[int], int]:
    """The scan's found steps (first bad releases) and its builds."""
    points = initial_sample(h.n, 8)
    built = set(points)
    verdicts: dict[tuple[int, int], str] = {}
    bisected: set[tuple[int, int]] = set()
    closed: set[tuple[int, int]] = set()
    spent: set[tuple[int, int]] = set()  # undecided after their pairs
    failed: set[tuple[int, int]] = set()  # a step whose bisect named no culprit
    while (work := next_work(points, verdicts, bisected, max_gap, closed, spent=spent, failed=failed)) is not None:
        action, p, q = work
        if action == "judge":
            v = paired(h, p, q, band)
            verdicts[(p, q)] = "step" if v in ("slower", "faster") else "same" if v == "same" else "undecided"
            if verdicts[(p, q)] == "undecided":
                spent.add((p, q))
        elif action == "split":
            m = (p + q) // 2
            points = sorted({*points, m})
            built.add(m)
        else:
            if q - p == 1:
                bisected.add((p, q))
                continue
            ratio = math.exp(h.level[q] - h.level[p])
            edge = 1 - half_regression_band(ratio, band) if ratio < 1 else 1 + half_regression_band(ratio, band)
            like_bad = "below" if ratio < 1 else "above"

            def judge(i: int, p: int = p, edge: float = edge, like_bad: str = like_bad) -> str:
                built.add(p + i)
                s = paired(h, p, p + i, band, edge=edge)
                return "unresolved" if s == "unresolved" else "bad" if s == like_bad else "good"

            found = search(q - p + 1, judge)
            if found.first_bad is not None:
                bisected.add((p, q))
                f = p + found.first_bad
                bisected.add((f - 1, f))
                points = sorted({*points, f - 1, f})
                built |= {f - 1, f}
            else:
                failed.add((p, q))
    steps = {q for p, q in zip(points, points[1:], strict=False) if q - p == 1 and verdicts.get((p, q)) == "step"}
    return steps, len(built)


def asv_fit(h: History) -> set[int]:
    x = h.one()
    sigma = float(np.median(np.abs(np.diff(x)))) / 0.954 or h.noise  # MAD of the differences
    ends = rpt.Pelt(model="l1", min_size=1, jump=1).fit(x.reshape(-1, 1)).predict(pen=2 * math.log(h.n) * sigma)
    return {int(e) for e in ends[:-1]}


def sliding_t(h: History, window: int = 12, threshold: float = 7.0) -> set[int]:
    x = h.one()
    t = np.zeros(h.n)
    for i in range(window, h.n - window + 1):
        a, b = x[i - window:i], x[i:i + window]
        se = math.sqrt(a.var(ddof=1) / window + b.var(ddof=1) / window)
        t[i] = abs(b.mean() - a.mean()) / se if se else 0.0
    out = set()
    for i in range(h.n):  # Perfherder keeps the peak of each run above the threshold
        if t[i] > threshold and t[i] == t[max(0, i - window):i + window].max():
            out.add(i)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scans", type=int, default=100)
    ap.add_argument("--releases", type=int, default=300)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--noise", type=float, default=0.015)
    ap.add_argument("--band", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--build-s", type=float, default=150.0, help="one release's build (120-200 s here)")
    ap.add_argument("--trial-s", type=float, default=5.0, help="one trial of one cell")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    rows = {name: {"hit": 0, "true": 0, "false": 0, "flat_false": 0, "builds": 0, "trials": 0}
            for name in ("scan", "asv step fit", "sliding t-test")}
    for with_steps in (True, False):
        for _ in range(a.scans):
            h = History(rng, a.releases, a.steps if with_steps else 0, a.noise)
            found, builds = scan(h, a.band)
            got = {"scan": (found, builds, h.trials)}
            got["asv step fit"] = (asv_fit(h), a.releases, a.releases)
            got["sliding t-test"] = (sliding_t(h), a.releases, a.releases)
            for name, (steps, b, trials) in got.items():
                r = rows[name]
                r["true"] += len(h.steps)
                r["hit"] += len(steps & set(h.steps))
                r["false" if with_steps else "flat_false"] += len(steps - set(h.steps))
                if with_steps:
                    r["builds"] += b
                    r["trials"] += trials if name == "scan" else a.releases
    print(f"{a.scans} scans of {a.releases} releases with {a.steps} steps of 3-10% and {a.scans} with none; "
          f"noise {a.noise:.1%} per trial; band {a.band:.1%}")
    print(f"{'detector':<16} {'recall':>7} {'false/scan (steps)':>19} {'false/100 flat':>15} {'builds':>7} "
          f"{'trials':>7} {'hours':>6}")
    for name, r in rows.items():
        hours = (r["builds"] * a.build_s + r["trials"] * a.trial_s) / a.scans / 3600
        print(f"{name:<16} {r['hit'] / max(1, r['true']):>7.1%} {r['false'] / a.scans:>19.2f} "
              f"{100 * r['flat_false'] / a.scans:>15.1f} {r['builds'] / a.scans:>7.0f} {r['trials'] / a.scans:>7.0f} "
              f"{hours:>6.1f}")
    known = a.steps * math.ceil(math.log2(a.releases))
    print(f"bisecting each step from a known good/bad pair: {known} builds ({known * a.build_s / 3600:.1f} h of "
          f"builds), but only where someone knew the pair; hours at {a.build_s:.0f} s per build and "
          f"{a.trial_s:.0f} s per trial")


if __name__ == "__main__":
    main()
