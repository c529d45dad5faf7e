"""JSON exports (docs/architecture.md, Contracts), each carrying ``schema_version``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokensleuth.core.paths import write_atomic


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Write ``obj`` to ``path`` (paths.write_atomic: a regular file whole or not at all).
    Write errors are OSError, for the caller to report."""
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")
