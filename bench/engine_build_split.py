"""Where a build of the default engine's targets spends its compile time, by the part of the tree
each object comes from (llama-bench links llama.cpp's `common` library, so its sources are
compiled too), from ninja's own log of a build made without the compiler cache.

    .venv/bin/python bench/engine_build_split.py                      # configure and build (minutes)
    .venv/bin/python bench/engine_build_split.py --ninja-log DIR/.ninja_log   # a build already made

The build uses the build cache's own configure flags (sources.configure) and ninja with -j
this machine's cores; each edge's time is its wall time, which on an otherwise idle machine with
as many jobs as cores is its CPU time. GNU time's CPU seconds of the whole build are printed too.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import NoReturn

from tokensleuth.core.errors import UserError
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache
from tokensleuth.sources.configure import BASE_FLAGS, DEFAULT_TARGETS, host_flags

PARTS = (("common/", "common (llama.cpp's helper library)"), ("src/", "libllama"),
         ("ggml/src/ggml-cpu/", "ggml's CPU backend"), ("ggml/", "ggml (the rest)"),
         ("tools/", "the tools' own sources"), ("vendor/", "vendored (cpp-httplib, …)"))


def part_of(output: str) -> str:
    """The part of the tree a ninja output (an object's path in the build folder) comes from."""
    path = re.sub(r"[^/]+\.dir/", "", output.replace("CMakeFiles/", ""))  # the source's own folder
    for prefix, name in PARTS:
        if path.startswith(prefix):
            return name
    return "other (links, generated files)"


def read_log(log: Path) -> dict[str, float]:
    """Seconds per part, from a .ninja_log (v5: start ms, end ms, mtime, output, hash)."""
    got: dict[str, float] = defaultdict(float)
    latest: dict[str, tuple[int, int]] = {}
    for line in log.read_text().splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) >= 4:
            latest[fields[3]] = (int(fields[0]), int(fields[1]))  # (a rebuilt output: its last run)
    for output, (t0, t1) in latest.items():
        got[part_of(output)] += (t1 - t0) / 1000
    return dict(got)


def fail(why: str) -> NoReturn:
    print(f"error: {why}", file=sys.stderr)
    sys.exit(2)


def default_source() -> Path:
    """The default engine's llama.cpp tree (its sdist downloaded and unpacked once, into the cache)."""
    try:
        return BuildCache().llama_tree(DEFAULT_ENGINE)
    except UserError as exc:
        fail(str(exc))


def build(source: Path, targets: list[str], jobs: int) -> tuple[dict[str, float], float]:
    """Configure and build ``targets`` in a new folder, no compiler cache, then remove it; (seconds per
    part from its .ninja_log, the build's CPU s)."""
    ninja = shutil.which("ninja") or str(Path(sys.executable).parent / "ninja")
    work = Path(tempfile.mkdtemp(prefix="engine-build-split-"))
    try:
        cfg = ["cmake", "-S", str(source), "-B", str(work), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}",
               *BASE_FLAGS, *host_flags([])]
        subprocess.run(cfg, check=True, stdout=subprocess.DEVNULL)
        env = dict(os.environ, CCACHE_DISABLE="1")
        before = os.times()
        subprocess.run([ninja, "-C", str(work), f"-j{jobs}", *targets], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        return read_log(work / ".ninja_log"), cpu
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ninja-log", type=Path, help="read this build's log instead of building")
    ap.add_argument("--source", type=Path, help="the llama.cpp tree (default: the default engine's)")
    ap.add_argument("--target", action="append", help=f"targets (default: {' '.join(DEFAULT_TARGETS)})")
    args = ap.parse_args()
    if args.ninja_log:
        if not args.ninja_log.is_file():
            fail(f"{args.ninja_log} is not a file — give a build folder's .ninja_log")
        parts = read_log(args.ninja_log)
        print(f"# {args.ninja_log}")
    else:
        source, targets = args.source or default_source(), args.target or list(DEFAULT_TARGETS)
        parts, cpu = build(source, targets, os.cpu_count() or 1)
        print(f"# {' '.join(targets)} from {source}, built anew: {cpu:.0f} CPU s (its processes, user and system)")
    total = sum(parts.values())
    print("\n| part | s | share |\n| --- | ---: | ---: |")
    for name, s in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {s:.0f} | {s / total:.0%} |")
    print(f"| all | {total:.0f} | |")


if __name__ == "__main__":
    main()
