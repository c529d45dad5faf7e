"""The search over an ordered candidate list (good first, bad last): :func:`search`, one
candidate judged at a time, and :func:`search_parallel`, k at once (:func:`probe_points`).
Pure functions of ``n`` and a ``judge(index) -> outcome`` callable, so they are tested with a
dict; outcomes other than good and bad are stepped around."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

OUTCOMES = ("good", "bad", "skip", "crash", "unresolved")


@dataclass(slots=True)
class SearchResult:
    first_bad: int | None
    culprit_range: list[int]
    skipped: list[int] = field(default_factory=list)
    crashed: list[int] = field(default_factory=list)
    unresolved: list[int] = field(default_factory=list)
    order: list[int] = field(default_factory=list)  # indices in the order they were judged


def search(n: int, judge: Callable[[int], str]) -> SearchResult:
    """Binary search over candidates 0..n-1, where 0 is good and n-1 is bad.

    Outcomes other than good/bad (skip: did not build; crash; unresolved: the
    statistics could not decide) are stepped around: the next candidate is the
    untried one nearest the middle. When only such candidates separate the last
    good from the first bad, the answer is the range between them.
    """
    lo, hi = 0, n - 1
    res = SearchResult(None, [])
    out: dict[int, str] = {}
    while hi - lo > 1:
        untried = [i for i in range(lo + 1, hi) if i not in out]
        if not untried:
            break
        mid = (lo + hi) // 2
        i = min(untried, key=lambda k: (abs(k - mid), k))
        o = judge(i)
        if o not in OUTCOMES:
            raise ValueError(f"unknown outcome {o!r}")
        out[i] = o
        res.order.append(i)
        if o == "good":
            lo = i
        elif o == "bad":
            hi = i
    res.skipped = sorted(i for i, o in out.items() if o == "skip")
    res.crashed = sorted(i for i, o in out.items() if o == "crash")
    res.unresolved = sorted(i for i, o in out.items() if o == "unresolved")
    res.culprit_range = list(range(lo + 1, hi + 1))
    res.first_bad = hi if hi - lo == 1 else None
    return res


def probe_points(lo: int, hi: int, tried: Collection[int], k: int) -> list[int]:
    """Up to ``k`` untried candidates that split (lo, hi) into k+1 near-equal parts: each the
    untried one nearest its split point (k=1: the middle, as :func:`search` picks it)."""
    untried = [i for i in range(lo + 1, hi) if i not in tried]
    picks: list[int] = []
    for j in range(1, k + 1):
        left = [i for i in untried if i not in picks]
        if not left:
            break
        target = lo + ((hi - lo) * j) // (k + 1)
        picks.append(min(left, key=lambda i: (abs(i - target), i)))
    return sorted(picks)


def search_parallel(n: int, judge_many: Callable[[list[int]], dict[int, str]], k: int,
                    width: Callable[[], int] | None = None) -> tuple[SearchResult, int]:
    """:func:`search` with ``k`` candidates judged at once per round (a k-ary split of the
    remaining range); returns (result, rounds). ``width``: how many can be judged now (the
    machines still alive), asked each round. With k=1 it probes exactly what search does.

    After each round the range is cut to (the last good below the first bad, the first bad):
    outcomes merge as in :func:`search` (skip, crash and unresolved are stepped around).
    """
    lo, hi = 0, n - 1
    res = SearchResult(None, [])
    out: dict[int, str] = {}
    rounds = 0
    while hi - lo > 1:
        probes = probe_points(lo, hi, out, max(1, width() if width else k))
        if not probes:
            break
        got = judge_many(probes)
        rounds += 1
        for i in probes:
            o = got[i]
            if o not in OUTCOMES:
                raise ValueError(f"unknown outcome {o!r}")
            out[i] = o
            res.order.append(i)
        bads = [i for i, o in out.items() if o == "bad" and lo < i < hi]
        if bads:
            hi = min(bads)
        goods = [i for i, o in out.items() if o == "good" and lo < i < hi]
        if goods:
            lo = max(goods)
    res.skipped = sorted(i for i, o in out.items() if o == "skip")
    res.crashed = sorted(i for i, o in out.items() if o == "crash")
    res.unresolved = sorted(i for i, o in out.items() if o == "unresolved")
    res.culprit_range = list(range(lo + 1, hi + 1))
    res.first_bad = hi if hi - lo == 1 else None
    return res, rounds
