"""What is compiled: CMake and ninja run in a session of their own (:func:`run_logged`), errors
cut to one line (:func:`failure_line`), build directories held by slots (:func:`hold_slot`) and
mirrored trees (:func:`sync_tree`), and :class:`Compiler`: the cache of finished builds
(``<cache>/builds/<key>/``, made atomically) with what is configured
(:mod:`tokensleuth.sources.configure`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import EngineError, UserError
from tokensleuth.core.paths import file_lock
from tokensleuth.sources import Source
from tokensleuth.sources.configure import (
    BUILD_DIR,
    backends_from_flags,
    build_family,
    build_key,
    build_tool,
    cache_env,
    compiler_id,
    configure_argv,
    reuse_build_dirs,
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


def run_logged(argv: Sequence[str], log: Log | None, cwd: Path | None = None,
               env: dict[str, str] | None = None) -> str:
    """Run a build's command, each output line to ``log``; its output, or EngineError with its tail."""
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
def hold_slot(work: Path, name: str, slots: int = BUILD_SLOTS) -> Iterator[str]:
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


class Compiler:
    """The build cache's finished builds under ``builds``, and how one is made: in ``work`` (build
    directories, mirrored trees, their locks), with the compiler cache under ``root``."""

    def __init__(self, root: Path, builds: Path, work: Path) -> None:
        self.root = root
        self.builds = builds
        self.work = work

    def list(self) -> list[EngineBuild]:
        out = []
        for manifest in sorted(self.builds.glob("*/build.json")):
            try:
                out.append(EngineBuild.from_json(json.loads(manifest.read_text())))
            except (ValueError, TypeError):
                continue
        return sorted(out, key=lambda b: b.created_at)

    def hit(self, key: str, source: str, commit: str | None, number: int | None) -> EngineBuild | None:
        manifest = self.builds / key / "build.json"
        if not manifest.exists():
            return None
        b = EngineBuild.from_json(json.loads(manifest.read_text()))
        return EngineBuild(**{**b.to_json(), "source": source, "commit": commit or b.commit,
                              "build_number": number if number is not None else b.build_number,
                              "cmake_flags": b.cmake_flags, "backends": b.backends,
                              "targets": b.targets, "cache_hit": True})

    def build(self, src: Source, tree: Path, tree_id: str, commit: str | None, number: int | None,
               flags: Sequence[str], targets: Sequence[str], log: Log | None,
               key: str | None = None) -> EngineBuild:
        key = key or build_key(tree_id, flags, targets)
        hit = self.hit(key, str(src), commit, number)
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
        family = build_family(where, flags)
        base = f"build-{family}" if reuse_build_dirs() else f"build-{key}"
        # one build of a key at a time (the second finds the first's result); other keys take slots
        with file_lock(self.work / f"key-{key}.lock"), hold_slot(self.work, base) as slot:
            src_dir = self.work / f"{name}{slot}" if mirror else tree
            # inside the tree (its slot's: a git worktree's slot is held by the caller), so compile
            # lines are the same from every root; a fresh directory per build stays out of the tree
            bdir = src_dir / f"{BUILD_DIR}-{family}" if reuse_build_dirs() else self.work / f"{base}{slot}"
            hit = self.hit(key, str(src), commit, number)  # built by another process while we waited
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
        env = cache_env(self.root)
        cfg = configure_argv(cmake, tree, bdir, commit, number, flags, targets)
        t0 = time.monotonic()
        jobs = str(os.cpu_count() or 2)
        try:
            run_logged(cfg, log, env=env)
            run_logged([cmake, "--build", str(bdir), "--target", *targets, "-j", jobs], log, env=env)
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
