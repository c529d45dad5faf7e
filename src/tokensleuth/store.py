"""The study store: SQLite in WAL mode, one transaction per finished trial.

Every sample is committed together with the status change of its trial, so a
trial is either wholly stored (``done``) or not at all. One process at a time runs
a study: it holds the study's lease (pid, boot id, host). A trial found ``running``
when the lease is taken belonged to a holder that died: it is put back to
``planned``, and when it was started under another boot (the machine froze or
rebooted) it is first recorded as ``machine-lost``. That is the whole resume story:
rerunning a study executes the trials still planned.

SQLite's own errors (full disk, read-only or damaged file) become one-line
UserError/EngineError in one place, :func:`store_errors`.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import shutil
import socket
import sqlite3
import stat
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokensleuth.errors import EngineError, Interrupted, UserError

SCHEMA_VERSION = 4
# PRAGMA application_id of a tokensleuth store ("tksl"); set from schema 2 on.
APPLICATION_ID = 1953198956
# The tables a store of any schema version has: a database without them is another program's.
CORE_TABLES = frozenset({"studies", "arms", "trials", "results", "samples"})

# Numbered migrations: MIGRATIONS[i] takes a database from version i to i+1.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE studies (
        id          TEXT PRIMARY KEY,
        kind        TEXT NOT NULL,          -- bench | compare | import | bisect | decompose
        spec_hash   TEXT NOT NULL,
        spec_json   TEXT NOT NULL,
        status      TEXT NOT NULL,          -- running | done | failed
        created_at  REAL NOT NULL,
        finished_at REAL
    );
    CREATE TABLE arms (
        id          INTEGER PRIMARY KEY,
        study_id    TEXT NOT NULL REFERENCES studies(id),
        name        TEXT NOT NULL,
        source      TEXT NOT NULL,
        engine_json TEXT NOT NULL,          -- commit, build_number, flags, compiler, backends
        flags_json  TEXT NOT NULL,          -- engine argv additions of this arm
        env_json    TEXT NOT NULL,          -- environment variables of this arm
        UNIQUE (study_id, name)
    );
    CREATE TABLE trials (
        id          INTEGER PRIMARY KEY,
        study_id    TEXT NOT NULL REFERENCES studies(id),
        arm_id      INTEGER NOT NULL REFERENCES arms(id),
        seq         INTEGER NOT NULL,       -- position in the plan
        pair        INTEGER NOT NULL DEFAULT -1,  -- compare: pair index within its cell
        model       TEXT NOT NULL,
        workload    TEXT NOT NULL,          -- '' = all of the arm's llama-bench tests
        argv_json   TEXT NOT NULL,
        status      TEXT NOT NULL,          -- planned|running|done|failed|crashed|timeout|garbage
        exit_code   INTEGER,
        message     TEXT,
        stderr_tail TEXT,
        started_at  REAL,                   -- wall clock, epoch seconds
        ended_at    REAL,
        t0_ns       INTEGER,                -- monotonic clock at spawn
        t1_ns       INTEGER,                -- monotonic clock at exit
        env_json    TEXT,                   -- host, governor, versions at run time
        UNIQUE (study_id, seq)
    );
    CREATE TABLE results (
        id          INTEGER PRIMARY KEY,
        trial_id    INTEGER NOT NULL REFERENCES trials(id),
        test_idx    INTEGER NOT NULL,
        test        TEXT NOT NULL,          -- llama-bench name: pp512, tg128, pp512@d4096
        n_prompt    INTEGER NOT NULL,
        n_gen       INTEGER NOT NULL,
        n_depth     INTEGER NOT NULL,
        avg_ts      REAL,
        stddev_ts   REAL,
        raw_json    TEXT NOT NULL,
        UNIQUE (trial_id, test_idx)
    );
    CREATE TABLE samples (
        id          INTEGER PRIMARY KEY,
        result_id   INTEGER NOT NULL REFERENCES results(id),
        rep         INTEGER NOT NULL,
        duration_ns INTEGER NOT NULL,
        tokens      INTEGER NOT NULL,
        tokens_per_s REAL NOT NULL,
        UNIQUE (result_id, rep)
    );
    CREATE TABLE windows (
        id          INTEGER PRIMARY KEY,
        trial_id    INTEGER NOT NULL REFERENCES trials(id),
        test_idx    INTEGER NOT NULL,
        rep         INTEGER NOT NULL,
        start_ns    INTEGER NOT NULL,       -- monotonic clock, same as trials.t0_ns
        end_ns      INTEGER NOT NULL,
        cpu_ms      REAL,                   -- engine process-tree CPU time in the window
        counters_json TEXT,                 -- other counter deltas (energy J) over the window
        UNIQUE (trial_id, test_idx, rep)
    );
    CREATE TABLE timeline (
        trial_id    INTEGER NOT NULL REFERENCES trials(id),
        t_ns        INTEGER NOT NULL,       -- monotonic clock, same as trials.t0_ns
        values_json TEXT NOT NULL,          -- sampled power W, clocks MHz, busy %, memory MB
        PRIMARY KEY (trial_id, t_ns)
    );
    CREATE TABLE warnings (
        trial_id    INTEGER NOT NULL REFERENCES trials(id),
        code        TEXT NOT NULL,
        detail      TEXT NOT NULL
    );
    CREATE TABLE state (
        study_id    TEXT NOT NULL REFERENCES studies(id),
        key         TEXT NOT NULL,
        value_json  TEXT NOT NULL,
        PRIMARY KEY (study_id, key)
    );
    CREATE INDEX trials_study ON trials(study_id, status);
    CREATE INDEX results_trial ON results(trial_id);
    """,
    # 2: the study lease (one runner per study) and the boot a running trial started under.
    """
    CREATE TABLE leases (
        study_id    TEXT PRIMARY KEY REFERENCES studies(id),
        pid         INTEGER NOT NULL,
        pid_start   INTEGER,                -- /proc/PID/stat start time: a reused pid differs
        boot_id     TEXT NOT NULL,          -- /proc/sys/kernel/random/boot_id of the holder
        host        TEXT NOT NULL,
        since       REAL NOT NULL           -- wall clock, epoch seconds
    );
    ALTER TABLE trials ADD COLUMN boot_id TEXT;
    PRAGMA application_id = 1953198956
    """,
    # 3: engine kinds. An arm names the engine that ran it; a sample is one timed unit of
    # any engine (a llama-bench repetition, or a request to a server) with its own token
    # counts, its client-side timestamps and, for a streamed request, its time to first
    # token and inter-token latencies. llama-bench samples get their counts from their result.
    """
    ALTER TABLE arms ADD COLUMN kind TEXT NOT NULL DEFAULT 'llama-bench';
    ALTER TABLE samples ADD COLUMN n_prompt INTEGER;
    ALTER TABLE samples ADD COLUMN n_gen INTEGER;
    ALTER TABLE samples ADD COLUMN start_ns INTEGER;
    ALTER TABLE samples ADD COLUMN end_ns INTEGER;
    ALTER TABLE samples ADD COLUMN ttft_ns INTEGER;
    ALTER TABLE samples ADD COLUMN metrics_json TEXT;
    UPDATE samples SET n_prompt = (SELECT r.n_prompt FROM results r WHERE r.id = samples.result_id),
                       n_gen = (SELECT r.n_gen FROM results r WHERE r.id = samples.result_id)
    """,
    # 4: the fleet. A trial handed to a worker machine names it (NULL: run by the driver
    # itself); one that never came back is known by it on --resume.
    """
    ALTER TABLE trials ADD COLUMN node TEXT
    """,
]

