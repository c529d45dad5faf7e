"""Get engine binaries for a source: fetch, check out, build, cache.

Cache key = sha256(source tree id, CMake flags, compiler id, targets). A tree id
is the git tree hash for ``git:`` and the sdist's sha256 for ``pypi:``; so two
spellings of the same tree share one build. Builds go to
``<cache>/builds/<key>/`` and appear there atomically (built in a temporary
folder, renamed when complete): an interrupted build is never a cache hit.

Sources are built from stable paths (one worktree per repository, one folder
per sdist) with ``CCACHE_BASEDIR`` set, so ccache hits across neighbouring
commits: a rebuild after a one-file change recompiles one file. The build
directory lies inside its source tree (``<tree>/.tokensleuth-build-<family>``),
so the paths ccache hashes (relative to the build directory: ``../common/…``)
are the same for every source root: a repository's worktree compiles from the
objects its sdist's build left, and the reverse.

The work is split along its seams: what is fetched (:mod:`.fetch`: sdists, worktrees), what is
configured (:mod:`.configure`: CMake options, backends, the compiler cache, build keys), what is
compiled (:mod:`.compile`: CMake and ninja, their errors, the cache of finished builds) and a
prebuilt llama-bench checked (:mod:`.prebuilt`). This module is their public face:
:class:`BuildCache`, which holds a :class:`~.fetch.TreeFetcher` and a :class:`~.compile.Compiler`,
and the names others import from here.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tokensleuth.core.errors import UserError
from tokensleuth.core.paths import cache_dir
from tokensleuth.sources import Source, parse_source
from tokensleuth.sources.compile import (
    BUILD_SLOTS,
    Compiler,
    EngineBuild,
    Log,
    failure_line,
    hold_slot,
    sync_tree,
)
from tokensleuth.sources.configure import (
    ALL_TARGETS,
    BASE_FLAGS,
    BUILD_DIR,
    DEFAULT_TARGETS,
    TARGET,
    backends_from_flags,
    backends_in,
    build_key,
    build_tool,
    compiler_id,
    compiler_launcher,
    host_flags,
    reuse_build_dirs,
)
from tokensleuth.sources.fetch import (
    SDIST_ERRORS,
    TreeFetcher,
    checkout_worktree,
    damaged_sdist,
    set_aside,
)
from tokensleuth.sources.prebuilt import HELP_TIMEOUT_S, bench_help, bench_version, run_in_session

__all__ = [
    "ALL_TARGETS", "BASE_FLAGS", "BENCH_SOURCE", "BUILD_DIR", "BUILD_SLOTS", "DEFAULT_TARGETS", "HELP_TIMEOUT_S",
    "SDIST_ERRORS", "TARGET", "BuildCache", "EngineBuild", "Log", "backends_from_flags",
    "backends_in", "bench_help", "bench_source", "build_tool", "compiler_id", "compiler_launcher",
    "damaged_sdist", "failure_line", "host_flags", "reuse_build_dirs", "run_in_session", "set_aside",
    "sync_tree",
]

BENCH_SOURCE = "tools/llama-bench/llama-bench.cpp"


def bench_source(source: str) -> str | None:
    """The text of llama-bench's source in a pypi: sdist (downloaded, not built) or at a git:
    revision (read from git, nothing checked out); None for other sources or where it is not
    there."""
    src = parse_source(source)
    try:
        if src.kind == "pypi":
            path = BuildCache().llama_tree(src) / BENCH_SOURCE
            return path.read_text(errors="replace") if path.is_file() else None
        if src.kind == "git" and src.path is not None and src.rev:
            done = subprocess.run(["git", "-C", str(src.path), "show", f"{src.rev}:{BENCH_SOURCE}"],
                                  capture_output=True, text=True, errors="replace")
            return done.stdout if done.returncode == 0 else None
    except OSError:
        return None
    return None


class BuildCache:
    """The content-keyed build cache under the user cache dir: a fetcher of source trees and a
    compiler of builds, sharing its folders."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_dir()
        self.builds = self.root / "builds"
        self.sdists = self.root / "sdists"
        self.src = self.root / "src"
        self.work = self.root / "work"
        self.fetcher = TreeFetcher(self.sdists, self.src, self.work)
        self.compiler = Compiler(self.root, self.builds, self.work)

    # -- public ------------------------------------------------------------------

    def get(
        self,
        source: Source | str,
        cmake_flags: Sequence[str] = (),
        targets: Sequence[str] = DEFAULT_TARGETS,
        log: Log | None = None,
    ) -> EngineBuild:
        """Binaries for ``source``: from the cache when present, else built now."""
        src = parse_source(source) if isinstance(source, str) else source
        for t in targets:
            if not TARGET.fullmatch(t):
                raise UserError(f"unknown build target {t!r} — give a llama.cpp tool, e.g. {', '.join(ALL_TARGETS)}")
        if src.kind == "bin":
            return self._bin(src, targets or DEFAULT_TARGETS)
        if src.kind == "url":  # a server someone else runs: nothing to build or cache
            key = "url-" + hashlib.sha256(src.spec.encode()).hexdigest()[:16]
            return EngineBuild(src.spec, "", key, None, None, (), "remote", (), (), cache_hit=True)
        if src.kind == "cmd":  # a command that starts a server (a container); {bin}: the default build's
            bin_dir = ""
            if "{bin}" in src.spec:
                from tokensleuth.sources import DEFAULT_ENGINE

                bin_dir = self.get(DEFAULT_ENGINE, cmake_flags, (*DEFAULT_TARGETS, "llama-server"), log).bin_dir
            key = "cmd-" + hashlib.sha256((src.spec + bin_dir).encode()).hexdigest()[:16]
            return EngineBuild(src.spec, bin_dir, key, None, None, (), "command", (), (), cache_hit=True)
        cmake_flags = (*host_flags(cmake_flags), *cmake_flags)
        if src.kind == "pypi":
            tree, tree_id, commit, number = self.fetcher.pypi_tree(src, log)
            return self.compiler.build(src, tree, tree_id, commit, number, cmake_flags, targets, log)
        return self._git_build(src, cmake_flags, targets, log)

    def planned_key(self, source: Source | str, cmake_flags: Sequence[str] = (),
                    targets: Sequence[str] = DEFAULT_TARGETS) -> str | None:
        """The key :meth:`get` would give ``source``'s build, without building it: a git source's
        (its tree id, one ``git rev-parse``) or a pypi: source's (its unpacked tree, fetched once);
        None for a source that is not built here (bin:, url:, cmd:). What a stored comparison of
        this build is found by before the build is made (``Judge.answered``)."""
        src = parse_source(source) if isinstance(source, str) else source
        flags = (*host_flags(cmake_flags), *cmake_flags)
        if src.kind == "pypi":
            return build_key(self.fetcher.pypi_tree(src, None)[1], flags, targets)
        if src.kind == "git":
            return self._git_key(src, flags, targets)[0]
        return None

    def llama_tree(self, source: Source | str) -> Path:
        """The llama.cpp source tree of ``source`` (for its tokenizer files)."""
        src = parse_source(source) if isinstance(source, str) else source
        if src.kind == "pypi":
            return self.fetcher.pypi_tree(src, None)[0]
        if src.kind == "git":
            assert src.path is not None
            return src.path
        raise UserError("a bin: engine has no source tree — use a pypi: or git: engine here")

    def list(self) -> list[EngineBuild]:
        """The finished builds in the cache, oldest first."""
        return self.compiler.list()

    def sdist(self, src: Source, log: Log | None = None) -> Path:
        """The sdist of a pypi: source, downloaded once into the cache (no unpacking)."""
        return self.fetcher.sdist(src, log)

    def resolve_rev(self, repo: Path, rev: str) -> str:
        """The commit that ``rev`` names in ``repo``."""
        return self.fetcher.resolve_rev(repo, rev)

    # -- bin ---------------------------------------------------------------------

    def _bin(self, src: Source, targets: Sequence[str]) -> EngineBuild:
        """A prebuilt folder: its first target (the engine's own binary, DEFAULT_TARGETS[0] unless
        the caller asks for another) answers --help and names its version."""
        assert src.path is not None
        binary = src.path / targets[0]
        bench_help(binary)  # one line now, not a trial failure later
        commit, number = bench_version(binary)
        key = hashlib.sha256(str(src.path).encode()).hexdigest()[:16]
        return EngineBuild(str(src), str(src.path), key, commit, number, (), "prebuilt",
                           backends_in(src.path, targets[0]), tuple(t for t in ALL_TARGETS if (src.path / t).exists()), cache_hit=True)

    def _git_key(self, src: Source, flags: Sequence[str], targets: Sequence[str]) -> tuple[str, str, str]:
        """(build key, commit, tree id) of a git source (its host flags already in ``flags``)."""
        assert src.path and src.rev
        sha = self.fetcher.resolve_rev(src.path, src.rev)
        tree_id = subprocess.run(["git", "-C", str(src.path), "rev-parse", f"{sha}^{{tree}}"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        return build_key(f"git-tree:{tree_id}", flags, targets), sha, tree_id

    def _git_build(self, src: Source, flags: Sequence[str], targets: Sequence[str],
                   log: Log | None) -> EngineBuild:
        assert src.path
        key, sha, tree_id = self._git_key(src, flags, targets)
        number_out = subprocess.run(["git", "-C", str(src.path), "rev-list", "--count", sha],
                                    capture_output=True, text=True)
        number = int(number_out.stdout.strip()) if number_out.returncode == 0 else None
        hit = self.compiler.hit(key, str(src), sha, number)
        if hit:
            return hit
        self.work.mkdir(parents=True, exist_ok=True)
        name = self.fetcher.worktree_name(src.path, sha)
        # The worktree is checked out and built under its slot's lock: a second build of the
        # same repository at once takes the next slot (its own worktree and build directory).
        with hold_slot(self.work, name) as slot:
            wt = self.work / f"{name}{slot}"
            checkout_worktree(src.path, wt, sha)
            return self.compiler.build(src, wt, f"git-tree:{tree_id}", sha, number, flags, targets, log, key=key)
