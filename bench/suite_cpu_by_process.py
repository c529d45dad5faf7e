"""Where the test suite's CPU goes, by program: the kernel's process accounting of one run.

Every process that ended during the run leaves a record (its command name, as the kernel keeps it:
15 characters, and its user and system time, threads included). Grouped by command name, they say
which programs the suite's CPU seconds went to, and how many times each ran: what a cut must
aim at. (Ray's and Chromium's processes name themselves after a thread: they are listed as such.)

    touch /tmp/pacct && accton /tmp/pacct     # as root; Debian's acct package
    ... the run (scripts/test.sh) ...
    accton off
    python3 bench/suite_cpu_by_process.py /tmp/pacct --top 20
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import NoReturn

HZ = 100  # acct's v3 records count user and system time in ticks of 1/100 s


def _refuse(why: str) -> NoReturn:
    print(f"error: {why}", file=sys.stderr)
    sys.exit(2)


def by_command(pacct: Path) -> dict[str, tuple[int, float]]:
    """command -> (processes, CPU seconds), from ``dump-acct``."""
    dump = shutil.which("dump-acct")
    if dump is None:
        _refuse("dump-acct is missing: install Debian's acct package")
    out = subprocess.run([dump, str(pacct)], capture_output=True, text=True, check=True).stdout
    calls: dict[str, int] = defaultdict(int)
    cpu: dict[str, float] = defaultdict(float)
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) < 4:
            continue
        calls[f[0]] += 1
        cpu[f[0]] += (float(f[2]) + float(f[3])) / HZ
    return {k: (calls[k], cpu[k]) for k in calls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pacct", type=Path)
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    if not a.pacct.is_file():
        _refuse(f"{a.pacct}: no such accounting file — start it with accton before the run")
    rows = sorted(by_command(a.pacct).items(), key=lambda kv: -kv[1][1])
    total = sum(c for _, (_, c) in rows)
    print(f"{sum(n for _, (n, _) in rows)} processes, {total:.0f} CPU seconds (user and system)\n")
    print("| command | processes | CPU s | share | CPU ms each |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (n, c) in rows[:a.top]:
        print(f"| `{name}` | {n} | {c:.0f} | {c / total:.1%} | {1000 * c / n:.0f} |")
    rest = rows[a.top:]
    if rest:
        n, c = sum(x[0] for _, x in rest), sum(x[1] for _, x in rest)
        print(f"| (the other {len(rest)}) | {n} | {c:.0f} | {c / total:.1%} | |")


if __name__ == "__main__":
    main()
