"""What a driver decides, re-derived from the samples its study stored (test helper).

A test that runs the real engine gets the machine's numbers: an A/A's verdict, or the pairs a
study takes to settle, is the noise's. Such a test asserts the rule applied to what was stored
instead: the verdict the band gives the stored pairs, and where the rounds stop by compare's
schedule. The interval is computed here apart from the tool's statistics (a paired t on the
per-trial t/s that results.load_cells reads back), so a driver that pairs, judges or stops
wrongly fails the test, and a noisy machine does not.
"""

from __future__ import annotations

import math
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as st

from tokensleuth.analysis import stats
from tokensleuth.analysis.results import load_cells
from tokensleuth.core.workloads import trial_workloads
from tokensleuth.store import Store

CONFIDENCE = 0.99  # the tool's interval (stats.ratio_interval's default)


@dataclass(frozen=True, slots=True)
class Interval:
    pairs: int
    ratio: float
    lo: float
    hi: float


def _rates_by_pair(store: Store, study: str, model: str, workload: str, base: str,
                   cand: str) -> dict[int, tuple[float, float]]:
    """pair -> (baseline t/s, candidate t/s), for each pair both of whose trials finished."""
    pair_of = {int(t["id"]): int(t["pair"]) for t in store.reads.trials(study) if t["status"] == "done"}
    by_arm: dict[str, dict[int, float]] = {base: {}, cand: {}}
    for c in load_cells(store, study):
        if (c.model, c.test) == (model, workload) and c.arm in by_arm:
            for tid, v in c.trial_means.items():
                by_arm[c.arm][pair_of[tid]] = v
    return {p: (by_arm[base][p], by_arm[cand][p]) for p in sorted(set(by_arm[base]) & set(by_arm[cand]))}


def paired_rates(store: Store, study: str, model: str, workload: str, base: str,
                 cand: str) -> list[tuple[float, float]]:
    """(baseline t/s, candidate t/s) of each pair both of whose trials finished, in pair order."""
    return list(_rates_by_pair(store, study, model, workload, base, cand).values())


