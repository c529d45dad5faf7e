"""Processes that open one new store at the same instant: each migrates under the write lock, so
none finds the tables another has just made ("table … already exists")."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

OPEN = """
import sys, time
from pathlib import Path
from tokensleuth.store import Store
start = float(sys.argv[2])
while time.time() < start:
    pass
with Store(Path(sys.argv[1])) as s:
    s.reads.studies()
"""


def test_processes_opening_a_new_store_together_all_open_it(tmp_path: Path) -> None:
    for round_ in range(6):
        db = tmp_path / f"s{round_}.db"
        start = time.time() + 1.5  # every process waits, already imported, for the same instant
        procs = [subprocess.Popen([sys.executable, "-c", OPEN, str(db), str(start)], stderr=subprocess.PIPE,
                                  text=True) for _ in range(5)]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert all(p.returncode == 0 for p in procs), [e[-400:] for e in errors if e]


def test_a_store_created_by_another_process_during_the_write_check_is_writable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the processes above met now and then: the file did not exist when its write
    permission was asked (so "no"), and did when its existence was asked, so a new store read as
    read-only. Here the other process creates the file right after the first permission check."""
    import os
    import sqlite3

    from tokensleuth.store import files

    db = tmp_path / "new.db"
    real_access = os.access

    def access_then_created(p: str | Path, mode: int) -> bool:
        answer = real_access(p, mode)
        sqlite3.connect(db).close()  # the other process: SQLite makes the file, empty, writable
        return answer

    monkeypatch.setattr(os, "access", access_then_created)
    assert not files.unwritable(db)
