"""Patches and the private git repository decompose applies them in.

The user's checkout is never touched: the base is cloned (``--shared``, so nothing is
copied) or, for a ``pypi:`` source, committed into a bare repository under the cache
dir, and every patch is applied to a throw-away index (``git apply --cached``), so no
work tree is needed. Commits are made with fixed identities and dates, so the same base
and patches give the same commit ids on every run (a resumed decompose finds its builds
and comparisons by those ids).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tokensleuth.core.errors import UserError
from tokensleuth.core.paths import cache_dir, file_lock
from tokensleuth.sources.build import BuildCache

FIXED_DATE = "2000-01-01T00:00:00Z"
UPSTREAM_COMMITS = 2000  # how far back in the base's history a patch is looked for
IDENT = ("tokensleuth", "decompose@tokensleuth.invalid")


@dataclass(frozen=True, slots=True)
class Patch:
    name: str  # file name or short sha
    subject: str
    text: str
    author: tuple[str, str] = IDENT
    date: str = FIXED_DATE

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


class PatchFailed(Exception):
    """A patch that does not apply; the message names the conflicting file."""


def parse_patch(name: str, text: str) -> Patch:
    """A ``git format-patch`` file (or a plain diff): subject, author and date from its header."""
    subject = Path(name).stem
    m = re.search(r"^Subject: (?:\[[^\]]*\]\s*)?(.*(?:\n[ \t].*)*)", text, re.M)
    if m:
        subject = " ".join(m.group(1).split())
    author = IDENT
    if (a := re.search(r"^From: (.*?) <([^>]*)>", text, re.M)) is not None:
        author = (a.group(1).strip() or IDENT[0], a.group(2))
    date = FIXED_DATE
    if (d := re.search(r"^Date: (.+)$", text, re.M)) is not None:
        date = d.group(1).strip()
    return Patch(name, subject, text, author, date)


def read_patch_files(paths: Sequence[Path]) -> list[Patch]:
    out = []
    for p in paths:
        if not p.is_file():
            raise UserError(f"patch file {p} does not exist — pass the files git format-patch wrote")
        text = p.read_text(errors="replace")
        if "\n+++ " not in "\n" + text and "diff --git" not in text:
            raise UserError(f"{p} is not a patch (no diff in it) — pass git format-patch output")
        out.append(parse_patch(p.name, text))
    if not out:
        raise UserError("no patches — pass --series BRANCH or --patches FILE …")
    return out


def _git(repo: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True,
                          env=env)
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])} failed: {proc.stderr.strip()[:300]}")
    return proc


def patch_id(repo: Path, text: str) -> str | None:
    """``git patch-id --stable`` of a patch's diff (None for a patch with no diff)."""
    out = _git(repo, "patch-id", "--stable", stdin=text, check=False).stdout.split()
    return out[0] if out else None


def series_patches(repo: Path, base_sha: str, branch: str) -> list[Patch]:
    """The commits from base to BRANCH (first parent), each as format-patch text."""
    tip = BuildCache().resolve_rev(repo, branch)
    if _git(repo, "merge-base", "--is-ancestor", base_sha, tip, check=False).returncode != 0:
        raise UserError(f"--series {branch} does not descend from --base — rebase it onto the base or pick "
                        "the base it was written on")
    shas = _git(repo, "rev-list", "--reverse", "--first-parent", f"{base_sha}..{tip}").stdout.split()
    if not shas:
        raise UserError(f"--series {branch} has no commits on top of --base — name the branch that carries "
                        "the patches")
    return [parse_patch(sha[:10], _git(repo, "format-patch", "-1", "--stdout", sha).stdout) for sha in shas]


