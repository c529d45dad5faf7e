"""What the suite's parallel test processes (pytest-xdist workers) share, and how they keep apart.

They share the user cache (engine builds, the planted repository, the tiny models): what is
made there once is made under a lock, so two workers never make it at once. Each worker sees
the models under a name of its own, so that a test that looks for the engines still running
on its model finds its own process's, never the other worker's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from tokensleuth.core.paths import cache_dir, file_lock


def name() -> str:
    """This test process: gw0, gw1, ... under pytest-xdist; ``main`` otherwise."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@contextlib.contextmanager
def cache_lock(what: str) -> Iterator[None]:
    """Hold the suite-wide lock ``what`` (``tokensleuth.core.paths.file_lock``: not re-entrant)."""
    d = cache_dir() / "test-locks"
    d.mkdir(parents=True, exist_ok=True)
    with file_lock(d / f"{what}.lock"):
        yield


def models_dir() -> Path:
    """Where this worker's names for the tiny models are."""
    return cache_dir() / "test-models" / name()


def own_name(shared: Path) -> Path:
    """The shared model ``shared`` under this worker's own name (a hard link in models_dir())."""
    mine = models_dir() / shared.name
    if not mine.exists():
        mine.parent.mkdir(parents=True, exist_ok=True)
        tmp = mine.with_name(f"{mine.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        os.link(shared, tmp)
        tmp.replace(mine)
    return mine
