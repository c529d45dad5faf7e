"""Trial ordering: interleaved, order-balanced pairs; never all of A then all of B."""

from __future__ import annotations

from collections.abc import Sequence

from tokensleuth.core.records import PlannedTrial


def pair_order(arms: Sequence[str], pair: int) -> list[str]:
    """Order of the arms inside pair ``pair``: rotate, then reverse every other pair.

    For two arms this is AB, BA, AB, BA… (each arm first equally often, so a
    warm-up or thermal advantage of running first cancels over two pairs). For
    k arms the rotation puts each arm in each position once every k pairs.
    """
    k = len(arms)
    rot = list(arms[pair // 2 % k:]) + list(arms[: pair // 2 % k]) if k > 2 else list(arms)
    return rot if pair % 2 == 0 else rot[::-1]


def pair_round(arms: Sequence[str], model: str, workload: str, argv: tuple[str, ...],
               start: int, stop: int) -> list[PlannedTrial]:
    """Trials of pairs ``start..stop-1`` of one (model, workload) cell."""
    return [PlannedTrial(arm, model, workload, argv, pair)
            for pair in range(start, stop) for arm in pair_order(arms, pair)]
