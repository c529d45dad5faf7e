"""The store: schema versioning, one transaction per trial, recovery of killed trials."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tokensleuth.errors import UserError
from tokensleuth.store import SCHEMA_VERSION, PlannedTrial, ResultRow, SampleRow, Store, TrialOutcome


def _outcome(n: int = 3) -> TrialOutcome:
    r = ResultRow(0, "tg16", 0, 16, 0, 100.0, 1.0, {"samples_ns": [1] * n},
                  tuple(SampleRow(i, 160_000_000, 16) for i in range(n)))
    return TrialOutcome("done", 0, "", "", 0.0, 1.0, 10, 20, {}, (r,), ())


def _study(s: Store, n: int = 2) -> str:
    return s.create_study("bench", {"x": 1}, "h", [("a", "src", {}, (), {})],
                          [PlannedTrial("a", "m.gguf", "", ())] * n)


def test_schema_version_recorded(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_newer_schema_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "s.db"
    Store(p).close()
    con = sqlite3.connect(p)
    con.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    con.close()
    with pytest.raises(UserError, match="newer than this tokensleuth"):
        Store(p)


def test_not_a_database(tmp_path: Path) -> None:
    p = tmp_path / "s.db"
    p.write_text("hello")
    with pytest.raises(UserError, match="not a tokensleuth database"):
        Store(p)
    assert p.read_text() == "hello"


def test_trial_stored_once_with_samples(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        sid = _study(s)
        t = s.planned(sid)[0]
        s.mark_running(t["id"])
        s.finish_trial(t["id"], _outcome())
        with pytest.raises(RuntimeError, match="twice"):
            s.finish_trial(t["id"], _outcome())
        assert len(s.results(sid)) == 1
        assert s.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 3


def test_recover_puts_running_back_to_planned(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        sid = _study(s, 3)
        first = s.planned(sid)[0]
        s.mark_running(first["id"])
        assert len(s.planned(sid)) == 2
        assert s.recover(sid) == 1
        assert [t["seq"] for t in s.planned(sid)] == [0, 1, 2]


def test_outcome_validation() -> None:
    with pytest.raises(ValueError):
        TrialOutcome("running", 0, "", "", 0.0, 1.0, 0, 1, {})
    with pytest.raises(ValueError):
        TrialOutcome("done", 0, "", "", 0.0, 1.0, 5, 1, {})
