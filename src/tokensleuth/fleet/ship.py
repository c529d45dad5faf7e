"""Git sources for machines that do not have the repository: shipped as a git bundle.

The executor may not need a shared file system, so a ``git:PATH@REV`` source is not read
at PATH on a worker. The driver writes a bundle of the revision's history (from a
throw-away mirror, so the user's repository gains no ref), Ray carries its bytes, and
the worker fetches it into a bare mirror in its own cache, from which it builds as
usual. A worker that already has the commit gets nothing.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from tokensleuth.core.errors import UserError

SHIP_REF = "refs/tokensleuth/ship"


def repo_id(repo: Path) -> str:
    return hashlib.sha256(str(repo.expanduser().resolve()).encode()).hexdigest()[:12]


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], capture_output=True, text=True)


def bundle(repo: Path, sha: str, root: Path) -> bytes:
    """The history of ``sha`` in ``repo`` as a git bundle (cached under ``root``)."""
    root.mkdir(parents=True, exist_ok=True)
    out = root / f"{repo_id(repo)}-{sha[:20]}.bundle"
    if not out.exists():
        with tempfile.TemporaryDirectory(dir=root) as td:
            mirror = Path(td) / "m.git"
            for argv in (("clone", "--quiet", "--mirror", str(repo), str(mirror)),
                         ("-C", str(mirror), "update-ref", SHIP_REF, sha),
                         ("-C", str(mirror), "bundle", "create", "--quiet", str(Path(td) / "b"), SHIP_REF)):
                p = _git(*argv)
                if p.returncode != 0:
                    raise UserError(f"cannot bundle {sha[:10]} of {repo} for the fleet: "
                                    f"{(p.stderr.strip().splitlines() or ['git failed'])[-1]}")
            os.replace(Path(td) / "b", out)
    return out.read_bytes()


def mirror_of(cache_src: Path, rid: str) -> Path:
    return cache_src / f"fleet-{rid}.git"


def has(cache_src: Path, rid: str, sha: str) -> bool:
    m = mirror_of(cache_src, rid)
    return m.exists() and _git("-C", str(m), "cat-file", "-e", f"{sha}^{{commit}}").returncode == 0


def receive(cache_src: Path, rid: str, sha: str, data: bytes | None) -> Path:
    """The worker's mirror holding ``sha``, fetched from ``data`` (a bundle) when given."""
    m = mirror_of(cache_src, rid)
    if not m.exists():
        cache_src.mkdir(parents=True, exist_ok=True)
        p = _git("init", "--quiet", "--bare", str(m))
        if p.returncode != 0:
            raise UserError(f"cannot make a git mirror at {m}: {p.stderr.strip()[-200:]}")
    if data is not None and not has(cache_src, rid, sha):
        with tempfile.NamedTemporaryFile(dir=cache_src, suffix=".bundle") as f:
            f.write(data)
            f.flush()
            p = _git("-C", str(m), "fetch", "--quiet", f.name, f"{SHIP_REF}:refs/tokensleuth/{sha}")
            if p.returncode != 0:
                raise UserError(f"cannot fetch the shipped bundle of {sha[:10]}: {p.stderr.strip()[-200:]}")
    if not has(cache_src, rid, sha):
        raise UserError(f"commit {sha[:10]} is not on this machine and none was shipped")
    return m
