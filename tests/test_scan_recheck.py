"""bench/scan_recheck.py's classes: confirmed only where the re-check gives the scan's own decided
verdict; an unresolved cell, on either side, is never agreement; the stored re-checks say what the
rule says of their cells."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scan_recheck", ROOT / "bench" / "scan_recheck.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("scan_recheck", mod)
    spec.loader.exec_module(mod)
    return mod


recheck = _load()

# (scan, compare) -> class, for an interval that excludes no change (the compare's unresolved alone reads it)
TABLE = {
    ("slower", "slower"): "confirmed",
    ("slower", "faster"): "contradicted",
    ("slower", "same"): "contradicted",
    ("slower", "unresolved"): "unresolved",
    ("faster", "faster"): "confirmed",
    ("faster", "slower"): "contradicted",
    ("faster", "same"): "contradicted",
    ("faster", "unresolved"): "unresolved",
    ("same", "same"): "confirmed",
    ("same", "slower"): "contradicted",
    ("same", "faster"): "contradicted",
    ("same", "unresolved"): "unresolved",
    ("unresolved", "unresolved"): "unresolved",
    ("unresolved", "slower"): "unresolved",
    ("unresolved", "faster"): "unresolved",
    ("unresolved", "same"): "unresolved",
}


@pytest.mark.parametrize(("scan", "got"), sorted(TABLE))
def test_each_pair_of_verdicts_has_its_class(scan: str, got: str) -> None:
    assert recheck.classify(scan, got, (0.95, 1.05)) == TABLE[(scan, got)]
    assert recheck.classify(scan, got, None) == TABLE[(scan, got)]


def test_confirmed_only_where_both_sides_decided_the_same() -> None:
    for scan in (*recheck.DECIDED, "unresolved"):
        for got in (*recheck.DECIDED, "unresolved"):
            confirmed = recheck.classify(scan, got, None) == "confirmed"
            assert confirmed == (scan == got and scan in recheck.DECIDED), (scan, got)


def test_an_undecided_compare_moved_the_scans_way_is_moved_not_beyond_the_band() -> None:
    assert recheck.classify("slower", "unresolved", (0.92, 0.98)) == "moved, not beyond the band"
    assert recheck.classify("faster", "unresolved", (1.01, 1.08)) == "moved, not beyond the band"
    assert recheck.classify("slower", "unresolved", (1.01, 1.08)) == "unresolved"
    assert recheck.classify("faster", "unresolved", (0.92, 0.98)) == "unresolved"
    # the scan left it unresolved: no interval makes it agreement
    assert recheck.classify("unresolved", "unresolved", (0.92, 0.98)) == "unresolved"


CELL = re.compile(r"^  \S+ \S+: scan (\w+), compare (\w+) [\d.]+ \[([\d.]+), ([\d.]+)\] after \d+ pairs — (.+)$")
SUMMARY = re.compile(r"^\d+ pairs re-checked: (.+)$")


@pytest.mark.parametrize("name", ["scan_planted_6pct_recheck.txt", "scan_pack_recheck.txt"])
def test_the_stored_rechecks_are_classed_by_the_rule(name: str) -> None:
    counts = dict.fromkeys(recheck.KINDS, 0)
    summary = None
    for line in (RESULTS / name).read_text().splitlines():
        if m := CELL.match(line):
            scan, got, lo, hi, kind = m.groups()
            assert recheck.classify(scan, got, (float(lo), float(hi))) == kind, line
            counts[kind] += 1
        elif m := SUMMARY.match(line):
            summary = m.group(1)
    assert sum(counts.values()) > 0
    assert summary == ", ".join(f"{n} {k}" for k, n in counts.items())


def test_reclass_rewrites_a_cell_counted_by_the_old_rule() -> None:
    old = ("step 1 (spin, slower): a → b\n"
           "  moe tg8: scan unresolved, compare unresolved 0.995 [0.907, 1.091] after 20 pairs — confirmed\n"
           "  dense tg8: scan slower, compare slower 0.852 [0.785, 0.925] after 10 pairs — confirmed\n"
           "  dense pp64 (control): the bisect's control answer unresolved; compare unresolved 1.011 [0.947, 1.078] after 20 pairs\n"
           "1 pairs re-checked: 2 confirmed, 0 moved, not beyond the band, 0 contradicted, 0 unresolved\n")
    new = recheck.reclass(old).splitlines()
    assert new[1].endswith("after 20 pairs — unresolved")
    assert new[2].endswith("after 10 pairs — confirmed")
    assert new[3] == old.splitlines()[3]
    assert new[4] == "1 pairs re-checked: 1 confirmed, 0 moved, not beyond the band, 0 contradicted, 1 unresolved"