TRIAL_STATUSES = ("planned", "running", "done", "failed", "crashed", "timeout", "garbage")
# running: being run (or its runner died); interrupted: stopped by SIGINT/SIGTERM; both resume.
STUDY_STATUSES = ("running", "interrupted", "done", "failed")
UNFINISHED = ("running", "interrupted")
MACHINE_LOST = "machine-lost"
NODE_LOST = "node-lost"  # a worker machine died during the trial; the trial runs again
HANDED_OUT = "handed-out"  # a trial handed to a worker never came back before the driver stopped

# SQLite primary result codes (sqlite3.h) that say something about the file or the disk,
# not about tokensleuth's SQL; anything else (a constraint, a misuse) is a bug and keeps
# its traceback.
_SQLITE_PERM, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 3, 5, 6, 8
_SQLITE_IOERR, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN = 10, 11, 13, 14
_SQLITE_NOTADB, _SQLITE_AUTH = 26, 23


def _disk_full(path: Path) -> bool:
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
        if code == _SQLITE_FULL or (code in (_SQLITE_IOERR, _SQLITE_CANTOPEN) and _disk_full(path)):
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
        if code == _SQLITE_IOERR:
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


def _unwritable(path: Path) -> bool:
    """A store file that exists but that SQLite may not write beside (its -wal and -shm)."""
    wal = path.with_name(path.name + "-wal")
    no_wal = not wal.exists() or wal.stat().st_size == 0
    writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    return path.is_file() and no_wal and not writable


# Store files this process has open (device, inode) -> connections. Closing any descriptor
# of a file drops every POSIX lock the process holds on it, SQLite's included: once a store
# is open here (another thread's Store), nothing but SQLite may open and close the file.
_OPEN_HERE: dict[tuple[int, int], int] = {}
_OPEN_LOCK = threading.Lock()


