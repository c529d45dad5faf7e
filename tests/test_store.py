"""The store: schema versioning, one transaction per trial, recovery of killed trials."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tokensleuth.core.errors import Interrupted, UserError
from tokensleuth.store import (
    MACHINE_LOST,
    SCHEMA_VERSION,
    PlannedTrial,
    ResultRow,
    SampleRow,
    Store,
    StudyHandle,
    TrialOutcome,
)
from tokensleuth.store.leases import process_start


def _outcome(n: int = 3) -> TrialOutcome:
    r = ResultRow(0, "tg16", 0, 16, 0, 100.0, 1.0, {"samples_ns": [1] * n},
                  tuple(SampleRow(i, 160_000_000, 16) for i in range(n)))
    return TrialOutcome("done", 0, "", "", 0.0, 1.0, 10, 20, {}, (r,), ())


def _study(s: Store, n: int = 2) -> str:
    return s.writes.create_study("bench", {"x": 1}, "h", [("a", "src", {}, (), {})],
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
        t = s.reads.planned(sid)[0]
        s.writes.mark_running(t["id"])
        s.writes.finish_trial(t["id"], _outcome())
        with pytest.raises(RuntimeError, match="twice"):
            s.writes.finish_trial(t["id"], _outcome())
        assert len(s.reads.results(sid)) == 1
        assert s.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 3


def test_recover_puts_running_back_to_planned(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        sid = _study(s, 3)
        first = s.reads.planned(sid)[0]
        s.writes.mark_running(first["id"])
        assert len(s.reads.planned(sid)) == 2
        assert s.leases.recover(sid) == 1
        assert [t["seq"] for t in s.reads.planned(sid)] == [0, 1, 2]


def test_outcome_validation() -> None:
    with pytest.raises(ValueError):
        TrialOutcome("running", 0, "", "", 0.0, 1.0, 0, 1, {})
    with pytest.raises(ValueError):
        TrialOutcome("done", 0, "", "", 0.0, 1.0, 5, 1, {})


# -- schema migration ------------------------------------------------------------------


def test_schema_1_store_opens_and_migrates(tmp_path: Path) -> None:
    from tokensleuth.store import MIGRATIONS

    p = tmp_path / "old.db"
    con = sqlite3.connect(p)
    con.executescript(MIGRATIONS[0])
    con.execute("PRAGMA user_version=1")
    con.execute("INSERT INTO studies VALUES ('abc', 'bench', 'h', '{}', 'running', 1.0, NULL)")
    con.commit()
    con.close()
    with Store(p) as s:
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
        assert s.reads.study("abc")["status"] == "running"
        assert s.leases.holder("abc") is None  # the lease table exists
        assert {"boot_id", "node"} <= {r[1] for r in s.db.execute("PRAGMA table_info(trials)")}


# -- study ids ---------------------------------------------------------------------------


def test_study_prefix_is_literal_not_a_like_pattern(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        a, b = (s.writes.create_study("bench", {}, "h", [], []) for _ in range(2))
        s.db.execute("UPDATE studies SET id='a9x' WHERE id=?", (a,))
        s.db.execute("UPDATE studies SET id='b9y' WHERE id=?", (b,))
        for pattern in ("_9", "%", "a%", "_"):
            with pytest.raises(UserError, match="no study"):
                s.reads.study(pattern)
        assert s.reads.study("a9")["id"] == "a9x"
        with pytest.raises(UserError, match="empty"):
            s.reads.study("")


# -- find or create ------------------------------------------------------------------------


def _begin(s: Store, resume: bool, spec_hash: str = "h") -> StudyHandle:
    return s.writes.begin_study("bench", {"x": 1}, spec_hash, resume=resume, arms=[("a", "src", {}, (), {})],
                         plan=[PlannedTrial("a", "m.gguf", "", ())] * 2)


def test_begin_study_resume_semantics(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        first = _begin(s, resume=True)  # killed before the study existed: it simply starts
        assert (first.resumed, first.finished) == (False, False)
        assert len(s.reads.planned(first.id)) == 2
        again = _begin(s, resume=True)
        assert (again.id, again.resumed, again.finished) == (first.id, True, False)
        fresh = _begin(s, resume=False)  # no --resume: a new study
        assert fresh.id != first.id
        s.writes.finish_study(fresh.id)
        done = _begin(s, resume=True)  # the latest of this spec finished: nothing to run
        assert (done.id, done.resumed, done.finished, done.status) == (fresh.id, False, True, "done")
        other = _begin(s, resume=True, spec_hash="other")
        assert other.id not in (first.id, fresh.id)


# -- the study lease -------------------------------------------------------------------------


@pytest.fixture()
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen(["sleep", "60"])
    yield p
    p.kill()
    p.wait()


def _hold(s: Store, sid: str, pid: int, boot: str | None = None, start: int | None = -1) -> None:
    """Write a lease row as another process would have."""
    pid_start = process_start(Path("/proc"), pid) if start == -1 else start
    s.db.execute("INSERT OR REPLACE INTO leases VALUES (?,?,?,?,?,?)",
                 (sid, pid, pid_start, boot or s.leases.me.boot_id, "otherhost", 1.7e9))


def test_live_holder_is_named_and_keeps_the_lease(tmp_path: Path, other_process: subprocess.Popen[bytes]) -> None:
    with Store(tmp_path / "s.db") as s:
        sid = _begin(s, resume=True).id
        _hold(s, sid, other_process.pid)
        with pytest.raises(UserError) as e:
            with s.leases.hold(sid):
                pytest.fail("two processes ran one study")
        msg = str(e.value)
        assert f"study {sid} is being run by pid {other_process.pid} on otherhost since " in msg
        assert "wait for it, or stop it" in msg
        # its in-flight trial is left alone, and recover() refuses too
        s.writes.mark_running(s.reads.planned(sid)[0]["id"])
        with pytest.raises(UserError, match="being run by"):
            s.leases.recover(sid)
        assert [t["status"] for t in s.reads.trials(sid)] == ["running", "planned"]
        holder = s.leases.holder(sid)
        assert holder is not None and holder.pid == other_process.pid


def test_dead_holder_lease_is_taken_over(tmp_path: Path, other_process: subprocess.Popen[bytes]) -> None:
    with Store(tmp_path / "s.db") as s:
        sid = _begin(s, resume=True).id
        _hold(s, sid, other_process.pid)
        s.writes.mark_running(s.reads.planned(sid)[0]["id"])
        other_process.kill()
        other_process.wait()
        with s.leases.hold(sid) as lease:
            held = s.leases.holder(sid)
            assert held is not None and held.pid == os.getpid()
            # a dead process of this boot: back to planned, as before, and no warning
            assert lease.lost == ()
            assert [t["status"] for t in s.reads.trials(sid)] == ["planned", "planned"]
            assert s.reads.warnings(sid) == []
        assert s.leases.holder(sid) is None  # released


@pytest.mark.parametrize("why", ["other-boot", "pid-reused"])
def test_stale_lease_of_a_live_pid(tmp_path: Path, other_process: subprocess.Popen[bytes], why: str) -> None:
    # the pid runs, but it is not the holder: the holder's boot ended, or the pid was reused
    with Store(tmp_path / "s.db") as s:
        sid = _begin(s, resume=True).id
        if why == "other-boot":
            _hold(s, sid, other_process.pid, boot="0" * 36)
        else:
            _hold(s, sid, other_process.pid, start=1)
        with s.leases.hold(sid):
            held = s.leases.holder(sid)
            assert held is not None and held.pid == os.getpid()


def test_machine_lost_trial_is_recorded_and_rerun(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        sid = _begin(s, resume=True).id
        lost_id, other_id = (t["id"] for t in s.reads.planned(sid))
        s.writes.mark_running(lost_id)
        s.db.execute("INSERT INTO timeline VALUES (?, 1, ?), (?, 2, ?)",
                     (lost_id, '{"cpu_busy_pct": 50.0}', lost_id, '{"cpu_busy_pct": 97.0, "mem_mb": 30100.0}'))
        # the machine rebooted: the trial and its lease belong to a boot that ended
        s.db.execute("UPDATE trials SET boot_id='dead-boot-0000' WHERE id=?", (lost_id,))
        _hold(s, sid, os.getpid() + 1_000_000, boot="dead-boot-0000")
        with s.leases.hold(sid) as lease:
            assert [t.trial_id for t in lease.lost] == [lost_id]
            assert lease.lost[0].readings == {"cpu_busy_pct": 97.0, "mem_mb": 30100.0}
            warn = s.reads.warnings(sid)
            assert [w["code"] for w in warn] == [MACHINE_LOST]
            assert "machine lost during this trial" in warn[0]["detail"]
            assert "last readings: cpu_busy_pct 97, mem_mb 30100" in warn[0]["detail"]
            assert "boot dead-boo" in warn[0]["detail"]
            # re-run, not silently reset: planned again, and its lost readings are no timeline of the rerun
            assert [t["id"] for t in s.reads.planned(sid)] == [lost_id, other_id]
            assert s.reads.timeline(lost_id) == []
            s.writes.mark_running(lost_id)
            s.writes.finish_trial(lost_id, _outcome())
        # the warning stays with the trial and is counted with the study
        assert [w["code"] for w in s.reads.warnings(sid)] == [MACHINE_LOST]
        assert s.reads.trials(sid)[0]["status"] == "done"


def test_trial_of_this_boot_is_not_machine_lost(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        sid = _begin(s, resume=True).id
        t = s.reads.planned(sid)[0]["id"]
        s.writes.mark_running(t)
        assert s.reads.trials(sid)[0]["boot_id"] == s.leases.me.boot_id
        with s.leases.hold(sid) as lease:
            assert lease.lost == ()
        assert s.reads.warnings(sid) == []


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), Interrupted(15)], ids=["SIGINT", "SIGTERM"])
def test_interrupt_marks_the_study_and_releases_the_lease(tmp_path: Path, exc: BaseException) -> None:
    with Store(tmp_path / "s.db") as s:
        sid = _begin(s, resume=True).id
        with pytest.raises(type(exc)):
            with s.leases.hold(sid):
                s.writes.mark_running(s.reads.planned(sid)[0]["id"])
                raise exc
        assert s.reads.study(sid)["status"] == "interrupted"
        assert [t["status"] for t in s.reads.trials(sid)] == ["planned", "planned"]
        assert s.leases.holder(sid) is None
        again = _begin(s, resume=True)
        assert (again.id, again.resumed) == (sid, True)
        with s.leases.hold(sid):
            assert s.reads.study(sid)["status"] == "running"


def test_interrupt_inside_a_transaction_still_marks_the_study(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        sid = _begin(s, resume=True).id
        with pytest.raises(KeyboardInterrupt):
            with s.leases.hold(sid):
                s.db.execute("BEGIN IMMEDIATE")  # the signal lands between BEGIN and COMMIT
                raise KeyboardInterrupt
        assert not s.db.in_transaction
        assert s.reads.study(sid)["status"] == "interrupted"


def test_lease_is_reentrant_and_errors_release_it(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as s:
        sid = _begin(s, resume=True).id
        with s.leases.hold(sid):
            with s.leases.hold(sid):
                pass
            assert s.leases.holder(sid) is not None  # the inner exit keeps the outer's lease
        assert s.leases.holder(sid) is None
        with pytest.raises(RuntimeError):
            with s.leases.hold(sid):
                raise RuntimeError("a bug")
        assert s.leases.holder(sid) is None
        assert s.reads.study(sid)["status"] == "running"  # resumable, not interrupted


FIXTURES = Path(__file__).parent / "fixtures"


def test_a_store_made_by_the_landed_version_is_upgraded_in_place(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Schema 2 -> 3 (engine kinds, engine-neutral samples): same reports, counts filled in."""
    import json
    import shutil
    import subprocess

    from tests.conftest import tokensleuth_bin

    db = tmp_path / "v2.sqlite"
    shutil.copy(FIXTURES / "store-v2.sqlite", db)
    before = sqlite3.connect(db).execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    env = dict(cli_env, TOKENSLEUTH_DB=str(db))
    for sid in ("f4f4a5015f", "b993703edf"):  # a compare and a bench study
        out = tmp_path / f"{sid}.json"
        p = subprocess.run([tokensleuth_bin(), "report", sid, "--json", str(out)], env=env, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        want = json.loads((FIXTURES / f"store-v2-report-{sid}.json").read_text())
        assert json.loads(out.read_text()) == want
    with Store(db) as s:
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
        rows = s.db.execute("SELECT s.n_prompt, s.n_gen, r.n_prompt AS rp, r.n_gen AS rg, a.kind FROM samples s"
                            " JOIN results r ON r.id=s.result_id JOIN trials t ON t.id=r.trial_id"
                            " JOIN arms a ON a.id=t.arm_id").fetchall()
        assert len(rows) == before > 0
        assert all((r["n_prompt"], r["n_gen"]) == (r["rp"], r["rg"]) and r["kind"] == "llama-bench" for r in rows)



def test_a_store_open_in_this_process_is_not_read_outside_sqlite_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads of one process each open the store (a parallel bisect, a per-host compare).
    Closing any descriptor of the file drops every POSIX lock the process holds on it,
    SQLite's included: once it is open here, only SQLite may open it."""
    import builtins

    p = tmp_path / "s.db"
    with Store(p) as first:
        first.writes.create_study("bench", {}, "h", [], [])
    real_open = builtins.open
    opened: list[str] = []

    def spy(file: Any, *a: Any, **k: Any) -> Any:
        opened.append(str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", spy)
    with Store(p) as first:
        assert opened.count(str(p)) == 1  # not open here yet: its header is checked
        with Store(p) as second:  # another thread's connection beside it
            second.state.put(first.reads.studies()[0]["id"], "k", 1)
        assert opened.count(str(p)) == 1
    with Store(p):
        assert opened.count(str(p)) == 2  # closed everywhere: checked again
