"""Who runs a study: the holder of its lease (pid, its start time, boot id, host), whether that
holder still lives, and :class:`Leases`, a Store's part that takes and releases them and
recovers what a dead holder left ``running``."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tokensleuth.core.errors import Interrupted, UserError
from tokensleuth.core.records import HANDED_OUT, MACHINE_LOST, Lease, LostTrial
from tokensleuth.store.database import Database


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def process_start(proc_root: Path, pid: int) -> int | None:
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
    return Holder(pid, process_start(proc_root, pid), boot, socket.gethostname(), time.time())


def alive(h: Holder, me: Holder, proc_root: Path) -> bool:
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
    return h.pid_start is None or process_start(proc_root, h.pid) == h.pid_start


def holder_of(row: sqlite3.Row) -> Holder:
    return Holder(int(row["pid"]), row["pid_start"], str(row["boot_id"]), str(row["host"]),
                  float(row["since"]))


class Leases:
    """A Store's study leases: which process runs each study, held by this one while it runs it."""

    def __init__(self, database: Database, proc_root: Path = Path("/proc")) -> None:
        self.database = database
        self.proc_root = proc_root
        self.me = this_process(proc_root)
        self._held: dict[str, int] = {}  # study id -> nesting depth of this process's leases

    @contextmanager
    def hold(self, study_id: str) -> Iterator[Lease]:
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
            with self.database.tx() as db:
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
        row = self.database.db.execute("SELECT * FROM leases WHERE study_id=?", (study_id,)).fetchone()
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
            with self.database.tx() as db:
                db.execute("DELETE FROM leases WHERE study_id=? AND pid=? AND boot_id=?",
                           (study_id, self.me.pid, self.me.boot_id))

    def _interrupted(self, study_id: str) -> None:
        with suppress(sqlite3.Error):
            if self.database.db.in_transaction:  # the signal landed inside a transaction
                self.database.db.execute("ROLLBACK")
            with self.database.tx() as db:
                db.execute("UPDATE trials SET status='planned', started_at=NULL, boot_id=NULL"
                           " WHERE study_id=? AND status='running'", (study_id,))
                db.execute("UPDATE studies SET status='interrupted' WHERE id=? AND status='running'",
                           (study_id,))

    def recover(self, study_id: str) -> int:
        """Put trials left ``running`` by a dead runner back to ``planned``; return how many.

        Refuses (UserError) while another live process holds the study's lease.
        """
        with self.database.tx() as db:
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
