"""Figures stay drawable whatever the statistics give them."""

from __future__ import annotations

import re

from tokensleuth.report import plots


def _coordinates(svg: str) -> list[float]:
    return [float(x) for d in re.findall(r' d="([^"]*)"', svg) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", d)]


def test_an_early_interval_of_astronomic_width_is_cut_at_the_edge() -> None:
    """Two pairs at the t quantile of 1 degree of freedom: a 99% interval of ±10^14 %. Drawn as
    such, its path held coordinates in the 10^14 that a browser refuses ("Expected number")."""
    steps = [(2, 1.02, 1e-12, 1e12), (3, 1.01, 0.2, 5.0), (5, 1.0, 0.9, 1.1), (10, 1.0, 0.98, 1.02)]
    svg = plots.sequential([("m · tg16", steps), ("m · pp64", [(2, 0.9, 0.0, float("inf")), (3, 0.95, 0.8, 1.1)])],
                           0.01)
    xs = _coordinates(svg)
    assert xs and max(abs(x) for x in xs) < 10_000, max(abs(x) for x in xs)
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
