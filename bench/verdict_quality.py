#!/usr/bin/env python3
"""Verdict quality: tokensleuth compare vs the naive method, A/A and a planted 3% slowdown.

For each condition (A/A; candidate 3% slower via the planted-spin build) run
N independent studies and count verdicts:
- tokensleuth: paired, order-balanced, sequential (5 -> 10 -> 20 -> 40 pairs),
  99% interval against a ±1% band;
- naive: each arm once with -r 5, A then B, "different" when |ratio - 1| > 1%.

Reports false-alarm rate (A/A called faster/slower), detection rate (3% called
slower), mean engine-seconds per study, and the machine's noise (coefficient of
variation of a process's mean t/s between processes).

    .venv/bin/python bench/verdict_quality.py [--studies 20] [--workload tg32]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _common import default_engine, tiny_model

from tests.planted import planted_engine
from tokensleuth.analysis import stats
from tokensleuth.drivers.verdicts.pairs import run_compare
from tokensleuth.engines.llamabench.argv import workload_flags
from tokensleuth.store import Store
from tokensleuth.trials.spec import build_compare_spec


def tps(bench: Path, model: Path, flags: list[str], spin: int) -> tuple[float, float]:
    t0 = time.monotonic()
    out = subprocess.run([str(bench), "-m", str(model), *flags, "-o", "jsonl"], capture_output=True, text=True,
                         check=True, env={**os.environ, "TOKENSLEUTH_SPIN_US": str(spin)})
    return float(json.loads(out.stdout.splitlines()[0])["avg_ts"]), time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", type=int, default=20)
    ap.add_argument("--workload", default="tg32")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--slowdown", type=float, default=0.03)
    ap.add_argument("--designs", default="today,adaptive,fixed",
                    help="today: sequential pairs, -r REPS; adaptive: sequential pairs, -r chosen from the "
                         "study's own noise (no -r given); fixed: 10 alternating pairs x -r REPS, one interval")
    args = ap.parse_args()
    designs = args.designs.split(",")
    engine = default_engine()
    model = tiny_model(engine, "llama")
    src, build = planted_engine()
    bench = Path(build.bin_dir) / "llama-bench"
    flags = [*workload_flags(args.workload), "-r", str(args.reps)]

    # Calibrate the spin for the target slowdown: r = 1 / (1 + spin * tps).
    base_tps = np.mean([tps(bench, model, [*workload_flags(args.workload), "-r", "20"], 0)[0] for _ in range(3)])
    spin = int(round((1 / (1 - args.slowdown) - 1) / base_tps * 1e6))
    # True ratio and machine noise from 16 interleaved processes per arm.
    tb, tc = [], []
    for _i in range(16):
        a, b = tps(bench, model, flags, 0)[0], tps(bench, model, flags, spin)[0]
        tb.append(a)
        tc.append(b)
    true_ratio = float(np.exp(np.mean(np.log(np.array(tc) / np.array(tb)))))
    noise = stats.cv(tb)
    print(f"machine: {os.cpu_count()} cores; model tiny llama Q8_0; workload {args.workload}, -r {args.reps} per process")
    print(f"spin {spin} us per decode call; true ratio {true_ratio:.4f} (16 interleaved pairs)")
    print(f"noise: CV of a process's mean t/s between processes = {noise * 100:.2f}%")

    results: dict[str, dict[str, Any]] = {}
    for cond, cand_spin in (("A/A", 0), (f"{args.slowdown:.0%} slower", spin)):
        per_design: dict[str, Any] = {}
        for design in designs:
            verdicts: Counter[str] = Counter()
            secs = []
            pairs = []
            pooled_b: list[float] = []
            pooled_c: list[float] = []
            reps_used: list[int] = []
            for _s in range(args.studies):
                with tempfile.TemporaryDirectory() as td, Store(Path(td) / "s.db") as store:
                    data: dict[str, Any] = {
                        "arms": [{"name": "a", "source": src, "env": {"TOKENSLEUTH_SPIN_US": "0"}},
                                 {"name": "b", "source": src, "env": {"TOKENSLEUTH_SPIN_US": str(cand_spin)}}],
                        "models": [str(model)], "workloads": [args.workload], "band": 0.01}
                    if design != "adaptive":
                        data["common_flags"] = ["-r", str(args.reps)]
                    if design == "fixed":
                        data["min_pairs"] = data["max_pairs"] = 10
                    spec = build_compare_spec(data, "bench")
                    sid, comps = run_compare(store, spec, {"a": build, "b": build})
                    verdicts[comps[0].verdict] += 1
                    pooled_b += comps[0].base_ts
                    pooled_c += comps[0].cand_ts
                    pairs.append(comps[0].pairs)
                    secs.append(store.reads.engine_seconds(sid))
                    reps_used.append(int(store.db.execute(
                        "SELECT COUNT(*) FROM samples s JOIN results r ON r.id=s.result_id JOIN trials t ON "
                        "t.id=r.trial_id WHERE t.study_id=?", (sid,)).fetchone()[0]) // max(2 * comps[0].pairs, 1))
            per_design[design] = (verdicts, np.mean(secs), np.mean(pairs), np.mean(reps_used))
            if design == designs[0]:
                # every pair of every study of this condition, pooled: a far sharper ratio than the calibration's
                pooled = stats.ratio_interval(pooled_b, pooled_c)
                print(f"{cond}: pooled over {pooled.pairs} pairs of the {design} studies: ratio {pooled.ratio:.4f} "
                      f"99% CI [{pooled.lo:.4f}, {pooled.hi:.4f}]; CV between processes "
                      f"{stats.cv(pooled_b) * 100:.2f}%", flush=True)
        # naive
        naive: Counter[str] = Counter()
        nsecs = []
        for _s in range(args.studies):
            a, ta = tps(bench, model, flags, 0)
            b, tb_ = tps(bench, model, flags, cand_spin)
            r = b / a
            naive["slower" if r < 0.99 else "faster" if r > 1.01 else "same"] += 1
            nsecs.append(ta + tb_)
        results[cond] = {**per_design, "naive": (naive, np.mean(nsecs), 0.0, float(args.reps))}

    n = args.studies
    aa = results["A/A"]
    sl = results[f"{args.slowdown:.0%} slower"]
    for method in (*designs, "naive"):
        v_aa = aa[method][0]
        v_sl = sl[method][0]
        fa = (v_aa["faster"] + v_aa["slower"]) / n
        det = v_sl["slower"] / n
        secs = (aa[method][1] + sl[method][1]) / 2
        extra = (f", mean pairs A/A {aa[method][2]:.1f} / slowdown {sl[method][2]:.1f}, mean -r "
                 f"{(aa[method][3] + sl[method][3]) / 2:.1f}") if method != "naive" else ""
        print(f"{method:>11}: A/A false alarms {fa * 100:5.1f}% {dict(v_aa)}; "
              f"detection of {args.slowdown:.0%} {det * 100:5.1f}% {dict(v_sl)}; "
              f"engine-seconds/study {secs:6.2f}{extra}")


if __name__ == "__main__":
    main()
