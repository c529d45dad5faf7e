"""Both arms of a pair in one llama-bench process (A, B, B, A), on the real engine."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from tests.conftest import tokensleuth_bin
from tests.test_compare import compare
from tokensleuth.sources import DEFAULT_ENGINE
from tokensleuth.sources.build import EngineBuild

E = DEFAULT_ENGINE
# -ub 1 runs a 64-token prompt as 64 batches of one token: about half the speed of one batch of 64
# on any machine, however loaded (both run in the same process, one after the other)
ARMS = ["--arm", f"big={E}", "--arm", f"one={E}", "--flags", "big=-ub 64", "--flags", "one=-ub 1"]


def rows(db: Path, sql: str) -> list[sqlite3.Row]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_context_setting_ab_runs_each_pair_in_one_process(engine: EngineBuild, dense_model: Path,
                                                            cli_env: dict[str, str], db: Path, tmp_path: Path) -> None:
    p, doc = compare([*ARMS, "--model", str(dense_model), "-w", "pp64", "--band", "10%", "--max-pairs", "10",
                      "--", "-t", "1", "-b", "64", "-r", "3"], cli_env, tmp_path)
    assert p.returncode == 0, p.stderr
    (c,) = doc["comparisons"]
    assert c["design"] == "one process per pair (A,B,B,A)"
    assert (c["verdict"], c["candidate"]) == ("slower", "one") and c["ratio"] < 0.8, c
    assert "one engine process" in p.stdout
    trials = rows(db, "SELECT t.id, t.pair, a.name AS arm, t.t0_ns, t.t1_ns, t.env_json FROM trials t "
                      "JOIN arms a ON a.id = t.arm_id ORDER BY t.seq")
    assert len(trials) == 2 * c["pairs"]
    by_pair: dict[int, list[sqlite3.Row]] = {}
    for t in trials:
        by_pair.setdefault(int(t["pair"]), []).append(t)
    for pair, (first, second) in sorted(by_pair.items()):
        argv = [json.loads(t["env_json"])["argv"] for t in (first, second)]
        assert argv[0] == argv[1], "both trials of a pair come from one process"
        values = argv[0][argv[0].index("-ub") + 1]
        order = (first["arm"], second["arm"])
        assert values == {("big", "one"): "64,1,1,64", ("one", "big"): "1,64,64,1"}[order], (pair, values)
        # the process's time is counted once: the two trials' spans meet
        assert first["t1_ns"] == second["t0_ns"] and first["t0_ns"] < first["t1_ns"] < second["t1_ns"]
    # each trial holds its own arm's two instances: llama-bench's own report says which -ub ran
    got = rows(db, "SELECT a.name AS arm, r.raw_json, (SELECT COUNT(*) FROM samples s WHERE s.result_id = r.id) AS n "
                   "FROM results r JOIN trials t ON t.id = r.trial_id JOIN arms a ON a.id = t.arm_id")
    assert len(got) == len(trials)
    for r in got:
        assert json.loads(r["raw_json"])["n_ubatch"] == {"big": 64, "one": 1}[r["arm"]]
        assert r["n"] >= 6  # -r 3 per instance, two instances (cold repetitions are added, never taken)


def test_separate_processes_is_another_design_and_another_study(engine: EngineBuild, dense_model: Path,
                                                                cli_env: dict[str, str], db: Path,
                                                                tmp_path: Path) -> None:
    args = [*ARMS, "--model", str(dense_model), "-w", "pp64", "--band", "10%", "--min-pairs", "3", "--max-pairs", "3",
            "--", "-t", "1", "-b", "64", "-r", "2"]
    p1, d1 = compare(args, cli_env, tmp_path)
    p2, d2 = compare(["--separate-processes", *args], cli_env, tmp_path)
    assert p1.returncode in (0, 1) and p2.returncode in (0, 1), (p1.stderr, p2.stderr)
    assert d1["comparisons"][0]["design"] == "one process per pair (A,B,B,A)"
    assert "design" not in d2["comparisons"][0]  # a process per trial, as before the design existed
    assert d1["study"] != d2["study"]
    argvs = [json.loads(r["env_json"])["argv"] for r in rows(db, "SELECT env_json FROM trials WHERE study_id = "
                                                                 f"'{d2['study']}'")]
    assert len(argvs) == 6 and all(a[a.index("-ub") + 1] in ("64", "1") for a in argvs)


def _done(db: Path) -> int:
    try:
        return len(rows(db, "SELECT id FROM trials WHERE status = 'done'")) if db.exists() else 0
    except sqlite3.OperationalError:
        return 0


def test_a_kill_inside_a_shared_process_loses_and_duplicates_nothing(engine: EngineBuild, dense_model: Path,
                                                                      cli_env: dict[str, str], db: Path,
                                                                      tmp_path: Path) -> None:
    from tests.gate import Gate

    # the last of the study's 12 processes is held until the kill: the kill lands inside one of
    # them, however slowly the poll below comes round
    gate = Gate(tmp_path / "gate", Path(engine.bin_dir), hold=11)
    e = f"bin:{gate.bin_dir}"
    cmd = [tokensleuth_bin(), "compare", "--arm", f"big={e}", "--arm", f"one={e}", "--flags", "big=-ub 64",
           "--flags", "one=-ub 1", "--model", str(dense_model), "-w", "pp64", "-w", "tg16",
           "--band", "0.1%", "--min-pairs", "6", "--max-pairs", "6", "--", "-t", "1", "-b", "64", "-r", "2"]
    proc = subprocess.Popen(cmd, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    gate.kill_when(proc, lambda: _done(db), 2)
    killed_at = _done(db)
    assert 2 <= killed_at < 24 and killed_at % 2 == 0, "a pair's two trials are stored together"
    before = {(r["id"], r["duration_ns"]) for r in rows(db, "SELECT id, duration_ns FROM samples")}
    again = subprocess.run([*cmd[:2], "--resume", *cmd[2:]], env=cli_env, capture_output=True, text=True, timeout=900)
    assert again.returncode in (0, 1), again.stderr
    assert [r["status"] for r in rows(db, "SELECT status FROM trials")] == ["done"] * 24
    after = {(r["id"], r["duration_ns"]) for r in rows(db, "SELECT id, duration_ns FROM samples")}
    assert before <= after  # nothing measured before the kill was lost or changed
    per_trial = rows(db, "SELECT trial_id, COUNT(*) AS n FROM results GROUP BY trial_id")
    assert len(per_trial) == 24 and all(r["n"] == 1 for r in per_trial)
    assert len(rows(db, "SELECT id FROM studies")) == 1
