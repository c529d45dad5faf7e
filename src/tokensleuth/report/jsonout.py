"""JSON exports (docs/architecture.md, Contracts), each carrying ``schema_version``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import UserError
from tokensleuth.core.paths import write_atomic

def check_json_target(path: Path, option: str = "--json") -> None:
    """Refuse a ``--json`` path that cannot be written, before any engine time is spent.

    A path that exists must be writable and not a directory; a new file needs its
    nearest existing folder to be a writable directory (missing folders are made).
    """
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UserError(f"cannot use {option} {path}: {exc.strerror or exc} — give another path") from None
    if st is not None:
        if path.is_dir():
            raise UserError(f"{option} {path} is a directory — give a file path, e.g. {path / ('report.html' if option == '--html' else 'result.json')}")
        if path.exists() and not os.access(path, os.W_OK):
            raise UserError(f"{option} {path} is not writable — give another path or change its permissions")
        return
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"{option} {path}: {folder} is not a directory — give a path inside a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: cannot create files in {folder} — give a writable path")


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Write ``obj`` to ``path`` (paths.write_atomic: a regular file whole or not at all).
    Write errors are OSError, for the caller to report."""
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")