def interval(rates: list[tuple[float, float]]) -> Interval | None:
    """The geometric-mean ratio candidate/baseline and its t interval (None below 2 pairs)."""
    if len(rates) < 2:
        return None
    d = np.log(np.array([c for _, c in rates]) / np.array([b for b, _ in rates]))
    mean = float(d.mean())
    half = float(st.t.ppf(0.5 + CONFIDENCE / 2, df=len(d) - 1)) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return Interval(len(d), math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def band_verdict(iv: Interval | None, band: float) -> str:
    """The band's rule: faster/slower when the interval lies beyond 1±band, same inside it."""
    if iv is None:
        return "unresolved"
    if iv.lo > 1 + band:
        return "faster"
    if iv.hi < 1 - band:
        return "slower"
    return "same" if 1 - band <= iv.lo and iv.hi <= 1 + band else "unresolved"


def planned_pairs(store: Store, study: str) -> dict[tuple[str, str], int]:
    """Pairs planned per (model, workload) cell: a joined trial's pair counts for each of its workloads."""
    out: dict[tuple[str, str], int] = {}
    for t in store.reads.trials(study):
        for w in trial_workloads(str(t["workload"])):
            out[(t["model"], w)] = max(out.get((t["model"], w), 0), int(t["pair"]) + 1)
    return out


@contextmanager
def as_of(store: Store, study: str, pairs: int) -> Iterator[Store]:
    """The study as its driver saw it after the round that ended at ``pairs``: a copy of the
    store without the later pairs' trials (cold repetitions are found again from what is left)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "as_of.sqlite"
        con = sqlite3.connect(path)
        try:
            store.db.backup(con)
            later = "SELECT id FROM trials WHERE study_id=? AND pair>=?"
            con.execute(f"DELETE FROM samples WHERE result_id IN (SELECT id FROM results WHERE trial_id IN ({later}))",
                        (study, pairs))
            for table in ("results", "windows", "timeline", "warnings"):
                con.execute(f"DELETE FROM {table} WHERE trial_id IN ({later})", (study, pairs))
            con.execute("DELETE FROM trials WHERE study_id=? AND pair>=?", (study, pairs))
            con.commit()
        finally:
            con.close()
        with Store(path) as s:
            yield s


def stopped_at(store: Store, study: str, model: str, workload: str, arms: tuple[str, str], *, band: float,
               min_pairs: int, max_pairs: int, edge: float | None = None, start: int = 0,
               add_pairs_to: int | None = None) -> int:
    """The pairs where compare's rounds stop for this cell, replayed on the stored samples.

    The first round plans ``min_pairs``, each later one doubles them up to ``max_pairs``, while
    the cell's question is open: its verdict unresolved or, asked one-sided, its interval across
    ``edge``. Asked two-sided, it also stops once no ratio in the interval could give a verdict
    by ``max_pairs`` (stats.can_still_decide). ``start``: the pairs an earlier run left it at;
    ``add_pairs_to``: one round to that many first while the question is open, futile or not.
    """
    bad = [(t["seq"], t["status"]) for t in store.reads.trials(study) if t["status"] != "done"]
    assert not bad, f"trials that did not finish (the engine's doing, not the rule's): {bad}"
    n = start
    while True:
        iv = None
        if n:
            with as_of(store, study, n) as s:
                iv = interval(paired_rates(s, study, model, workload, *arms))
        if edge is not None:
            still_open = iv is None or iv.lo <= edge <= iv.hi
        else:
            still_open = band_verdict(iv, band) == "unresolved"
        if not still_open:
            return n
        if add_pairs_to is not None and n < add_pairs_to:
            n, add_pairs_to = add_pairs_to, None
            continue
        add_pairs_to = None
        est = None if iv is None else stats.RatioEstimate(iv.pairs, iv.ratio, iv.lo, iv.hi, CONFIDENCE)
        if n >= max_pairs or (edge is None and not stats.can_still_decide(est, band, max_pairs)):
            return n
        n = min(min_pairs if n < min_pairs else 2 * n, max_pairs)


def verified(bisect: dict[str, Any]) -> bool:
    """A bisect's verification held, or waited by the confounder rule: its culprit-against-parent
    comparison was steered (pairs a busy neighbour or a stall touched on one side answer otherwise:
    comparisons.guard), which is a decision waiting, not a wrong one."""
    return bisect["verified"] is True or any((v.get("confounded") or {}).get("steered")
                                             for v in bisect.get("verification") or [])


def held_open(bisect: dict[str, Any], culprit: str) -> bool:
    """A bisect left unresolved by the confounder rule alone: the planted culprit is inside its
    culprit range, and every commit it could not judge was held open by pairs a busy neighbour or a
    stall touched on one side (comparisons.guard, named in the step's note) — a decision waiting,
    never a wrong one. Any other unresolved answer is not this."""
    from tokensleuth.drivers.verdicts.comparisons import CONFOUNDERS

    if bisect["status"] != "unresolved" or culprit not in bisect["culprit_range"]:
        return False
    inner = set(bisect["culprit_range"][:-1])  # (answer.py: the commits between the last good and the first bad)
    steps = [s for s in bisect.get("steps") or [] if s["commit"] in inner]
    open_steps = [s for s in steps if s["outcome"] == "unresolved"]

    def held(note: str) -> bool:  # comparisons.Comparison.confounder_note of a steered cell, nothing else
        return (not note.startswith("good failed") and "no decision is taken on this cell until more pairs settle it"
                in note and any(f"{code} in " in note for code in CONFOUNDERS))

    return (bool(open_steps) and not any(s["outcome"] == "crash" for s in steps)
            and all(held(s.get("note") or "") for s in open_steps)
            and sorted(s["commit"] for s in open_steps) == sorted(
                (bisect.get("reason") or "").partition("(")[2].partition(")")[0].split(", ")))


def guarded_verdict(store: Store, study: str, model: str, workload: str, base: str, cand: str,
                    band: float) -> str:
    """The band's rule as a judge with ``confounders = "wait"`` applies it (comparisons.guard):
    where a confounder touched one trial of a pair and not the other, the answer is the rule on
    the hull of the all-pairs interval and the untouched pairs' one (unresolved below 2 of them)."""
    from tokensleuth.drivers.verdicts.comparisons import confounded_trials

    rates = _rates_by_pair(store, study, model, workload, base, cand)
    flagged = confounded_trials(store, study)
    hit = {p for p in rates if flagged.get((model, workload, base, p), set()) ^ flagged.get((model, workload, cand, p), set())}
    full = interval(list(rates.values()))
    if not hit or full is None:
        return band_verdict(full, band)
    clean = interval([r for p, r in rates.items() if p not in hit])
    if clean is None:
        return "unresolved"
    return band_verdict(Interval(full.pairs, full.ratio, min(full.lo, clean.lo), max(full.hi, clean.hi)), band)
