"""kill -9 in the middle of a study, rerun with --resume: nothing lost, nothing twice."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from tests.conftest import tokensleuth_bin
from tokensleuth.drivers.bench import asked_reps
from tokensleuth.sources.build import EngineBuild

ARGS = ["-p", "64", "-n", "16", "-r", "3", "-t", "1"]
TRIALS = 6


def _done(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(db, timeout=30)
    try:
        return int(con.execute("SELECT COUNT(*) FROM trials WHERE status='done'").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def test_killed_study_resumes_without_loss_or_duplicates(
    engine: EngineBuild, moe_model: Path, db: Path, cli_env: dict[str, str]
) -> None:
    cmd = [tokensleuth_bin(), "bench", "--model", str(moe_model), "--trials", str(TRIALS), "--", *ARGS]
    proc = subprocess.Popen(cmd, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while _done(db) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = _done(db)
    assert 2 <= killed_at < TRIALS, "the kill must land mid-study"
    con = sqlite3.connect(db)
    samples_before = con.execute("SELECT id, duration_ns FROM samples ORDER BY id").fetchall()
    con.close()

    again = subprocess.run([*cmd[:2], "--resume", *cmd[2:]], env=cli_env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM studies").fetchone()[0] == 1
    statuses = [r[0] for r in con.execute("SELECT status FROM trials ORDER BY seq")]
    assert statuses == ["done"] * TRIALS
    # every sample that existed before the kill is still there, unchanged
    after = dict(con.execute("SELECT id, duration_ns FROM samples").fetchall())
    assert all(after[i] == d for i, d in samples_before)
    # exactly one result per (trial, test) and the repetitions its trial was planned with each (3, or
    # more where bench added the cold ones the trials before it showed): nothing counted twice
    per_trial = con.execute("SELECT trial_id, COUNT(*) FROM results GROUP BY trial_id").fetchall()
    assert len(per_trial) == TRIALS and all(n == 2 for _, n in per_trial)
    planned = {tid: asked_reps([*ARGS, *json.loads(a)]) for tid, a in con.execute("SELECT id, argv_json FROM trials")}
    got = con.execute("SELECT r.trial_id, COUNT(s.id), COUNT(DISTINCT s.rep) FROM results r"
                      " JOIN samples s ON s.result_id=r.id GROUP BY r.id").fetchall()
    assert len(got) == TRIALS * 2 and all(n == d == planned[tid] for tid, n, d in got), (got, planned)
    assert min(planned.values()) == 3
    # the resumed run ran only the missing trials
    assert again.stderr.count(" done: ") == TRIALS - killed_at
    assert "study: " in again.stdout
    # no llama-bench left running by the killed process (it dies with its parent)
    ps = subprocess.run(["pgrep", "-f", str(moe_model)], capture_output=True, text=True)
    assert ps.stdout.strip() == ""


SMALL = ["-p", "16", "-n", "4", "-r", "2", "-t", "1"]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tokensleuth_bin(), *args], env=env, capture_output=True, text=True, timeout=300)


def test_resume_starts_a_missing_study_says_a_finished_one_and_reruns_a_machine_lost_trial(
    engine: EngineBuild, dense_model: Path, db: Path, cli_env: dict[str, str]
) -> None:
    args = ["bench", "--resume", "--model", str(dense_model), "--", *SMALL]
    # killed before the study row existed: --resume simply starts it
    first = _run(args, cli_env)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count(" done: ") == 1
    con = sqlite3.connect(db)
    (sid,) = con.execute("SELECT id FROM studies").fetchone()
    assert f"study: {sid}" in first.stdout

    # finished: nothing runs again, the stored results are shown, no error
    again = _run(args, cli_env)
    assert again.returncode == 0, again.stderr
    assert " done: " not in again.stderr
    assert f"study: {sid}" in again.stdout
    assert con.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 1

    # the machine froze mid-trial: the trial is left running under a boot that ended
    (tid,) = con.execute("SELECT id FROM trials").fetchone()
    con.execute("DELETE FROM samples WHERE result_id IN (SELECT id FROM results WHERE trial_id=?)", (tid,))
    for table in ("results", "windows", "timeline", "warnings"):
        con.execute(f"DELETE FROM {table} WHERE trial_id=?", (tid,))
    con.execute("UPDATE trials SET status='running', boot_id='0000-ended-boot' WHERE id=?", (tid,))
    con.execute("UPDATE studies SET status='running'")
    con.commit()
    lost = _run(args, cli_env)
    assert lost.returncode == 0, lost.stderr
    assert lost.stderr.count(" done: ") == 1  # re-run
    assert "machine-lost in 1 trial(s)" in lost.stdout  # counted in the report
    assert "machine lost during this trial" in lost.stdout
    rows = con.execute("SELECT t.status, w.code FROM trials t JOIN warnings w ON w.trial_id=t.id"
                       " WHERE w.code='machine-lost'").fetchall()
    assert rows == [("done", "machine-lost")]
    assert con.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 2  # pp16 and tg4, once each
    con.close()


def _leased(db: Path) -> bool:
    if not db.exists():
        return False
    con = sqlite3.connect(db, timeout=30)
    try:
        return int(con.execute("SELECT COUNT(*) FROM leases").fetchone()[0]) > 0
    except sqlite3.OperationalError:
        return False
    finally:
        con.close()


def test_second_resume_is_told_who_runs_the_study(
    engine: EngineBuild, dense_model: Path, db: Path, cli_env: dict[str, str]
) -> None:
    trials = 20  # long enough that it is still running when the second one has started up
    cmd = [tokensleuth_bin(), "bench", "--resume", "--model", str(dense_model), "--trials", str(trials),
           "--", *SMALL]
    proc = subprocess.Popen(cmd, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _leased(db) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _leased(db), "the first run must hold the study's lease"
        # held still while the second asks (its engine runs on): on a loaded machine the first
        # could otherwise finish before the second has started up
        proc.send_signal(signal.SIGSTOP)
        try:
            second = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=120)
        finally:
            proc.send_signal(signal.SIGCONT)
        first_out, first_err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert f"is being run by pid {proc.pid} on " in lines[0]
    assert "wait for it, or stop it" in lines[0]
    # the first run finished undisturbed: every trial once
    assert proc.returncode == 0, first_err
    con = sqlite3.connect(db)
    assert [r[0] for r in con.execute("SELECT status FROM trials")] == ["done"] * trials
    assert con.execute("SELECT COUNT(DISTINCT trial_id), COUNT(*) FROM results").fetchone() == (trials, trials * 2)
    assert con.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0  # released
    con.close()


def test_a_trial_lost_with_its_machine_keeps_its_last_readings(
    engine: EngineBuild, dense_model: Path, db: Path, cli_env: dict[str, str]
) -> None:
    """Readings are committed while the trial runs: a freeze (here: kill -9 + an ended boot)
    leaves the last ones in the store, and the machine-lost warning quotes them."""
    args = ["bench", "--model", str(dense_model), "--", "-p", "0", "-n", "512", "-r", "16", "-t", "1"]  # ~6 s
    proc = subprocess.Popen([tokensleuth_bin(), *args], env=cli_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    rows = 0
    while rows == 0 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        try:
            con = sqlite3.connect(db, timeout=5)
            rows = con.execute("SELECT COUNT(*) FROM timeline tl JOIN trials t ON t.id=tl.trial_id"
                               " WHERE t.status='running'").fetchone()[0]
            con.close()
        except sqlite3.OperationalError:
            pass
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert rows > 0, "no readings were committed while the trial ran"
    con = sqlite3.connect(db)
    con.execute("UPDATE trials SET boot_id='0000-ended-boot' WHERE status='running'")
    con.commit()
    con.close()
    again = _run(["bench", "--resume", *args[1:]], cli_env)
    assert again.returncode == 0, again.stderr
    con = sqlite3.connect(db)
    (detail,) = con.execute("SELECT detail FROM warnings WHERE code='machine-lost'").fetchone()
    assert "last readings: engine_rssanon_mb" in detail and "none stored" not in detail, detail
