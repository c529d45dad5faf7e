"""Print how many of this machine's cores are idle now (read over one second), at most ARGV[1]."""

from __future__ import annotations

import sys

import psutil


def idle_cores(at_most: int, seconds: float = 1.0) -> int:
    busy = sum(psutil.cpu_percent(interval=seconds, percpu=True)) / 100  # cores' worth in use
    cpus = len(psutil.Process().cpu_affinity() or []) or (psutil.cpu_count() or 1)
    return max(1, min(at_most, int(cpus - busy + 0.5)))


if __name__ == "__main__":
    print(idle_cores(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
