#!/usr/bin/env python3
"""The fleet on a real local Ray cluster (a head and worker nodes as separate `ray start`
processes on this machine, each with its own label and tokensleuth cache; the compiler
cache shared, as ccache/sccache can be between machines).

    .venv/bin/python bench/fleet.py simulate            # k-ary search rounds, k = 1, 2, 4, 8
    .venv/bin/python bench/fleet.py bisect [--runs 1]   # 24-commit bisect with 1 and 2 workers
    .venv/bin/python bench/fleet.py overhead [--runs 4] # one compare: local vs through Ray
    .venv/bin/python bench/fleet.py drill               # a worker killed mid-pair

Each part prints its figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import default_engine, tiny_model, tokensleuth_cmd
from bisect_cost import NAMES as COST_NAMES

from tests.fleet import local_cluster
from tests.planted import bisect_history
from tokensleuth.core.paths import cache_dir
from tokensleuth.drivers.hunts.bisect import search, search_parallel

# bisect_cost's 24-commit history with a slowdown that shows at -t 1 (300 µs per decode call)
NAMES = tuple("spin" if n == "culprit" else n for n in COST_NAMES)


def simulate(step_s: float) -> None:
    """The same search code as the driver, judged by a known culprit at every position."""
    print(f"k-ary bisect rounds, simulated with the driver's search code (every culprit position; one round = "
          f"build + judge = {step_s:.0f} s, measured with 1 worker; endpoints and verification not included)")
    print("| candidates | k | ceil(log2 N) | mean rounds | max rounds | search s at mean (rounds x round) | vs k=1 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in (24, 300):
        base = None
        for k in (1, 2, 4, 8):
            rounds = []
            for bad in range(1, n):
                truth = {i: "good" if i < bad else "bad" for i in range(n)}
                if k == 1:
                    r = len(search(n, truth.__getitem__).order)
                else:
                    def judge_many(idx: list[int], t: dict[int, str] = truth) -> dict[int, str]:
                        return {i: t[i] for i in idx}

                    r = search_parallel(n, judge_many, k)[1]
                rounds.append(r)
            mean = statistics.mean(rounds)
            base = base or mean
            print(f"| {n} | {k} | {math.ceil(math.log2(n - 1))} | {mean:.2f} | {max(rounds)} | {mean * step_s:.0f} | "
                  f"{mean / base:.2f}x |")


def _store_rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def bisect(runs: int, sizes: tuple[int, ...] = (1, 2)) -> float:
    engine = default_engine()
    moe = tiny_model(engine, "qwen3moe")
    repo, shas = bisect_history(NAMES, branch="bisect-24-spin")
    ccache = cache_dir() / "ccache"
    per_round = []
    print("24-commit bisect on the real engine (-t 1 per worker; each worker builds in its own empty cache)")
    print("| workers | run | wall (s) | rounds | steps | culprit right | verified | --resume needed |")
    print("| ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |")
    for workers in [("w1", "w2")[:k] for k in sizes]:
        for run in range(runs):
            with tempfile.TemporaryDirectory() as td, local_cluster(Path(td), workers, ccache=ccache) as c:
                out, db = Path(td) / "b.json", Path(td) / "s.db"
                argv = [*tokensleuth_cmd(), "bisect", "--db", str(db), "--repo", str(repo),
                        "--good", shas["base"], "--bad", shas["n21"], "--model", str(moe), "-w", "tg32",
                        "--cluster", c.address, "--on", "role=bench", "--json", str(out),
                        "--", "-t", "1", "-r", "5"]
                t0 = time.monotonic()
                # an unresolved answer is resumed, as a user would (it adds pairs where they were missing)
                for resumes in range(3):
                    p = subprocess.run(argv if resumes == 0 else [*argv[:2], "--resume", *argv[2:]],
                                       capture_output=True, text=True)
                    if p.returncode != 1:
                        break
                wall = time.monotonic() - t0
                if p.returncode != 0:
                    print(p.stderr[-3000:])
                    raise SystemExit("bisect failed")
                r = json.loads(out.read_text())
                right = r["first_bad"] == shas["spin"][:10]
                print(f"| {len(workers)} | {run + 1} | {wall:.0f} | {r['rounds']} | {len(r['steps'])} | {right} | "
                      f"{r['verified']} | {resumes} |", flush=True)
                if len(workers) == 1:
                    per_round.append(wall / (r["rounds"] + 3))  # + endpoints, verification, builds of the ends
    return float(statistics.mean(per_round)) if per_round else 0.0


def _compare(args: list[str], db: Path) -> tuple[float, float, int, str]:
    t0 = time.monotonic()
    p = subprocess.run([*tokensleuth_cmd(), "compare", "--db", str(db), *args], capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        print(p.stderr[-2000:])
        raise SystemExit("compare failed")
    sid = _store_rows(db, "SELECT id FROM studies WHERE kind='compare' ORDER BY created_at DESC LIMIT 1")[0][0]
    es = _store_rows(db, f"SELECT SUM((t1_ns - t0_ns) / 1e9) FROM trials WHERE study_id='{sid}'")[0][0]
    pairs = _store_rows(db, f"SELECT MAX(pair) + 1 FROM trials WHERE study_id='{sid}'")[0][0]
    verdict = "same" if "| same" in p.stdout else "unresolved" if "unresolved" in p.stdout else "?"
    return float(es), wall, int(pairs), verdict


def overhead(runs: int) -> None:
    engine = default_engine()
    dense = tiny_model(engine, "llama")
    spec = ["--arm", f"a=bin:{engine.bin_dir}", "--arm", f"b=bin:{engine.bin_dir}", "--model", str(dense),
            "-w", "tg32", "--band", "5%", "--max-pairs", "40", "--", "-t", "1", "-r", "5"]
    got: dict[str, list[tuple[float, float, int, str]]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory() as td, local_cluster(Path(td), ("w1",)) as c:
        for i in range(runs):
            for how in (("local", "ray") if i % 2 == 0 else ("ray", "local")):
                db = Path(td) / f"{how}-{i}.db"
                extra = ["--cluster", c.address, "--on", "host=w1"] if how == "ray" else []
                got[how].append(_compare([*extra, *spec], db))
    print("one A/A compare (tg32 -r 5 -t 1, band 5%), local vs through Ray with one worker, alternating")
    print("| path | runs | engine-s per verdict | wall s per verdict | pairs | verdicts |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for how, v in got.items():
        print(f"| {how} | {len(v)} | {statistics.mean(x[0] for x in v):.3f} | {statistics.mean(x[1] for x in v):.2f} | "
              f"{statistics.mean(x[2] for x in v):.1f} | {', '.join(x[3] for x in v)} |")
    r = statistics.mean(x[0] for x in got["ray"]) / statistics.mean(x[0] for x in got["local"])
    print(f"engine-seconds per verdict, Ray / local: {r:.3f}")


def drill() -> None:
    engine = default_engine()
    dense = tiny_model(engine, "llama")
    with tempfile.TemporaryDirectory() as td, local_cluster(Path(td), ("w1", "w2")) as c:
        db = Path(td) / "s.db"
        args = [*tokensleuth_cmd(), "compare", "--db", str(db), "--cluster", c.address, "--on", "role=bench",
                "--arm", f"a=bin:{engine.bin_dir}", "--arm", f"b=bin:{engine.bin_dir}", "--model", str(dense),
                "-w", "tg64", "--min-pairs", "12", "--max-pairs", "12", "--", "-t", "1", "-r", "4"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while proc.poll() is None:
            if db.exists():
                try:
                    rows = _store_rows(db, "SELECT status, node FROM trials")
                except sqlite3.OperationalError:
                    rows = []
                if any(s == "done" for s, _ in rows) and any(s == "running" and n == "w2" for s, n in rows):
                    break
            time.sleep(0.02)
        c.kill("w2")
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        lost = _store_rows(db, "SELECT trial_id FROM warnings WHERE code='node-lost'")
        done = _store_rows(db, "SELECT COUNT(*) FROM trials WHERE status='done'")[0][0]
        dup = _store_rows(db, "SELECT COUNT(*) FROM (SELECT trial_id FROM results GROUP BY trial_id HAVING COUNT(*) > 1)")
        pairs = _store_rows(db, "SELECT COUNT(DISTINCT pair) FROM trials WHERE status='done'")[0][0]
        rerun = _store_rows(db, "SELECT COUNT(*) FROM trials t WHERE status='done' AND id IN "
                                "(SELECT trial_id FROM warnings WHERE code='node-lost')")[0][0]
        print("node-loss drill: 2 workers, 12 pairs of tg64 -r 4, w2 killed (kill -9 of its process group) mid-pair")
        print(f"trials lost with w2: {len(lost)} (pairs lost: {len({t for (t,) in lost}) // 2 or len(lost)}); "
              f"re-run and stored: {rerun}; trials done: {done}; pairs complete: {pairs}; duplicated trials: {dup[0][0]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("part", choices=["simulate", "bisect", "overhead", "drill"])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--workers", default="1,2", help="bisect: worker counts to run, e.g. 2")
    ap.add_argument("--step-s", type=float, default=None, help="one bisect round's seconds (default: measured)")
    a = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if a.part == "simulate":
        simulate(a.step_s or 60.0)
    elif a.part == "bisect":
        sizes = tuple(int(x) for x in a.workers.split(","))
        step = bisect(a.runs, sizes)
        if step:
            print(f"measured seconds per sequential round (1 worker): {step:.0f}")
            simulate(step)
    elif a.part == "overhead":
        overhead(max(2, a.runs))
    else:
        drill()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
