"""A decompose's series and what it writes: the patches prepared in a private clone, the kept ones
written as a branch or a folder."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from tokensleuth.core.errors import UserError
from tokensleuth.sources import parse_source
from tokensleuth.sources.build import BuildCache
from tokensleuth.sources.patches import (
    Patch,
    PrivateRepo,
    read_patch_files,
    series_patches,
)


def prepare(repo: Path | None, base: str, series: str | None,
            patch_files: Sequence[Path]) -> tuple[PrivateRepo, str, list[Patch]]:
    """The private repository, the base commit in it and the patches, validated (UserError)."""
    if (series is None) == (not patch_files):
        raise UserError("decompose needs either --series BRANCH or --patches FILE … — name one of them")
    if not base:
        raise UserError("decompose needs --base REV (a commit of --repo, or pypi:NAME==VERSION)")
    if base.startswith(("git:", "bin:")):
        raise UserError(f"--base {base}: write --repo PATH --base REV for a git checkout (a bin: folder has no "
                        "source to patch)")
    if base.startswith("pypi:"):
        if series is not None:
            raise UserError("--series needs --repo and a --base revision of it — pass the patches with --patches")
        parse_source(base)
        patches = read_patch_files(patch_files)
        private, sha = PrivateRepo.for_source(base)
        return private, sha, patches
    if repo is None:
        raise UserError("--base REV needs --repo PATH (the llama.cpp checkout it names) — or use --base pypi:…")
    repo = repo.expanduser().resolve()
    parse_source(f"git:{repo}@{base}")
    sha = BuildCache().resolve_rev(repo, base)
    patches = series_patches(repo, sha, series) if series is not None else read_patch_files(patch_files)
    return PrivateRepo.for_git(repo), sha, patches


def check_out_branch(repo: Path | None, name: str) -> None:
    """Before any work: the branch can be created (valid name, not there yet, a repo to put it in)."""
    if repo is None:
        raise UserError("--out-branch needs --repo PATH to create the branch in — or write --out-dir DIR")
    proc = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True)
    if proc.returncode != 0:
        raise UserError(f"--out-branch {name!r} is not a valid branch name — pick another")
    have = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "-q", f"refs/heads/{name}"],
                          capture_output=True)
    if have.returncode == 0:
        raise UserError(f"branch {name} already exists in {repo} — pick a new name or delete it first")


def write_branch(repo: Path, private: PrivateRepo, final: str, name: str) -> None:
    """Branch NAME in the user's repo: the base plus the kept patches (the one change made there)."""
    subprocess.run(["git", "-C", str(repo), "fetch", "-q", "--no-tags", str(private.path),
                    f"{final}:refs/heads/{name}"], check=True, capture_output=True)


def write_dir(private: PrivateRepo, base: str, final: str, out_dir: Path) -> list[Path]:
    """The kept patches as numbered git format-patch files in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if final == base:
        return []
    proc = subprocess.run(["git", "-C", str(private.path), "format-patch", "-o", str(out_dir),
                           f"{base}..{final}"], check=True, capture_output=True, text=True)
    return [Path(p) for p in proc.stdout.split()]
