"""The Store itself: opening (read-only where it must), the schema check and migrations,
transactions, closing, and the study lease (take, release, recover what a dead holder left).
Its queries and writes are mixed in from reads.py and writes.py."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tokensleuth.core.errors import Interrupted, UserError
from tokensleuth.core.records import HANDED_OUT, MACHINE_LOST, Lease, LostTrial
from tokensleuth.store.files import (
    OPEN_HERE,
    OPEN_LOCK,
    SQLITE_IOERR,
    check_path,
    disk_full,
    readable_as_is,
    store_errors,
    translate,
    unwritable,
)
from tokensleuth.store.leases import Holder, alive, holder_of, this_process
from tokensleuth.store.reads import _Reads
from tokensleuth.store.schema import APPLICATION_ID, CORE_TABLES, MIGRATIONS, SCHEMA_VERSION
from tokensleuth.store.writes import _Writes


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


class Store(_Reads, _Writes):
    """A connection to the study store. Caller-owned; close it (or use ``with``).

    ``with Store(path) as store:`` is also the boundary where SQLite's errors about the
    file or the disk (inside the block too) become one-line UserError/EngineError.
    """

    def __init__(self, path: Path, *, proc_root: Path = Path("/proc")) -> None:
        self.path = path
        self.proc_root = proc_root
        self.me = this_process(proc_root)
        self._held: dict[str, int] = {}  # study id -> nesting depth of this process's leases
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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, typ: object, exc: BaseException | None, tb: object) -> None:
        with suppress(sqlite3.Error):
            self.close()
        if exc is not None:
            mapped = translate(self.path, exc) if isinstance(exc, sqlite3.Error) else None
            if mapped is not None:
                raise mapped from exc

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

    # -- the study lease ------------------------------------------------------------

    @contextmanager
    def lease(self, study_id: str) -> Iterator[Lease]:
        """Hold the study's lock while running it; only one process runs a study at once.

        Taking it fails with a UserError naming the live holder; a holder that died
        (same boot) or whose boot ended is stale and taken over, and the trials it left
        ``running`` are recovered (see :meth:`recover`). SIGINT/SIGTERM inside
        (KeyboardInterrupt, Interrupted) mark the study ``interrupted`` and put its
        in-flight trial back to ``planned`` before the exception goes on. Re-entrant in
        one process.
        """
        depth = self._held.get(study_id, 0)
        lost: tuple[LostTrial, ...] = ()
        if depth == 0:
            with self.tx() as db:
                self._take_lease(db, study_id)
                lost = tuple(self._recover(db, study_id))
        self._held[study_id] = depth + 1
        try:
            yield Lease(study_id, lost)
        except (KeyboardInterrupt, Interrupted):
            if depth == 0:
                self._interrupted(study_id)
            raise
        finally:
            self._held[study_id] = depth
            if depth == 0:
                del self._held[study_id]
                self._release(study_id)

    def holder(self, study_id: str) -> Holder | None:
        """Who holds the study's lease (maybe a dead process), or None."""
        row = self.db.execute("SELECT * FROM leases WHERE study_id=?", (study_id,)).fetchone()
        return None if row is None else holder_of(row)

    def _take_lease(self, db: sqlite3.Connection, study_id: str) -> None:
        self._check_lease(db, study_id)
        me = self.me
        db.execute(
            "INSERT OR REPLACE INTO leases(study_id, pid, pid_start, boot_id, host, since)"
            " VALUES (?,?,?,?,?,?)",
            (study_id, me.pid, me.pid_start, me.boot_id, me.host, time.time()),
        )
        # a continued study (interrupted, or finished and given more pairs) runs again
        db.execute("UPDATE studies SET status='running', finished_at=NULL WHERE id=?", (study_id,))

    def _check_lease(self, db: sqlite3.Connection, study_id: str) -> None:
        """Raise when another live process holds the study's lease."""
        row = db.execute("SELECT * FROM leases WHERE study_id=?", (study_id,)).fetchone()
        if row is None:
            return
        h = holder_of(row)
        mine = (h.pid, h.boot_id, h.pid_start) == (self.me.pid, self.me.boot_id, self.me.pid_start)
        if not mine and alive(h, self.me, self.proc_root):
            raise UserError(f"study {study_id} is being run by {h.describe()} — wait for it, "
                            f"or stop it (kill {h.pid}) and rerun with --resume")

    def _release(self, study_id: str) -> None:
        # Best effort: a lease left behind by a failed write names a pid that is about to
        # exit, and a dead holder's lease is taken over.
        with suppress(sqlite3.Error):
            with self.tx() as db:
                db.execute("DELETE FROM leases WHERE study_id=? AND pid=? AND boot_id=?",
                           (study_id, self.me.pid, self.me.boot_id))

    def _interrupted(self, study_id: str) -> None:
        with suppress(sqlite3.Error):
            if self.db.in_transaction:  # the signal landed inside a transaction
                self.db.execute("ROLLBACK")
            with self.tx() as db:
                db.execute("UPDATE trials SET status='planned', started_at=NULL, boot_id=NULL"
                           " WHERE study_id=? AND status='running'", (study_id,))
                db.execute("UPDATE studies SET status='interrupted' WHERE id=? AND status='running'",
                           (study_id,))

    def recover(self, study_id: str) -> int:
        """Put trials left ``running`` by a dead runner back to ``planned``; return how many.

        Refuses (UserError) while another live process holds the study's lease.
        """
        with self.tx() as db:
            self._check_lease(db, study_id)
            n = db.execute("SELECT COUNT(*) FROM trials WHERE study_id=? AND status='running'",
                           (study_id,)).fetchone()[0]
            self._recover(db, study_id)
            return int(n)

    def _recover(self, db: sqlite3.Connection, study_id: str) -> list[LostTrial]:
        """Recover running trials; those started under another boot are recorded as lost.

        A dead process of this boot leaves nothing worth keeping (its samples were never
        committed). A trial whose boot ended took its machine down with it (a model too
        large for memory freezes the host): that is a finding, so it becomes a
        ``machine-lost`` warning with the last readings stored, and the trial runs again.
        """
        lost: list[LostTrial] = []
        rows = db.execute(
            "SELECT t.*, a.name AS arm FROM trials t JOIN arms a ON a.id=t.arm_id"
            " WHERE t.study_id=? AND t.status='running' ORDER BY t.seq", (study_id,)).fetchall()
        for r in rows:
            boot = r["boot_id"]
            if boot and boot != self.me.boot_id:
                last = db.execute("SELECT values_json FROM timeline WHERE trial_id=?"
                                  " ORDER BY t_ns DESC LIMIT 1", (r["id"],)).fetchone()
                t = LostTrial(int(r["id"]), int(r["seq"]), str(r["arm"]), str(r["model"]),
                              str(r["workload"]), r["started_at"], str(boot),
                              json.loads(last["values_json"]) if last else {})
                db.execute("INSERT INTO warnings(trial_id, code, detail) VALUES (?,?,?)",
                           (t.trial_id, MACHINE_LOST, t.detail()))
                lost.append(t)
            elif r["node"]:
                # handed to a worker by a driver that then stopped: it never came back
                when = dt.datetime.fromtimestamp(r["started_at"]).strftime("%H:%M:%S") if r["started_at"] else "?"
                db.execute("INSERT INTO warnings(trial_id, code, detail) VALUES (?,?,?)",
                           (r["id"], HANDED_OUT, f"trial {r['seq']} was handed to {r['node']} at {when} and "
                            "never came back (the driver stopped); it runs again"))
            # the rerun records its own timeline (a lost run's readings live on in its warning)
            db.execute("DELETE FROM timeline WHERE trial_id=?", (r["id"],))
        db.execute("UPDATE trials SET status='planned', started_at=NULL, boot_id=NULL, node=NULL"
                   " WHERE study_id=? AND status='running'", (study_id,))
        return lost
