"""The peer check's verdict on a ratio (peer / tokensleuth) is read off its 95% interval at ±5%:
agreement only where the whole interval lies in [0.95, 1.05] (bench/_peers.agreement)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from _peers import agreement  # noqa: E402


@pytest.mark.parametrize(("lo", "hi", "said"), [
    (0.97, 1.03, "agrees (within ±5%)"),
    (0.95, 1.05, "agrees (within ±5%)"),  # the band's edges are in it
    (0.96, 0.99, "agrees (within ±5%)"),  # excludes 1, but every ratio it allows is within ±5%
    (1.01, 1.049, "agrees (within ±5%)"),
    (1.051, 1.20, "differs"),
    (0.80, 0.949, "differs"),
    (0.982, 1.278, "not resolved to ±5%"),  # the old one-stream llama-benchy ratio: centre 1.120
    (0.902, 1.106, "not resolved to ±5%"),  # covers 1, but reaches past both edges
    (0.99, 1.06, "not resolved to ±5%"),  # one edge is enough
    (0.94, 1.01, "not resolved to ±5%"),
    (1.02, 1.08, "not resolved to ±5%"),  # excludes 1, yet may be within the band
    (0.93, 0.96, "not resolved to ±5%"),
])
def test_the_interval_decides(lo: float, hi: float, said: str) -> None:
    assert agreement(lo, hi) == said


@pytest.mark.parametrize(("lo", "hi"), [(1.1, 1.0), (0.0, 1.0), (-0.5, 1.0)])
def test_a_malformed_interval_is_refused(lo: float, hi: float) -> None:
    with pytest.raises(ValueError, match="not a ratio interval"):
        agreement(lo, hi)
