"""The study store: SQLite in WAL mode, one transaction per finished trial.

Every sample is committed together with the status change of its trial, so a
trial is either wholly stored (``done``) or not at all. One process at a time runs
a study: it holds the study's lease (pid, boot id, host). A trial found ``running``
when the lease is taken belonged to a holder that died: it is put back to
``planned``, and when it was started under another boot (the machine froze or
rebooted) it is first recorded as ``machine-lost``. That is the whole resume story:
rerunning a study executes the trials still planned.

The package: the records in tokensleuth.core.records (plain data, no store), the schema and its
migrations (schema.py), what a store file may be and its faults (files.py), the lease holder
(leases.py), the live timeline (timeline.py); reads and writes here.

SQLite's own errors (full disk, read-only or damaged file) become one-line
UserError/EngineError in one place, :func:`store_errors`.

Floor 1: imports core only.
"""


from __future__ import annotations

import datetime as dt
import json
import sqlite3
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tokensleuth.core.errors import Interrupted, UserError
from tokensleuth.core.records import (
    HANDED_OUT,
    MACHINE_LOST,
    NODE_LOST,
    STUDY_STATUSES,
    TRIAL_STATUSES,
    UNFINISHED,
    ArmRow,
    Lease,
    LostTrial,
    PlannedTrial,
    ResultRow,
    SampleRow,
    StudyHandle,
    StudyRow,
    TrialOutcome,
    WindowRow,
)
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
from tokensleuth.store.schema import APPLICATION_ID, CORE_TABLES, MIGRATIONS, SCHEMA_VERSION
from tokensleuth.store.timeline import LiveTimeline

FLOOR = 1  # the layers: a module imports its own folder and lower floors (tests/test_seams.py)

# what `from tokensleuth.store import …` gives (the records also come from tokensleuth.core.records)
__all__ = [
    "APPLICATION_ID", "ArmRow", "StudyRow", "CORE_TABLES", "HANDED_OUT", "MACHINE_LOST", "MIGRATIONS", "NODE_LOST", "SCHEMA_VERSION",
    "STUDY_STATUSES", "TRIAL_STATUSES", "UNFINISHED", "Holder", "Lease", "LiveTimeline", "LostTrial",
    "PlannedTrial", "ResultRow", "SampleRow", "Store", "StudyHandle", "TrialOutcome", "WindowRow", "count_engine",
    "engine_ns", "store_errors", "this_process", "translate",
]

_engine = [0]  # ns of engine time this process has measured, every store and thread together
_engine_lock = threading.Lock()


def engine_ns() -> int:
    """The engine time (ns) of every trial this process has measured: stored ones
    (:meth:`Store.finish_trials`) and those a driver keeps in its own state (a scan's levels,
    :func:`count_engine`). A long study's cost is the difference between two readings."""
    return _engine[0]


def count_engine(out: TrialOutcome) -> None:
    """Add a finished trial's engine time (its process's start to end) to :func:`engine_ns`."""
    if out.t0_ns is not None and out.t1_ns is not None:
        with _engine_lock:
            _engine[0] += max(0, out.t1_ns - out.t0_ns)


def _study(r: sqlite3.Row) -> StudyRow:
    return StudyRow(**{f: r[f] for f in StudyRow.__slots__ if f in r.keys()})



def stored_json(row: Any, column: str, empty: str | None = None) -> Any:
    """A JSON column of a row the store returned, decoded (``empty``: the JSON to read where the
    column is NULL or empty; without it such a column raises, as the text itself would)."""
    text = row[column]
    return json.loads((text or empty) if empty is not None else text)