def _check_path(path: Path) -> None:
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
    with _OPEN_LOCK:
        if _OPEN_HERE.get((st.st_dev, st.st_ino)):
            return  # checked when it was first opened; reading it now would unlock it (above)
    with open(path, "rb") as fh:
        if fh.read(16) != b"SQLite format 3\x00":
            raise UserError(f"{path} is not a tokensleuth database — {fix}")


# -- who runs a study -------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _pid_start(proc_root: Path, pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks after boot (field 22 of /proc/PID/stat)."""
    text = _read(proc_root / str(pid) / "stat")
    if text is None:
        return None
    try:
        return int(text.rsplit(")", 1)[1].split()[19])  # fields after "(comm)" start at field 3
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Holder:
    """A process that runs (or ran) a study: the fields of a lease row."""

    pid: int
    pid_start: int | None
    boot_id: str
    host: str
    since: float

    def describe(self) -> str:
        when = dt.datetime.fromtimestamp(self.since).strftime("%Y-%m-%d %H:%M:%S")
        return f"pid {self.pid} on {self.host} since {when}"


def this_process(proc_root: Path = Path("/proc")) -> Holder:
    pid = os.getpid()
    boot = (_read(proc_root / "sys/kernel/random/boot_id") or "").strip()
    return Holder(pid, _pid_start(proc_root, pid), boot, socket.gethostname(), time.time())


def _alive(h: Holder, me: Holder, proc_root: Path) -> bool:
    """Whether the lease holder ``h`` still runs, seen from ``me``.

    Another boot means the holder died with its machine (a boot id is the only
    identity that survives a reboot; a pid does not). On the same boot, a pid that is
    gone, a zombie, or whose start time differs (the pid was reused) is dead.
    """
    if h.boot_id != me.boot_id:
        return False
    text = _read(proc_root / str(h.pid) / "stat")
    if text is None:
        if (proc_root / "self").exists():
            return False  # /proc works and the pid has no entry: gone
        try:
            os.kill(h.pid, 0)  # no /proc: ask the kernel
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = text.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):
        return False
    return h.pid_start is None or _pid_start(proc_root, h.pid) == h.pid_start


@dataclass(frozen=True, slots=True)
class LostTrial:
    """A trial left ``running`` under another boot: the machine froze or rebooted during it."""

    trial_id: int
    seq: int
    arm: str
    model: str
    workload: str
    started_at: float | None
    boot_id: str
    readings: dict[str, float]  # its last stored timeline values ({} when none were stored)

    def detail(self) -> str:
        when = ("at " + dt.datetime.fromtimestamp(self.started_at).strftime("%Y-%m-%d %H:%M:%S")
                if self.started_at else "")
        last = (", ".join(f"{k} {v:g}" for k, v in sorted(self.readings.items()))
                if self.readings else "none stored")
        return (f"machine lost during this trial (trial {self.seq}, {Path(self.model).name} "
                f"{self.workload or 'all tests'}, started {when} under boot {self.boot_id[:8]}, "
                f"which has ended); last readings: {last}; the trial is run again")


class LiveTimeline:
    """Commits a running trial's sampled readings every ``every_s`` seconds.

    Called from the sampler thread with the timeline so far; it writes the rows not yet
    written through a connection of its own (an SQLite connection belongs to the thread
    that opened it; WAL lets it write beside the runner's). The trial's final commit
    inserts the same rows with INSERT OR IGNORE, so nothing is stored twice. What this
    buys: a machine that freezes mid-trial leaves the trial's last readings in the store.
    """

    def __init__(self, path: Path, trial_id: int, every_s: float = 2.0) -> None:
        self.path = path
        self.trial_id = trial_id
        self.every_s = every_s
        self._written = 0
        self._last = time.monotonic()
        self._db: sqlite3.Connection | None = None

    def __call__(self, timeline: Sequence[tuple[int, dict[str, float]]]) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s or len(timeline) <= self._written:
            return
        self._last = now
        if self._db is None:
            # made in the sampler thread, closed by the runner once the sampler has stopped
            self._db = sqlite3.connect(self.path, timeout=1.0, check_same_thread=False)
        rows = timeline[self._written:]
        with self._db:
            self._db.executemany("INSERT OR IGNORE INTO timeline(trial_id, t_ns, values_json) VALUES (?,?,?)",
                                 [(self.trial_id, t, json.dumps(v)) for t, v in rows])
        self._written += len(rows)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


@dataclass(frozen=True, slots=True)
class StudyHandle:
    """What :meth:`Store.begin_study` found or made."""

    id: str
    resumed: bool  # an unfinished study of this spec goes on
    finished: bool  # this spec's latest study already finished: read it, there is nothing to run
    status: str


@dataclass(frozen=True, slots=True)
class Lease:
    """The study lock held by this process; ``lost`` were found on taking it."""

    study_id: str
    lost: tuple[LostTrial, ...] = ()


