"""Run the fuzz suites with many examples; print, per parser, the examples run and the failures.

Usage: python bench/fuzz.py [--examples 10000] [--out bench/results/fuzz.txt]

Each property of tests/faults/test_fuzz_parsers.py (and tests/faults/test_fuzz_spec.py
where it exists) is one parser or loader; its property is "a valid result or the clean
refusal of its layer, never any other exception". The counts are hypothesis's own
(``--hypothesis-show-statistics``), summed over its phases: "examples" are the test
cases that ran to a verdict (passing + failing; hypothesis's "invalid" draws, rejected
before the parser saw them, are not counted), "unhandled" the failing ones, i.e.
inputs on which the parser raised something it must not (each a shrink of the same
few errors when the number is above 0).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = ("tests/faults/test_fuzz_parsers.py", "tests/faults/test_fuzz_spec.py")

_TEST = re.compile(r"^(?P<path>tests/\S+\.py)::(?P<name>\w+):\s*$")
_COUNTS = re.compile(r"^\s*- (?P<passing>\d+) passing, (?P<failing>\d+) failing, and (?P<invalid>\d+) invalid")
_VALID = re.compile(r"^\s*\* (?P<pct>[\d.]+)%, valid\s*$")


@dataclass
class Stat:
    suite: str
    name: str
    examples: int = 0
    failing: int = 0
    valid_pct: float | None = None  # share of generated cases with a valid result (hypothesis event)


def parse_statistics(text: str) -> list[Stat]:
    """Per-test counts from pytest's ``--hypothesis-show-statistics`` section."""
    stats: list[Stat] = []
    cur: Stat | None = None
    for line in text.splitlines():
        m = _TEST.match(line)
        if m:
            cur = Stat(Path(m["path"]).stem, m["name"])
            stats.append(cur)
            continue
        if cur is None:
            continue
        c = _COUNTS.match(line)
        if c:
            cur.examples += int(c["passing"]) + int(c["failing"])
            cur.failing += int(c["failing"])
        v = _VALID.match(line)
        if v and cur.valid_pct is None:  # the generate phase comes first
            cur.valid_pct = float(v["pct"])
    return stats


def render(stats: list[Stat], examples: int, seconds: float, pytest_rc: int, failed: list[str]) -> str:
    rows = [("suite", "parser (property)", "examples run", "unhandled exceptions", "valid results")]
    for s in stats:
        label = s.name.removeprefix("test_fuzz_").removeprefix("test_")
        valid = f"{s.valid_pct:.1f}%" if s.valid_pct is not None else "—"
        rows.append((s.suite, label, f"{s.examples:,}", str(s.failing), valid))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    total = sum(s.examples for s in stats)
    unhandled = sum(s.failing for s in stats)
    lines += [
        "",
        f"asked for {examples:,} examples per property; {len(stats)} properties, {total:,} examples run, "
        f"{unhandled} unhandled exceptions; {seconds:.0f} s; pytest exit {pytest_rc}",
        "valid results: share of generated inputs that the parser accepted (the rest were cleanly refused)",
    ]
    lines += [f"FAILED {f}" for f in failed]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--examples", type=int, default=10000, help="hypothesis examples per property")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    args = ap.parse_args(argv)
    suites = [s for s in SUITES if (ROOT / s).exists()]
    env = dict(os.environ, TOKENSLEUTH_FUZZ_EXAMPLES=str(args.examples))
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
         *suites],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    seconds = time.monotonic() - t0
    stats = parse_statistics(proc.stdout)
    failed = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("FAILED ")]
    table = render(stats, args.examples, seconds, proc.returncode, failed)
    print(table, end="")
    if args.out:
        args.out.write_text(table)
    if not stats:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        return 1
    if proc.returncode != 0:  # what failed, and on which input (pytest's "E" lines)
        print("\n".join(ln for ln in proc.stdout.splitlines() if ln.startswith("E "))[-6000:], file=sys.stderr)
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
