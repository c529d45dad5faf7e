"""The scan under noise (issue 43): the band its level rounds' noise resolves, the band it uses,
and the rule that splits an undecided interval only where a step beyond that band could be
inside. Pure: each test asserts what the code decides on given numbers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sps

from tokensleuth.drivers.hunts.scan import next_work
from tokensleuth.drivers.hunts.scan.resolve import (
    choose_band,
    halfwidth,
    level_spread,
    noise_line,
    noise_of,
    pairs_for_band,
    pairs_to_decide,
    resolvable_band,
    room_for_step,
    split_limit,
)


def _cell(ratio: float, lo: float, hi: float, pairs: int = 40) -> dict[str, Any]:
    return {"model": "/m/tiny.gguf", "workload": "pp64", "ratio": ratio, "ci": [lo, hi], "pairs": pairs,
            "verdict": "unresolved"}


def test_the_resolvable_band_is_the_99pct_halfwidth_plus_two_standard_errors_at_the_pairs() -> None:
    sd, n = 0.188, 40  # a pair's log ratio at 13.3% between processes (tiny dense pp64 here), 2 x 20 pairs
    t = float(sps.t.ppf(0.995, n - 1))
    assert halfwidth(sd, n) == pytest.approx(t * sd / math.sqrt(n))
    assert resolvable_band(sd, n) == pytest.approx(math.expm1((t + 1.959964) * sd / math.sqrt(n)), rel=1e-6)
    assert resolvable_band(sd, n) == pytest.approx(0.149, abs=0.001)
    assert resolvable_band(0.02, 40) == pytest.approx(0.0149, abs=0.0002)  # quiet: ±2% is in reach
    # the fewest pairs whose resolvable band is ±2%: at 18.8%, thousands; at 2%, fewer than 40
    n2 = pairs_for_band(0.188, 0.02)
    # ((2.576 + 1.96) · 0.188 / √n ≤ log 1.02 from n ≈ 1854; the search steps by n/16)
    assert n2 is not None and resolvable_band(0.188, n2) <= 0.02 < resolvable_band(0.188, 1840)
    assert 1850 < n2 < 1980
    assert pairs_for_band(0.02, 0.02) == 24  # (2.807 + 1.96) · 0.02 / √24 = 0.0195 ≤ log 1.02; at 23, 0.0201
    assert pairs_for_band(0.5, 0.001, limit=1000) is None


def test_the_levels_spread_is_pooled_between_rounds_of_each_build() -> None:
    # two builds, two rounds each: log spreads of ±0.05 and ±0.1 around each build's mean
    got = level_spread([[100 * math.exp(-0.05), 100 * math.exp(0.05)], [50 * math.exp(-0.1), 50 * math.exp(0.1)],
                        [70.0]])  # (a build measured once adds nothing)
    assert got is not None
    sd, dof = got
    assert dof == 2 and sd == pytest.approx(math.sqrt((2 * 0.05 ** 2 + 2 * 0.1 ** 2) / 2))
    assert level_spread([[100.0], [90.0]]) is None


def test_the_band_asked_is_kept_and_what_the_noise_resolves_is_said() -> None:
    assert choose_band(0.02, given=False, resolvable=0.149) == 0.02  # never widened: it hides steps
    assert choose_band(0.02, given=False, resolvable=0.012) == 0.02
    assert choose_band(0.02, given=True, resolvable=0.149) == 0.02
    assert choose_band(0.02, given=False, resolvable=None) == 0.02
    noisy = {("m", "pp64"): [[100 * math.exp(-0.094), 100 * math.exp(0.094)]] * 9,  # sd 13.3%: pair sd 18.8%
             ("m", "tg32"): [[100.0, 101.0]] * 9}
    auto = noise_of(noisy, 0.02, False, 20)
    assert auto["pairs"] == 40 and auto["dof"] == 9
    assert auto["level_sd"] == pytest.approx(0.094 * math.sqrt(2), rel=1e-6)  # the noisiest cell
    assert auto["resolvable_band"] == pytest.approx(resolvable_band(math.sqrt(2) * auto["level_sd"], 40))
    assert auto["band"] == 0.02 and auto["band_asked"] == 0.02
    assert "band ±2.0% kept (the default), tighter than that" in noise_line(auto)
    assert "--band 14.9% resolves" in noise_line(auto)
    kept = noise_of(noisy, 0.02, True, 20)
    assert kept["band"] == 0.02 and kept["pairs_for_band"] == pairs_for_band(kept["pair_sd"], 0.02)
    line = noise_line(kept)
    assert "band ±2.0% kept (as asked), tighter than that" in line and "--band 14.9% resolves" in line
    assert f"would take ~{kept['pairs_for_band']} pairs (--max-pairs {math.ceil(kept['pairs_for_band'] / 2)})" in line
    none = noise_of({("m", "pp64"): [[100.0], [90.0]]}, 0.02, False, 20)
    assert none["resolvable_band"] is None and none["band"] == 0.02 and split_limit(none) is None


def _est(ratio: float, h: float, pairs: int = 40) -> dict[str, Any]:
    """A cell whose 99% interval is ``ratio`` times e^±h (log-symmetric, as the verdicts' are)."""
    return _cell(ratio, ratio * math.exp(-h), ratio * math.exp(h), pairs)


def test_an_undecided_interval_is_split_only_when_its_interval_reaches_beyond_the_limit() -> None:
    noise = {"band": 0.149, "resolvable_band": 0.149, "margin": 0.085}
    limit = split_limit(noise)
    assert limit == pytest.approx(1.149 * 1.085 - 1)  # 24.7%: log 1.2467 = 0.2205, log(1 − 0.2467) = −0.2833
    assert limit is not None
    # undecided (over the band's edge, log 1.149 = 0.139) but inside the limit: not split
    assert not room_for_step([_est(1.08, 0.085)], limit, cap=40)  # [0.992, 1.176]
    assert not room_for_step([_est(0.86, 0.08), _est(1.0, 0.05)], limit, cap=40)
    # its interval reaches past the limit on either side: a step could be inside, it is split
    assert room_for_step([_est(1.15, 0.085)], limit, cap=40)  # log: 0.1398 + 0.085 = 0.2248 > 0.2205
    assert room_for_step([_est(1.0, 0.05), _est(0.80, 0.085)], limit, cap=40)  # −0.308 < −0.283
    # a cell with no estimate leaves room
    assert room_for_step([{"ratio": None, "ci": None, "pairs": 0}], limit, cap=40)
    # a compare that stopped at 10 pairs (futility) is read at the half-width it would have at 40
    wide = _est(1.02, 0.24, pairs=10)
    assert room_for_step([dict(wide, pairs=40)], limit, cap=40)  # as if measured at 40: it reaches past
    assert not room_for_step([wide], limit, cap=40)  # at 40 pairs its ±24% (10 pairs) would be ±10.0%


def test_the_pairs_an_undecided_cell_needs_settle_it_on_the_side_its_estimate_is() -> None:
    # inside the band: its interval must shrink to fit (log 1.05 − log 1.02 = 0.0290 from 0.05)
    n = pairs_to_decide(_est(1.02, 0.05), 0.05)
    assert n is not None and halfwidth(0.05 * math.sqrt(40) / float(sps.t.ppf(0.995, 39)), n) <= 0.0293
    assert 100 < n < 130
    # beyond it: to clear the edge (log 1.09 − log 1.05 = 0.0374)
    beyond = pairs_to_decide(_est(1.09, 0.05), 0.05)
    assert beyond is not None and 60 < beyond < 80
    assert pairs_to_decide({"ratio": None, "ci": None, "pairs": 0}, 0.05) is None
    assert pairs_to_decide(_est(1.05, 0.05), 0.05) is None  # on the edge: no number of pairs settles it


def test_a_narrow_undecided_interval_is_left_listed_and_a_wide_one_split() -> None:
    pts = [0, 13, 26]
    v = {(0, 13): "undecided", (13, 26): "same"}
    assert next_work(pts, v, set(), 32, spent={(0, 13)}) == ("split", 0, 13)
    assert next_work(pts, v, set(), 32, spent={(0, 13)}, narrow={(0, 13)}) is None
    # not yet judged this run: its pairs go on first, narrow or not
    assert next_work(pts, v, set(), 32, narrow={(0, 13)}) == ("judge", 0, 13)
    # a settings change inside is still located (a probe per step, no pairs)
    assert next_work(pts, v, set(), 32, spent={(0, 13)}, narrow={(0, 13)}, settings={(0, 13)}) == ("locate", 0, 13)


def test_the_result_carries_the_resolvable_band_the_band_used_and_the_pairs_an_undecided_one_needs(
        tmp_path: Path) -> None:
    from tokensleuth.drivers.hunts.scan import finish
    from tokensleuth.drivers.hunts.scan.levels import settle_band
    from tokensleuth.drivers.hunts.scan.state import INTERVALS, LEVELS, POINTS, Scan
    from tokensleuth.sources.history import Candidate
    from tokensleuth.store import Store
    from tokensleuth.studies.scan import render

    cands = [Candidate(f"r{i}", f"bin:/sim/{i}") for i in range(5)]
    spec = {"models": ["/m/tiny.gguf"], "control_models": [], "workloads": ["pp64"], "band": 0.02,
            "max_pairs": 20, "cmake": [], "flags": [], "timeout_s": 60.0, "samples": 4, "rounds": 2, "max_gap": 32,
            "band_given": False}
    lines: list[str] = []
    with Store(tmp_path / "s.db") as store:
        sid = store.writes.begin_study("scan", spec, "h1", resume=False).id
        scan = Scan(store, sid, cands, spec, lines.append, None)
        scan.put(POINTS, [c.label for c in cands[::2]])
        scan.put(LEVELS, [{"label": c.label, "round": r, "model": "/m/tiny.gguf", "workload": "pp64",
                           "ts": 100 * math.exp(0.094 if r else -0.094)} for c in cands[::2] for r in (0, 1)])
        noise = settle_band(scan)
        assert scan.spec["band"] == noise["band"] == 0.02 and noise["resolvable_band"] > 0.14
        assert lines[-1].strip().startswith("noise: a level's spread between processes 13.3%")
        scan.put(INTERVALS, {"r0..r2": {"verdict": "same", "cells": [_cell(1.0, 0.97, 1.03)]},
                             "r2..r4": {"verdict": "undecided", "cells": [_est(1.08, 0.085)],
                                        "note": "undecided, and no cell's interval reaches beyond ±24.7%"}})
        got = finish(scan, measure=False)
    assert got["band"] == 0.02 and got["resolvable_band"] == pytest.approx(noise["resolvable_band"])
    assert got["noise"]["band_asked"] == 0.02 and got["noise"]["band_given"] is False
    (u,) = got["undecided"]
    assert u["reason"].startswith("undecided, and no cell's interval reaches beyond")
    # at ±2% its 8% estimate is a step: its ±0.085 at 40 pairs must shrink to log 1.08 − log 1.02 = 0.057
    assert u["pairs_needed"] == pairs_to_decide(_est(1.08, 0.085), got["band"]) and 80 <= u["pairs_needed"] <= 100
    md = render(got)
    assert "Noise: a level's spread between processes 13.3%" in md and f"~{u['pairs_needed']} pairs" in md
