"""The Store: a study store opened and closed, and the parts it holds, each with its own state:
the open file (:class:`~tokensleuth.store.database.Database`), the study leases
(:class:`~tokensleuth.store.leases.Leases`), the queries (:class:`~tokensleuth.store.reads.Reads`),
the writes (:class:`~tokensleuth.store.writes.Writes`) and each study's own state
(:class:`~tokensleuth.store.state.StudyState`)."""

from __future__ import annotations

import sqlite3
from contextlib import suppress
from pathlib import Path

from tokensleuth.store.database import Database
from tokensleuth.store.files import translate
from tokensleuth.store.leases import Leases
from tokensleuth.store.reads import Reads
from tokensleuth.store.state import StudyState
from tokensleuth.store.writes import Writes


class Store:
    """A connection to the study store. Caller-owned; close it (or use ``with``).

    Callers ask its parts: ``store.reads.trials(sid)``, ``store.writes.finish_trials(done)``,
    ``with store.leases.hold(sid):``, ``store.state.get(sid, key)``.

    ``with Store(path) as store:`` is also the boundary where SQLite's errors about the
    file or the disk (inside the block too) become one-line UserError/EngineError.
    """

    def __init__(self, path: Path, *, proc_root: Path = Path("/proc")) -> None:
        self.path = path
        self.database = Database(path)
        self.leases = Leases(self.database, proc_root)
        self.reads = Reads(self.database)
        self.writes = Writes(self.database, self.leases.me.boot_id)
        self.state = StudyState(self.database)

    @property
    def db(self) -> sqlite3.Connection:
        """The SQLite connection, for SQL of one's own (tests, bench scripts, the SQL tools)."""
        return self.database.db

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
        self.database.close()
