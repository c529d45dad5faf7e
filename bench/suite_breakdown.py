"""Where a suite run's time went: per test file, the slowest tests, and the engine builds.

Reads a suite log written with ``--durations=0`` (every test's setup, call and teardown) and
the home directory the run used (its build cache records each build's seconds), and prints:

- the workers' time (the sum of every duration) against the wall time pytest says;
- where the run was under GNU time (``/usr/bin/time -v bash scripts/test.sh …``): the CPU time of
  the whole run (setup, lint, types, builds and tests) against its wall time, and the least wall
  time that CPU work could take on this machine's cores, at full use of every one;
- each test file's time, largest first (``--dist loadfile`` keeps a file on one worker);
- the slowest tests;
- the builds the run made (``build_s`` of each build record: its source, targets, seconds),
  and their total: on an empty home every build compiles, on a warm one most are cache hits.

    python3 bench/suite_breakdown.py LOG HOME [--top 30]

(``bench/suite_fresh.sh`` writes such a run; run it with ``--durations=0``.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

DURATION = re.compile(r"^([0-9.]+)s (call|setup|teardown)\s+(\S+)")
SUMMARY = re.compile(r"(\d+) passed.* in ([0-9.]+)s")
TIME_V = re.compile(r"User time \(seconds\): ([0-9.]+)\s+System time \(seconds\): ([0-9.]+)"
                    r".*?Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([0-9.]+)", re.S)


def cpu_line(log: str, cores: int) -> str | None:
    """The whole run's CPU seconds against its wall time, from GNU time -v's lines (None without)."""
    m = TIME_V.search(log)
    if m is None:
        return None
    cpu = float(m.group(1)) + float(m.group(2))
    wall = int(m.group(3) or 0) * 3600 + int(m.group(4)) * 60 + float(m.group(5))
    return (f"the whole run under GNU time: {cpu:.0f} CPU seconds (user and system) over {wall:.0f} s of wall time: "
            f"{cpu / wall:.2f} of {cores} cores busy on average; at full use of all {cores} the same work takes "
            f"no less than {cpu / cores:.0f} s ({cpu / cores / 60:.1f} min)")


def durations(log: str) -> list[tuple[float, str, str]]:
    """(seconds, phase, test id) of each line pytest's --durations printed."""
    return [(float(m.group(1)), m.group(2), m.group(3)) for line in log.splitlines() if (m := DURATION.match(line))]


@dataclass(frozen=True)
class Build:
    s: float
    source: str
    targets: str
    hit: bool


def builds(home: Path) -> list[Build]:
    """Every build record under ``home``'s tool cache, slowest first."""
    out = []
    for rec in sorted((home / ".cache" / "tokensleuth" / "builds").glob("*/build.json")):
        b = json.loads(rec.read_text())
        out.append(Build(float(b.get("build_s") or 0.0), str(b["source"]), ",".join(b.get("targets") or []),
                         bool(b.get("cache_hit"))))
    return sorted(out, key=lambda b: -b.s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("home", type=Path)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="the cores of the machine the run had")
    ap.add_argument("--timeline", type=Path, help="the file TOKENSLEUTH_TEST_TIMELINE named for the run "
                    "(tests/conftest.py): when each test process ended, and what ran alone at the end")
    a = ap.parse_args()
    text = a.log.read_text()
    d = durations(text)
    if not d:
        raise SystemExit(f"error: {a.log} has no durations — run the suite with --durations=0")
    total = sum(s for s, _, _ in d)
    m = SUMMARY.search(text)
    wall = float(m.group(2)) if m else None
    print(f"workers' time (every duration summed): {total:.0f} s"
          + (f"; pytest's wall {wall:.0f} s ({total / wall:.2f} workers busy on average)" if wall else ""))
    if (line := cpu_line(text, a.cores)) is not None:
        print(line)
    per_file: dict[str, float] = defaultdict(float)
    for s, _, test in d:
        per_file[test.split("::")[0]] += s
    print("\n| test file | s |\n| --- | ---: |")
    for f, s in sorted(per_file.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"| `{f}` | {s:.0f} |")
    print("\n| test (phase) | s |\n| --- | ---: |")
    for s, phase, test in sorted(d, reverse=True)[:a.top]:
        print(f"| `{test}` ({phase}) | {s:.0f} |")
    made = builds(a.home)
    compiled = [b for b in made if not b.hit]
    print(f"\n{len(made)} builds, {len(compiled)} compiled: {sum(b.s for b in compiled):.0f} s of build wall time "
          "(each build's own, on a machine the other worker shares)")
    home = str(a.home)
    print("\n| build s | source | targets |\n| ---: | --- | --- |")
    for b in compiled[:a.top // 2]:
        print(f"| {b.s:.0f} | `{b.source.replace(home, '~')}` | {b.targets} |")
    small = [b.s for b in compiled[a.top // 2:]]
    if small:
        print(f"| {sum(small):.0f} | the other {len(small)} builds ({min(small):.0f}-{max(small):.0f} s each) | |")
    if a.timeline is not None:
        print()
        print(timeline(a.timeline))


def timeline(path: Path) -> str:
    """When each test process took its first test and ended its last, and the tests that ran after
    the first of them ended (one process left: the other cores idle but for that file's own work)."""
    rows = []
    for line in path.read_text().splitlines():
        t0, t1, worker, test = line.split(" ", 3)
        rows.append((float(t0), float(t1), worker, test))
    if not rows:
        return f"{path}: no test recorded"
    start = min(r[0] for r in rows)
    ends = {w: max(r[1] for r in rows if r[2] == w) for w in {r[2] for r in rows}}
    out = ["| test process | first test at s | last ended at s |", "| --- | ---: | ---: |"]
    out += [f"| {w} | {min(r[0] for r in rows if r[2] == w) - start:.0f} | {t - start:.0f} |"
            for w, t in sorted(ends.items())]
    first_end = min(ends.values())
    alone = [r for r in rows if r[1] > first_end]
    out += ["", f"after the first test process ended ({first_end - start:.0f} s in), "
            f"{max(ends.values()) - first_end:.0f} s ran on one process:", "", "| test | s after |", "| --- | ---: |"]
    out += [f"| `{t}` | {max(t1, first_end) - max(t0, first_end):.0f} |" for t0, t1, _, t in alone
            if max(t1, first_end) - max(t0, first_end) >= 1]
    return "\n".join(out)


if __name__ == "__main__":
    main()
