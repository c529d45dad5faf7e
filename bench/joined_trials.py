#!/usr/bin/env python3
"""What one process per model (every workload in one llama-bench run per trial) saves against
one process per workload (``--separate-processes``): the same compare, both ways, repeated.

Per design: trials, engine seconds (the engine processes' own wall time), the compare's wall
time and each cell's verdict, ratio and pairs. By default the planted engine (tests/planted.py)
against itself with a wait of SPIN_US per decode call on one arm, on the tiny MoE and dense
models at tg16 and pp512 (the planted scan's cells), -t 1.

    .venv/bin/python bench/joined_trials.py [--repeats 3] [--spin-us 1500] [--band 30%]
        [--engine SOURCE --model PATH ... -w W ...] [-- ENGINE FLAGS]

With --engine, both arms run that source (an A/A: the cost of a "same" verdict) and the
models are the ones named: the figure at a real model's scale.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import _common


def run(db: Path, arms: list[str], models: list[str], workloads: list[str], extra: list[str],
        separate: bool, band: str) -> tuple[float, dict[str, Any]]:
    out = db.with_suffix(".json")
    cmd = [*_common.tokensleuth_cmd(), "compare", "--db", str(db), "--json", str(out), "--no-probe", *arms]
    cmd += ["--band", band] if band else []
    cmd += [x for m in models for x in ("--model", m)] + [x for w in workloads for x in ("-w", w)]
    cmd += (["--separate-processes"] if separate else []) + ["--", *extra]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode not in (0, 1):
        raise SystemExit(f"compare failed ({p.returncode}): {p.stderr[-2000:]}")
    con = sqlite3.connect(db)
    trials, engine_s = con.execute("SELECT COUNT(*), COALESCE(SUM(t1_ns - t0_ns), 0) / 1e9 FROM trials").fetchone()
    doc = json.loads(out.read_text())
    cells = {f"{Path(c['model']).stem.split('-')[1]} {c['workload']}": (c["verdict"], c["ratio"], c["pairs"])
             for c in doc["comparisons"]}
    return wall, {"trials": trials, "engine_s": engine_s, "cells": cells}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--spin-us", type=int, default=1500)
    ap.add_argument("--band", default="", help="compare's --band (default: its own)")
    ap.add_argument("--engine")
    ap.add_argument("--model", action="append")
    ap.add_argument("-w", action="append")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    if a.engine:
        arms = ["--arm", f"a={a.engine}", "--arm", f"b={a.engine}"]
        models = a.model or []
    else:
        from tests.planted import planted_engine

        src, _ = planted_engine()
        arms = ["--arm", f"base={src}", "--arm", f"spin={src}", "--env", f"spin:TOKENSLEUTH_SPIN_US={a.spin_us}"]
        engine = _common.default_engine()
        models = a.model or [str(_common.tiny_model(engine, "qwen3moe")), str(_common.tiny_model(engine, "llama"))]
    workloads = a.w or ["tg16", "pp512"]
    extra = a.extra or ["-t", "1"]
    print(f"compare {' '.join(arms[1::2] if a.engine else arms[1:4:2])} on {len(models)} model(s) x "
          f"{', '.join(workloads)}, engine flags {' '.join(extra)}, band {a.band or 'default'}; {a.repeats} repeats, "
          "designs alternating")
    totals: dict[str, list[tuple[float, dict[str, Any]]]] = {"one process per model": [],
                                                                 "one per workload": []}
    with tempfile.TemporaryDirectory() as td:
        for r in range(a.repeats):
            order = [False, True] if r % 2 == 0 else [True, False]
            for separate in order:
                name = "one per workload" if separate else "one process per model"
                wall, got = run(Path(td) / f"{r}-{int(separate)}.db", arms, models, workloads, extra, separate,
                                a.band)
                totals[name].append((wall, got))
                print(f"  {r + 1}. {name:<22} {got['trials']:4d} trials {got['engine_s']:7.1f} s engine "
                      f"{wall:7.1f} s wall  " + "; ".join(f"{k} {v[0]} {v[1]:.3f} ({v[2]} pairs)"
                                                         for k, v in sorted(got["cells"].items())), flush=True)
    for name, runs in totals.items():
        n = len(runs)
        print(f"{name:<22} mean {sum(g['trials'] for _, g in runs) / n:6.1f} trials "
              f"{sum(g['engine_s'] for _, g in runs) / n:7.1f} s engine {sum(w for w, _ in runs) / n:7.1f} s wall")


if __name__ == "__main__":
    main()
