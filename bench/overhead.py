#!/usr/bin/env python3
"""Overhead of measuring: llama-bench run by tokensleuth vs the same command run bare.

Interleaved, order-balanced pairs (bare first in even pairs, tokensleuth first in
odd ones). tokensleuth runs through its CLI, exactly as a user runs it: progress
lines stamped, CPU counters read at each window edge, every sample stored.

    .venv/bin/python bench/overhead.py [--pairs 12]
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

FLAGS = ["-p", "128", "-n", "32", "-r", "5"]


def bare(bench: Path, model: Path) -> dict[str, float]:
    out = subprocess.run([str(bench), "-m", str(model), *FLAGS, "-o", "jsonl"], capture_output=True,
                         text=True, check=True)
    return tps_by_test(out.stdout)


def via_tokensleuth(model: Path, db: Path, js: Path) -> dict[str, float]:
    subprocess.run([*tokensleuth_cmd(), "bench", "--db", str(db), "--model", str(model), "--json", str(js), "--", *FLAGS],
                   capture_output=True, text=True, check=True)
    doc = json.loads(js.read_text())
    return {r["workload"]: float(r["tokens_per_s"]["mean"]) for r in doc["results"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--flags", default=" ".join(FLAGS), help="llama-bench flags of every run")
    args = ap.parse_args()
    FLAGS[:] = args.flags.split()
    engine = default_engine()
    model = tiny_model(engine, "qwen3moe")
    bench = Path(engine.bin_dir) / "llama-bench"
    base: dict[str, list[float]] = {}
    tool: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as td:
        db, js = Path(td) / "s.db", Path(td) / "b.json"
        for i in range(args.pairs):
            order: list[tuple[str, Callable[[], dict[str, float]]]] = [
                ("bare", lambda: bare(bench, model)), ("tool", lambda: via_tokensleuth(model, db, js))]
            if i % 2:
                order.reverse()
            for name, fn in order:
                for w, v in fn().items():
                    (base if name == "bare" else tool).setdefault(w, []).append(v)
    print(f"machine: {os.cpu_count()} cores; model: tiny qwen3moe Q8_0; llama-bench {' '.join(FLAGS)}")
    print(f"{args.pairs} interleaved pairs (bare vs tokensleuth bench)")
    for w in base:
        e = stats.ratio_interval(base[w], tool[w], 0.99)
        d = np.log(np.array(tool[w]) / np.array(base[w]))
        print(f"{w:>6}: bare {np.mean(base[w]):9.1f} t/s, tokensleuth {np.mean(tool[w]):9.1f} t/s, "
              f"ratio {e.ratio:.4f}  99% CI [{e.lo:.4f}, {e.hi:.4f}]  sd(log ratio) {d.std(ddof=1):.4f}  "
              f"verdict vs ±0.5%: {stats.verdict(e, 0.005)}")


if __name__ == "__main__":
    main()