@dataclass(frozen=True, slots=True)
class SampleRow:
    """One timed unit: a llama-bench repetition, or a request (or a group of concurrent ones)."""

    rep: int
    duration_ns: int
    tokens: int  # the tokens the rate counts: tokens / duration is the sample's t/s
    n_prompt: int | None = None
    n_gen: int | None = None
    start_ns: int | None = None  # monotonic clock (trials.t0_ns's): request sent
    end_ns: int | None = None  # last token received
    ttft_ns: int | None = None  # time to first token, client side
    metrics: dict[str, Any] = field(default_factory=dict)  # itl_ms percentiles, server timings …

    @property
    def tokens_per_s(self) -> float:
        return self.tokens * 1e9 / self.duration_ns


@dataclass(frozen=True, slots=True)
class WindowRow:
    test_idx: int
    rep: int
    start_ns: int
    end_ns: int
    cpu_ms: float | None = None
    counters: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResultRow:
    test_idx: int
    test: str
    n_prompt: int
    n_gen: int
    n_depth: int
    avg_ts: float | None
    stddev_ts: float | None
    raw: dict[str, Any]
    samples: tuple[SampleRow, ...]


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """Everything a finished trial leaves behind; written in one transaction."""

    status: str
    exit_code: int | None
    message: str
    stderr_tail: str
    started_at: float
    ended_at: float
    t0_ns: int
    t1_ns: int
    env: dict[str, Any]
    results: tuple[ResultRow, ...] = ()
    windows: tuple[WindowRow, ...] = ()
    timeline: tuple[tuple[int, dict[str, float]], ...] = ()
    warnings: tuple[tuple[str, str], ...] = ()  # (code, detail)

    def __post_init__(self) -> None:
        if self.status not in TRIAL_STATUSES or self.status in ("planned", "running"):
            raise ValueError(f"not a final trial status: {self.status!r}")
        if self.t1_ns < self.t0_ns:
            raise ValueError("trial ends before it starts")


@dataclass(frozen=True, slots=True)
class PlannedTrial:
    arm: str
    model: str
    workload: str
    argv: tuple[str, ...]
    pair: int = -1


def _holder(row: sqlite3.Row) -> Holder:
    return Holder(int(row["pid"]), row["pid_start"], str(row["boot_id"]), str(row["host"]),
                  float(row["since"]))


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
            _check_path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            if _unwritable(path):
                self._open_read_only()
            else:
                for attempt in range(4):
                    try:
                        self.db = self._open(sqlite3.connect(path, timeout=30, isolation_level=None))
                        break
                    except sqlite3.OperationalError as exc:
                        if _unwritable(path):  # e.g. the folder turned out read-only
                            self._open_read_only()
                            break
                        # A connection opened beside others of this process (a thread's) has
                        # met a transient disk I/O error while the log was being reset; try again.
                        code = int(getattr(exc, "sqlite_errorcode", -1)) & 0xFF
                        if code != _SQLITE_IOERR or attempt == 3 or _disk_full(path):
                            raise
                        time.sleep(0.2 * (attempt + 1))
            st = path.stat()
            self._inode: tuple[int, int] | None = (st.st_dev, st.st_ino)
            with _OPEN_LOCK:
                _OPEN_HERE[self._inode] = _OPEN_HERE.get(self._inode, 0) + 1

    def _open_read_only(self) -> None:
        """Open a store that may not be written (read-only disk or folder, immutable file).

        SQLite could not create its -shm file beside it (or would leave one behind), so
        the file is opened immutable: reading works, a write is a one-line "read-only"
        error. Safe only when no -wal file holds unmerged commits (see _unwritable).
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
            with _OPEN_LOCK:
                _OPEN_HERE[inode] -= 1
                if not _OPEN_HERE[inode]:
                    del _OPEN_HERE[inode]

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
        return None if row is None else _holder(row)

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
        h = _holder(row)
        mine = (h.pid, h.boot_id, h.pid_start) == (self.me.pid, self.me.boot_id, self.me.pid_start)
        if not mine and _alive(h, self.me, self.proc_root):
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

    def study(self, study_id: str) -> sqlite3.Row:
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
        row: sqlite3.Row = rows[0]
        return row

    def studies(self) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT s.*, (SELECT COUNT(*) FROM trials t WHERE t.study_id=s.id) AS n_trials,"
            " (SELECT COUNT(*) FROM trials t WHERE t.study_id=s.id AND t.status='done') AS n_done"
            " FROM studies s ORDER BY created_at"
        ).fetchall()

    def arms(self, study_id: str) -> list[sqlite3.Row]:
        return self.db.execute(
            "SELECT * FROM arms WHERE study_id=? ORDER BY id", (study_id,)
        ).fetchall()

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
