"""The open store file: opening it (read-only where it must), the schema check and migrations,
transactions, closing. The part of a Store that the others read and write through."""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tokensleuth.core.errors import UserError
from tokensleuth.store.files import (
    OPEN_HERE,
    OPEN_LOCK,
    SQLITE_IOERR,
    check_path,
    disk_full,
    readable_as_is,
    store_errors,
    unwritable,
)
from tokensleuth.store.schema import APPLICATION_ID, CORE_TABLES, MIGRATIONS, SCHEMA_VERSION


def _wal(db: sqlite3.Connection, patience_s: float = 30.0) -> None:
    """Put a store in WAL mode. Switching a new file's journal answers "database is locked" at once
    while another process opens it too (SQLite calls no busy handler there), so it is tried again
    for as long as a locked store is waited for elsewhere."""
    deadline = time.monotonic() + patience_s
    delay = 0.01
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(0.5, delay * 2)


class Database:
    """One connection to a store file, its schema checked and brought up to date."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.read_only = False
        with store_errors(path):
            check_path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            if unwritable(path):
                self._open_read_only()
            else:
                for attempt in range(4):
                    try:
                        self.db = self._open(sqlite3.connect(path, timeout=30, isolation_level=None))
                        break
                    except sqlite3.OperationalError as exc:
                        if unwritable(path):  # e.g. the folder turned out read-only
                            self._open_read_only()
                            break
                        if disk_full(path) and readable_as_is(path):  # reads work on a full disk;
                            self._open_read_only()  # a write says the disk is full (files.translate)
                            break
                        # A connection opened beside others of this process (a thread's) has
                        # met a transient disk I/O error while the log was being reset; try again.
                        code = int(getattr(exc, "sqlite_errorcode", -1)) & 0xFF
                        if code != SQLITE_IOERR or attempt == 3 or disk_full(path):
                            raise
                        time.sleep(0.2 * (attempt + 1))
            st = path.stat()
            self._inode: tuple[int, int] | None = (st.st_dev, st.st_ino)
            with OPEN_LOCK:
                OPEN_HERE[self._inode] = OPEN_HERE.get(self._inode, 0) + 1

    def _open_read_only(self) -> None:
        """Open a store that may not be written (read-only disk or folder, immutable file).

        SQLite could not create its -shm file beside it (or would leave one behind), so
        the file is opened immutable: reading works, a write is a one-line "read-only"
        error. Safe only when no -wal file holds unmerged commits (see unwritable).
        """
        uri = f"file:{urllib.parse.quote(str(self.path.absolute()))}?mode=ro&immutable=1"
        self.db = self._open(sqlite3.connect(uri, uri=True, isolation_level=None), read_only=True)
        self.read_only = True

    def _open(self, db: sqlite3.Connection, read_only: bool = False) -> sqlite3.Connection:
        self.db = db
        try:
            db.row_factory = sqlite3.Row
            # Check whose file it is before anything writes to it (WAL mode rewrites the header).
            self._check_schema()
            if read_only:
                version = int(db.execute("PRAGMA user_version").fetchone()[0])
                if version < SCHEMA_VERSION:
                    raise UserError(f"the store {self.path} is read-only and has the older schema "
                                    f"{version} — make it writable once so tokensleuth can upgrade it")
                return db
            _wal(db)
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except BaseException:
            db.close()
            raise
        return db

    def close(self) -> None:
        self.db.close()
        inode, self._inode = getattr(self, "_inode", None), None
        if inode is not None:
            with OPEN_LOCK:
                OPEN_HERE[inode] -= 1
                if not OPEN_HERE[inode]:
                    del OPEN_HERE[inode]

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            # SQLite rolls back by itself on some errors (a full disk): only roll back what is
            # still open, and never let the rollback hide the error that caused it.
            if self.db.in_transaction:
                with suppress(sqlite3.Error):
                    self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _check_schema(self) -> None:
        """Refuse a database of another program before writing anything to it."""
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        app = int(self.db.execute("PRAGMA application_id").fetchone()[0])
        tables = {str(r[0]) for r in self.db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite%'")}
        # A later tokensleuth may lay its tables out otherwise: judge by the id it sets.
        plausible = app == APPLICATION_ID or (app == 0 and (not tables or CORE_TABLES <= tables))
        if version > SCHEMA_VERSION and plausible:
            raise UserError(
                f"{self.path} has store schema {version}, newer than this tokensleuth "
                f"understands ({SCHEMA_VERSION}) — upgrade tokensleuth or pass another --db"
            )
        ours = app == APPLICATION_ID or (app == 0 and CORE_TABLES <= tables and {
            str(r[1]) for r in self.db.execute("PRAGMA table_info(studies)")} >= {
            "id", "kind", "spec_hash", "spec_json", "status"})
        if (tables or version or app) and not ours:
            shown = ", ".join(sorted(tables)[:4]) + (" …" if len(tables) > 4 else "")
            raise UserError(f"{self.path} is an SQLite database of another program "
                            f"(tables: {shown or 'none'}) — pass another --db path")

    def _migrate(self) -> None:
        """Bring the schema up to date, one step per write transaction. Each step reads the version
        under the write lock it migrates in: processes opening a new store together (four bench
        runs and a reader) each found version 0 outside it, and all but the first then failed on
        "table … already exists"."""
        if int(self.db.execute("PRAGMA user_version").fetchone()[0]) >= SCHEMA_VERSION:
            return
        while True:
            with self.tx() as db:
                v = int(db.execute("PRAGMA user_version").fetchone()[0])
                if v >= SCHEMA_VERSION:
                    return
                for stmt in MIGRATIONS[v].split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute(f"PRAGMA user_version={v + 1}")
