"""kill -9 in the middle of a study, rerun with --resume: nothing lost, nothing twice."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from tests.conftest import tokensleuth_bin
from tokensleuth.sources.build import EngineBuild

ARGS = ["-p", "64", "-n", "16", "-r", "3"]
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
    # exactly one result per (trial, test) and 3 samples each: nothing counted twice
    per_trial = con.execute("SELECT trial_id, COUNT(*) FROM results GROUP BY trial_id").fetchall()
    assert len(per_trial) == TRIALS and all(n == 2 for _, n in per_trial)
    assert con.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == TRIALS * 2 * 3
    # the resumed run ran only the missing trials
    assert again.stderr.count(" done: ") == TRIALS - killed_at
    assert "study: " in again.stdout
    # no llama-bench left running by the killed process (it dies with its parent)
    ps = subprocess.run(["pgrep", "-f", str(moe_model)], capture_output=True, text=True)
    assert ps.stdout.strip() == ""


def test_resume_without_unfinished_study_is_a_user_error(
    engine: EngineBuild, dense_model: Path, cli_env: dict[str, str]
) -> None:
    p = subprocess.run([tokensleuth_bin(), "bench", "--resume", "--model", str(dense_model), "--", *ARGS],
                       env=cli_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.startswith("error: no unfinished bench study")
    assert len(p.stderr.strip().splitlines()) == 1
