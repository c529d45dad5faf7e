#!/usr/bin/env python3
"""The monitor's own cost: its CPU use at the default interval, and tokens/s with it on vs off.

1. Sampler CPU: run the Monitor (every source this host has, plus per-thread and
   memory reads of a live engine process) for 20 s at 0.2 s and read the CPU time
   of the sampler thread itself (/proc/self/task/<tid>/schedstat).
2. Edge cost: the CPU time one window-edge read (Monitor.edge: the engine's
   per-thread schedstat, cgroup, energy counters) takes, on a live llama-bench
   process. One edge per repetition lands inside the engine's timed work, so
   edge cost / repetition time bounds the throughput overhead where the engine
   uses every core.
3. Throughput: llama-bench run through the runner with the monitor (probes at
   window edges + sampler) vs without (no probe, no sampler), interleaved pairs.

    .venv/bin/python bench/monitor_overhead.py [--pairs 16]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

from _common import default_engine, tiny_model

from tokensleuth.analysis import stats
from tokensleuth.engines import llamabench
from tokensleuth.engines.proc import run_process
from tokensleuth.monitor.cpu import ProcessCpuReader, ThreadCpuReader
from tokensleuth.monitor.sampler import Monitor
from tokensleuth.monitor.sources import probe_sources

FLAGS = ["-p", "0", "-n", "32", "-r", "10"]


def sampler_cpu(seconds: float = 20.0) -> tuple[float, int]:
    victim = subprocess.Popen(["sleep", str(seconds + 5)])
    mon = Monitor(probe_sources(), 0.2)
    mon.edge(victim.pid)  # tells the sampler which process to watch, as the runner does
    mon.start()
    time.sleep(0.5)
    th = mon._thread
    assert th is not None and th.native_id is not None
    stat = Path(f"/proc/self/task/{th.native_id}/schedstat")
    c0, t0 = int(stat.read_text().split()[0]), time.monotonic()
    time.sleep(seconds)
    c1, t1 = int(stat.read_text().split()[0]), time.monotonic()
    n = len(mon.stop())
    victim.kill()
    return (c1 - c0) / 1e9 / (t1 - t0), max(n, len(mon.threads))


def edge_cost(bench: Path, model: Path, n: int = 500) -> float:
    """Mean CPU seconds of one Monitor.edge() on a running two-thread llama-bench."""
    eng = subprocess.Popen([str(bench), "-m", str(model), "-p", "0", "-n", "4096", "-r", "50", "-t", "2"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        mon = Monitor(probe_sources(), 0.2)
        mon.edge(eng.pid)  # the first edge opens the per-thread files: not the steady cost
        # paced like progress lines (the sleep's own wake-up cost measured apart and taken off)
        c0 = time.thread_time_ns()
        for _ in range(n):
            time.sleep(0.001)
        c1 = time.thread_time_ns()
        for _ in range(n):
            mon.edge(eng.pid)
            time.sleep(0.001)
        cost = ((time.thread_time_ns() - c1) - (c1 - c0)) / n / 1e9
        mon.stop()
        # the engine's CPU time alone: the process CPU-time clock against the per-thread walk
        for reader in (ProcessCpuReader(eng.pid), ThreadCpuReader(eng.pid)):
            reader.read_ns()
            c0 = time.thread_time_ns()
            for _ in range(n):
                reader.read_ns()
            print(f"{type(reader).__name__}.read_ns: {(time.thread_time_ns() - c0) / n / 1e3:.1f} us of CPU")
            reader.close()
    finally:
        eng.kill()
        eng.wait()
    return cost


def line_cost(n: int = 500) -> tuple[float, float]:
    """The tool's CPU per progress line (reader wake-up, stamp; then also the edge read and
    the sampler), from a child printing ``n`` lines 4 ms apart against one that only sleeps."""
    printer = ["python3", "-c", f"import sys, time\nfor i in range({n}):\n"
               "    print('llama-bench: benchmark 1/2: prompt run', i, file=sys.stderr, flush=True)\n"
               "    time.sleep(0.004)"]
    silent = ["python3", "-c", f"import time\nfor i in range({n}): time.sleep(0.004)"]

    def cpu(argv: list[str], monitored: bool) -> int:
        mon = Monitor(probe_sources(), 0.2) if monitored else None
        if mon:
            mon.start()
        c0 = time.process_time_ns()
        run_process(argv, probe=mon.edge if mon else None)
        used = time.process_time_ns() - c0
        if mon:
            mon.stop()
        return used

    base = min(cpu(silent, False) for _ in range(3))
    plain = min(cpu(printer, False) for _ in range(3))
    probed = min(cpu(printer, True) for _ in range(3))
    return (plain - base) / n / 1e9, (probed - base) / n / 1e9


def tps(bench: Path, model: Path, monitored: bool) -> float:
    mon = Monitor(probe_sources(), 0.2) if monitored else None
    if mon:
        mon.start()
    res = llamabench.run_trial(bench, str(model), FLAGS, probe=mon.edge if mon else None)
    if mon:
        mon.stop()
    out = llamabench.outcome_from(res, {}, {})
    assert out.status == "done" and out.results[0].avg_ts is not None, out.message
    return float(out.results[0].avg_ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--sampler-only", action="store_true")
    args = ap.parse_args()
    frac, n = sampler_cpu()
    print(f"sources: {[s.name for s in probe_sources()]}; sampler at 0.2 s: {frac * 100:.3f}% of one core "
          f"({n} samples)")
    engine = default_engine()
    model = tiny_model(engine, "llama")
    bench = Path(engine.bin_dir) / "llama-bench"
    cost = edge_cost(bench, model)
    print(f"one window-edge read: {cost * 1e6:.1f} us of CPU; as a share of a repetition: "
          + ", ".join(f"{ms} ms rep {cost / (ms / 1e3) * 100:.3f}%" for ms in (10, 50, 200, 1000)))
    plain, probed = line_cost()
    print(f"per progress line (one per repetition): {plain * 1e6:.1f} us of the tool's CPU to read and "
          f"stamp it, {probed * 1e6:.1f} us with the monitor (edge read + sampler share)")
    if args.sampler_only:
        return
    off, on = [], []
    for i in range(args.pairs):
        if i % 2:
            on.append(tps(bench, model, True))
            off.append(tps(bench, model, False))
        else:
            off.append(tps(bench, model, False))
            on.append(tps(bench, model, True))
    e = stats.ratio_interval(off, on)
    print(f"llama-bench {' '.join(FLAGS)} on tiny llama, {args.pairs} interleaved pairs: monitor on/off "
          f"ratio {e.ratio:.4f}, 99% CI [{e.lo:.4f}, {e.hi:.4f}], verdict vs ±0.5%: {stats.verdict(e, 0.005)}")


if __name__ == "__main__":
    main()
