"""kill -9 at random moments, then --resume: count kills, samples lost and samples duplicated.

For bench (fixed trials) and compare (fixed pairs: --min-pairs = --max-pairs), each round
runs the command, SIGKILLs it at a random moment up to --kills times (rerunning with
--resume after each), lets the last --resume finish, and checks the store against what an
uninterrupted run stores: every sample seen after any kill still there unchanged (else
lost), one result per (trial, test) and one trial per (pair, arm, cell) (else duplicated),
and the expected totals.

    python bench/kill_anywhere.py --rounds 10 --kills 5
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

from _common import default_engine, tiny_model, tokensleuth_cmd


def snapshot(db: Path) -> dict[int, int]:
    if not db.exists():
        return {}
    con = sqlite3.connect(db, timeout=30)
    try:
        return dict(con.execute("SELECT id, duration_ns FROM samples").fetchall())
    except sqlite3.OperationalError:
        return {}
    finally:
        con.close()


def one_round(cmd: list[str], db: Path, rng: random.Random, kills: int, span_s: float,
              expect_samples: int) -> tuple[int, int, int, int]:
    """(kills landed, samples lost, samples duplicated, total samples short of expected)."""
    env = dict(os.environ, TOKENSLEUTH_DB=str(db))
    resume = [*cmd[:len(tokensleuth_cmd()) + 1], "--resume", *cmd[len(tokensleuth_cmd()) + 1:]]
    seen: dict[int, int] = {}
    landed = 0
    for k in range(kills):
        p = subprocess.Popen(cmd if k == 0 else resume, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=rng.uniform(0.05, span_s))
            break
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            landed += 1
        seen.update(snapshot(db))
    final = subprocess.run(resume, env=env, capture_output=True, text=True)  # finishes, or says it is done
    if final.returncode != 0:
        raise SystemExit(f"final run failed: {final.stderr[-500:]}")
    after = snapshot(db)
    lost = sum(1 for i, d in seen.items() if after.get(i) != d)
    con = sqlite3.connect(db)
    dup = con.execute("SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM results"
                      " GROUP BY trial_id, test_idx)").fetchone()[0]
    dup += con.execute("SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM trials WHERE pair >= 0"
                       " GROUP BY study_id, pair, arm_id, model, workload)").fetchone()[0]
    con.close()
    return landed, lost, int(dup), expect_samples - len(after)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    engine = default_engine()
    model = tiny_model(engine, "llama")
    ts = tokensleuth_cmd()
    e = f"bin:{engine.bin_dir}"
    kinds = {
        # 5 trials x 2 tests x 3 repetitions
        "bench": ([*ts, "bench", "--model", str(model), "--trials", "5", "--", "-p", "32", "-n", "8", "-r", "3"],
                  3.0, 5 * 2 * 3),
        # 4 pairs x 2 arms x 2 workloads x 2 repetitions
        "compare": ([*ts, "compare", "--arm", f"a={e}", "--arm", f"b={e}", "-m", str(model), "-w", "pp32",
                     "-w", "tg8", "--min-pairs", "4", "--max-pairs", "4", "--", "-r", "2"], 5.0, 4 * 2 * 2 * 2),
    }
    print(f"kill_anywhere: {args.rounds} rounds x up to {args.kills} SIGKILLs per command, seed {args.seed}")
    print(f"{'command':8} {'kills':>6} {'lost':>5} {'duplicated':>10} {'short':>6} {'wall s':>7}")
    for name, (cmd, span, expect) in kinds.items():
        # kill moments are drawn over the first 60% of an uninterrupted run of this command here
        with tempfile.TemporaryDirectory() as d:
            t0 = time.monotonic()
            subprocess.run(cmd, env=dict(os.environ, TOKENSLEUTH_DB=str(Path(d) / "s.db")), capture_output=True)
            span = 0.6 * (time.monotonic() - t0)
        totals = [0, 0, 0, 0]
        t0 = time.monotonic()
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as d:
                for i, v in enumerate(one_round(cmd, Path(d) / "s.db", rng, args.kills, span, expect)):
                    totals[i] += v
        print(f"{name:8} {totals[0]:6d} {totals[1]:5d} {totals[2]:10d} {totals[3]:6d} {time.monotonic() - t0:7.0f}")


if __name__ == "__main__":
    main()
