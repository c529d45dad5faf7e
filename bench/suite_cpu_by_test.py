"""Which test the suite's CPU went to: the kernel's process accounting of one run, each process
given to the test that its test process (an ancestor, by parent pid) was running when it started.

The test processes' pids and each test's start and end come from TOKENSLEUTH_TEST_TIMELINE
(tests/conftest.py: "start end worker:pid nodeid" a line). A process whose ancestors include no
test process (the set-up, the engine build beside it, lint and types) is counted as "(outside the
tests)"; a test process's own CPU is its tests' in-process work and is left out of the table (the
accounting keeps one record per process, at its end, so it cannot be split between its tests).

    touch /tmp/pacct && accton /tmp/pacct     # as root; Debian's acct package
    TOKENSLEUTH_TEST_TIMELINE=/tmp/tl.txt bash scripts/test.sh
    accton off
    python3 bench/suite_cpu_by_test.py /tmp/pacct /tmp/tl.txt --top 25
"""

from __future__ import annotations

import argparse
import bisect
import shutil
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import NoReturn

HZ = 100  # acct's v3 records count user and system time in ticks of 1/100 s


def _refuse(why: str) -> NoReturn:
    print(f"error: {why}", file=sys.stderr)
    sys.exit(2)


@dataclass(frozen=True)
class Proc:
    command: str
    cpu_s: float
    pid: int
    ppid: int
    start: float  # (whole seconds: the record's own resolution)
    end: float


def processes(pacct: Path) -> list[Proc]:
    dump = shutil.which("dump-acct")
    if dump is None:
        _refuse("dump-acct is missing: install Debian's acct package")
    if not pacct.is_file():
        _refuse(f"{pacct} is not a file — give the file accton wrote")
    run = subprocess.run([dump, str(pacct)], capture_output=True, text=True)
    if run.returncode != 0:
        _refuse(f"dump-acct could not read {pacct}: {(run.stderr.strip().splitlines() or ['no message'])[-1]}")
    out = run.stdout
    procs = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 15 or f[1] != "v3":
            continue
        start = datetime.strptime(f[14], "%a %b %d %H:%M:%S %Y").timestamp()
        procs.append(Proc(f[0], (float(f[2]) + float(f[3])) / HZ, int(f[9]), int(f[10]), start,
                          start + float(f[4]) / HZ))
    if not procs:
        _refuse(f"{pacct} holds no process accounting records (v3) — give the file accton wrote")
    return procs


def tests_by_process(timeline: Path) -> dict[int, tuple[list[float], list[tuple[float, str]]]]:
    """test process pid -> (its tests' start times, sorted; (end, nodeid) for each)."""
    runs: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for line in timeline.read_text().splitlines():
        t0, t1, worker, test = line.split(" ", 3)
        if ":" not in worker:
            _refuse(f"{timeline} has no pids (worker:pid): record the run with this tree's tests/conftest.py")
        runs[int(worker.rsplit(":", 1)[1])].append((float(t0), float(t1), test))
    out = {}
    for pid, rows in runs.items():
        rows.sort()
        out[pid] = ([r[0] for r in rows], [(r[1], r[2]) for r in rows])
    return out


def attribute(procs: list[Proc], tests: dict[int, tuple[list[float], list[tuple[float, str]]]]
              ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """(test -> command -> CPU s, command -> CPU s outside the tests)."""
    by_pid: dict[int, list[Proc]] = defaultdict(list)
    for p in procs:
        by_pid[p.pid].append(p)

    def parent_of(pid: int, at: float) -> Proc | None:
        """The process ``pid`` that was alive at ``at`` (a long run reuses pids: the one whose
        life held that moment, else the last started before it)."""
        alive = [q for q in by_pid.get(pid, ()) if q.start - 1 <= at <= q.end + 1]
        before = [q for q in by_pid.get(pid, ()) if q.start - 1 <= at]
        return min(alive, key=lambda q: q.end - q.start, default=None) or max(before, key=lambda q: q.start,
                                                                               default=None)

    by_test: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    outside: dict[str, float] = defaultdict(float)
    for p in procs:
        if p.pid in tests:
            continue  # a test process itself
        a, at, seen = p.ppid, p.start, 0
        while a not in tests and seen < 64 and (q := parent_of(a, at)) is not None:
            a, at, seen = q.ppid, q.start, seen + 1
        if a not in tests:
            outside[p.command] += p.cpu_s
            continue
        starts, rows = tests[a]
        i = max(bisect.bisect_right(starts, p.start + 1) - 1, 0)  # (+1: the record's start is truncated)
        by_test[rows[i][1]][p.command] += p.cpu_s
    return by_test, outside


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pacct", type=Path)
    ap.add_argument("timeline", type=Path)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    if not a.timeline.is_file():
        _refuse(f"{a.timeline} is not a file — give the file TOKENSLEUTH_TEST_TIMELINE named")
    procs = processes(a.pacct)
    tests = tests_by_process(a.timeline)
    by_test, outside = attribute(procs, tests)
    total = sum(p.cpu_s for p in procs)
    in_tests = sum(sum(c.values()) for c in by_test.values())
    own = sum(p.cpu_s for p in procs if p.pid in tests)
    print(f"{len(procs)} processes, {total:.0f} CPU s: {in_tests:.0f} in processes the tests started, "
          f"{own:.0f} in the test processes themselves, {sum(outside.values()):.0f} outside the tests\n")
    print("| test | CPU s | of it llama-bench | the rest, by program |")
    print("| --- | ---: | ---: | --- |")
    rows = sorted(by_test.items(), key=lambda kv: -sum(kv[1].values()))
    for test, cmds in rows[: a.top]:
        rest = sorted(((c, s) for c, s in cmds.items() if c != "llama-bench"), key=lambda x: -x[1])[:4]
        print(f"| `{test}` | {sum(cmds.values()):.0f} | {cmds.get('llama-bench', 0):.0f} | "
              + ", ".join(f"{c} {s:.0f}" for c, s in rest if s >= 0.5) + " |")
    left = rows[a.top:]
    print(f"| ({len(left)} other tests) | {sum(sum(c.values()) for _, c in left):.0f} | "
          f"{sum(c.get('llama-bench', 0) for _, c in left):.0f} | |")
    print("\noutside the tests: " + ", ".join(f"{c} {s:.0f}" for c, s in sorted(outside.items(), key=lambda x: -x[1])[:8]))


if __name__ == "__main__":
    main()
