#!/usr/bin/env python3
"""The monitor's own cost: its CPU use at the default interval, and tokens/s with it on vs off.

1. Sampler CPU: run the Monitor (every source this host has, plus per-thread and
   memory reads of a live engine process) for 20 s at 0.2 s and read the CPU time
   of the sampler thread itself (/proc/self/task/<tid>/schedstat).
2. Throughput: llama-bench run through the runner with the monitor (probes at
   window edges + sampler) vs without (no probe, no sampler), interleaved pairs.

    .venv/bin/python bench/monitor_overhead.py [--pairs 16]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

from _common import default_engine, tiny_model
from tokensleuth import stats
from tokensleuth.engines import llamabench
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
    if args.sampler_only:
        return
    engine = default_engine()
    model = tiny_model(engine, "llama")
    bench = Path(engine.bin_dir) / "llama-bench"
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
