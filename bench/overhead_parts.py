#!/usr/bin/env python3
"""Where the measuring overhead comes from: each layer of tokensleuth added in turn.

Arms, run in rotated order in every round (one engine process per arm per round):
  bare      llama-bench -o jsonl, output captured by subprocess.run
  progress  the same plus --progress (the flag tokensleuth adds)
  proc      run_process: two reader threads stamping each line, no probe
  monitor   run_process with the Monitor: counters read at each line, sampler thread
  runner    run_bench in this process: the whole runner (snapshots, store, one commit per trial)
  cli       the tokensleuth bench command, exactly as a user runs it
Each arm is compared with bare: paired log ratios, 99% interval.

    .venv/bin/python bench/overhead_parts.py [--rounds 30] [--flags "-p 64 -n 64 -r 5"]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import default_engine, tiny_model, tokensleuth_cmd, tps_by_test

from tokensleuth.analysis import stats
from tokensleuth.analysis.results import load_cells
from tokensleuth.drivers.bench import run_bench
from tokensleuth.engines.proc import run_process
from tokensleuth.monitor.sampler import Monitor
from tokensleuth.monitor.sources import probe_sources
from tokensleuth.store import Store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--flags", default="-p 64 -n 64 -r 5")
    ap.add_argument("--arms", default="bare,progress,proc,monitor,runner,cli", help="comma-separated, bare first")
    args = ap.parse_args()
    flags = args.flags.split()
    engine = default_engine()
    model = tiny_model(engine, "qwen3moe")
    bench = str(Path(engine.bin_dir) / "llama-bench")
    base = [bench, "-m", str(model), *flags, "-o", "jsonl"]
    srcs = probe_sources()

    def bare() -> dict[str, float]:
        return tps_by_test(subprocess.run(base, capture_output=True, text=True, check=True).stdout)

    def progress() -> dict[str, float]:
        return tps_by_test(subprocess.run([*base, "--progress"], capture_output=True, text=True, check=True).stdout)

    def proc() -> dict[str, float]:
        return tps_by_test(run_process([*base, "--progress"]).text("out"))

    def monitor() -> dict[str, float]:
        m = Monitor(srcs, 0.2)
        m.start()
        try:
            res = run_process([*base, "--progress"], probe=m.edge)
        finally:
            m.stop()
        return tps_by_test(res.text("out"))

    td = tempfile.mkdtemp()

    def runner() -> dict[str, float]:
        with Store(Path(td) / "r.db") as store:
            sid = run_bench(store, engine, [str(model)], flags)
            return {c.test: sum(c.tokens_per_s) / len(c.tokens_per_s) for c in load_cells(store, sid)}

    def cli() -> dict[str, float]:
        js = Path(td) / "b.json"
        subprocess.run([*tokensleuth_cmd(), "bench", "--db", f"{td}/s.db", "--model", str(model), "--json", str(js),
                        "--", *flags], capture_output=True, text=True, check=True)
        doc = json.loads(js.read_text())
        return {r["workload"]: float(r["tokens_per_s"]["mean"]) for r in doc["results"]}

    every: dict[str, Callable[[], dict[str, float]]] = {
        "bare": bare, "progress": progress, "proc": proc, "monitor": monitor, "runner": runner, "cli": cli}
    arms = [(name, every[name]) for name in args.arms.split(",")]
    got: dict[str, dict[str, list[float]]] = {name: {} for name, _ in arms}
    for r in range(args.rounds):
        k = r % len(arms)
        for name, fn in arms[k:] + arms[:k]:
            for w, v in fn().items():
                got[name].setdefault(w, []).append(v)
    print(f"machine: {os.cpu_count()} cores; model: tiny qwen3moe Q8_0; llama-bench {args.flags}; "
          f"{args.rounds} rounds, rotated order")
    for w in got["bare"]:
        print(f"{w}: bare {np.mean(got['bare'][w]):.1f} t/s")
        for name, _ in arms[1:]:
            e = stats.ratio_interval(got["bare"][w], got[name][w], 0.99)
            print(f"  {name:>8} / bare: {e.ratio:.4f}  99% CI [{e.lo:.4f}, {e.hi:.4f}]")


if __name__ == "__main__":
    main()
