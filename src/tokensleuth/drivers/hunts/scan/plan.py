"""The scan's pure moves: its first sample, the order of a round, the next piece of work, what is
left, where a setting changes, the blocks of a range."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence

from tokensleuth.core.errors import UserError


def initial_sample(n: int, intervals: int = 8) -> list[int]:
    """Both ends and evenly spaced points between: at most ``intervals`` intervals."""
    if n < 2:
        raise UserError("a scan needs at least two commits or releases in its range")
    k = min(n - 1, max(1, intervals))
    return sorted({round(i * (n - 1) / k) for i in range(k + 1)})


def round_order(points: Sequence[int], r: int) -> list[int]:
    """The order of round ``r``: forward on even rounds, backward on odd ones (each build sits
    at every place of the round on average, so a drift during a round cancels)."""
    return list(points) if r % 2 == 0 else list(points)[::-1]


def next_work(points: Sequence[int], verdicts: Mapping[tuple[int, int], str], bisected: Collection[tuple[int, int]],
              max_gap: int, closed: Collection[tuple[int, int]] = (), likely: Collection[int] = (),
              spent: Collection[tuple[int, int]] = (), failed: Collection[tuple[int, int]] = (),
              settings: Collection[tuple[int, int]] = (),
              narrow: Collection[tuple[int, int]] = ()) -> tuple[str, int, int] | None:
    """The scan's next move over the sampled ``points`` (candidate indices, in order), from the
    verdicts of the intervals between neighbours so far (same | step | undecided):

    - ``("judge", p, q)``: an interval with no verdict, or undecided (its pairs go on);
    - ``("split", p, q)``: the same, but longer than ``max_gap`` (a step and its revert could hide);
      undecided after its pairs were ``spent`` (a step and its revert, or a step near the band,
      could be inside); a step whose bisect ``failed`` to name a culprit (most often two steps
      inside, whose sum the bisect's candidates fall between): its middle is sampled, and each
      half judged on its own. (One commit long, such an interval is left as it is; undecided but
      ``narrow`` — its estimate leaves no room for a step the noise could resolve,
      :func:`~tokensleuth.drivers.hunts.scan.resolve.room_for_step` — it is left too, listed undecided.)
    - ``("bisect", p, q)``: a step not bisected yet (one commit long too: the bisect explains it);
    - ``("locate", p, q)``: the same, or undecided after its pairs, but its ends' llama-bench
      ``settings`` differ (a default changed inside): the commit where they change is searched
      for instead of a split (a probe per step, no pairs; its neighbours are judged after).

    ``closed``: intervals nothing more can be done for now (nothing between them builds, the
    budget). The intervals after the points in ``likely`` (indices into ``points``: where the fit
    put a step) come first, then the longest. None: nothing left."""
    todo = []
    for k, (p, q) in enumerate(zip(points, points[1:], strict=False)):
        if (p, q) in closed:
            continue
        v = verdicts.get((p, q))
        action: str | None = None
        if v is None or v == "undecided":
            action = ("judge" if (p, q) not in spent else None if q - p <= 1 else
                      "locate" if (p, q) in settings else None if (p, q) in narrow else "split")
        elif v == "same":
            action = "locate" if (p, q) in settings and q - p > 1 else "split" if q - p > max_gap else None
        elif v == "step" and (p, q) not in bisected:
            action = "bisect" if (p, q) not in failed else "split" if q - p > 1 else None
        if action:
            todo.append((k not in likely, -(q - p), k, action, p, q))
    if not todo:
        return None
    *_, action, p, q = min(todo)
    return action, p, q


def pieces(length: int, max_gap: int) -> int:
    """How many intervals a same interval of ``length`` commits ends as, split at its middle
    until none is longer than ``max_gap``."""
    if length <= max_gap or length < 2:
        return 1
    return pieces(length // 2, max_gap) + pieces(length - length // 2, max_gap)


def first_changed(lo: int, hi: int, differs: Callable[[int], bool | None]) -> tuple[int, int]:
    """Where a setting changes between ``lo`` (the old settings) and ``hi`` (new ones): the last
    index with the old settings and the first with new ones, by halving. ``differs(i)``: whether
    ``i``'s settings differ from ``lo``'s, None when it cannot tell (``i`` does not build; it is
    passed over, so the two returned may then be more than one apart)."""
    inner = list(range(lo + 1, hi))
    while inner:
        mid = inner[len(inner) // 2]
        got = differs(mid)
        if got is None:
            inner.remove(mid)
        elif got:
            hi, inner = mid, [i for i in inner if i < mid]
        else:
            lo, inner = mid, [i for i in inner if i > mid]
    return lo, hi


def remaining(points: Sequence[int], verdicts: Mapping[tuple[int, int], str], bisected: Collection[tuple[int, int]],
              max_gap: int, settings: Collection[tuple[int, int]] = ()) -> dict[str, int]:
    """What is left to do, in verdicts and builds: intervals to judge, long same intervals to
    split (a build, two verdicts, again until no piece is longer than ``max_gap`` — an interval
    not judged yet is counted as the same, the common case) and the steps of the bisects still
    to run (about log2 of the interval's length, a build and a verdict each); a settings change to
    locate: about log2 of its length in builds (a probe each, no pairs) and two verdicts after."""
    judge = split = later = bisect = locate = 0
    for p, q in zip(points, points[1:], strict=False):
        v = verdicts.get((p, q))
        if v is None:
            judge += 1
            later += pieces(q - p, max_gap) - 1
        elif v == "same" and (p, q) in settings and q - p > 1:
            locate += math.ceil(math.log2(q - p))
        elif v == "same" and q - p > max_gap:
            split += 1
            later += pieces(q - p, max_gap) - 2
        elif v == "step" and (p, q) not in bisected and q - p > 1:
            bisect += math.ceil(math.log2(q - p))
    return {"judge": judge, "split": split, "bisect": bisect, "locate": locate,
            "verdicts": judge + 2 * (split + later) + bisect + (2 if locate else 0),
            "builds": split + later + bisect + locate}


def blocks_of(points: Sequence[int], k: int) -> list[tuple[int, int]]:
    """The range cut at sampled ``points`` into at most ``k`` blocks of about as many intervals,
    neighbours sharing their boundary point (each block is one machine's: its intervals, pairs
    and levels all there; the boundary point is built on both)."""
    k = max(1, min(k, len(points) - 1))
    bounds = sorted({points[round(j * (len(points) - 1) / k)] for j in range(k + 1)})
    return list(zip(bounds, bounds[1:], strict=False))