class Store:
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
            db.execute("PRAGMA journal_mode=WAL")
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
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        for v in range(version, SCHEMA_VERSION):
            with self.tx() as db:
                for stmt in MIGRATIONS[v].split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute(f"PRAGMA user_version={v + 1}")

    # -- studies ---------------------------------------------------------------

    def create_study(
        self,
        kind: str,
        spec: dict[str, Any],
        spec_hash: str,
        arms: Sequence[tuple[str, str, dict[str, Any], Sequence[str], dict[str, str]]],
        plan: Sequence[PlannedTrial],
    ) -> str:
        """Create a study with its arms and planned trials in one transaction."""
        with self.tx() as db:
            return self._create_study(db, kind, spec, spec_hash, arms, plan)

    def _create_study(
        self,
        db: sqlite3.Connection,
        kind: str,
        spec: dict[str, Any],
        spec_hash: str,
        arms: Sequence[tuple[str, str, dict[str, Any], Sequence[str], dict[str, str]]],
        plan: Sequence[PlannedTrial],
    ) -> str:
        study_id = uuid.uuid4().hex[:10]
        db.execute(
            "INSERT INTO studies(id, kind, spec_hash, spec_json, status, created_at)"
            " VALUES (?,?,?,?,?,?)",
            (study_id, kind, spec_hash, json.dumps(spec, sort_keys=True), "running", time.time()),
        )
        for name, source, engine, flags, env in arms:
            db.execute(
                "INSERT INTO arms(study_id, name, source, engine_json, flags_json, env_json, kind)"
                " VALUES (?,?,?,?,?,?,?)",
                (study_id, name, source, json.dumps(engine), json.dumps(list(flags)),
                 json.dumps(env), str(engine.get("engine_kind") or "llama-bench")),  # (engines.base.DEFAULT_KIND: the store sits below engines)
            )
        self._insert_plan(db, study_id, plan, start_seq=0)
        return study_id

    def begin_study(
        self,
        kind: str,
        spec: dict[str, Any],
        spec_hash: str,
        *,
        resume: bool,
        arms: Sequence[tuple[str, str, dict[str, Any], Sequence[str], dict[str, str]]] = (),
        plan: Sequence[PlannedTrial] = (),
    ) -> StudyHandle:
        """Find the study to run for this spec, or create it (with ``arms`` and ``plan``).

        ``resume``: the latest study of this exact spec, if there is one — unfinished
        (``resumed``) or finished (``finished``: the caller reads its stored results) —
        else a new one (a run killed before its study existed simply starts). Without
        ``resume`` a new study is always created. Find and create are one transaction,
        so two processes resuming at once find the same study (and its lease).
        """
        with self.tx() as db:
            if resume:
                row = db.execute(
                    "SELECT id, status FROM studies WHERE kind=? AND spec_hash=?"
                    " ORDER BY created_at DESC, rowid DESC LIMIT 1",
                    (kind, spec_hash),
                ).fetchone()
                if row is not None:
                    status = str(row["status"])
                    return StudyHandle(str(row["id"]), status in UNFINISHED,
                                       status not in UNFINISHED, status)
            sid = self._create_study(db, kind, spec, spec_hash, arms, plan)
            return StudyHandle(sid, False, False, "running")
    def add_trials(self, study_id: str, plan: Sequence[PlannedTrial]) -> None:
        """Append planned trials (a later round of a sequential study)."""
        with self.tx() as db:
            row = db.execute(
                "SELECT COALESCE(MAX(seq), -1) FROM trials WHERE study_id=?", (study_id,)
            ).fetchone()
            self._insert_plan(db, study_id, plan, start_seq=int(row[0]) + 1)

    @staticmethod
    def _insert_plan(
        db: sqlite3.Connection, study_id: str, plan: Sequence[PlannedTrial], start_seq: int
    ) -> None:
        arm_ids = {
            r["name"]: r["id"]
            for r in db.execute("SELECT id, name FROM arms WHERE study_id=?", (study_id,))
        }
        for i, t in enumerate(plan):
            db.execute(
                "INSERT INTO trials(study_id, arm_id, seq, pair, model, workload, argv_json, status)"
                " VALUES (?,?,?,?,?,?,?, 'planned')",
                (study_id, arm_ids[t.arm], start_seq + i, t.pair, t.model, t.workload,
                 json.dumps(list(t.argv))),
            )

    def find_resumable(self, kind: str, spec_hash: str) -> str | None:
        """The latest unfinished (running or interrupted) study of this spec."""
        row = self.db.execute(
            "SELECT id FROM studies WHERE kind=? AND spec_hash=? AND status IN (?, ?)"
            " ORDER BY created_at DESC, rowid DESC LIMIT 1",
            (kind, spec_hash, *UNFINISHED),
        ).fetchone()
        return None if row is None else str(row["id"])

    def find_study(self, kind: str, spec_hash: str) -> str | None:
        row = self.db.execute(
            "SELECT id FROM studies WHERE kind=? AND spec_hash=?"
            " ORDER BY created_at DESC, rowid DESC LIMIT 1",
            (kind, spec_hash),
        ).fetchone()
        return None if row is None else str(row["id"])

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

    def finish_study(self, study_id: str, status: str = "done") -> None:
        if status not in STUDY_STATUSES:
            raise ValueError(f"not a study status: {status!r}")
        with self.tx() as db:
            db.execute(
                "UPDATE studies SET status=?, finished_at=? WHERE id=?",
                (status, time.time(), study_id),
            )

    def study(self, study_id: str) -> StudyRow:
        """The study whose id is, or starts with, ``study_id`` (taken literally)."""
        if not study_id:
            raise UserError("the study id is empty — list the studies with `tokensleuth studies`")
        rows = self.db.execute(
            "SELECT * FROM studies WHERE substr(id, 1, ?) = ?", (len(study_id), study_id)
        ).fetchall()
        if not rows:
            raise UserError(f"no study {study_id!r} in {self.path} — list them with `tokensleuth studies`")
        if len(rows) > 1:
            raise UserError(f"study id {study_id!r} is ambiguous — give more characters")
        return _study(rows[0])

    def studies(self) -> list[StudyRow]:
        return [_study(r) for r in self.db.execute(
            "SELECT s.*, (SELECT COUNT(*) FROM trials t WHERE t.study_id=s.id) AS n_trials,"
            " (SELECT COUNT(*) FROM trials t WHERE t.study_id=s.id AND t.status='done') AS n_done"
            " FROM studies s ORDER BY created_at"
        ).fetchall()]

    def arms(self, study_id: str) -> list[ArmRow]:
        return [ArmRow(*(r[f] for f in ArmRow.__slots__)) for r in self.db.execute(
            "SELECT * FROM arms WHERE study_id=? ORDER BY id", (study_id,)
        ).fetchall()]

    def engines(self, study_id: str) -> dict[str, dict[str, Any]]:
        """Each arm's engine (its build's manifest), decoded, by arm name."""
        return {a.name: a.engine for a in self.arms(study_id)}

    def set_arm_engine(self, study_id: str, name: str, engine: dict[str, Any]) -> None:
        with self.tx() as db:
            db.execute(
                "UPDATE arms SET engine_json=? WHERE study_id=? AND name=?",
                (json.dumps(engine), study_id, name),
            )

    # -- trials ----------------------------------------------------------------

    def planned(self, study_id: str) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT t.*, a.name AS arm FROM trials t JOIN arms a ON a.id=t.arm_id"
            " WHERE t.study_id=? AND t.status='planned' ORDER BY t.seq",
            (study_id,),
        ).fetchall()

    def trials(self, study_id: str) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT t.*, a.name AS arm FROM trials t JOIN arms a ON a.id=t.arm_id"
            " WHERE t.study_id=? ORDER BY t.seq",
            (study_id,),
        ).fetchall()

    def last_argv(self, study_id: str) -> list[str] | None:
        """The argv of the study's most recently planned trial (None: no trial planned)."""
        row = self.db.execute("SELECT argv_json FROM trials WHERE study_id=? ORDER BY seq DESC LIMIT 1",
                              (study_id,)).fetchone()
        return None if row is None else list(json.loads(row["argv_json"]))

    def mark_running(self, trial_id: int, node: str | None = None) -> None:
        """Mark a planned trial running under this boot (a later boot then knows it was lost)."""
        self.mark_running_many([trial_id], node)

    def mark_running_many(self, trial_ids: Sequence[int], node: str | None = None) -> None:
        """Mark planned trials running, in one transaction; ``node``: the worker they are handed to."""
        with self.tx() as db:
            db.executemany(
                "UPDATE trials SET status='running', started_at=?, boot_id=?, node=? WHERE id=? AND status='planned'",
                [(time.time(), self.me.boot_id, node, t) for t in trial_ids],
            )

    def hand_back(self, trial_ids: Sequence[int], code: str, detail: str) -> None:
        """Trials whose worker was lost: back to planned, with the loss recorded (one transaction).

        Nothing they measured was stored (a worker's samples reach the store only with its
        finished outcome), so running them again counts nothing twice.
        """
        with self.tx() as db:
            for t in trial_ids:
                db.execute("INSERT INTO warnings(trial_id, code, detail) VALUES (?,?,?)", (t, code, detail))
                db.execute("DELETE FROM timeline WHERE trial_id=?", (t,))
                db.execute("UPDATE trials SET status='planned', started_at=NULL, boot_id=NULL, node=NULL"
                           " WHERE id=? AND status='running'", (t,))

    def live_timeline(self, trial_id: int, every_s: float = 2.0) -> LiveTimeline:
        """A writer that commits a running trial's readings as the sampler takes them."""
        return LiveTimeline(self.path, trial_id, every_s)

    def finish_trial(self, trial_id: int, out: TrialOutcome) -> None:
        """Store a finished trial and all its samples in one transaction."""
        self.finish_trials([(trial_id, out)])

    def finish_trials(self, done: Sequence[tuple[int, TrialOutcome]]) -> None:
        """Store finished trials (a pair from one worker) and their samples in one transaction."""
        with self.tx() as db:
            for trial_id, out in done:
                cur = db.execute(
                    "UPDATE trials SET status=?, exit_code=?, message=?, stderr_tail=?, started_at=?,"
                    " ended_at=?, t0_ns=?, t1_ns=?, env_json=? WHERE id=? AND status='running'",
                    (out.status, out.exit_code, out.message, out.stderr_tail, out.started_at,
                     out.ended_at, out.t0_ns, out.t1_ns, json.dumps(out.env), trial_id),
                )
                if cur.rowcount != 1:
                    # Someone else finished it (or it was never started): storing again would
                    # count its samples twice.
                    raise RuntimeError(f"trial {trial_id} is not running; refusing to store it twice")
                self._insert_outcome_rows(db, trial_id, out)
        for _, out in done:  # (once stored: a trial whose transaction failed is measured again)
            count_engine(out)

    def import_trial(
        self, study_id: str, arm: str, model: str, out: TrialOutcome
    ) -> None:
        """Store an already-finished trial (from ``import``) in one transaction."""
        with self.tx() as db:
            self._insert_finished_trial(db, study_id, arm, model, out)

    def import_study(
        self,
        kind: str,
        spec: dict[str, Any],
        spec_hash: str,
        arm: tuple[str, str, dict[str, Any]],
        trials: Sequence[tuple[str, TrialOutcome]],
    ) -> str:
        """Store a finished study of finished trials (``import``): all of it or, on any error, nothing.

        ``arm`` is (name, source, engine); ``trials`` are (model, outcome). One
        transaction, so a failure half-way (or a kill) never leaves a study
        ``running`` or a file half-imported.
        """
        study_id = uuid.uuid4().hex[:10]
        now = time.time()
        name, source, engine = arm
        with self.tx() as db:
            db.execute(
                "INSERT INTO studies(id, kind, spec_hash, spec_json, status, created_at, finished_at)"
                " VALUES (?,?,?,?,'done',?,?)",
                (study_id, kind, spec_hash, json.dumps(spec, sort_keys=True), now, now),
            )
            db.execute(
                "INSERT INTO arms(study_id, name, source, engine_json, flags_json, env_json)"
                " VALUES (?,?,?,?,'[]','{}')",
                (study_id, name, source, json.dumps(engine)),
            )
            for model, out in trials:
                self._insert_finished_trial(db, study_id, name, model, out)
        return study_id

    @staticmethod
    def _insert_finished_trial(
        db: sqlite3.Connection, study_id: str, arm: str, model: str, out: TrialOutcome
    ) -> None:
        """Append a finished trial with its results and samples, inside the caller's transaction."""
        seq = int(db.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM trials WHERE study_id=?",
                             (study_id,)).fetchone()[0])
        trial_id = db.execute(
            "INSERT INTO trials(study_id, arm_id, seq, model, workload, argv_json, status, exit_code,"
            " message, stderr_tail, started_at, ended_at, t0_ns, t1_ns, env_json)"
            " SELECT ?, id, ?, ?, '', '[]', ?,?,?,?,?,?,?,?,? FROM arms WHERE study_id=? AND name=?",
            (study_id, seq, model, out.status, out.exit_code, out.message, out.stderr_tail,
             out.started_at, out.ended_at, out.t0_ns, out.t1_ns, json.dumps(out.env), study_id, arm),
        ).lastrowid
        if trial_id is None or db.execute("SELECT changes()").fetchone()[0] != 1:
            raise ValueError(f"study {study_id} has no arm {arm!r}")
        Store._insert_outcome_rows(db, trial_id, out)

    @staticmethod
    def _insert_outcome_rows(db: sqlite3.Connection, trial_id: int, out: TrialOutcome) -> None:
        """A finished trial's results, samples, windows, timeline and warnings (caller's transaction).

        The timeline goes in with INSERT OR IGNORE: rows committed while the trial ran
        (LiveTimeline) are already there.
        """
        for r in out.results:
            rid = db.execute(
                "INSERT INTO results(trial_id, test_idx, test, n_prompt, n_gen, n_depth,"
                " avg_ts, stddev_ts, raw_json) VALUES (?,?,?,?,?,?,?,?,?)",
                (trial_id, r.test_idx, r.test, r.n_prompt, r.n_gen, r.n_depth, r.avg_ts,
                 r.stddev_ts, json.dumps(r.raw)),
            ).lastrowid
            db.executemany(
                "INSERT INTO samples(result_id, rep, duration_ns, tokens, tokens_per_s, n_prompt, n_gen,"
                " start_ns, end_ns, ttft_ns, metrics_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [(rid, s.rep, s.duration_ns, s.tokens, s.tokens_per_s,
                  r.n_prompt if s.n_prompt is None else s.n_prompt, r.n_gen if s.n_gen is None else s.n_gen,
                  s.start_ns, s.end_ns, s.ttft_ns, json.dumps(s.metrics) if s.metrics else None)
                 for s in r.samples],
            )
        db.executemany(
            "INSERT INTO windows(trial_id, test_idx, rep, start_ns, end_ns, cpu_ms, counters_json)"
            " VALUES (?,?,?,?,?,?,?)",
            [(trial_id, w.test_idx, w.rep, w.start_ns, w.end_ns, w.cpu_ms,
              json.dumps(w.counters) if w.counters else None) for w in out.windows],
        )
        db.executemany(
            "INSERT OR IGNORE INTO timeline(trial_id, t_ns, values_json) VALUES (?,?,?)",
            [(trial_id, t, json.dumps(v)) for t, v in out.timeline],
        )
        db.executemany(
            "INSERT INTO warnings(trial_id, code, detail) VALUES (?,?,?)",
            [(trial_id, c, d) for c, d in out.warnings],
        )

    # -- reading back ------------------------------------------------------------

    def results(self, study_id: str) -> list[sqlite3.Row]:
        """One row per (trial, test) of the study's finished trials."""
        return self.db.execute(
            "SELECT r.*, t.id AS trial_id, t.seq, t.model, t.workload, a.name AS arm, t.env_json"
            " FROM results r JOIN trials t ON t.id=r.trial_id JOIN arms a ON a.id=t.arm_id"
            " WHERE t.study_id=? AND t.status='done' ORDER BY t.seq, r.test_idx",
            (study_id,),
        ).fetchall()

    def samples(self, result_id: int) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT * FROM samples WHERE result_id=? ORDER BY rep", (result_id,)
        ).fetchall()

    def windows(self, trial_id: int) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT * FROM windows WHERE trial_id=? ORDER BY test_idx, rep", (trial_id,)
        ).fetchall()

    def trial_stats(self, study_id: str) -> list[sqlite3.Row]:
        """Per finished trial and test: mean t/s, sample count, CPU ms and tokens in windows."""
        return self.db.execute(
            "SELECT t.id AS trial_id, t.seq, t.pair, t.model, t.workload, t.t0_ns, t.t1_ns,"
            " a.name AS arm, r.test, r.test_idx,"
            " AVG(s.tokens_per_s) AS mean_ts, COUNT(s.id) AS n,"
            " (SELECT SUM(w.cpu_ms) FROM windows w WHERE w.trial_id=t.id AND w.test_idx=r.test_idx) AS cpu_ms,"
            " SUM(s.tokens) AS tokens"
            " FROM trials t JOIN arms a ON a.id=t.arm_id JOIN results r ON r.trial_id=t.id"
            " JOIN samples s ON s.result_id=r.id"
            " WHERE t.study_id=? AND t.status='done' GROUP BY r.id ORDER BY t.seq, r.test_idx",
            (study_id,),
        ).fetchall()

    def done_samples(self, study_id: str) -> list[sqlite3.Row]:
        """Every timed repetition (t/s > 0) of the study's finished trials, in trial, test and
        repetition order, with its trial's arm, cell and clock and its result's test and raw row."""
        return self.db.execute(
            "SELECT t.id AS trial, a.name AS arm, t.model, t.workload, t.started_at, t.t0_ns, t.t1_ns,"
            " r.test, r.test_idx, r.raw_json, s.tokens_per_s, s.duration_ns"
            " FROM trials t JOIN arms a ON a.id=t.arm_id JOIN results r ON r.trial_id=t.id"
            " JOIN samples s ON s.result_id=r.id WHERE t.study_id=? AND t.status='done' AND s.tokens_per_s > 0"
            " ORDER BY t.id, r.test_idx, s.rep",
            (study_id,)).fetchall()

    def activity(self, study_id: str) -> tuple[list[Any], int, list[Any]]:
        """What moves while a study runs: its trials' (count, last end, done count), its warnings'
        count, and its state's (count, sizes) — a page is rendered again when any of them moved."""
        trials = self.db.execute("SELECT COUNT(*), MAX(ended_at), SUM(status='done') FROM trials WHERE study_id=?",
                                 (study_id,)).fetchone()
        warnings = self.db.execute("SELECT COUNT(*) FROM warnings w JOIN trials t ON t.id=w.trial_id"
                                   " WHERE t.study_id=?", (study_id,)).fetchone()[0]
        state = self.db.execute("SELECT COUNT(*), GROUP_CONCAT(length(value_json)) FROM state WHERE study_id=?",
                                (study_id,)).fetchone()
        return list(trials), int(warnings), list(state)

    def engine_seconds(self, study_id: str) -> float:
        row = self.db.execute(
            "SELECT COALESCE(SUM(t1_ns - t0_ns), 0) FROM trials WHERE study_id=? AND t1_ns IS NOT NULL",
            (study_id,),
        ).fetchone()
        return float(row[0]) / 1e9

    def timeline(self, trial_id: int) -> list[tuple[int, dict[str, float]]]:
        return [(int(r["t_ns"]), json.loads(r["values_json"])) for r in self.db.execute(
            "SELECT t_ns, values_json FROM timeline WHERE trial_id=? ORDER BY t_ns", (trial_id,))]

    def warnings(self, study_id: str) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT w.*, a.name AS arm, t.model, t.workload FROM warnings w"
            " JOIN trials t ON t.id=w.trial_id JOIN arms a ON a.id=t.arm_id WHERE t.study_id=?"
            " ORDER BY t.seq", (study_id,)).fetchall()

    def put_state(self, study_id: str, key: str, value: Any) -> None:
        with self.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO state(study_id, key, value_json) VALUES (?,?,?)",
                (study_id, key, json.dumps(value)),
            )

    def get_state(self, study_id: str, key: str, default: Any = None) -> Any:
        row = self.db.execute(
            "SELECT value_json FROM state WHERE study_id=? AND key=?", (study_id, key)
        ).fetchone()
        return default if row is None else json.loads(row["value_json"])
