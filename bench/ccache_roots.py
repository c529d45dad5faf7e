#!/usr/bin/env python3
"""Compiler-cache hits across source roots: the default engine's sdist, then a git history of
the same files (tests/planted.py's planted repository, its worktree named after its first
commit), then decompose's private repository of the sdist (a third name). Each build directory
lies inside its source tree, so every root after the first should compile from the cache.

An empty cache root and an empty compiler cache of their own (the machine's are not touched);
ccache's stats log counts each compile's result.

    .venv/bin/python bench/ccache_roots.py
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (the project root on sys.path)

from tests.planted import planted_repo
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache
from tokensleuth.sources.patches import PrivateRepo


def main() -> None:
    with tempfile.TemporaryDirectory() as td:
        t = Path(td)
        os.environ["CCACHE_DIR"] = str(t / "ccache")
        os.environ["TOKENSLEUTH_LAUNCHER"] = "ccache"
        stats = t / "stats.log"
        os.environ["CCACHE_STATSLOG"] = str(stats)
        cache = BuildCache(t / "root")
        repo = planted_repo()
        private, base = PrivateRepo.for_source(DEFAULT_ENGINE, root=t / "decompose")
        roots = [("sdist mirror", DEFAULT_ENGINE), ("planted worktree", f"git:{repo}@HEAD~1"),
                 ("decompose clone", private.source(base))]
        print(f"{'source root':<18} {'build s':>8} {'compiles':>9} {'from cache':>11}")
        for label, source in roots:
            stats.unlink(missing_ok=True)
            t0 = time.monotonic()
            b = cache.get(source)
            took = time.monotonic() - t0
            results = [r for ln in (stats.read_text().splitlines() if stats.exists() else [])
                       if (r := ln.strip()) in ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")]
            hits = sum(r != "cache_miss" for r in results)
            print(f"{label:<18} {took:8.0f} {len(results):9d} {hits:11d}   ({'hit' if b.cache_hit else 'built'})",
                  flush=True)
        print(f"machine: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
