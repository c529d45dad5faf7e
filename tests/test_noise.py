"""Variance components and the cheapest repetitions per process (noise.py), and a real
compare that chooses its own -r."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
from pathlib import Path

import numpy as np

from tests.conftest import tokensleuth_bin
from tokensleuth.analysis.noise import Noise, Process, components
from tokensleuth.drivers.verdicts.reps import damped
from tokensleuth.sources.build import EngineBuild


def test_best_reps_is_cochrans_allocation_bounded() -> None:
    # sqrt(c_p s_w^2 / (c_r s_b^2)) = sqrt(1.0 * 0.01^2 / (0.05 * 0.02^2)) = sqrt(5) -> 2
    assert Noise(0.02, 0.01, 1.0, 0.05, 10, 50).best_reps() == 2
    # a costly process and quiet processes: many repetitions, bounded at 20
    assert Noise(0.005, 0.02, 2.0, 0.01, 10, 50).best_reps() == 20
    assert Noise(0.0, 0.02, 2.0, 0.01, 10, 50).best_reps() == 20
    # sqrt(0.2 * 0.02^2 / (0.01 * 0.01^2)) = sqrt(80) -> 9
    assert Noise(0.01, 0.02, 0.2, 0.01, 10, 50).best_reps() == 9
    assert "noise here: 2.0% between processes, 1.0% within" in Noise(0.02, 0.01, 1.0, 0.05, 10, 50).sentence()


def test_components_recover_simulated_levels() -> None:
    rng = np.random.default_rng(7)
    sb, sw = 0.03, 0.01
    procs = []
    for g in range(3):
        for _ in range(60):
            level = math.log(100.0) + rng.normal(0, sb)
            logs = tuple(level + rng.normal(0, sw, 5))
            procs.append(Process(("a", "m", g), logs, 1.5, 0.25))
    n = components(procs)
    assert n is not None
    assert abs(n.between_cv - sb) / sb < 0.2 and abs(n.within_cv - sw) / sw < 0.1
    assert n.process_s == 1.25 and n.rep_s == 0.05 and n.processes == 180 and n.repetitions == 900
    assert components(procs[:1]) is None  # one process: no between estimate


def test_compare_without_r_chooses_its_repetitions(engine: EngineBuild, dense_model: Path, tmp_path: Path,
                                                   cli_env: dict[str, str]) -> None:
    out = tmp_path / "c.json"
    p = subprocess.run([tokensleuth_bin(), "compare", "--arm", f"a={engine.source}", "--arm", f"b={engine.source}",
                        "-m", str(dense_model), "-w", "tg8", "--min-pairs", "3", "--max-pairs", "6", "--json",
                        str(out), "--", "-t", "1"], env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]  # same or unresolved, the study itself ran
    n = json.loads(out.read_text())["noise"]
    assert n["processes"] >= 6 and n["rep_s"] > 0 and n["within_cv"] > 0
    # Cochran's r* = sqrt(c_p σ²_w / (c_r σ²_b)) from the study's own components, rounded into [2, 20]
    if n["between_cv"] == 0:
        want = 20
    else:
        r = math.sqrt(n["process_s"] * n["within_cv"] ** 2 / (n["rep_s"] * n["between_cv"] ** 2))
        want = int(min(20, max(2, round(r))))
    assert n["best_reps"] == want, n
    assert "noise here:" in p.stdout and f"cheapest -r here: {want} " in p.stdout
    con = sqlite3.connect(cli_env["TOKENSLEUTH_DB"])
    argvs = [json.loads(a) for (a,) in con.execute("SELECT argv_json FROM trials ORDER BY seq")]
    first = argvs[0]
    assert first[first.index("-r"):][:2] == ["-r", "3"]  # the first round, before the study's own noise is known
    # the -r each round chose (a trial's -r is that plus the cold leading repetitions it drops)
    (by_round,) = con.execute("SELECT value_json FROM state WHERE key='reps-by-round'").fetchone()
    chosen = json.loads(by_round)
    assert chosen[0] == 3, chosen  # (3 pairs, then 6: one round or two)
    changes = [(x, y) for x, y in zip(chosen, chosen[1:], strict=False) if x != y]
    assert all(y <= 2 * x and y >= x // 2 for x, y in changes), chosen  # damped: at most x2 or /2 a round
    rs = [int(a[a.index("-r") + 1]) for a in argvs]
    assert min(rs) >= 2 and set(rs) <= {c + k for c in chosen for k in range(4)}, (rs, chosen)
    # with -r given, the user's choice stands: no -r is added to the trials
    p = subprocess.run([tokensleuth_bin(), "compare", "--arm", f"a={engine.source}", "--arm", f"b={engine.source}",
                        "-m", str(dense_model), "-w", "tg8", "--min-pairs", "2", "--max-pairs", "2", "--", "-t", "1",
                        "-r", "2"], env=cli_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    last = con.execute("SELECT id FROM studies ORDER BY created_at DESC LIMIT 1").fetchone()[0]
    assert all("-r" not in json.loads(a) for (a,) in
               con.execute("SELECT argv_json FROM trials WHERE study_id=?", (last,)))


def test_the_repetitions_move_at_most_double_or_half_a_round() -> None:
    assert [damped(3, b) for b in (2, 3, 5, 6, 7, 20)] == [2, 3, 5, 6, 6, 6]
    assert [damped(12, b) for b in (2, 5, 6, 20)] == [6, 6, 6, 20]
    assert damped(2, 2) == 2 and damped(3, 1) == 2  # never below R_MIN


def test_the_estimate_keeps_workloads_apart(tmp_path: Path) -> None:
    """Two workloads 50x apart in speed, each process at test_idx 0 (as compare stores them):
    their levels are two cells, not one cell's between-process spread (205.9% was reported)."""
    from tokensleuth.analysis.noise import estimate
    from tokensleuth.store import PlannedTrial, ResultRow, SampleRow, Store, TrialOutcome

    rng = np.random.default_rng(3)
    speeds = {"pp2048": 13700.0, "tg32": 273.0}
    plan = [PlannedTrial(arm, "m.gguf", w, ()) for _ in range(8) for arm in ("a", "b") for w in speeds]
    with Store(tmp_path / "s.db") as s:
        sid = s.writes.create_study("compare", {"x": 1}, "h", [("a", "src", {}, (), {}), ("b", "src", {}, (), {})], plan)
        for t in s.reads.planned(sid):
            tps = speeds[t["workload"]] * math.exp(rng.normal(0, 0.01))  # 1% between processes
            n = 2048 if t["workload"] == "pp2048" else 32
            reps = tuple(SampleRow(i, int(n / (tps * math.exp(rng.normal(0, 0.01))) * 1e9), n) for i in range(5))
            r = ResultRow(0, t["workload"], n if n == 2048 else 0, 0 if n == 2048 else n, 0, tps, 0.0, {}, reps)
            s.writes.mark_running(t["id"])
            s.writes.finish_trial(t["id"], TrialOutcome("done", 0, "", "", 0.0, 1.0, 0, 10**9, {}, (r,), ()))
        n_ = estimate(s, sid)
    assert n_ is not None and n_.processes == 32
    assert 0.004 < n_.between_cv < 0.02, n_  # 1%, not the two speeds' 200%
    assert 0.008 < n_.within_cv < 0.013, n_
