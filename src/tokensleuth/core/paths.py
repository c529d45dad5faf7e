"""Where tokensleuth keeps its cache and data (overridable by environment)."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

import platformdirs


def cache_dir() -> Path:
    """Root of the build cache, sdists and ccache (``TOKENSLEUTH_CACHE`` overrides)."""
    env = os.environ.get("TOKENSLEUTH_CACHE")
    return Path(env) if env else Path(platformdirs.user_cache_dir("tokensleuth"))


def data_dir() -> Path:
    env = os.environ.get("TOKENSLEUTH_DATA")
    return Path(env) if env else Path(platformdirs.user_data_dir("tokensleuth"))


def default_db() -> Path:
    """The study store (``TOKENSLEUTH_DB`` overrides, ``--db`` overrides both)."""
    env = os.environ.get("TOKENSLEUTH_DB")
    return Path(env) if env else data_dir() / "tokensleuth.sqlite"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path``: a regular file atomically, anything else directly.

    A regular file (or a new one) is written to a temporary file beside it and renamed
    over it, so a reader never sees half a file. A character device (/dev/null,
    /dev/full), a FIFO, a socket or a symbolic link (/dev/stdout) is written through
    as it is: renaming over it would replace the device or the link with a plain file.
    Write errors are OSError, for the caller to report.
    """
    try:
        st: os.stat_result | None = path.lstat()
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tokensleuth-{os.getpid()}-{secrets.token_hex(4)}.tmp")  # short: any name fits
    # os.open with 0o666 lets the umask decide the mode, as a plain open() would
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, st.st_mode & 0o7777 if st else 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing), across processes; waits for it.
    Not re-entrant: a process that holds it and asks again waits for itself."""
    import fcntl

    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
