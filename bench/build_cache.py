#!/usr/bin/env python3
"""Build cache figures: cold build, warm (cache hit), rebuild after a one-file change.

Uses a git copy of the default engine's llama.cpp tree and a fresh, empty cache
(and ccache) directory, so "cold" really is cold.

    .venv/bin/python bench/build_cache.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import BuildCache


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def main() -> None:
    tree = BuildCache().llama_tree(DEFAULT_ENGINE)
    with tempfile.TemporaryDirectory() as td:
        work = Path(td)
        repo = work / "llama.cpp"
        shutil.copytree(tree, repo, ignore=shutil.ignore_patterns("*.gguf.inp", "*.gguf.out"))
        git(repo, "init", "-q")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
        os.environ["TOKENSLEUTH_CACHE"] = str(work / "cache")
        os.environ["CCACHE_DIR"] = str(work / "cache" / "ccache")
        cache = BuildCache(work / "cache")
        src = f"git:{repo}@HEAD"

        t = time.monotonic()
        b = cache.get(src)
        cold = time.monotonic() - t
        t = time.monotonic()
        b2 = cache.get(src)
        warm = time.monotonic() - t
        assert b2.cache_hit and b2.key == b.key

        f = repo / "tools" / "llama-bench" / "llama-bench.cpp"
        f.write_text(f.read_text() + "\nstatic int tokensleuth_touched = 1;\n")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "touch one file")
        t = time.monotonic()
        b3 = cache.get(src)
        touched = time.monotonic() - t
        assert not b3.cache_hit and b3.key != b.key
        stats = subprocess.run(["ccache", "-s"], capture_output=True, text=True,
                               env=dict(os.environ)).stdout

    print(f"machine: {os.cpu_count()} cores")
    print(f"cold build (empty cache and ccache): {cold:7.1f} s")
    print(f"warm request (cache hit):            {warm:7.3f} s")
    print(f"rebuild after one-file change:       {touched:7.1f} s  (ccache)")
    print("ccache:", " | ".join(ln.strip() for ln in stats.splitlines() if "Hits" in ln or "Misses" in ln))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
