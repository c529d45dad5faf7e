"""SIGKILL at random moments across bench, compare and bisect, then --resume: every
trial stored once, nothing lost, the same answer, no engine left behind.

The moments are drawn from a seeded generator (TOKENSLEUTH_KILL_SEED, default fixed, printed
on failure): each kill waits for a drawn number of stored trials, then a drawn fraction of a
second more, so every kill lands while the command still has work (the number made is
asserted). TOKENSLEUTH_KILLS sets how many kills each command takes (default 3).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests import rules
from tests.conftest import tokensleuth_bin
from tokensleuth.sources.build import EngineBuild

KILLS = int(os.environ.get("TOKENSLEUTH_KILLS", "3"))
SEED = int(os.environ.get("TOKENSLEUTH_KILL_SEED", "20261201"))


@pytest.fixture()
def rng() -> random.Random:
    print(f"TOKENSLEUTH_KILL_SEED={SEED}")
    return random.Random(SEED)


def _engines_of(model: Path) -> str:
    return subprocess.run(["pgrep", "-f", "--", f"-m {model}"], capture_output=True, text=True).stdout.strip()


def _done(db: Path) -> int:
    try:
        con = sqlite3.connect(db, timeout=30)
        try:
            return int(con.execute("SELECT COUNT(*) FROM trials WHERE status='done'").fetchone()[0])
        finally:
            con.close()
    except sqlite3.OperationalError:
        return 0


def kill_and_resume(cmd: list[str], env: dict[str, str], model: Path, rng: random.Random, kills: int,
                    total: int) -> tuple[subprocess.CompletedProcess[str], list[tuple[int, float]]]:
    """Run ``cmd``, SIGKILL it ``kills`` times (each rerun with --resume), then --resume once
    more to the end. Kill k comes once a drawn number of trials (rising, below ``total`` - 1)
    is stored, after a drawn 0-0.3 s more. Returns that run and the kill moments."""
    db = Path(env["TOKENSLEUTH_DB"])
    resume = [cmd[0], cmd[1], "--resume", *cmd[2:]]
    targets = sorted(rng.sample(range(0, total - 1), kills))
    moments = []
    for k, target in enumerate(targets):
        after = rng.uniform(0.0, 0.3)
        p = subprocess.Popen(cmd if k == 0 else resume, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 600
        while _done(db) < target and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(after)
        assert p.poll() is None, f"the command ended before kill {k} ({target} trials + {after:.2f} s, seed {SEED})"
        p.send_signal(signal.SIGKILL)
        p.wait()
        moments.append((target, round(after, 2)))
        deadline = time.monotonic() + 5  # the engine dies with its parent (PR_SET_PDEATHSIG)
        while _engines_of(model) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _engines_of(model) == "", f"engine left running after kill {moments[-1]} (seed {SEED})"
    assert len(moments) == kills
    # after the kills, --resume finishes the study
    final = subprocess.run(resume, env=env, capture_output=True, text=True, timeout=900)
    return final, moments


def _no_duplicates(con: sqlite3.Connection) -> None:
    dup = con.execute("SELECT study_id, pair, arm_id, model, workload, COUNT(*) FROM trials WHERE pair >= 0"
                      " GROUP BY study_id, pair, arm_id, model, workload HAVING COUNT(*) > 1").fetchall()
    assert dup == [], f"a pair measured twice: {dup} (seed {SEED})"
    dup = con.execute("SELECT trial_id, test_idx, COUNT(*) FROM results GROUP BY trial_id, test_idx"
                      " HAVING COUNT(*) > 1").fetchall()
    assert dup == []
    running = con.execute("SELECT COUNT(*) FROM trials WHERE status IN ('running', 'planned')").fetchone()[0]
    assert running == 0


def test_bench_killed_anywhere(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], db: Path,
                               rng: random.Random) -> None:
    trials = 5
    cmd = [tokensleuth_bin(), "bench", "--model", str(dense_model), "--trials", str(trials),
           "--", "-p", "32", "-n", "8", "-r", "3", "-t", "1"]
    final, moments = kill_and_resume(cmd, cli_env, dense_model, rng, KILLS, trials)
    assert final.returncode == 0, f"{final.stderr[-2000:]} (kills at {moments}, seed {SEED})"
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM studies WHERE kind='bench'").fetchone()[0] == 1
    assert [r[0] for r in con.execute("SELECT status FROM trials")] == ["done"] * trials
    assert con.execute("SELECT COUNT(*) FROM results").fetchone()[0] == trials * 2
    # each trial's repetitions: the user's 3, or more where a round added the cold ones its
    # processes showed (the plan's argv says how many): two tests each, every one stored once
    argvs = [json.loads(a) for (a,) in con.execute("SELECT argv_json FROM trials")]
    reps = [int(a[a.index("-r") + 1]) if "-r" in a else 3 for a in argvs]
    assert con.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == sum(2 * r for r in reps), argvs
    _no_duplicates(con)


def test_compare_killed_anywhere(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], db: Path,
                                 rng: random.Random, tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    e = f"bin:{engine.bin_dir}"
    cmd = [tokensleuth_bin(), "compare", "--arm", f"a={e}", "--arm", f"b={e}", "-m", str(dense_model),
           "-w", "pp32", "-w", "tg8", "--min-pairs", "4", "--max-pairs", "4", "--no-probe", "--json", str(out), "--",
           "-r", "2", "-t", "1"]
    final, moments = kill_and_resume(cmd, cli_env, dense_model, rng, KILLS, 8)
    assert final.returncode == 0, f"{final.stderr[-2000:]} (kills at {moments}, seed {SEED})"
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM studies WHERE kind='compare'").fetchone()[0] == 1
    # 4 pairs x 2 arms, each run exactly once, each trial both workloads in one process
    cells = Counter(con.execute("SELECT workload, status FROM trials").fetchall())
    assert cells == {("pp32,tg8", "done"): 8}
    assert sorted(Counter(r[0] for r in con.execute("SELECT test FROM results")).items()) == [("pp32", 8), ("tg8", 8)]
    _no_duplicates(con)
    assert [c["pairs"] for c in json.loads(out.read_text())["comparisons"]] == [4, 4]


def _bin(d: Path, real: Path, extra: str = "") -> Path:
    d.mkdir()
    (d / "llama-bench").write_text(f'#!/bin/bash\nif [ "$1" = --help ]; then exec {real} --help; fi\n'
                                   f'{extra}exec {real} "$@"\n')
    (d / "llama-bench").chmod(0o755)
    return d


def test_bisect_killed_anywhere(engine: EngineBuild, dense_model: Path, cli_env: dict[str, str], db: Path,
                                rng: random.Random, tmp_path: Path) -> None:
    from tests.planted import planted_engine

    _, planted = planted_engine()  # its llama-bench waits TOKENSLEUTH_SPIN_US per decode call
    real = Path(planted.bin_dir) / "llama-bench"
    # good, good, then a 1.5 ms wait per token: about 4x slower from "r2" on, at any load (-t 1);
    # the band is wide because the test is of kills and resumes, and a 2 x 8 ms trial is noisy
    # (a first process ran 33% slow): r1 must lie above the edge halfway to r3 (0.5) on a busy machine too
    slow = "export TOKENSLEUTH_SPIN_US=1500\n"
    dirs = [_bin(tmp_path / "r0", real), _bin(tmp_path / "r1", real), _bin(tmp_path / "r2", real, slow),
            _bin(tmp_path / "r3", real, slow)]
    out = tmp_path / "b.json"
    cmd = [tokensleuth_bin(), "bisect", *[a for d in dirs for a in ("--bin", str(d))], "-m", str(dense_model),
           "-w", "tg16", "--band", "25%", "--max-pairs", "10", "--json", str(out), "--", "-r", "2", "-t", "1"]
    # the endpoints alone take 2 x 5 pairs: the kills land within them and the steps after
    final, moments = kill_and_resume(cmd, cli_env, dense_model, rng, KILLS, 12)
    assert final.returncode in (0, 1), f"{final.stderr[-2000:]} (kills {moments}, seed {SEED})"
    r = json.loads(out.read_text())
    # found; or a neighbour of r2 held open by the confounder rule (said, exit 1): kills lose nothing either way
    held = rules.held_open(r, "r2")
    assert final.returncode == (1 if held else 0), f"{final.stdout[-1000:]}{final.stderr[-2000:]} (kills {moments}, seed {SEED})"
    assert held or r["status"] == "found" and r["first_bad"] == "r2" and rules.verified(r), (r, moments, SEED)
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM studies WHERE kind='bisect'").fetchone()[0] == 1
    # each comparison (A, B) measured in one study, never started over
    hashes = [h for (h,) in con.execute("SELECT spec_hash FROM studies WHERE kind='compare'")]
    assert len(hashes) == len(set(hashes))
    _no_duplicates(con)