class PrivateRepo:
    """A bare repository under the cache dir that holds the base and every state built on it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ids: dict[str, dict[str, str]] = {}  # commit -> {patch id: commit of its history}

    @classmethod
    def for_git(cls, repo: Path, root: Path | None = None) -> PrivateRepo:
        """A shared clone of ``repo`` (its objects read through alternates: nothing copied)."""
        repo = repo.expanduser().resolve()
        dest = (root or cache_dir() / "decompose") / f"git-{hashlib.sha256(str(repo).encode()).hexdigest()[:12]}.git"
        if not (dest / "HEAD").exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            with file_lock(dest.with_name(f".{dest.name}.lock")):  # another process may be making it
                if not (dest / "HEAD").exists():
                    tmp = dest.with_name(dest.name + ".tmp")
                    subprocess.run(["rm", "-rf", str(tmp)], check=True)
                    subprocess.run(["git", "clone", "-q", "--bare", "--shared", "--no-tags", str(repo), str(tmp)],
                                   check=True, capture_output=True)
                    tmp.rename(dest)
        return cls(dest)

    @classmethod
    def for_source(cls, source: str, root: Path | None = None) -> tuple[PrivateRepo, str]:
        """A repository whose one commit is the llama.cpp tree of ``source`` (e.g. a pypi: sdist)."""
        tree = BuildCache().llama_tree(source)
        dest = (root or cache_dir() / "decompose") / f"src-{hashlib.sha256(source.encode()).hexdigest()[:12]}.git"
        if not (dest / "refs" / "heads" / "base").exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            with file_lock(dest.with_name(f".{dest.name}.lock")):  # another process may be making it
                if not (dest / "refs" / "heads" / "base").exists():
                    cls._make_source_repo(dest, tree, source)
        r = cls(dest)
        return r, _git(dest, "rev-parse", "refs/heads/base").stdout.strip()

    @staticmethod
    def _make_source_repo(dest: Path, tree: Path, source: str) -> None:
        subprocess.run(["rm", "-rf", str(dest)], check=True)
        subprocess.run(["git", "init", "-q", "--bare", str(dest)], check=True, capture_output=True)
        env = _env(IDENT, FIXED_DATE)
        with tempfile.TemporaryDirectory() as td:
            env["GIT_INDEX_FILE"] = str(Path(td) / "index")
            work = ["git", "--git-dir", str(dest), "--work-tree", str(tree)]
            subprocess.run([*work, "add", "-A", "-f", "."], check=True, capture_output=True, env=env)
            t = subprocess.run([*work, "write-tree"], check=True, capture_output=True, text=True,
                               env=env).stdout.strip()
        sha = subprocess.run(["git", "--git-dir", str(dest), "commit-tree", t, "-m", f"base: {source}"],
                             check=True, capture_output=True, text=True, env=env).stdout.strip()
        subprocess.run(["git", "--git-dir", str(dest), "update-ref", "refs/heads/base", sha], check=True)

    def source(self, sha: str) -> str:
        return f"git:{self.path}@{sha}"

    def tree(self, sha: str) -> str:
        return _git(self.path, "rev-parse", f"{sha}^{{tree}}").stdout.strip()

    def contained(self, parent: str, patch: Patch) -> bool:
        """Whether ``parent`` already has the patch: its reverse applies there."""
        with self._index(parent) as env:
            return _git(self.path, "apply", "--cached", "--reverse", "--check", "-", stdin=patch.text, env=env,
                        check=False).returncode == 0

    def upstream(self, parent: str, patch: Patch, limit: int = UPSTREAM_COMMITS) -> str | None:
        """The commit among ``parent``'s last ``limit`` that carries the same change (git patch-id).

        This is ``git cherry``'s test: a patch taken upstream and edited by later commits
        no longer reverse-applies, but its patch id still matches the upstream commit.
        """
        mine = patch_id(self.path, patch.text)
        if mine is None:
            return None
        if parent not in self._ids:
            # Ordinary commits only: a root commit (a pypi: tree) or a merge is no one patch.
            log = subprocess.Popen(["git", "-C", str(self.path), "log", "-p", "--no-color", "--min-parents=1",
                                    "--max-parents=1", f"-n{limit}", "--format=commit %H", parent],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            ids = subprocess.run(["git", "-C", str(self.path), "patch-id", "--stable"], stdin=log.stdout,
                                 capture_output=True, text=True)
            assert log.stdout is not None
            log.stdout.close()
            log.wait()
            self._ids[parent] = {}
            for line in ids.stdout.splitlines():
                pid, _, sha = line.partition(" ")
                self._ids[parent].setdefault(pid, sha)  # newest first: the latest commit with it
        return self._ids[parent].get(mine)

    def apply(self, parent: str, patch: Patch) -> str:
        """The commit ``parent`` + ``patch`` (deterministic id); PatchFailed when it does not apply."""
        with self._index(parent) as env:
            # --3way, as `git am -3` does: context that drifted since the patch was written
            # merges cleanly, and a change already made upstream merges to no change at all.
            proc = _git(self.path, "apply", "--cached", "--3way", "-", stdin=patch.text, env=env, check=False)
            if proc.returncode != 0:
                raise PatchFailed(apply_error(proc.stderr))
            tree = _git(self.path, "write-tree", env=env).stdout.strip()
        env = _env(patch.author, patch.date)
        msg = f"{patch.subject}\n"  # no file name: a series and its format-patch files give the same ids
        return _git(self.path, "commit-tree", tree, "-p", parent, stdin=msg, env=env).stdout.strip()

    def _index(self, sha: str) -> _Index:
        return _Index(self.path, sha)


class _Index:
    """A throw-away index holding ``sha``'s tree (as an env for git)."""

    def __init__(self, repo: Path, sha: str) -> None:
        self.repo, self.sha = repo, sha
        self.dir = tempfile.TemporaryDirectory()

    def __enter__(self) -> dict[str, str]:
        env = dict(os.environ, GIT_INDEX_FILE=str(Path(self.dir.name) / "index"))
        _git(self.repo, "read-tree", self.sha, env=env)
        return env

    def __exit__(self, *exc: object) -> None:
        self.dir.cleanup()


def _env(author: tuple[str, str], date: str) -> dict[str, str]:
    return dict(os.environ, GIT_AUTHOR_NAME=author[0], GIT_AUTHOR_EMAIL=author[1], GIT_AUTHOR_DATE=date,
                GIT_COMMITTER_NAME=IDENT[0], GIT_COMMITTER_EMAIL=IDENT[1], GIT_COMMITTER_DATE=date)


def apply_error(stderr: str) -> str:
    """``git apply``'s complaint in one line, naming the file (``patch failed: src/x.cpp:12``)."""
    lines = [ln.removeprefix("error: ").strip() for ln in stderr.splitlines() if ln.startswith("error:")]
    failed = next((ln for ln in lines if ln.startswith("patch failed:")), None)
    if failed is None and (m := re.search(r"^Applied patch to '(.+)' with conflicts", stderr, re.M)):
        failed = f"conflict in {m.group(1)}"
    return ("does not apply: " + (failed or (lines[0] if lines else stderr.strip()[:200] or "git apply failed")))


def build_error(message: str) -> str:
    """The first compiler error line of a failed build's output (else its first line)."""
    for ln in message.splitlines():
        if re.search(r"\berror\b", ln) and ("#error" in ln or re.search(r":\d+:\d*:? ?(fatal )?error", ln)):
            return ln.strip()[:300]
    for ln in message.splitlines():
        if "error:" in ln:
            return ln.strip()[:300]
    return (message.splitlines() or ["build failed"])[0][:300]
