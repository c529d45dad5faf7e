#!/usr/bin/env python3
"""CPU seconds of one build per commit where the commit changes no source (a README line) or one
small source file: what every step of a bisect or scan pays beyond its own compile (configure,
ninja, the links, the copy into the cache), on the planted history and this machine's compiler
cache, in a cache root of its own (no finished build to hit).

    PYTHONPATH=. .venv/bin/python bench/commit_rebuild_cost.py [--commits 4]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from tests.planted import bisect_history
from tokensleuth.sources.build import BuildCache


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=4)
    args = ap.parse_args()
    repo, shas = bisect_history()
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "history"
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", shas["n1"]], check=True)
        cache = BuildCache(Path(tmp) / "cache")
        cache.get(f"git:{clone}@HEAD")  # the family's first build (from the compiler cache)
        for kind, path in (("no source", "README.md"), ("a comment in one source", "src/llama-io.cpp")):
            cpu, wall = [], []
            for i in range(args.commits):
                with open(clone / path, "a") as fh:
                    fh.write(f"\n// tokensleuth rebuild cost {kind} {i}\n")
                subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam",
                                f"{kind} {i}"], check=True)
                c0, t0 = children_cpu(), time.monotonic()
                cache.get(f"git:{clone}@HEAD")
                cpu.append(children_cpu() - c0)
                wall.append(time.monotonic() - t0)
            print(f"a commit that changes {kind}: " + ", ".join(f"{c:.1f}" for c in cpu)
                  + f" CPU s (its processes'), {sum(wall) / len(wall):.1f} s wall on average")


if __name__ == "__main__":
    main()
