"""What a store file may be, and what SQLite's errors about it mean: one-line
UserError/EngineError at one boundary, :func:`store_errors`."""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tokensleuth.core.errors import EngineError, UserError

# SQLite primary result codes (sqlite3.h) that say something about the file or the disk,
# not about tokensleuth's SQL; anything else (a constraint, a misuse) is a bug and keeps
# its traceback.
_SQLITE_PERM, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 3, 5, 6, 8
SQLITE_IOERR, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN = 10, 11, 13, 14
_SQLITE_NOTADB, _SQLITE_AUTH = 26, 23


def disk_full(path: Path) -> bool:
    """Whether the file system of ``path`` has (nearly) no room: SQLite's I/O errors do
    not say ENOSPC, so an I/O error on a full disk is recognised by looking."""
    for d in (path.parent, path.parent.parent):
        with suppress(OSError):
            return shutil.disk_usage(d).free < (1 << 20)
    return False


def translate(path: Path, exc: BaseException) -> UserError | EngineError | None:
    """The one-line error for a store fault, or None when ``exc`` is not one (a bug)."""
    fix = "pass another --db path"
    if isinstance(exc, sqlite3.Error) and not isinstance(exc, sqlite3.DatabaseError):
        return None  # InterfaceError: tokensleuth misused the library
    if isinstance(exc, sqlite3.DatabaseError):
        if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError,
                            sqlite3.InterfaceError)):
            return None
        code = int(getattr(exc, "sqlite_errorcode", -1)) & 0xFF
        if code == _SQLITE_FULL or (code in (SQLITE_IOERR, _SQLITE_CANTOPEN, _SQLITE_READONLY) and disk_full(path)):
            return EngineError(f"the disk holding the store {path} is full; nothing of this command "
                               "was stored — free some space and rerun it")
        if code == _SQLITE_READONLY:
            return UserError(f"the store {path} is read-only ({exc}) — make it and its folder "
                             f"writable, or {fix}")
        if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
            return UserError(f"the store {path} is damaged or not a tokensleuth store ({exc}) — "
                             f"restore it from a backup (sqlite3 {path} .recover saves what is "
                             f"readable), or {fix}")
        if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return UserError(f"the store {path} stayed locked by another process for 30 s — "
                             "wait for it to finish and rerun")
        if code in (_SQLITE_CANTOPEN, _SQLITE_PERM, _SQLITE_AUTH):
            return UserError(f"cannot open the store {path} ({exc}; SQLite also needs to create "
                             f"{path.name}-wal and -shm beside it) — make its folder writable, or {fix}")
        if code == SQLITE_IOERR:
            return EngineError(f"I/O error on the store {path} ({exc}) — check the disk, then rerun")
        return None
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOSPC:
            return EngineError(f"the disk holding the store {path} is full — free some space and rerun")
        why = exc.strerror or str(exc)
        if exc.errno in (errno.ENOTDIR, errno.EEXIST):
            why = "a part of its folder path is a file, not a folder"
        return UserError(f"cannot use {path} as the store ({why}) — {fix}")
    return None


@contextmanager
def store_errors(path: Path) -> Iterator[None]:
    """The boundary where SQLite's errors about the file or disk become one-line errors."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        mapped = translate(path, exc)
        if mapped is None:
            raise
        raise mapped from exc


def readable_as_is(path: Path) -> bool:
    """A store file whose -wal holds no commits: its main file alone is the whole store, so it
    can be read opened immutable (a full disk, where SQLite cannot grow its -wal and -shm)."""
    wal = path.with_name(path.name + "-wal")
    return path.is_file() and (not wal.exists() or wal.stat().st_size == 0)


def unwritable(path: Path) -> bool:
    """A store file that exists but that SQLite may not write beside (its -wal and -shm).

    Whether it exists is asked first: another process may create the file between the checks,
    and a write check made before it existed says "not writable" of a file that is."""
    if not path.is_file():
        return False
    wal = path.with_name(path.name + "-wal")
    no_wal = not wal.exists() or wal.stat().st_size == 0
    return no_wal and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


# Store files this process has open (device, inode) -> connections. Closing any descriptor
# of a file drops every POSIX lock the process holds on it, SQLite's included: once a store
# is open here (another thread's Store), nothing but SQLite may open and close the file.
OPEN_HERE: dict[tuple[int, int], int] = {}
OPEN_LOCK = threading.Lock()


def check_path(path: Path) -> None:
    """Refuse, before SQLite touches it, a --db that is not a store file nor a place for one."""
    fix = "pass another --db path"
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise UserError(f"cannot use {path} as the store (a part of its folder path is a file, "
                        f"not a folder) — {fix}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path} is a folder — give --db a file, e.g. {path / 'tokensleuth.sqlite'}")
    if not stat.S_ISREG(st.st_mode):
        # a device, FIFO or socket: SQLite would write -wal/-shm files beside it (/dev/null-wal)
        raise UserError(f"{path} is not a regular file — {fix}")
    if st.st_size == 0:
        return  # an empty file becomes a new store, as SQLite does
    with OPEN_LOCK:
        if OPEN_HERE.get((st.st_dev, st.st_ino)):
            return  # checked when it was first opened; reading it now would unlock it (above)
    with open(path, "rb") as fh:
        if fh.read(16) != b"SQLite format 3\x00":
            raise UserError(f"{path} is not a tokensleuth database — {fix}")
