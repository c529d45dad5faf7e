#!/usr/bin/env python3
"""Noise controls, measured: does each one lower the between-process spread, and is it safe?

For each control, N engine processes with it and N without, interleaved (on, off, on, off …),
each one llama-bench process of the tiny dense model (tg32, -r 3, -t 1): the between-process
CV of the process means with and without, and the A/A check with the control on (its
processes split into two interleaved halves: the ratio and its 99% interval, which must
contain 1). For ASLR off, a fixed layout is a bias risk rather than a noise one: processes
are run under ``setarch -R`` at several layouts (the environment's size moves the stack),
and the spread of the per-layout means is the bias a fixed layout could put into an A/B.

    .venv/bin/python bench/noise_controls.py [--processes 30] [--bench PATH --model PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
from _common import default_engine, tiny_model

from tokensleuth.analysis import stats

# name -> extra llama-bench flags (and a wrapper) for the "on" side
CONTROLS: dict[str, tuple[list[str], list[str]]] = {
    "pin one core (-C, --cpu-strict)": (["-C", "0x2", "--cpu-strict", "1"], []),
    "priority (--prio 2)": (["--prio", "2"], []),
    "weights in anonymous memory (-lm none)": (["-lm", "none"], []),
    "weights locked (-lm mmap+mlock)": (["-lm", "mmap+mlock"], []),
    "no polling (--poll 0)": (["--poll", "0"], []),
}


BASE = ["-p", "0", "-n", "32", "-r", "3", "-t", "1"]


def run(bench: Path, model: Path, flags: list[str], wrapper: list[str], env_pad: int = 0) -> float:
    env = dict(os.environ, TOKENSLEUTH_PAD="x" * env_pad)
    out = subprocess.run([*wrapper, str(bench), "-m", str(model), *BASE, *flags, "-o", "jsonl"],
                         capture_output=True, text=True, check=True, env=env)
    return float(json.loads(out.stdout.splitlines()[0])["avg_ts"])


def aa(values: list[float]) -> str:
    a, b = values[0::2], values[1::2]
    n = min(len(a), len(b))
    e = stats.ratio_interval(a[:n], b[:n])
    ok = "contains 1" if e.lo <= 1 <= e.hi else "EXCLUDES 1"
    return f"A/A {e.ratio:.4f} [{e.lo:.4f}, {e.hi:.4f}] ({ok})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=30)
    ap.add_argument("--bench", type=Path)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--base", default=" ".join(BASE), help="llama-bench flags of every process (e.g. add -ngl 99)")
    a = ap.parse_args()
    BASE[:] = a.base.split()
    if a.bench and a.model:
        bench, model = a.bench, a.model
    else:
        engine = default_engine()
        bench, model = Path(engine.bin_dir) / "llama-bench", tiny_model(engine, "llama")
    n = a.processes
    print(f"machine: {os.cpu_count()} CPUs; {n} processes per side, interleaved; llama-bench {' '.join(BASE)}; "
          f"{model.name}")
    for name, (flags, wrapper) in CONTROLS.items():
        on, off = [], []
        for _ in range(n):
            on.append(run(bench, model, flags, wrapper))
            off.append(run(bench, model, [], []))
        print(f"{name:42s}: CV between processes {stats.cv(on) * 100:5.2f}% on vs {stats.cv(off) * 100:5.2f}% off; "
              f"mean t/s {np.mean(on):8.1f} vs {np.mean(off):8.1f}; {aa(on)}", flush=True)
    if shutil.which("setarch"):
        pads = [0, 1000, 3000, 7000]
        per: dict[int, list[float]] = {p: [] for p in pads}
        aslr_on: list[float] = []
        for _ in range(max(n // 2, 5)):
            for p in pads:
                per[p].append(run(bench, model, [], ["setarch", platform.machine(), "-R"], p))
            aslr_on.append(run(bench, model, [], []))
        means = {p: float(np.mean(v)) for p, v in per.items()}
        cvs = [stats.cv(v) for v in per.values()]
        spread = max(means.values()) / min(means.values()) - 1
        print(f"{'ASLR off (setarch -R), 4 layouts':42s}: CV within a layout {np.mean(cvs) * 100:5.2f}% vs "
              f"{stats.cv(aslr_on) * 100:5.2f}% with ASLR on; per-layout means "
              + ", ".join(f"{m:.1f}" for m in means.values())
              + f": a fixed layout can differ from another by {spread * 100:.2f}% (the bias risk)")
    else:
        print("ASLR off: setarch is not installed; not measured")
    print("not measured here: THP for the weights (a system-wide setting), governor and boost (no cpufreq in "
          "this VM: `tokensleuth doctor` reports both where they exist)")


if __name__ == "__main__":
    main()
