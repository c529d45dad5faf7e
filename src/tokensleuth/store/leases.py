"""Who runs a study: the holder of its lease (pid, its start time, boot id, host), and
whether that holder still lives."""

from __future__ import annotations

import datetime as dt
import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path


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
    return h.pid_start is None or _pid_start(proc_root, h.pid) == h.pid_start



def holder_of(row: sqlite3.Row) -> Holder:
    return Holder(int(row["pid"]), row["pid_start"], str(row["boot_id"]), str(row["host"]),
                  float(row["since"]))
